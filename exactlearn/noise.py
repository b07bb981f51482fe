"""The approximate oracle (arXiv:2608.03294; docs: explanation/real-field.md): every output perturbed by a seeded uniform amount.

``NoisyOracle(oracle, noise=eta, seed=s)`` answers ``f(X) + eta * u`` with ``u`` drawn
uniformly from ``[-1, 1]`` (64 random bits, an exact dyadic rational) by
``random.Random(seed)``, one draw per query in the order asked (per output, in order, for a
model of m outputs).  It keeps the wrapped
oracle's counters (``queries``, ``max_length``, ``seconds``), ``field`` and
``check_plan``, and exposes ``noise`` (eta, a field element): :func:`exactlearn.learn`
reads it as the bound on the output error when ``noise=`` is not given.  ``noise`` (here
and in ``learn``) may be a rational, a decimal string, an mpf or a float
(:func:`noise_bound`).

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

import math
import numbers
import random
from fractions import Fraction

from gmpy2 import mpq


def noise_bound(K, noise, name="noise"):
    """The output-error bound eta as an element of the real field ``K``.

    Accepts what ``K`` embeds (int, rational, ``"p/q"`` or decimal string, mpf) and also a
    Python or numpy float, read as its exact binary value (``1e-15`` is
    1.0000000000000000777e-15, one rounding of the decimal).  Raises ``ValueError`` naming
    the parameter (``name``) and the value when it is not a finite number >= 0.

    >>> import numpy as np
    >>> from exactlearn.fields import Real
    >>> K = Real(dps=20)
    >>> K.format(noise_bound(K, 1e-15)), K.format(noise_bound(K, "1e-15"))
    ('1.0000000000000000777e-15', '1.0e-15')
    >>> K.format(noise_bound(K, np.float32(0.5)))
    '0.5'
    >>> noise_bound(K, -1e-3, "noise_rel")
    Traceback (most recent call last):
    ...
    ValueError: noise_rel must be >= 0, got -0.001
    """
    given = noise
    if hasattr(noise, "dtype") and isinstance(noise, numbers.Real) \
            and not isinstance(noise, numbers.Integral):
        noise = float(noise)            # a numpy float: its exact value (float32 within float64)
    if isinstance(noise, float):
        if not math.isfinite(noise):
            raise ValueError(f"{name} must be a finite number >= 0, got {given!r}")
        noise = Fraction(noise)
    try:
        eta = K(noise)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name}: {exc}") from None
    if eta < 0:
        raise ValueError(f"{name} must be >= 0, got {given!r}")
    return eta


class NoisyOracle:
    """An oracle whose outputs are within ``noise`` of the wrapped oracle's."""

    BITS = 64

    def __init__(self, oracle, noise, seed=None):
        K = getattr(oracle, "field", None)
        if K is None or not hasattr(K, "is_exact"):
            raise ValueError(f"a noisy oracle wraps an oracle over the real field (an "
                             f"exactlearn Oracle), not {type(oracle).__name__}")
        if K.is_exact:
            raise ValueError(f"a noisy oracle needs the real field, not the {K.name} field "
                             f"(its outputs would no longer be exact values of the model)")
        eta = noise_bound(K, noise)
        self.oracle = oracle
        self.field = K
        self.noise = eta
        self.seed = seed
        self._rng = random.Random(seed)

    def __call__(self, tokens):
        y = self.oracle(tokens)
        if isinstance(y, (list, tuple)):  # m outputs (docs: explanation/biases.md#vector-outputs)
            return type(y)(yj + self._draw() for yj in y)               # one draw each
        return y + self._draw()

    def _draw(self):
        n = self._rng.getrandbits(self.BITS)
        u = mpq(2 * n - (2 ** self.BITS - 1), 2 ** self.BITS - 1)     # uniform on [-1, 1]
        return self.field(u) * self.noise

    def __getattr__(self, name):          # queries, max_length, seconds, check_plan, d, model
        if name in ("oracle", "batch"):   # batch: the wrapped box's would answer without noise
            raise AttributeError(name)
        return getattr(self.oracle, name)
