"""Claim ``probability-one-rate``: random queries succeed with probability one.

arXiv:2608.03294 (abstract): "the learner chooses its query vectors at random
and recovers the canonical pairs ... with probability one".  With a *finite*
sampling range the theorem becomes a rate: query entries uniform on the
N = 2R + 1 integers of [-R, R] fail with probability at most B/N.

Schwartz–Zippel bound (derived here; docs: howto/field-and-range.md#choosing-the-range).  Let m be the number of
canonical heads (pairwise distinct W_h, nonzero v_h).  A paper-plan run
succeeds when none of these polynomials in the random entries of X and E
vanishes:

* (c)  v_h . e for the 2d - 1 directions e_j, e_1 + e_j: degree 1, m(2d-1) of
  them (a vanishing one hides a pole);
* (rho) e^T (W_h - W_g) x for the 2d^2 - 1 configurations and the m(m-1)/2
  pairs: degree 2 (coinciding poles merge);
* (match) for each of the d^2 - 1 matching configurations and each wrong triple
  (h, r, s) != (h, h, h), e_1^T (W_h - W_s) x + e_j^T (W_r - W_s) x (within)
  or e_1^T (W_h - W_s) x_1 + e_1^T (W_r - W_s) x_i (across): degree 2,
  m(m^2 - 1) per configuration (an ambiguous pairing).

Each is a nonzero polynomial, so by Schwartz–Zippel vanishes with probability
at most deg/N, and a union bound gives

    P(fail) <= [ m(2d-1) + (2d^2-1) m(m-1) + 2(d^2-1) m(m^2-1) ] / N  =: B/N,

divided by (1 - d/N)^2 because the learner redraws singular X or E before any
query (each singular with probability <= d/N).  Over the modular field a bad
reduction modulo p adds at most about (plan degree)/p, below 2^-100 here.

The campaign measures the failure rate in cells (field, d, H, R) of random
plain models: the rational field from R = 1 up to R = 128 (d = 2: the bound is
0.448 at R = 64 and 0.221 at R = 128; plans of at most 24 R^2 exponent bits,
which the rational field realises: :func:`realisable`) and the modular field up
to R = 2^32.  Every statistical test below runs at level ALPHA_EACH = ALPHA /
(number of tests) (Bonferroni), so a wrong verdict -- verified although a cell's
failure probability is above its bound or the rate does not fall, or refuted
although the bound holds -- has probability at most ALPHA = 10^-3 (for the fit,
under its model):

1. Bound, per cell where it says something (bound < 1): the exact binomial
   (Clopper–Pearson) one-sided limits of the failure probability.  The cell
   *exceeds* the bound when the lower limit is above it, is *confirmed* when
   the upper limit is at or below it, and is otherwise *consistent*.  A cell
   is *decisive* when even zero failures would confirm it (enough trials).
   Tightness = rate / bound (and upper limit / bound) is reported per cell.
2. Trend, per class (d, H): a binomial maximum-likelihood fit of
   P(fail) = a + c/N over the cells with R >= FIT_MIN_RANGE of both fields
   (same events, so the same curve; the modular cells at R = 2^32 pin the
   intercept), a >= 0, with profile-likelihood limits.  P(fail) = c/N +
   O(1/N^2) for a finite union of polynomial events; below R = 4 the rates
   saturate (0.5 - 0.8 at R = 1, 2), so those cells are reported, not fitted.  The rate falls when
   the slope's lower limit is above 0; it falls to 0 unless the intercept's
   lower limit is above 0; the slope agrees with the bound's (B, the slope of
   B/N/(1-d/N)^2 at 1/N -> 0) unless its lower limit is above B; the fit
   describes the data unless its deviance is significant.

Refuted: a certified answer differs from the canonical form, or a cell exceeds
its bound, or the intercept is significantly above 0, or the slope
significantly above B.  Verified: none of these, every decisive cell
confirmed, each class with a confirmed cell whose bound is <= 1/2, each
class's slope significantly positive and its fit not rejected.  Otherwise
inconclusive.
"""

