"""PyTorch attention layers as exactlearn black boxes (docs: howto/torch-jax-layer.md).

* :func:`black_box` / :func:`true_heads`: ``torch.nn.MultiheadAttention`` used as
  self-attention (query = key = value = the tokens), ``batch_first`` either way, ``bias``
  either way; ``add_bias_kv`` and ``add_zero_attn`` are outside the model class and refused.
* :func:`black_box_linear` / :func:`true_heads_linear`: a self-attention built from
  ``nn.Linear`` maps -- query, key, value and an output map -- split into ``heads`` heads with
  scores scaled by ``1/sqrt(d_h)`` (Hugging Face's BERT attention: ``attn.self.query``,
  ``.key``, ``.value`` and ``attn.output.dense``, without the residual and LayerNorm that
  follow it).

The box runs the module under ``torch.no_grad()`` in the module's own dtype (float32 or
float64) and, by default, with ``torch.set_num_threads(1)`` for the duration of each call
(``threads=``; ``None`` leaves torch's setting alone): small attention queries run about 70
times faster on one thread than on torch's default pool (docs: howto/torch-jax-layer.md).
torch is imported when a function here is called, never at import.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from exactlearn.adapters.common import LayerBox, TrueHeads, canonical_parameters, token_dtypes
from exactlearn.errors import ModelError


def _torch():
    try:
        import torch
    except ImportError:
        raise ModelError("the torch adapter needs PyTorch: pip install exactlearn[torch]") from None
    return torch


@contextlib.contextmanager
def _threads(torch, n):
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    if old != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if old != n:
            torch.set_num_threads(old)


def _check_threads(threads):
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ModelError(f"threads must be a positive integer or None, got {threads!r}")


def _np(t) -> np.ndarray:
    """A parameter as float64 numpy, converted in torch (exact from float16, bfloat16 and
    float32; numpy has no bfloat16, so ``.numpy()`` first would raise a raw TypeError)."""
    return None if t is None else t.detach().cpu().double().numpy()


def _mha_blocks(module):
    """(Q, bq, K, bk, V, bv, O, bo) of a MultiheadAttention, float64 numpy, checked."""
    torch = _torch()
    if not isinstance(module, torch.nn.MultiheadAttention):
        raise ModelError(f"black_box takes a torch.nn.MultiheadAttention, got {type(module).__name__} "
                         f"(a layer of q/k/v/o nn.Linear maps: black_box_linear)")
    if type(module).forward is not torch.nn.MultiheadAttention.forward:
        raise ModelError(f"{type(module).__module__}.{type(module).__name__} overrides "
                         f"MultiheadAttention.forward: its weights need not be those the adapter "
                         f"reads (in_proj_weight, out_proj)")
    _runs_as_written(module, "the MultiheadAttention")
    if module.bias_k is not None or module.bias_v is not None:
        raise ModelError("MultiheadAttention with add_bias_kv=True is outside the model class")
    if module.add_zero_attn:
        raise ModelError("MultiheadAttention with add_zero_attn=True is outside the model class")
    E, H = module.embed_dim, module.num_heads
    if module._qkv_same_embed_dim:
        Wq, Wk, Wv = module.in_proj_weight.chunk(3, dim=0)
    else:
        Wq, Wk, Wv = module.q_proj_weight, module.k_proj_weight, module.v_proj_weight
        if module.kdim != E or module.vdim != E:
            raise ModelError(f"self-attention needs kdim = vdim = embed_dim = {E}, got "
                             f"kdim={module.kdim}, vdim={module.vdim}")
    b = module.in_proj_bias
    bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
    dh = E // H
    Q, K, V = (_np(w).reshape(H, dh, E) for w in (Wq, Wk, Wv))
    bq, bk, bv = (None if x is None else _np(x).reshape(H, dh) for x in (bq, bk, bv))
    return Q, bq, K, bk, V, bv, _np(module.out_proj.weight), _np(module.out_proj.bias)


def true_heads(module, readout=None) -> TrueHeads:
    """The canonical parameters of a ``torch.nn.MultiheadAttention`` (self-attention):
    ``W_h = K_h^T Q_h / sqrt(d_h)`` with ``Q_h, K_h`` the rows ``h d_h .. (h+1) d_h`` of the
    query and key parts of ``in_proj_weight``, ``u_h = K_h^T b_{q,h} / sqrt(d_h)``,
    ``v_h = r^T O_h V_h`` (``O_h`` the columns of head h of ``out_proj.weight``; the m x d
    matrix without a readout), ``c = r . (O b_v + b_o)``.  See
    :class:`~exactlearn.adapters.common.TrueHeads`.

    Parameters
    ----------
    module : torch.nn.MultiheadAttention
        A self-attention layer (``kdim = vdim = embed_dim``, no ``add_bias_kv`` or
        ``add_zero_attn``), of any float dtype: its weights are read exactly.
    readout : array_like, optional
        The vector r of the scalar answer ``r . out[-1]`` (m = ``out_proj.out_features``
        finite numbers); without it each ``v_h`` is the m x d matrix ``O_h V_h`` (compare
        with ``learn(..., outputs=m)``).

    Returns
    -------
    TrueHeads
        The layer's own parameters; ``.heads()`` gives the canonical heads to compare with
        ``learn()``'s ``res.heads``.

    Raises
    ------
    ModelError
        One line, for a module outside the model class or a readout of the wrong length.
    """
    Q, bq, K, bk, V, bv, O, bo = _mha_blocks(module)
    return canonical_parameters(Q, bq, K, bk, V, bv, O, bo, readout=readout)


def black_box(module, readout=None, dtype=None, threads: int | None = 1) -> LayerBox:
    """A ``torch.nn.MultiheadAttention`` as a black box: ``box(X)`` runs
    the module on the tokens X (an (n, d) numpy array, the final token last) and answers at the
    last position -- ``module(X, X, X)[-1]``, computed as ``module(X[-1:], X, X)``, the final
    token's query only (the same output at O(n) cost): ``readout . out[-1]`` (a float64
    scalar) with a readout, the output vector (the module's dtype) without one -- learn it
    with ``learn(..., outputs=m)``
    (docs: explanation/biases.md#vector-outputs).  ``box.batch(queries)`` runs each length's
    queries as one batch.

    ``dtype=None``: tokens must have the module's dtype (``learn(..., tokens="float64")`` for a
    float64 module); other tokens are refused, never cast.  ``dtype="float64"`` on a float32
    module takes float64 tokens and converts them, refusing any that would round.
    Dropout is off (the module runs under ``no_grad`` and must be in eval mode or have
    ``dropout=0``).

    Parameters
    ----------
    module : torch.nn.MultiheadAttention
        A self-attention layer in float32 or float64 (one dtype for every parameter),
        ``batch_first`` either way; ``kdim``/``vdim`` other than ``embed_dim``,
        ``add_bias_kv``, ``add_zero_attn`` and training mode with dropout are refused.
    readout : array_like, optional
        A vector r of length ``out_proj.out_features`` (finite numbers): the box answers
        ``r . out[-1]`` as a float64 number.  Without it the box answers the output vector.
    dtype : str, optional
        ``None``: tokens must have the module's dtype (``learn(..., tokens="float64")`` for
        a float64 module); other tokens are refused, never cast.  ``"float32"`` or
        ``"float64"``: the box takes tokens of that dtype and converts them to the module's,
        refusing any that would round (``"float64"`` on a float32 module).
    threads : int or None, default 1
        torch's thread count during each call, restored after it (a positive integer;
        ``None``: torch's setting left unchanged).

    Returns
    -------
    LayerBox
        A callable black box for :func:`exactlearn.api.learn`, with ``batch(queries)``.

    Raises
    ------
    ModelError
        One line, when the box is made, for a module outside the model class (or in
        training mode with dropout), a dtype it does not take, a readout of the wrong
        length or a ``threads`` that is not a positive integer or None.
    """
    torch = _torch()
    _mha_blocks(module)                                  # checks the module
    _check_threads(threads)
    if module.training and module.dropout > 0:
        raise ModelError("the module is in training mode with dropout > 0: call module.eval()")
    td, md = token_dtypes(_one_dtype(module.parameters()), dtype)
    E, bf = module.embed_dim, module.batch_first

    def forward(stack):
        if module.training and module.dropout > 0:       # put in training mode since: a noisy box
            raise ModelError("the module was put in training mode with dropout > 0 after "
                             "black_box(): call module.eval()")
        x = torch.from_numpy(np.ascontiguousarray(stack))
        with (torch.no_grad(), _threads(torch, threads),
              _observing_hooks([(module, "the MultiheadAttention")])):
            q = x[:, -1:]                                # the final token's query only: O(n)
            if not bf:
                x, q = x.transpose(0, 1), q.transpose(0, 1)
            out, _ = module(q, x, x, need_weights=False)
            return (out[:, 0] if bf else out[0]).numpy()

    return LayerBox(forward, E, module.out_proj.out_features, readout, td, md,
                    name=f"torch MultiheadAttention(d={E}, heads={module.num_heads})")


def _runs_as_written(module, what: str) -> None:
    """Refuse (one line) a module whose call need not compute its class's ``forward`` on the
    weights :func:`true_heads` reads: a ``forward`` set on the instance (as accelerate's
    ``add_hook_to_module`` does) or a subclass ``__call__``.  Forward hooks are allowed
    while they only observe (:func:`_observing_hooks`)."""
    torch = _torch()
    why = None
    if "forward" in vars(module):
        why = "has a forward set on the instance"
    elif type(module).__call__ is not torch.nn.Module.__call__:
        why = f"is a {type(module).__name__}, which overrides __call__"
    if why is not None:
        raise ModelError(f"{what} {why}: its answers need not be those of the weights the "
                         f"adapter reads")


@contextlib.contextmanager
def _observing_hooks(modules):
    """During one call of the box: every forward (pre-)hook of ``modules`` (``[(module,
    name)]``) and every global one runs as registered, and one that returns a value -- which
    torch puts in place of the input or output -- is refused (:class:`ModelError`): the box
    would answer for other weights than those :func:`true_heads` reads.  A hook that only
    observes (counts, logs) returns None and is kept.  Each module is checked as by
    :func:`_runs_as_written` first (an instance forward set since the box was made)."""
    M = _torch().nn.modules.module
    tables = [(M._global_forward_hooks, "a global forward hook"),
              (M._global_forward_pre_hooks, "a global forward pre-hook")]
    for module, what in modules:
        _runs_as_written(module, what)
        tables += [(module._forward_hooks, f"a forward hook of {what}"),
                   (module._forward_pre_hooks, f"a forward pre-hook of {what}")]
    saved = []
    for table, who in tables:
        for key, hook in list(table.items()):
            def checked(*args, _hook=hook, _who=who, **kwargs):
                if _hook(*args, **kwargs) is not None:
                    raise ModelError(f"{_who} changes its input or output: the box would "
                                     f"answer for other weights than those the adapter reads")
            saved.append((table, key, hook))
            table[key] = checked
    try:
        yield
    finally:
        for table, key, hook in saved:
            table[key] = hook


def _torch_dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def _one_dtype(params):
    """The one dtype of a layer's parameters; a layer that mixes dtypes is refused (torch would
    fail inside the first query, or cast)."""
    dtypes = sorted({_torch_dtype_name(p.dtype) for p in params})
    if len(dtypes) != 1:
        raise ModelError(f"the layer mixes dtypes {dtypes}: give every parameter one dtype "
                         f"(module.float() or module.double())")
    return dtypes[0]


def _linear_blocks(query, key, value, out, heads):
    torch = _torch()
    for name, lin in (("query", query), ("key", key), ("value", value), ("out", out)):
        if not isinstance(lin, torch.nn.Linear):
            raise ModelError(f"{name} must be a torch.nn.Linear, got {type(lin).__name__}")
        if type(lin).forward is not torch.nn.Linear.forward:
            raise ModelError(f"{name} is a {type(lin).__name__}, which overrides Linear.forward: "
                             f"its weights need not be those the adapter reads")
        _runs_as_written(lin, name)
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise ModelError(f"heads must be a positive integer, got {heads!r}")
    d = query.in_features
    if key.in_features != d or value.in_features != d:
        raise ModelError(f"query, key and value must take the same input size, got "
                         f"{query.in_features}, {key.in_features}, {value.in_features}")
    if query.out_features != key.out_features or query.out_features % heads:
        raise ModelError(f"query and key must have equal output sizes divisible by heads={heads}, "
                         f"got {query.out_features}, {key.out_features}")
    if value.out_features % heads or out.in_features != value.out_features:
        raise ModelError(f"value's output size ({value.out_features}) must be divisible by "
                         f"heads={heads} and equal out's input size ({out.in_features})")
    dh, dv = query.out_features // heads, value.out_features // heads
    Q, K = _np(query.weight).reshape(heads, dh, d), _np(key.weight).reshape(heads, dh, d)
    V = _np(value.weight).reshape(heads, dv, d)
    bq = None if query.bias is None else _np(query.bias).reshape(heads, dh)
    bk = None if key.bias is None else _np(key.bias).reshape(heads, dh)
    bv = None if value.bias is None else _np(value.bias).reshape(heads, dv)
    return Q, bq, K, bk, V, bv, _np(out.weight), _np(out.bias)


def true_heads_linear(query, key, value, out, heads: int, readout=None) -> TrueHeads:
    """The canonical parameters of the self-attention of :func:`black_box_linear` (the same
    map as :func:`true_heads`, the head blocks being the rows of ``query.weight``,
    ``key.weight`` and ``value.weight`` and the columns of ``out.weight``)."""
    return canonical_parameters(*_linear_blocks(query, key, value, out, heads), readout=readout)


def black_box_linear(query, key, value, out, heads: int, readout=None, dtype=None,
                     threads: int | None = 1) -> LayerBox:
    """A self-attention of ``nn.Linear`` maps as a black box (Hugging Face BERT:
    ``black_box_linear(a.self.query, a.self.key, a.self.value, a.output.dense,
    a.self.num_attention_heads, readout=r)`` for ``a = model.encoder.layer[i].attention``).

    Head h takes the h-th block of ``query``/``key``/``value`` outputs; the last token's
    context ``sum_i softmax_i(k_{h,i} . q_{h,n} / sqrt(d_h)) v_{h,i}``, heads concatenated,
    goes through ``out``.  The answer, ``dtype`` and ``threads`` are as in :func:`black_box`.
    """
    torch = _torch()
    _linear_blocks(query, key, value, out, heads)
    _check_threads(threads)
    td, md = token_dtypes(_one_dtype(p for lin in (query, key, value, out) for p in lin.parameters()),
                          dtype)
    d = query.in_features
    dh, dv = query.out_features // heads, value.out_features // heads
    scale = 1.0 / math.sqrt(dh)

    def forward(stack):
        x = torch.from_numpy(np.ascontiguousarray(stack))
        with (torch.no_grad(), _threads(torch, threads),
              _observing_hooks([(query, "query"), (key, "key"), (value, "value"), (out, "out")])):
            B, n, _ = x.shape
            q = query(x[:, -1]).view(B, heads, dh)                       # the final token's query
            k = key(x).view(B, n, heads, dh)
            v = value(x).view(B, n, heads, dv)
            s = torch.einsum("bihk,bhk->bhi", k, q) * scale
            a = torch.softmax(s, dim=-1)
            ctx = torch.einsum("bhi,bihv->bhv", a, v).reshape(B, heads * dv)
            return out(ctx).numpy()

    return LayerBox(forward, d, out.out_features, readout, td, md,
                    name=f"torch Linear self-attention(d={d}, heads={heads})")
