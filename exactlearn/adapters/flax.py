"""A Flax attention layer as an exactlearn black box (docs: howto/torch-jax-layer.md).

:func:`black_box` / :func:`true_heads` take a ``flax.nnx.MultiHeadAttention`` alone (it holds
its parameters: :mod:`~exactlearn.adapters.nnx`) or a ``flax.linen.MultiHeadDotProductAttention`` and
its parameters (what ``module.init`` returns, or its ``"params"``), used as self-attention
(``module.apply(variables, X)``: inputs_q = inputs_kv = the tokens; the box asks only the
final token's query, ``module.apply(variables, X[:, -1:], X)``, which is the same output at the
last position at O(n) cost).  ``normalize_qk``,
``decode`` and a custom ``attention_fn`` are outside the model class and refused.

The box runs one jitted ``apply`` per padded query length and batch size, in the layer's own
dtype: float32, or float64 with ``jax.config.update("jax_enable_x64", True)`` set before the
parameters are made (without it JAX turns float64 into float32, so float64 tokens are refused).
JAX sizes its thread pool when it starts; the adapter leaves it alone.  jax and flax are
imported when a function here is called, never at import.
"""

from __future__ import annotations

import functools

import numpy as np

from exactlearn.adapters import nnx as _nnx
from exactlearn.adapters.common import (LayerBox, TrueHeads, canonical_parameters, layer_dtype,
                                       refuse_outside_class, token_dtypes)
from exactlearn.errors import ModelError


def _flax():
    try:
        import flax.linen as nn
        import jax
    except ImportError:
        raise ModelError("the flax adapter needs jax and flax: pip install exactlearn[flax]") from None
    return jax, nn


#: Fields of MultiHeadDotProductAttention that replace its products (quantised or scaled
#: einsums): the layer then computes with other weights than those read
CUSTOM_PRODUCTS = ("qkv_dot_general", "out_dot_general", "qkv_dot_general_cls",
                   "out_dot_general_cls", "qk_attn_weights_einsum_cls",
                   "attn_weights_value_einsum_cls")


def _final_query(module, variables, q, kv, mask):
    if module.deterministic is not None:            # fixed at construction (checked: no dropout)
        return module.apply(variables, q, kv, mask=mask)[:, 0]
    return module.apply(variables, q, kv, mask=mask, deterministic=True)[:, 0]


@functools.lru_cache(maxsize=1)
def _jitted():
    """One jitted apply for every box (the module is a static argument: boxes of equal
    layers share their compilations)."""
    jax, _ = _flax()
    return jax.jit(_final_query, static_argnums=0)


def _params(params) -> dict:
    if isinstance(params, dict) or hasattr(params, "keys"):
        p = params.get("params", params)
        if all(k in p for k in ("query", "key", "value", "out")):
            return p
    raise ModelError("params must be the layer's variables (module.init(...)) or their 'params', "
                     "with query, key, value and out")


def _check(module, params):
    jax, nn = _flax()
    if not isinstance(module, nn.MultiHeadDotProductAttention):
        raise ModelError(f"black_box takes a flax.linen.MultiHeadDotProductAttention or a "
                         f"flax.nnx.MultiHeadAttention, got {type(module).__name__}")
    if params is None:
        raise ModelError("a flax.linen MultiHeadDotProductAttention needs its params: "
                         "black_box(module, module.init(...))")
    if (type(module).__call__ is not nn.MultiHeadDotProductAttention.__call__
            or type(module).apply is not nn.Module.apply):
        raise ModelError(f"{type(module).__name__} overrides MultiHeadDotProductAttention's "
                         f"call or apply: build a MultiHeadDotProductAttention with its "
                         f"parameters")
    if module.deterministic is not None and not module.deterministic and module.dropout_rate > 0:
        raise ModelError("MultiHeadDotProductAttention built with deterministic=False and "
                         "dropout_rate > 0 is a noisy box: build it with deterministic=True")
    refuse_outside_class(module, "MultiHeadDotProductAttention", CUSTOM_PRODUCTS,
                         nn.dot_product_attention)
    p = _params(params)
    return jax, p, layer_dtype(jax.tree_util.tree_leaves(p), module.dtype)