from __future__ import annotations

import math

from exactlearn import Oracle, Rational, learn
from exactlearn.cli.main import field_by_name

from ..claim import INCONCLUSIVE, REFUTED, VERIFIED, ClaimResult, claim
from ..models import random_model, trial_rng
from ._learning import level

ID = "probability-one-rate"

ALPHA = 1e-3                          # familywise error of the claim's tests (each direction)
FIT_MIN_RANGE = 4                     # cells with R >= 4 (N >= 9) enter the trend fit
INFORMATIVE = 0.5                     # each class needs a confirmed cell with bound <= this

_SMALL = (1, 2, 4, 8, 16, 32)
#: cells (field, d, H, R, trials) per level; full-run trials are multiplied by --scale.
#: The rational cells at R = 64, 128 (d = 2) are where its bound is <= 1/2 (0.448,
#: 0.221); they cost most (plans of up to 24 R^2 exponent bits).  Every rational cell
#: is realisable (:func:`realisable`).  Each class has a decisive cell with bound <= 1/2:
#: zero failures there would confirm the bound.
DESIGN = {
    "tiny": [("rational", 2, 2, R, 30) for R in (4, 16)] + [("rational", 2, 2, 64, 60)]
            + [("modular", 2, 2, R, n) for R, n in ((32, 30), (2 ** 8, 60), (2 ** 32, 20))],
    "quick": [("rational", 2, 2, R, 40) for R in _SMALL]
             + [("rational", 2, 2, 64, 60), ("rational", 2, 2, 128, 80)]
             + [("modular", 2, 2, R, 40) for R in (32, 2 ** 8, 2 ** 32)]
             + [("rational", 3, 2, R, 30) for R in _SMALL]
             + [("modular", 3, 2, 2 ** 8, 60), ("modular", 3, 2, 2 ** 32, 40)],
    "full": [("rational", d, 2, R, 300) for d in (2, 3) for R in _SMALL + (64,)]
            + [("rational", 2, 2, 128, 300), ("rational", 3, 2, 128, 150)]
            + [("modular", d, 2, R, 1000 if (d, R) == (2, 512) else 300) for d in (2, 3)
               for R in (32, 64, 128, 256, 512, 2 ** 16, 2 ** 32)],
}
#: The modular d = 2, R = 512 cell (bound 0.0548) gets 1000 trials: at the measured rate of
#: about 1.3 %, 300 trials leave its Bonferroni Clopper-Pearson upper limit (about 0.063)
#: above the bound, so the decisive cell could not be confirmed and a correct learner read
#: inconclusive; with 1000 it is about 0.034.
W_ENTRIES = 3                         # |W| entries of the plain random models (models.random_W)


def realisable(d: int, R: int, K=None) -> bool:
    """Whether field K (default: the rational field) realises every paper plan at range R
    for the campaign's models: |e^T W x| <= d^2 * 2R * W_ENTRIES * R (directions
    e_1 + e_j have entries up to 2R), so the oracle's plan check never refuses one.

    >>> realisable(2, 128), realisable(3, 128), realisable(2, 256)
    (True, True, False)
    """
    K = K if K is not None else Rational()
    limit = K.max_exponent
    return limit is None or d * d * 2 * R * W_ENTRIES * R <= limit


def bound_numerator(d: int, m: int) -> int:
    """B of the docstring: the union bound is B / N (before conditioning)."""
    return m * (2 * d - 1) + (2 * d * d - 1) * m * (m - 1) + 2 * (d * d - 1) * m * (m * m - 1)


