"""Query directions and scale over the real field: the Cayley plan and the scaling probe
(docs: explanation/real-field.md, "Scaling rule").

Conditioning depends on how spread the exponents ``s = e^T W_h x`` are: at ``|s| >> 1``
some ``rho_h = e^s`` are huge or tiny and their heads all but vanish from the samples;
when the ``s_h`` of one configuration crowd together their poles do.  So:

* **Directions.**  The learner draws X and E as usual (integers in ``[-R, R]``,
  ``R = 1000`` by default for this field) and replaces each by the *exactly orthogonal*
  rational matrix of its skew part (Cayley, :func:`orthogonal_plan`): unit tokens,
  perfectly conditioned final solves, exact rational queries.
* **Scale.**  Both are multiplied by one rational ``sigma`` (a multiple of 1/16):

      sigma = sqrt(PAPER_TARGET / s_rms),   PAPER_TARGET = 1,

  where ``s_rms`` is the root mean square of ``log rho_h`` over the poles of a *probe*:
  basis families of the plan, ``(x_1, e_1), (x_2, e_2), ...``, sampled at unit scale for
  ``k = 0 .. 2H`` (``2H + 1`` queries each), as many as it takes to see 6 exponents: one
  family (``2H + 1`` queries) for ``H >= 6``, ``ceil(6/H)`` families below.  If the probe
  cannot be analysed it is repeated at a quarter of the scale, at most 4 times; if it fails
  at every one of them the run fails (no scale is guessed: at a tiny scale the heads'
  exponents crowd below the noise and distinct heads merge).  Exponents scale by
  ``sigma^2``, so the probe's exponents then have rms about 1 and every configuration's
  are of order one (on all-MiniLM-L6-v2 heads:
  rms targets 1-2 give errors around 1e-55 at 100 digits, 4 already fails some draws).
  ``query_scale=`` fixes ``sigma`` (no probe).  Probe queries are counted in ``queries``
  and reported separately as ``probe_queries``: ``queries = plan count + probe_queries``
  (probe queries the plan repeats, when ``sigma = 1``, are reused, not asked twice:
  :class:`~exactlearn.pipeline.ask.AskOnce`).
  A run that fails still reports the probe queries it asked.

>>> from gmpy2 import mpq
>>> Q = cayley([[3, 1], [-2, 5]])
>>> [[sum(Q[k][i] * Q[k][j] for k in range(2)) for j in range(2)] for i in range(2)]
[[mpq(1,1), mpq(0,1)], [mpq(0,1), mpq(1,1)]]
"""

from __future__ import annotations

from gmpy2 import mpq

from exactlearn.algebra import linalg
from exactlearn.errors import (DegenerateDraw, FieldError, ModelError, NoisierThanDeclared,
                               NonFiniteAnswer, clip)
from exactlearn.fields.rational import QQ
from exactlearn.pipeline.plan import paper_plan
from exactlearn.strategies.real.fit import fit_family_with_sensitivities
from exactlearn.strategies.real.sensitivity import LO, Sens, rounding

#: the probe family's exponents are scaled to rms about this (the stable plan, for float
#: boxes, aims at :data:`~exactlearn.strategies.real.stable_probe.STABLE_TARGET`, 3)
PAPER_TARGET = mpq(1)
PROBE_TRIES = 4
PROBE_SAMPLES = 6        # probe families until at least this many exponents are seen


def cayley(A):
    """The exactly orthogonal rational matrix ``(I - S)(I + S)^-1`` of the normalised skew
    part ``S = (A - A^T) / max|A|`` of an integer matrix (``I + S`` is invertible: S has
    imaginary spectrum).  The normalisation keeps the rotation angles spread: a large skew
    part would give a rotation close to ``-I``, whatever the draw."""
    d = len(A)
    top = max(1, max(abs(int(a)) for row in A for a in row))
    S = [[QQ(A[i][j] - A[j][i]) / top for j in range(d)] for i in range(d)]
    I = linalg.identity(d, QQ)
    minus = [[I[i][j] - S[i][j] for j in range(d)] for i in range(d)]
    plus = [[I[i][j] + S[i][j] for j in range(d)] for i in range(d)]
    return linalg.matmul(minus, linalg.inverse(plus, QQ), QQ)


