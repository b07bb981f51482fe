"""What the adapters share (docs: howto/torch-jax-layer.md): the canonical parameters of a layer
(:class:`TrueHeads`, from its weight blocks by :func:`canonical_parameters`), the dtype rule for
incoming tokens (:func:`token_dtypes`, :func:`as_module_tokens`) and the length-grouped batch
(:class:`LayerBox`).

The model class (arXiv:2608.03294, extended by the layers' biases): head h scores token i as
``s_{h,i} = x_i^T W_h x_n + u_h^T x_i`` and the layer returns, at the last position,
``f(X) = c + sum_h sum_i softmax_i(s_h) v_h^T x_i``.  For a layer with query, key, value and
output maps ``q = Q x + b_q``, ``k = K x + b_k``, ``v = V x + b_v``, ``out = O ctx + b_o`` and
head blocks ``Q_h, K_h`` (d_h x d), ``V_h`` (d_v x d), ``O_h`` (m x d_v), scaled by ``s``
(``1/sqrt(d_h)`` by default):

* ``W_h = s K_h^T Q_h`` and ``u_h = s K_h^T b_{q,h}`` (the key bias adds one amount to every
  score of a head, so it cancels);
* ``v_h = r^T O_h V_h`` with a readout r, else the m x d matrix ``O_h V_h``;
* ``c = r . (O b_v + b_o)`` (the vector ``O b_v + b_o`` without a readout), since each head's
  weights sum to 1.

>>> import numpy as np
>>> I = np.eye(2)[None]                              # one head, d = d_h = 2
>>> t = canonical_parameters(I, None, I, None, I, None, I[0], None, readout=[1.0, 0.0])
>>> t.W[0].tolist(), t.v.tolist(), float(t.c), t.has_bias
([[0.7071067811865475, 0.0], [0.0, 0.7071067811865475]], [[1.0, 0.0]], 0.0, False)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gmpy2 import mpq

from exactlearn.errors import ModelError
from exactlearn.model import Head, canonicalize

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass(frozen=True)
class TrueHeads:
    """A layer's parameters in exactlearn's canonical coordinates, as float64 numpy arrays.

    ``W`` (H, d, d); ``u`` (H, d) (zeros without a query bias); ``v`` (H, d) with a readout,
    (H, m, d) without; ``c`` a 0-d array with a readout, (m,) without; ``readout`` the float64
    readout or ``None``.  The arrays are computed in float64 from the layer's weights (products
    of float64 numbers, so exact to about 1e-16 relative, not exact rationals).
    """

    W: np.ndarray
    u: np.ndarray
    v: np.ndarray
    c: np.ndarray
    readout: np.ndarray | None

    @property
    def has_bias(self) -> bool:
        """True when a query bias (``u``) or a value/output bias (``c``) is nonzero."""
        return bool(np.any(self.u != 0) or np.any(self.c != 0))

    def heads(self) -> tuple:
        """The canonical :class:`~exactlearn.model.Head` tuple (entries the exact rationals of
        the float64 arrays), to compare with ``learn()``'s ``res.heads``.

        Without a readout each head's v is the m x d matrix ``O_h V_h`` (a tuple of m rows), to
        compare with ``learn(..., outputs=m)`` (docs: explanation/biases.md#vector-outputs).  A
        layer with biases (nonzero u or c) gives a :class:`~exactlearn.model.HeadSet` whose heads
        carry their ``u`` and whose ``constant`` is c (a length-m tuple without a readout), as
        ``learn(..., bias=True)`` returns them (docs: explanation/biases.md); heads with equal
        ``(W, u)`` merge.

        >>> import numpy as np
        >>> I = np.eye(2)[None]
        >>> t = canonical_parameters(I, None, I, None, I, None, I[0], None)
        >>> [h.v for h in t.heads()] == [((1, 0), (0, 1))]
        True
        """
        q = lambda xs: tuple(mpq(float(a)) for a in xs)          # noqa: E731
        vector = self.readout is None

        def v_of(v):
            return tuple(q(row) for row in v) if vector else q(v)

        if self.has_bias:
            c = q(self.c) if vector else mpq(float(self.c))
            return canonicalize((Head(tuple(q(row) for row in W), v_of(v), q(u))
                                 for W, v, u in zip(self.W, self.v, self.u)), c, True)
        return canonicalize(Head(tuple(q(row) for row in W), v_of(v)) for W, v in zip(self.W, self.v))


def readout_vector(readout, m: int) -> np.ndarray | None:
    """``readout`` as a float64 vector of length m (or None; a torch tensor is detached first);
    a wrong length, a complex or non-finite entry, or a zero readout is bad input."""
    if readout is None:
        return None
    try:
        if hasattr(readout, "detach"):          # a torch tensor (one that requires grad too)
            readout = readout.detach().cpu().double().numpy()
        elif isinstance(readout, (list, tuple)):
            readout = [x.detach().cpu().double().numpy() if hasattr(x, "detach") else x
                       for x in readout]
        complex_ = np.iscomplexobj(readout)
        r = None if complex_ else np.array(readout, dtype=np.float64)
    except (TypeError, ValueError, RuntimeError, AttributeError):
        raise ModelError(f"readout must be a vector of {m} numbers") from None
    if complex_:
        raise ModelError(f"readout must be a vector of {m} real numbers, got complex entries")
    if r.shape != (m,):
        raise ModelError(f"readout must be a vector of length {m} (the layer's output size), "
                         f"got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ModelError("readout has a non-finite entry")
    if not np.any(r):
        raise ModelError("readout is zero: every answer would be 0")
    return r


def canonical_parameters(Q, bq, K, bk, V, bv, O, bo, readout=None, scale=None) -> TrueHeads:
    """:class:`TrueHeads` from per-head blocks (float64 numpy): ``Q, K`` (H, d_h, d), ``V``
    (H, d_v, d), ``O`` (m, H*d_v); biases ``bq, bk`` (H, d_h), ``bv`` (H, d_v), ``bo`` (m,) or
    ``None``; ``scale`` the score factor (default ``1/sqrt(d_h)``).  ``bk`` only cancels."""
    Q, K, V, O = (np.asarray(a, dtype=np.float64) for a in (Q, K, V, O))
    H, dh, d = Q.shape
    dv = V.shape[1]
    m = O.shape[0]
    s = 1.0 / np.sqrt(dh) if scale is None else float(scale)
    W = s * np.einsum("hkr,hkc->hrc", K, Q)                     # K_h^T Q_h
    u = np.zeros((H, d)) if bq is None else s * np.einsum("hkr,hk->hr", K, np.asarray(bq, np.float64))
    Oh = O.reshape(m, H, dv).transpose(1, 0, 2)                 # (H, m, d_v): O_h
    OV = np.einsum("hmv,hvd->hmd", Oh, V)                       # O_h V_h
    const = np.zeros(m)
    if bv is not None:
        const = const + O @ np.asarray(bv, np.float64).reshape(H * dv)
    if bo is not None:
        const = const + np.asarray(bo, np.float64)
    r = readout_vector(readout, m)
    if r is None:
        return TrueHeads(W, u, OV, const, None)
    return TrueHeads(W, u, np.einsum("m,hmd->hd", r, OV), np.asarray(r @ const), r)


def refuse_outside_class(module, name: str, products, attention_fn) -> None:
    """The checks a flax attention layer (linen or NNX, ``name`` its class) shares: fields
    ``products`` that replace its products, ``normalize_qk``, ``decode`` and an
    ``attention_fn`` other than flax's each get a one-line ModelError."""
    custom = [f for f in products if getattr(module, f, None) is not None]
    if custom:
        raise ModelError(f"{name} with a custom {custom[0]} is not supported: it computes "
                         f"with other weights than its kernels")
    if module.normalize_qk:
        raise ModelError(f"{name} with normalize_qk=True is outside the model class")
    if module.decode:
        raise ModelError(f"{name} with decode=True is not a self-attention of the tokens")
    if module.attention_fn is not attention_fn:
        raise ModelError(f"{name} with a custom attention_fn is not supported")


def layer_dtype(leaves, compute_dtype):
    """The one dtype of a layer's parameter arrays ``leaves`` and its ``compute_dtype`` (None:
    the parameters'); a one-line ModelError when they mix."""
    dtypes = {np.dtype(leaf.dtype) for leaf in leaves}
    if compute_dtype is not None:
        dtypes.add(np.dtype(compute_dtype))
    if len(dtypes) != 1:
        raise ModelError(f"the layer mixes dtypes {sorted(map(str, dtypes))}: give it one "
                         f"(dtype= and param_dtype= equal)")
    return dtypes.pop()


def token_dtypes(module_dtype, dtype) -> tuple:
    """(the dtype the box takes, the module's dtype).  ``dtype=None`` takes the module's own;
    another float dtype is converted to the module's, exactly or not at all (see
    :func:`as_module_tokens`)."""
    try:
        md = np.dtype(module_dtype)
    except TypeError:                   # a name numpy lacks: torch's "bfloat16"
        md = None
    if md is None or md not in FLOAT_DTYPES:      # (np.dtype("float64") == None is True)
        raise ModelError(f"the layer computes in {module_dtype}: the adapters take float32 or "
                         f"float64 layers")
    if dtype is None:
        return md, md
    try:
        td = np.dtype(dtype)
    except TypeError:
        raise ModelError(f"dtype must be 'float32' or 'float64', got {dtype!r}") from None
    if td not in FLOAT_DTYPES:
        raise ModelError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    return td, md


def as_module_tokens(X, d: int, token_dtype, module_dtype, hint: str = "") -> np.ndarray:
    """One query as a 2-D array of the module's dtype.  Tokens of another dtype than the box
    takes are refused (no silent casting); a conversion the user asked for (``dtype=``) that
    would round an entry is refused too."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] != d or X.shape[0] == 0:
        raise ModelError(f"a query must be a 2-D array of tokens of dimension {d}, got shape {X.shape}")
    if X.dtype != token_dtype:
        more = (f", or build the box with dtype='{X.dtype}' to convert (exactly) to the layer's "
                f"{module_dtype}" if X.dtype in FLOAT_DTYPES else "")
        raise ModelError(f"the box takes {token_dtype} tokens, got {X.dtype}: call "
                         f"learn(..., tokens='{token_dtype}'){more}{hint}")
    if token_dtype == module_dtype:
        return X
    Y = X.astype(module_dtype)
    if not np.array_equal(Y.astype(token_dtype), X):
        raise ModelError(f"a token entry is not exactly a {module_dtype} number: "
                         f"converting it would round")
    return Y


class LayerBox:
    """A black box over a layer's forward: ``box(X)`` and ``box.batch(queries)``.

    ``forward(stack)`` takes a (B, n, d) array of the module's dtype and returns the (B, m)
    outputs at the last position as a numpy array.  With a readout the answer is the float64
    scalar ``readout . out`` (the output converted exactly to float64 first); without, the
    output vector itself (module dtype).  ``batch`` groups the queries by length and runs each
    group as one forward (in chunks of at most ``chunk`` queries).  The box has no ``noise``:
    the error bound is the caller's (``learn(noise=...)``).
    """

    def __init__(self, forward, d: int, m: int, readout, token_dtype, module_dtype,
                 chunk: int = 1024, name: str = "layer", hint: str = ""):
        self._forward = forward
        self.d = d
        self.m = m
        self.readout = readout_vector(readout, m)
        self.token_dtype = token_dtype
        self.module_dtype = module_dtype
        self.chunk = int(chunk)
        self.__name__ = name
        self.hint = hint            # appended to a refusal of the tokens' dtype

    def _answer(self, out_row):
        if self.readout is None:
            return np.array(out_row, dtype=self.module_dtype)
        return np.float64(np.dot(np.asarray(out_row, dtype=np.float64), self.readout))

    def __call__(self, X):
        Y = as_module_tokens(X, self.d, self.token_dtype, self.module_dtype, self.hint)
        return self._answer(np.asarray(self._forward(Y[None]))[0])

    def batch(self, queries) -> list:
        arrays = [as_module_tokens(X, self.d, self.token_dtype, self.module_dtype, self.hint)
                  for X in queries]
        groups: dict = {}
        for i, Y in enumerate(arrays):
            groups.setdefault(Y.shape[0], []).append(i)
        answers = [None] * len(arrays)
        for idx in groups.values():
            for lo in range(0, len(idx), self.chunk):
                part = idx[lo:lo + self.chunk]
                out = np.asarray(self._forward(np.stack([arrays[i] for i in part])))
                for i, row in zip(part, out):
                    answers[i] = self._answer(row)
        return answers