def bound(d: int, m: int, R: int) -> float:
    """Upper bound on P(fail) for entries uniform on [-R, R] (capped at 1).

    >>> round(bound(2, 2, 64), 3), round(bound(2, 2, 128), 3), bound(2, 2, 16)
    (0.448, 0.221, 1.0)
    """
    N = 2 * R + 1
    if N <= d:
        return 1.0
    return min(1.0, bound_numerator(d, m) / N / (1 - d / N) ** 2)


def rate_trial(args) -> dict:
    """One learning run; a pure function of its arguments."""
    seed, field_name, d, H, R, index = args
    rng = trial_rng(seed, f"{ID}:{field_name}:{d}:{H}:{R}", index)
    model = random_model(rng, d, H, "plain")
    m = len(model.canonical_heads())
    res = learn(Oracle(model, field_by_name(field_name)), d=d, heads=H, seed=rng.randrange(2 ** 62), query_range=R)
    certified = res.status == "certified"
    return {"field": field_name, "d": d, "H": H, "m": m, "R": R, "certified": certified,
            "wrong": certified and res.heads != model.canonical_heads(),
            "reason": (res.error or "").split(":")[0]}


# ---- exact binomial tails and Clopper–Pearson limits -------------------------------------

def _log_pmf(i: int, n: int, p: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p))


def _tail(k: int, n: int, p: float, step: int) -> float:
    """sum of P(X = i), i = k, k + step, ... (step +-1), from k outwards until negligible;
    k is on the far side of the mode, so the terms only decrease."""
    total, i = 0.0, k
    while 0 <= i <= n:
        t = math.exp(_log_pmf(i, n, p))
        total += t
        if t <= 1e-18 * total:
            break
        i += step
    return total


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed term by term (the shorter tail).

    >>> round(binom_cdf(1, 10, 0.5), 10) == round(11 / 1024, 10)
    True
    """
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    if k < n * p:
        return min(1.0, _tail(k, n, p, -1))
    return max(0.0, 1.0 - _tail(k + 1, n, p, +1))


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    if k > n * p:
        return min(1.0, _tail(k, n, p, +1))
    return max(0.0, 1.0 - _tail(k - 1, n, p, -1))


def _solve(f, lo: float, hi: float) -> float:
    """The root of an increasing f on [lo, hi] by bisection (to float precision)."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return hi


def cp_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper–Pearson upper limit: the p with P(X <= k | p) = alpha.

    >>> round(cp_upper(0, 30, 0.05), 6) == round(1 - 0.05 ** (1 / 30), 6)
    True
    """
    if n == 0 or k >= n:
        return 1.0
    return _solve(lambda p: alpha - binom_cdf(k, n, p), k / n, 1.0)


def cp_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper–Pearson lower limit: the p with P(X >= k | p) = alpha."""
    if n == 0 or k <= 0:
        return 0.0
    return _solve(lambda p: binom_sf(k, n, p) - alpha, 0.0, k / n)


def normal_quantile(q: float) -> float:
    """z with Phi(z) = q (bisection on erfc; |error| < 1e-12)."""
    return _solve(lambda z: 0.5 * math.erfc(-z / math.sqrt(2)) - q, -40.0, 40.0)


def chi2_sf(x: float, df: int) -> float:
    """P(chi^2_df > x) (mpmath's regularized upper incomplete gamma)."""
    import mpmath
    if df <= 0:
        return 1.0
    return float(mpmath.gammainc(df / 2, x / 2, mpmath.inf, regularized=True))


# ---- the trend fit: P(fail) = a + c x, x = 1/N, binomial likelihood, a >= 0 -------------

def _loglik(a: float, c: float, cells) -> float:
    s = 0.0
    for x, k, n in cells:
        p = a + c * x
        if p < 0.0 or p > 1.0 or (k and p == 0.0) or (k < n and p == 1.0):
            return -math.inf
        if k:
            s += k * math.log(p)
        if n - k:
            s += (n - k) * math.log1p(-p)
    return s


