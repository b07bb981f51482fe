"""A Flax NNX attention layer (``flax.nnx.MultiHeadAttention``) as an exactlearn black box
(docs: howto/torch-jax-layer.md#2-a-flax-multiheaddotproductattention).

:func:`exactlearn.adapters.flax.black_box` and :func:`~exactlearn.adapters.flax.true_heads`
come here for an NNX layer, which holds its own parameters (no ``params`` argument).  It is
used as self-attention, ``layer(X)``; the box asks only the final token's query,
``layer(X[:, -1:], X)``, the same output at the last position.  Grouped-query attention
(``num_kv_heads`` < ``num_heads``) is in the model class: query head h shares the key and
value maps of group ``h // (num_heads / num_kv_heads)``, as flax computes it.
``normalize_qk``, ``decode=True``, a custom ``attention_fn``, custom products or dtype
promotion, and keys and values of another width (``in_kv_features``) are refused.

flax's ``dot_product_attention`` without dropout hands the work to
``jax.nn.dot_product_attention``, which computes the softmax in float32 whatever the layer's
dtype.  For a float64 layer the box passes ``sow_weights=True`` (inside ``nnx.capture``, which
returns the sown attention weights; they are dropped), which takes flax's own path in the
layer's dtype -- the same function -- so that a float64 layer answers at float64 rounding; a
float32 layer runs as it is called.  The box uses the parameters as they are when it is made.
"""

from __future__ import annotations

import numpy as np

from exactlearn.adapters.common import layer_dtype, refuse_outside_class
from exactlearn.errors import ModelError

#: NNX MultiHeadAttention fields that replace its products: the layer then computes with
#: other weights than those read
CUSTOM_PRODUCTS = ("qkv_dot_general", "out_dot_general", "qkv_dot_general_cls",
                   "out_dot_general_cls")


def is_nnx(module) -> bool:
    """True for a ``flax.nnx.MultiHeadAttention`` (flax imported only when it is loaded)."""
    import sys
    nnx = sys.modules.get("flax.nnx")
    return nnx is not None and isinstance(module, nnx.MultiHeadAttention)


def check(module, params):
    """``(jax, nnx, dtype)`` for a layer in the model class; one-line ModelError otherwise."""
    import jax
    from flax import nnx
    from flax.nnx.nn import attention, dtypes as fdt
    name = type(module).__name__
    if params is not None:
        raise ModelError(f"a flax.nnx {name} holds its parameters: call black_box(layer) and "
                         f"true_heads(layer) without params")
    if type(module).__call__ is not nnx.MultiHeadAttention.__call__:
        raise ModelError(f"{name} overrides MultiHeadAttention's call: build a "
                         f"MultiHeadAttention with its parameters")
    if any(getattr(module, f, fdt.promote_dtype) is not fdt.promote_dtype
           for f in ("qkv_promote_dtype", "out_promote_dtype")):
        raise ModelError("MultiHeadAttention with a custom promote_dtype is not supported")
    refuse_outside_class(module, "MultiHeadAttention", CUSTOM_PRODUCTS,
                         attention.dot_product_attention)
    _check_maps(module, nnx, fdt)
    if module.in_kv_features != module.in_features:
        raise ModelError(f"MultiHeadAttention with in_kv_features={module.in_kv_features} != "
                         f"in_features={module.in_features} is not a self-attention of the tokens")
    leaves = jax.tree_util.tree_leaves(nnx.state(module, nnx.Param))
    return jax, nnx, layer_dtype(leaves, module.dtype)


def _check_maps(module, nnx, fdt) -> None:
    """The four maps as flax builds them: plain ``LinearGeneral`` layers with the default
    product and dtype promotion over the last axes, so that they compute with the kernels
    :func:`blocks` reads (a map replaced or edited after construction computes with other
    weights)."""
    for name, axis in (("query", (-1,)), ("key", (-1,)), ("value", (-1,)), ("out", (-2, -1))):
        lin = getattr(module, name, None)
        if type(lin) is not nnx.LinearGeneral:
            raise ModelError(f"MultiHeadAttention's {name} map is a {type(lin).__name__}, not "
                             f"the LinearGeneral flax builds: it may compute with other weights "
                             f"than its kernel")
        edited = [f for f, ok in (("dot_general", lin.dot_general is None),
                                  ("dot_general_cls", lin.dot_general_cls is None),
                                  ("promote_dtype", lin.promote_dtype is fdt.promote_dtype),
                                  ("preferred_element_type", lin.preferred_element_type is None),
                                  ("axis", tuple(lin.axis) == axis),
                                  ("dtype", lin.dtype == module.dtype),
                                  ("batch_axis", not lin.batch_axis)) if not ok]
        if edited:
            raise ModelError(f"MultiHeadAttention's {name} map has a custom {edited[0]}: it "
                             f"computes with other weights than its kernel")


def blocks(module):
    """Per-head float64 blocks ``(Q, bq, K, bk, V, bv, O, bo)`` for
    :func:`~exactlearn.adapters.common.canonical_parameters`; grouped key and value heads
    repeated over their query heads."""
    def arr(layer, name):
        x = getattr(layer, name, None)
        return None if x is None else np.asarray(x[...], dtype=np.float64)
    Qk, Kk, Vk = (arr(getattr(module, n), "kernel") for n in ("query", "key", "value"))
    Ok = arr(module.out, "kernel")
    d, H, dh = Qk.shape
    rep = H // Kk.shape[1]
    Q, K, V = (np.repeat(x.transpose(1, 2, 0), r, axis=0)      # (H, d_h, d): the rows
               for x, r in ((Qk, 1), (Kk, rep), (Vk, rep)))
    bq, bk, bv = (arr(getattr(module, n), "bias") for n in ("query", "key", "value"))
    bk, bv = (None if b is None else np.repeat(b, rep, axis=0) for b in (bk, bv))
    O = Ok.reshape(H * Vk.shape[2], -1).T                           # (m, H d_v)
    return Q, bq, K, bk, V, bv, O, arr(module.out, "bias")


def runner(module, jax, nnx, dtype):
    """``run(q, kv, mask)``: the layer's outputs at the queries ``q`` over the tokens ``kv``
    (one jitted call per shape; module doc for ``sow_weights``)."""
    graph, state = nnx.split(nnx.clone(module))     # a copy: the parameters as they are now
    full = np.dtype(dtype) == np.dtype(np.float64)

    def final(state, q, kv, mask):
        layer = nnx.merge(graph, state)
        call = layer
        if full and hasattr(nnx, "capture"):      # the sown weights returned, and dropped
            call = lambda *a, **k: nnx.capture(layer, nnx.Intermediate)(*a, **k)[0]  # noqa
        return call(q, kv, mask=mask, deterministic=True, decode=False,
                    sow_weights=full)[:, 0]
    jitted = jax.jit(final)
    return lambda q, kv, mask: jitted(state, q, kv, mask)
