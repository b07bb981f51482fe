"""The approximate oracle of SPEC §6: every output perturbed by a seeded uniform amount.

``NoisyOracle(oracle, noise=eta, seed=s)`` answers ``f(X) + eta * u`` with ``u`` drawn
uniformly from ``[-1, 1]`` (64 random bits, an exact dyadic rational) by
``random.Random(seed)``, one draw per query in the order asked.  It keeps the wrapped
oracle's counters (``queries``, ``max_length``, ``seconds``), ``field`` and
``check_plan``, and exposes ``noise`` (eta, a field element): :func:`exactlearn.learn`
reads it as the bound on the output error when ``noise=`` is not given.

Only the real field can carry noise: an exact field would turn the perturbation into a
different exact value, which no exact certificate can accept.

>>> from exactlearn import MultiHeadAttention, Oracle
>>> from exactlearn.fields import Real
>>> o = NoisyOracle(Oracle(MultiHeadAttention([([[1]], [2])]), Real(dps=30)), "1e-20", seed=1)
>>> y = o([[1], [1]])
>>> abs(y - 2) <= o.noise, o.queries
(True, 1)
"""

from __future__ import annotations

import random

from gmpy2 import mpq


class NoisyOracle:
    """An oracle whose outputs are within ``noise`` of the wrapped oracle's."""

    BITS = 64

    def __init__(self, oracle, noise, seed=None):
        K = oracle.field
        if K.is_exact:
            raise ValueError(f"a noisy oracle needs the real field, not the {K.name} field "
                             f"(its outputs would no longer be exact values of the model)")
        eta = K(noise)
        if eta < 0:
            raise ValueError(f"noise must be >= 0, got {noise!r}")
        self.oracle = oracle
        self.field = K
        self.noise = eta
        self.seed = seed
        self._rng = random.Random(seed)

    def __call__(self, tokens):
        y = self.oracle(tokens)
        n = self._rng.getrandbits(self.BITS)
        u = mpq(2 * n - (2 ** self.BITS - 1), 2 ** self.BITS - 1)     # uniform on [-1, 1]
        return y + self.field(u) * self.noise

    def __getattr__(self, name):          # queries, max_length, seconds, check_plan, d, model
        if name == "oracle":
            raise AttributeError(name)
        return getattr(self.oracle, name)