def _argmax(grad, lo: float, hi: float) -> float:
    """Maximiser on [lo, hi] of a concave function with decreasing derivative ``grad``."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if grad(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _dp(p: float, k: int, n: int) -> float:
    """d/dp of k log p + (n - k) log(1 - p)."""
    return (k / p if k else 0.0) - ((n - k) / (1 - p) if n - k else 0.0)


def _best_c(a: float, cells) -> float:
    xmax = max(x for x, _, _ in cells)
    return _argmax(lambda c: sum(x * _dp(a + c * x, k, n) for x, k, n in cells),
                   -a / xmax, (1 - a) / xmax)


def _best_a(c: float, cells) -> float:
    lo = max([0.0] + [-c * x for x, _, _ in cells])
    hi = min(1 - c * x for x, _, _ in cells)
    if hi <= lo:
        return lo
    return _argmax(lambda a: sum(_dp(a + c * x, k, n) for x, k, n in cells), lo, hi)


def _golden_max(f, lo: float, hi: float) -> float:
    """Maximiser of a concave (unimodal) f on [lo, hi] by golden-section search."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(120):
        if fc >= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
        if b - a < 1e-15:
            break
    best = max((f(t), t) for t in (lo, (a + b) / 2, hi))
    return best[1]


def _profile_limits(prof, best: float, lo: float, hi: float, target: float) -> tuple:
    """The points left and right of ``best`` where the concave profile ``prof`` falls to
    ``target`` (the ends lo/hi when it never does)."""
    left = lo if prof(lo) >= target else _solve(lambda t: prof(t) - target, lo, best)
    right = hi if prof(hi) >= target else _solve(lambda t: target - prof(t), best, hi)
    return left, right


def fit_rate(cells, alpha: float) -> dict:
    """Binomial ML fit of P(fail) = a + c/N, a >= 0, through ``cells`` = [(N, failures, trials)].

    Profile-likelihood limits at one-sided level alpha (signed root of the deviance,
    z = Phi^-1(1 - alpha)), and the deviance goodness of fit (cells - 2 degrees of freedom).
    """
    pts = [(1.0 / N, k, n) for N, k, n in cells if n]
    if len(pts) < 3 or len({x for x, _, _ in pts}) < 2:
        return {"cells": len(pts), "fitted": False}
    xmax = max(x for x, _, _ in pts)

    def prof_a(a):
        return _loglik(a, _best_c(a, pts), pts)

    def prof_c(c):
        return _loglik(_best_a(c, pts), c, pts)

    a_hat = _golden_max(prof_a, 0.0, 1.0)
    c_hat = _best_c(a_hat, pts)
    l_hat = _loglik(a_hat, c_hat, pts)
    z = normal_quantile(1 - alpha)
    target = l_hat - z * z / 2
    a_lo, a_hi = _profile_limits(prof_a, a_hat, 0.0, 1.0, target)
    c_lo, c_hi = _profile_limits(prof_c, c_hat, -1.0 / xmax, 1.0 / xmax, target)
    if a_hat <= 0.0:
        a_lo = 0.0
    deviance = 0.0
    for x, k, n in pts:
        p = min(1.0, max(0.0, a_hat + c_hat * x))
        if k:
            deviance += 2 * k * math.log(k / (n * p)) if p > 0 else math.inf
        if n - k:
            deviance += 2 * (n - k) * math.log((n - k) / (n * (1 - p))) if p < 1 else math.inf
    df = len(pts) - 2
    return {"fitted": True, "cells": len(pts), "intercept": a_hat, "intercept_limits": [a_lo, a_hi],
            "slope": c_hat, "slope_limits": [c_lo, c_hi], "z": z,
            "deviance": deviance, "df": df, "gof_p": chi2_sf(deviance, df)}


# ---- the verdict -----------------------------------------------------------------

def _sig(x: float, digits: int = 4):
    return float(f"{x:.{digits}g}") if math.isfinite(x) else None