def orthogonal_plan(plan):
    """The plan with X and E replaced by the exactly orthogonal (Cayley) matrices built from
    the drawn ones: unit token directions, perfectly conditioned solves, exact rationals."""
    d = plan.d
    X = cayley([[plan.X[j][i] for j in range(d)] for i in range(d)])     # rows of the drawn X
    E = cayley([[plan.E[j][i] for j in range(d)] for i in range(d)])
    cols = lambda M: [tuple(mpq(M[i][j]) for i in range(d)) for j in range(d)]
    return paper_plan(cols(X), cols(E), plan.H)


def scaled_plan(plan, sigma):
    """The plan with X and E multiplied by the rational ``sigma``."""
    X = [tuple(sigma * mpq(a) for a in x) for x in plan.X]
    E = [tuple(sigma * mpq(a) for a in e) for e in plan.E]
    return paper_plan(X, E, plan.H)


def scale_for(K, s_rms):
    """sigma = sqrt(PAPER_TARGET / s_rms) rounded to a multiple of 1/16 (at least 1/16)."""
    t = K.ctx.sqrt(K(PAPER_TARGET) / s_rms)
    return mpq(max(1, int(K.ctx.nint(16 * t))), 16)


def probe_families(plan, H):
    """The basis configurations probed: ``(x_i, e_i)``, then ``(x_i, e_i+1)``, ... -- as
    many as it takes to see ``PROBE_SAMPLES`` exponents with H heads (one family for
    H >= 6), at most ``d^2``."""
    d = plan.d
    want = min(d * d, -(-PROBE_SAMPLES // H))
    order = [(i, (i + t) % d) for t in range(d) for i in range(d)]
    return [plan.configs[plan.index("basis", i, j)] for i, j in order[:want]]


def probe_scale(plan, ask, K, S, H, eta, Yguess):
    """``(sigma, probe_detail)`` by the rule of the module docstring (``plan`` has unit
    columns): the rms of ``log rho`` over the poles of the probe families.  ``ask`` is an
    :class:`~exactlearn.pipeline.ask.AskOnce`, ``S`` the run's sensitivity context."""
    sigma0, tries, first = mpq(1), [], None
    ctx = K.ctx
    families = probe_families(plan, H)
    for _ in range(PROBE_TRIES):
        ss = []
        try:
            for c in families:
                x = [sigma0 * mpq(a) for a in c.x]
                a = [xi + sigma0 * mpq(b) for xi, b in zip(x, c.e)]
                got = [ask.observe([a] * k + [x]) for k in range(2 * H + 1)]
                ys = [y for y, _ in got]
                etas = {q: LO.convert(eta) + rounding(K, Yguess(ys)) for _, q in got}
                fit = fit_family_with_sensitivities(K, H, ys, [Sens.unit(S, q) for _, q in got], etas)
                ss += [ctx.log(r) for r in fit.rhos]
        except (NoisierThanDeclared, ModelError):
            raise                  # a smaller scale would only hide the noise, not remove it;
                                   # a box refusing the tokens (bad input) refuses every scale
        except (FieldError, ArithmeticError, ValueError) as exc:
            first = first or exc
            tries.append({"scale": str(sigma0), "failed": clip(exc, 120)})
            sigma0 /= 4
            continue
        rms = ctx.sqrt(ctx.fsum(s * s for s in ss) / len(ss)) if ss else None
        tries.append({"scale": str(sigma0), "families": len(families), "poles": len(ss),
                      "rms_exponent": None if rms is None else ctx.nstr(rms, 4),
                      "max_exponent": None if rms is None else ctx.nstr(max(abs(s) for s in ss), 4)})
        if not rms:
            return sigma0, tries
        return sigma0 * scale_for(K, rms / sigma0 ** 2), tries
    if isinstance(first, NonFiniteAnswer):     # the box's nan or inf: that, in one line
        raise first
    raise DegenerateDraw(f"the scale probe failed at every scale tried "
                         f"({', '.join(t['scale'] for t in tries)}), so no query scale is known "
                         f"(its samples never fit at most {H} poles within the declared eta: a box "
                         f"noisier than declared or outside the model class, or a degenerate draw); "
                         f"first failure: {tries[0]['failed']}")