def _blocks(p):
    def arr(x):
        return None if x is None else np.asarray(x, dtype=np.float64)
    q, k, v, o = (p[name] for name in ("query", "key", "value", "out"))
    Qk, Kk, Vk, Ok = arr(q["kernel"]), arr(k["kernel"]), arr(v["kernel"]), arr(o["kernel"])
    if Qk.ndim != 3 or Ok.ndim != 3:
        raise ModelError("the query kernel must be (d, heads, d_h) and the out kernel (heads, d_h, m)")
    d, H, dh = Qk.shape
    dv = Vk.shape[2]
    Q, K, V = (x.transpose(1, 2, 0) for x in (Qk, Kk, Vk))          # (H, d_h, d): the rows
    O = Ok.reshape(H * dv, -1).T                                      # (m, H d_v)
    return (Q, arr(q.get("bias")), K, arr(k.get("bias")), V, arr(v.get("bias")), O,
            arr(o.get("bias")))


def true_heads(module, params=None, readout=None) -> TrueHeads:
    """The canonical parameters of a ``MultiHeadDotProductAttention`` (self-attention): with
    ``Q_h = query.kernel[:, h, :]^T`` (and so on) and ``O_h = out.kernel[h]^T``,
    ``W_h = K_h^T Q_h / sqrt(d_h)``, ``u_h = K_h^T b_{q,h} / sqrt(d_h)``, ``v_h = r^T O_h V_h``
    (the m x d matrix without a readout), ``c = r . (O b_v + b_o)``.  See
    :class:`~exactlearn.adapters.common.TrueHeads`.

    Parameters
    ----------
    module : flax.linen.MultiHeadDotProductAttention or flax.nnx.MultiHeadAttention
        The layer, used as self-attention; one outside the model class is refused as by
        :func:`black_box`.  An NNX layer's grouped key and value heads (``num_kv_heads``)
        are repeated over their query heads.
    params : dict, optional
        A linen layer's variables (``module.init(...)``) or their ``"params"``, with
        ``query``, ``key``, ``value`` and ``out``; read exactly.  None for an NNX layer.
    readout : array_like, optional
        The vector r of the scalar answer (m finite numbers, m the last axis of
        ``out.kernel``); without it each ``v_h`` is an m x d matrix.

    Returns
    -------
    TrueHeads
        ``.heads()`` gives the canonical heads to compare with ``learn()``'s ``res.heads``.

    Raises
    ------
    ModelError
        One line, for a layer outside the model class, parameters without the four
        kernels or of mixed dtypes, or a readout of the wrong length.
    """
    if _nnx.is_nnx(module):
        _nnx.check(module, params)
        return canonical_parameters(*_nnx.blocks(module), readout=readout)
    _, p, _ = _check(module, params)
    return canonical_parameters(*_blocks(p), readout=readout)


