"""Adapters: a PyTorch or JAX/Flax attention layer as an exactlearn black box
(docs: howto/torch-jax-layer.md).

* :mod:`exactlearn.adapters.torch` -- ``torch.nn.MultiheadAttention`` (``black_box``,
  ``true_heads``) and a self-attention built from q/k/v/o ``nn.Linear`` layers, the shape of
  Hugging Face's BERT attention (``black_box_linear``, ``true_heads_linear``);
* :mod:`exactlearn.adapters.flax` -- ``flax.linen.MultiHeadDotProductAttention`` and
  ``flax.nnx.MultiHeadAttention`` (:mod:`exactlearn.adapters.nnx`) used as self-attention
  (``black_box``, ``true_heads``).

Each box answers ``box(tokens)`` (a 2-D numpy array, the final token last) with the layer's
output at the last position, read out as ``readout . out[-1]`` when a readout is given (the
scalar ``learn()`` takes today) or the whole output vector otherwise, and ``box.batch(queries)``
runs the queries grouped by length, one batched forward per group.  ``true_heads`` maps the
layer's weights to exactlearn's canonical parameters (:class:`~exactlearn.adapters.common.TrueHeads`).

torch and flax are optional extras (``pip install exactlearn[torch]``, ``exactlearn[flax]``),
imported only when an adapter is used; nothing in exactlearn imports this package.
"""
