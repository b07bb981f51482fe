"""First-order error propagation over the real field: sensitivities, bounds and the noise
check (docs: explanation/real-field.md; the paper's
approximate-oracle conditions, arXiv:2608.03294: outputs within eta of the truth).

Every observation ``y_q`` differs from the true ``f(q)`` by at most
``eta_q = eta + u_q``: the oracle's stated noise ``eta`` plus its rounding,
``u_q = 2^-prec * 512 * Y`` (:func:`rounding`) with ``Y`` the size of its terms
(first bounded by ``H max|y|``, then recomputed from the recovered heads).  Every
derived quantity ``z`` is tracked to first order as a *linear functional of the
observation errors*, ``dz = sum_q S_z[q] eps_q`` (a :class:`Sens`), and bounded by
the worst case ``B_z = sum_q |S_z[q]| eta_q`` (:meth:`Sens.bound`;
exact in the linear model: correlations through shared observations are kept, not
added up).

Where the observations fix a quantity more than once, its residual is compared with
its first-order bound (:func:`check_noise`): a residual above ``NOISE_FACTOR B + r``
means the box is noisier than declared (docs: explanation/algorithm.md#what-a-failure-means).

Precision
---------
* Sensitivities: ``K.dps + 30`` digits.  The rows of an ill-conditioned ``J^+`` are as
  large as its condition number and cancel in sums (e.g. ``sum_h c_h = y_0 - A``), so
  they need the working precision and more.  :func:`sens_context` makes that context
  once per run; every :class:`Sens` carries it, so computations on sensitivities take
  it from their operands.  No context is cached in the module.
* Bounds: :data:`LO`, a fixed 20-digit mpmath context.  It is used **read-only** (never
  its precision changed, no ``extraprec``): bounds need only a few digits, and one
  shared constant context keeps them comparable across a run.

>>> from exactlearn.fields.real import Real
>>> K = Real(dps=30)
>>> S = sens_context(K)
>>> z = Sens.unit(S, 0).add(Sens.unit(S, 1), -2)          # dz = eps_0 - 2 eps_1
>>> LO.nstr(z.bound({0: LO.mpf(1), 1: LO.mpf("0.5")}), 3)
'2.0'
"""

from __future__ import annotations


from exactlearn.algebra.contexts import context
from exactlearn.errors import NoisierThanDeclared

#: The bounds' context: 20 digits, read-only (module doc).
LO = context(dps=20)

#: A residual beyond NOISE_FACTOR first-order bounds from eta: noisier than declared.
NOISE_FACTOR = 10


def sens_context(K):
    """A new context for the sensitivities of one run over ``K``: ``K.dps + 30`` digits
    (module doc)."""
    return context(dps=K.dps + 30)


class Sens:
    """A linear functional of the observation errors: ``{observation index: coefficient}``."""

    __slots__ = ("ctx", "c")

    def __init__(self, ctx, coeffs=None):
        self.ctx = ctx
        self.c = coeffs if coeffs is not None else {}

    @classmethod
    def unit(cls, ctx, q) -> "Sens":
        return cls(ctx, {q: ctx.one})

    def scaled(self, a) -> "Sens":
        a = self.ctx.convert(a)
        return Sens(self.ctx, {q: x * a for q, x in self.c.items()})

    def add(self, other: "Sens", a=1) -> "Sens":
        return combine(self.ctx, [(1, self), (a, other)])

    def bound(self, etas):
        """Worst case ``sum_q |S[q]| eta_q`` (a low-precision number)."""
        return LO.convert(self.ctx.fsum(abs(x) * etas[q] for q, x in self.c.items()))


def combine(ctx, terms) -> Sens:
    """``sum a * s`` over the ``(a, s)`` of ``terms``, in the context ``ctx``."""
    out: dict = {}
    for a, s in terms:
        a = ctx.convert(a)
        if a == 0:
            continue
        for q, x in s.c.items():
            out[q] = out.get(q, ctx.zero) + x * a
    return Sens(ctx, out)


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