def black_box(module, params=None, readout=None, dtype=None) -> LayerBox:
    """A ``MultiHeadDotProductAttention`` as a black box: ``box(X)`` answers
    ``module.apply(params, X[None])[0, -1]`` (computed as ``module.apply(params, X[None, -1:],
    X[None])[0, 0]``, the final token's query only) read out as ``readout . out`` (a float64
    scalar), or the output vector (the layer's dtype) without a readout -- learn it with
    ``learn(..., outputs=m)`` (docs: explanation/biases.md#vector-outputs).
    ``box.batch(queries)`` runs each length's queries as one jitted batch (batch and length
    padded to powers of two, the batch to at least 8: the extra queries discarded, the extra
    tokens masked out, which weighs them exactly 0).

    ``dtype=None``: tokens must have the layer's dtype; ``dtype=`` another float dtype
    converts them exactly or refuses (as the torch adapter).  Dropout is off
    (``deterministic=True``).

    Parameters
    ----------
    module : flax.linen.MultiHeadDotProductAttention or flax.nnx.MultiHeadAttention
        The layer, in float32 or float64 (one dtype for every parameter and ``dtype=``);
        a subclass that overrides the call, custom products or ``attention_fn``,
        ``normalize_qk``, ``decode`` and ``deterministic=False`` with dropout are refused.
        A float64 NNX layer is called on flax's float64 path (``sow_weights=True``:
        :mod:`~exactlearn.adapters.nnx`; its default path computes the softmax in float32).
    params : dict, optional
        A linen layer's variables (``module.init(...)``) or their ``"params"``, with
        ``query``, ``key``, ``value`` and ``out``.  None for an NNX layer, which holds its
        own (read when the box is made).
    readout : array_like, optional
        A vector r of length m (the last axis of ``out.kernel``; finite numbers): the box
        answers ``r . out`` as a float64 number; without it the output vector.
    dtype : str, optional
        ``None``: tokens of the layer's dtype only; ``"float32"`` or ``"float64"``: tokens
        of that dtype, converted exactly to the layer's or refused.  float64 (tokens or
        layer) needs ``jax_enable_x64``.

    Returns
    -------
    LayerBox
        A callable black box for :func:`exactlearn.api.learn`, with ``batch(queries)``.

    Raises
    ------
    ModelError
        One line, when the box is made, for a layer, parameters or readout that
        :func:`true_heads` refuses, a dtype the box does not take, or float64 without
        ``jax_enable_x64``.
    """
    if _nnx.is_nnx(module):
        jax, nnx, md = _nnx.check(module, params)
        d, m, name = module.in_features, module.out_features, "MultiHeadAttention"
    else:
        jax, p, md = _check(module, params)
        d = _blocks(p)[0].shape[2]
        m, name = np.asarray(p["out"]["kernel"]).shape[-1], "MultiHeadDotProductAttention"
    td, md = token_dtypes(md, dtype)
    if np.dtype(np.float64) in (td, md) and not jax.config.jax_enable_x64:
        raise ModelError("float64 with JAX needs jax.config.update('jax_enable_x64', True) "
                         "before the parameters are made (JAX would round to float32)")
    # The output at the last position is the final token's query attending over all tokens:
    # asking only that query costs O(n), not the O(n^2) of every position.  Shapes are padded
    # to powers of two (few shapes, few compilations): extra queries are copies, discarded;
    # extra tokens are masked out, and a masked score's weight is exactly 0.
    if _nnx.is_nnx(module):
        run = _nnx.runner(module, jax, nnx, md)
    else:
        run = _linen_runner(jax, module, {"params": p})

    def forward(stack):
        B, n, _ = stack.shape
        size, length = max(8, 1 << (B - 1).bit_length()), 1 << (n - 1).bit_length()
        kv = np.zeros((size, length, d), dtype=stack.dtype)
        kv[:B, :n] = stack
        kv[B:, :n] = stack[:1]
        mask = np.zeros((size, 1, 1, length), dtype=bool)
        mask[..., :n] = True
        out = np.asarray(run(kv[:, n - 1:n], kv, mask))
        if out.dtype != md:
            raise ModelError(f"the layer answered in {out.dtype}, not its {md}")
        return out[:B]

    hint = ("" if jax.config.jax_enable_x64 else
            " (JAX's x64 mode is off, so a layer built with param_dtype=float64 holds float32 "
            "parameters: call jax.config.update('jax_enable_x64', True) before making them)")
    return LayerBox(forward, d, m, readout, td, md,
                    name=f"flax {name}(d={d}, heads={module.num_heads})", hint=hint)


def _linen_runner(jax, module, variables):
    try:
        hash(module)
        run = functools.partial(_jitted(), module)
    except TypeError:                                   # an unhashable layer: its own jit
        run = jax.jit(functools.partial(_final_query, module))
    return lambda q, kv, mask: run(variables, q, kv, mask)