def summarise(rows, alpha: float = ALPHA) -> tuple:
    """(status, evidence) from the trial rows (see the module docstring)."""
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["field"], r["d"], r["H"], r["R"]), []).append(r)
    classes = sorted({(d, H) for _, d, H, _ in cells})
    keys = sorted(cells)
    informative = [k for k in keys if bound(k[1], max(r["m"] for r in cells[k]), k[3]) < 1]
    n_tests = len(informative) + 4 * len(classes)     # per class: slope > 0, <= B, a = 0, fit
    alpha_each = alpha / max(1, n_tests)
    table, problems, unverified = [], [], []
    for key in keys:
        field, d, H, R = key
        rs = cells[key]
        n = len(rs)
        fails = sum(not r["certified"] for r in rs)
        m = max(r["m"] for r in rs)
        b = bound(d, m, R)
        lo, up = cp_lower(fails, n, alpha_each), cp_upper(fails, n, alpha_each)
        is_inf = b < 1
        decisive = is_inf and cp_upper(0, n, alpha_each) <= b
        if not is_inf:
            verdict = "uninformative"
        elif lo > b:
            verdict = "exceeds"
        elif up <= b:
            verdict = "confirmed"
        else:
            verdict = "consistent"
        row = {"field": field, "d": d, "H": H, "R": R, "N": 2 * R + 1, "trials": n, "failures": fails,
               "rate": round(fails / n, 4), "bound": _sig(b, 3), "within_bound": verdict != "exceeds",
               "m": m, "cp_lower": _sig(lo), "cp_upper": _sig(up), "informative": is_inf,
               "decisive": decisive, "verdict": verdict,
               "tightness": _sig(fails / n / b) if b > 0 else None,
               "tightness_upper": _sig(up / b) if b > 0 else None}
        table.append(row)
        where = f"{field} d={d} H={H} R={R}"
        if verdict == "exceeds":
            problems.append(f"{where}: {fails}/{n} failures, Clopper-Pearson lower limit "
                            f"{lo:.3g} above the bound {b:.3g}")
        elif decisive and verdict != "confirmed":
            unverified.append(f"{where}: upper limit {up:.3g} above the bound {b:.3g}")
    trend = []
    for d, H in classes:
        own = [t for t in table if (t["d"], t["H"]) == (d, H)]
        rat = [t for t in own if t["field"] == "rational"]
        m = max(t["m"] for t in own)
        B = bound_numerator(d, m)
        fit = fit_rate([(t["N"], t["failures"], t["trials"]) for t in own if t["R"] >= FIT_MIN_RANGE],
                       alpha_each)
        entry = {"d": d, "H": H, "bound_slope": B,
                 "rate_small_R": rat[0]["rate"] if rat else None,
                 "rate_large_R": rat[-1]["rate"] if rat else None,
                 "fit_model": f"P(fail) = a + c/N over the cells with R >= {FIT_MIN_RANGE} "
                              "(both fields), binomial likelihood, a >= 0",
                 "fit_cells": fit["cells"]}
        where = f"d={d} H={H}"
        if not fit["fitted"]:
            entry["falls"] = False
            unverified.append(f"{where}: too few cells for the trend fit")
            trend.append(entry)
            continue
        (a_lo, a_hi), (c_lo, c_hi) = fit["intercept_limits"], fit["slope_limits"]
        entry.update({"slope": _sig(fit["slope"]), "slope_limits": [_sig(c_lo), _sig(c_hi)],
                      "slope_over_bound": _sig(fit["slope"] / B),
                      "intercept": _sig(fit["intercept"]), "intercept_limits": [_sig(a_lo), _sig(a_hi)],
                      "deviance": _sig(fit["deviance"]), "df": fit["df"], "gof_p": _sig(fit["gof_p"]),
                      "falls": c_lo > 0, "limit_zero": a_lo <= 0, "slope_within_bound": c_lo <= B,
                      "fit_accepted": fit["gof_p"] >= alpha_each})
        if a_lo > 0:
            problems.append(f"{where}: the rate does not fall to 0 (intercept at 1/N -> 0 at least {a_lo:.3g})")
        if c_lo > B:
            problems.append(f"{where}: the rate falls like {c_lo:.3g}/N or slower, the bound allows {B}/N")
        if c_lo <= 0:
            unverified.append(f"{where}: no significant fall with R (slope lower limit {c_lo:.3g})")
        if fit["gof_p"] < alpha_each:
            unverified.append(f"{where}: a + c/N does not fit the rates (deviance {fit['deviance']:.3g} "
                              f"on {fit['df']} df)")
        if not any(t["verdict"] == "confirmed" and t["bound"] <= INFORMATIVE for t in own):
            unverified.append(f"{where}: no cell with bound <= {INFORMATIVE} confirmed")
        trend.append(entry)
    wrong = [r for r in rows if r["wrong"]]
    evidence = {
        "runs": len(rows),
        "certified": sum(r["certified"] for r in rows),
        "wrong": len(wrong),
        "bound": "P(fail) <= [m(2d-1) + (2d^2-1)m(m-1) + 2(d^2-1)m(m^2-1)] / N / (1-d/N)^2, "
                 "N = 2R+1 (Schwartz-Zippel + union bound; derivation in the module docstring)",
        "derivation": __doc__.split('Schwartz–Zippel bound (derived here; docs: howto/field-and-range.md#choosing-the-range).')[1]
                      .split("The campaign measures")[0].strip(),
        "statistics": {"alpha": alpha, "tests": n_tests, "alpha_each": _sig(alpha_each),
                       "limits": "exact binomial (Clopper-Pearson), one-sided at 1 - alpha_each",
                       "fit": "profile likelihood, one-sided at 1 - alpha_each (Bonferroni)"},
        "rates": table,
        "trend": trend,
        "confirmed_rational_cells": [t["R"] for t in table if t["field"] == "rational"
                                     and t["verdict"] == "confirmed" and t["bound"] <= INFORMATIVE],
        "problems": problems,
        "why_not_verified": unverified,
        "series": {"failure_vs_range": {
            "points": [{"field": t["field"], "d": t["d"], "H": t["H"], "range": t["R"],
                        "runs": t["trials"], "failures": t["failures"],
                        "wrong": sum(r["wrong"] for r in cells[(t["field"], t["d"], t["H"], t["R"])]),
                        "bound": t["bound"]} for t in table],
            "bound_formula": "[m(2d-1) + (2d^2-1)m(m-1) + 2(d^2-1)m(m^2-1)] / N / (1-d/N)^2, N = 2R+1"}},
    }
    if wrong:
        evidence["wrong_examples"] = wrong[:3]
    if wrong or problems:
        return REFUTED, evidence
    return (VERIFIED if not unverified else INCONCLUSIVE), evidence


def design(ctx) -> list:
    """The cells (field, d, H, R, trials) of this run's level (full: trials times --scale)."""
    lv = level(ctx)
    return [(f, d, H, R, ctx.size(n, n) if lv == "full" else n) for f, d, H, R, n in DESIGN[lv]]


def campaign(ctx, trial=rate_trial) -> tuple:
    """(status, evidence) of the campaign; ``trial`` is the learning run (tests swap it)."""
    items = [(ctx.seed, field, d, H, R, i) for field, d, H, R, n in design(ctx) for i in range(n)]
    return summarise(ctx.map(trial, items))


@claim(ID, "With random queries the learner succeeds with probability one: over [-R, R] its "
           "failure rate stays within a Schwartz-Zippel bound O(1/R) (exact binomial limits where "
           "the bound is below 1), falls like c/R with c > 0 to 0 as R grows (fitted slope and "
           "intercept), and no certified answer is ever wrong.", order=80)
def check(ctx):
    status, evidence = campaign(ctx)
    return ClaimResult(status, evidence)
