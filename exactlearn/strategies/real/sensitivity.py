"""Bounds and the noise check over the real field (docs: explanation/real-field.md; the
paper's approximate-oracle conditions, arXiv:2608.03294: outputs within eta of the truth).

Every observation ``y_q`` differs from the true ``f(q)`` by at most
``eta_q = eta + u_q``: the oracle's stated noise ``eta`` plus its rounding,
``u_q = 2^-prec * 512 * Y`` (:func:`rounding`) with ``Y`` the size of its terms.  Every
derived quantity is bounded to first order by ``sum_q |S_z[q]| eta_q`` from its sensitivity
to the observations (a fitted family's ``G``,
:class:`~exactlearn.strategies.real.fit.RatioFit`, and the solve's products of them).

Where the observations fix a quantity more than once, its residual is compared with
its first-order bound (:func:`check_noise`): a residual above ``NOISE_FACTOR B + r``
means the box is noisier than declared (docs: explanation/algorithm.md#what-a-failure-means).

Bounds are computed in :data:`LO`, a fixed 20-digit mpmath context, used **read-only** (never
its precision changed, no ``extraprec``): bounds need only a few digits, and one shared
constant context keeps them comparable across a run.

>>> from exactlearn.fields.real import Real
>>> LO.nstr(rounding(Real(dps=30), 1), 3)
'5.05e-29'
"""

from __future__ import annotations


from exactlearn.algebra.contexts import context
from exactlearn.errors import NoisierThanDeclared

#: The bounds' context: 20 digits, read-only (module doc).
LO = context(dps=20)

#: A residual beyond NOISE_FACTOR first-order bounds from eta: noisier than declared.
NOISE_FACTOR = 10


def rounding(K, Y):
    """Rounding allowance of one oracle output whose terms have size Y."""
    return LO.ldexp(64 * 8, -K.prec) * LO.convert(Y)


def check_noise(residual, bound, slack, what):
    """Raise :class:`NoisierThanDeclared` when ``|residual| > NOISE_FACTOR * bound + slack``.

    ``residual`` is a quantity the observations determine more than once (zero for exact
    outputs of a multi-head attention), ``bound`` its first-order worst case when every
    output is within its ``eta_q`` of the truth, ``slack`` the rounding of computing it."""
    r = LO.convert(abs(residual))
    allow = NOISE_FACTOR * bound + slack
    if r > allow:
        times = f"{LO.nstr(r / bound, 3)} times" if bound else "above"
        raise NoisierThanDeclared(
            f"outputs noisier than the declared eta (or not those of a multi-head attention): "
            f"{what} by {LO.nstr(r, 3)}, {times} its first-order bound {LO.nstr(bound, 3)} "
            f"from eta (outputs within eta of the model class stay within {NOISE_FACTOR})")
