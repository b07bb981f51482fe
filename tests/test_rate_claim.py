"""The ``probability-one-rate`` claim can fail on its quantitative part (docs: howto/field-and-range.md#choosing-the-range).

* exact binomial (Clopper–Pearson) limits against published values (R's
  ``binom.test``), closed forms and an independent implementation (mpmath's
  regularized incomplete beta), and the binomial tail against exact rationals;
* the trend fit recovers a known slope and flags a rate that does not fall to 0;
* the quick campaign measures rational cells where the bound is <= 1/2, and the
  rational field realises those ranges (the oracle's plan check);
* mutants: a learner failing at twice the bound's rate, at a constant rate, or
  certifying a wrong answer is not verified; a learner failing at a rate like
  the real one (4/N) is;
* the real claim is verified on its quick campaign (about 10 s), with its cells,
  limits, tightness and fit in the evidence;
* the failure figure draws Clopper–Pearson error bars and the bound only where
  it is below 1.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from types import SimpleNamespace

import pytest

from exactlearn import Oracle
from exactlearn.fields import Rational
from exactlearn.pipeline.plan import draw_paper_plan

from proofs_check.claim import Context, LocalExecutor
from proofs_check.claims import probability_one_rate as por
from proofs_check.models import random_model, trial_rng


# ---- exact binomial limits ----------------------------------------------------------

#: (k, n, two-sided level, lower, upper): R 4.x, binom.test(k, n)$conf.int
BINOM_TEST = [(1, 10, 0.95, 0.002528579, 0.445016117),
              (5, 10, 0.95, 0.187086028, 0.812913972),
              (0, 20, 0.95, 0.0, 0.168433470)]


@pytest.mark.parametrize("k, n, level, lo, up", BINOM_TEST)
def test_clopper_pearson_matches_r_binom_test(k, n, level, lo, up):
    a = (1 - level) / 2
    assert por.cp_lower(k, n, a) == pytest.approx(lo, abs=1e-8)
    assert por.cp_upper(k, n, a) == pytest.approx(up, abs=1e-8)


def test_clopper_pearson_closed_forms_and_incomplete_beta():
    mpmath = pytest.importorskip("mpmath")
    for n in (1, 7, 40, 300):
        assert por.cp_upper(0, n, 1e-3) == pytest.approx(1 - 1e-3 ** (1 / n), rel=1e-12)
        assert por.cp_lower(n, n, 1e-3) == pytest.approx(1e-3 ** (1 / n), rel=1e-12)
    for k, n, a in ((1, 30, 1e-4), (3, 80, 5e-5), (17, 40, 0.01), (300, 3000, 1e-5)):
        up, lo = por.cp_upper(k, n, a), por.cp_lower(k, n, a)
        # P(X <= k | up) = a and P(X >= k | lo) = a, by the regularized incomplete beta
        assert float(1 - mpmath.betainc(k + 1, n - k, 0, up, regularized=True)) == pytest.approx(a, rel=1e-9)
        assert float(mpmath.betainc(k, n - k + 1, 0, lo, regularized=True)) == pytest.approx(a, rel=1e-9)


def test_binomial_tail_against_exact_rationals():
    for k, n, p in ((0, 10, Fraction(1, 3)), (3, 25, Fraction(1, 7)), (20, 25, Fraction(1, 7)),
                    (12, 30, Fraction(2, 5)), (1, 300, Fraction(1, 1000))):
        exact = sum(Fraction(math.comb(n, i)) * p ** i * (1 - p) ** (n - i)
                    for i in range(k + 1))
        assert por.binom_cdf(k, n, float(p)) == pytest.approx(float(exact), rel=1e-12, abs=1e-300)
        assert por.binom_sf(k + 1, n, float(p)) == pytest.approx(float(1 - exact), rel=1e-9, abs=1e-15)


# ---- the trend fit ------------------------------------------------------------------

NS = (9, 17, 33, 65, 129, 257, 2 ** 33 + 1)


def test_fit_recovers_a_known_slope():
    cells = [(N, round(2000 * 4 / N), 2000) for N in NS]          # P(fail) = 4/N, expected counts
    fit = por.fit_rate(cells, 1e-4)
    assert fit["slope"] == pytest.approx(4, rel=0.02)
    c_lo, c_hi = fit["slope_limits"]
    assert 3 < c_lo < 4 < c_hi < 5
    assert fit["intercept_limits"][0] == 0 and fit["intercept_limits"][1] < 0.01
    assert fit["gof_p"] > 0.5


def test_fit_sees_a_rate_that_does_not_fall_to_zero():
    cells = [(N, round(400 * (0.05 + 4 / N)), 400) for N in NS]
    fit = por.fit_rate(cells, 1e-4)
    assert fit["intercept_limits"][0] > 0.02 and fit["slope_limits"][0] > 0


# ---- the campaign's design -----------------------------------------------------------

def quick_context(seed: int = 0) -> Context:
    return Context(quick=True, seed=seed, executor=LocalExecutor(1))


def test_quick_design_measures_rational_cells_where_the_bound_says_something():
    cells = [(d, H, R) for f, d, H, R, n in por.design(quick_context()) if f == "rational"
             and por.bound(d, H, R) <= 0.5]
    assert len(cells) >= 2
    for d, H, R in cells:                  # the rational field realises these ranges
        for i in range(5):
            rng = trial_rng(0, "design", i)
            oracle = Oracle(random_model(rng, d, H, "plain"), Rational())
            assert oracle.check_plan(draw_paper_plan(d, H, rng, R)) <= oracle.field.max_exponent
    for level, cells in por.DESIGN.items():  # and every rational cell of every level, by its bound
        assert all(por.realisable(d, R) for f, d, H, R, n in cells if f == "rational"), level


# ---- mutants: the claim is not verified for a learner that is worse than the bound ---------

def _mutant(rate, wrong_at=None):
    """A stand-in for exactlearn.learn: fails with probability rate(d, m, R), otherwise
    returns the canonical heads (or a wrong answer for the trial seeds in wrong_at)."""
    def learn(oracle, d, heads, seed, query_range):
        model = oracle.model
        canon = model.canonical_heads()
        rng = random.Random(seed)
        if rng.random() < rate(d, len(canon), query_range):
            return SimpleNamespace(status="failed", heads=(), error="degenerate draw (mutant): x")
        if wrong_at is not None and wrong_at(query_range, rng):
            return SimpleNamespace(status="certified", heads=canon[:-1], error=None)
        return SimpleNamespace(status="certified", heads=canon, error=None)
    return learn


def like_real(d, m, R):
    return min(1.0, 4 / (2 * R + 1))


MUTANTS = {
    # twice the bound wherever that is a probability; like the real learner elsewhere
    "twice the bound where < 1": lambda d, m, R: (2 * por.bound(d, m, R) if 2 * por.bound(d, m, R) < 1
                                                  else like_real(d, m, R)),
    "min(1, twice the bound)": lambda d, m, R: min(1.0, 2 * por.bound(d, m, R)),
    "5% + 4/N (no limit 0)": lambda d, m, R: min(1.0, 0.05 + 4 / (2 * R + 1)),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_learner_is_not_verified(monkeypatch, name):
    monkeypatch.setattr(por, "learn", _mutant(MUTANTS[name]))
    res = por.check(quick_context())
    ev = res.evidence
    assert res.status in ("refuted", "inconclusive"), (name, ev["problems"], ev.get("why_not_verified"))
    assert ev["problems"] or ev["why_not_verified"]


def test_twice_the_bound_is_refuted_by_a_cell_above_it(monkeypatch):
    monkeypatch.setattr(por, "learn", _mutant(MUTANTS["twice the bound where < 1"]))
    res = por.check(quick_context())
    ev = res.evidence
    assert res.status == "refuted", (ev["problems"], ev.get("why_not_verified"))
    above = [t for t in ev["rates"] if t["verdict"] == "exceeds"]
    assert above and all(t["cp_lower"] > t["bound"] and t["tightness"] > 1 for t in above)


def test_certified_wrong_answer_is_refuted(monkeypatch):
    monkeypatch.setattr(por, "learn", _mutant(like_real, wrong_at=lambda R, rng: R == 2 ** 32
                                               and rng.random() < 0.05))
    res = por.check(quick_context())
    assert res.status == "refuted" and res.evidence["wrong"] >= 1


def test_learner_at_a_realistic_rate_is_verified(monkeypatch):
    """The control for the mutants: the same stand-in failing like the real learner."""
    monkeypatch.setattr(por, "learn", _mutant(like_real))
    res = por.check(quick_context())
    assert res.status == "verified", (res.evidence["problems"], res.evidence["why_not_verified"])


# ---- the real claim -------------------------------------------------------------------

@pytest.mark.slow
def test_real_claim_verified_on_quick_campaign():
    res = por.check(quick_context())
    ev = res.evidence
    assert res.status == "verified", (ev["problems"], ev["why_not_verified"])
    assert ev["wrong"] == 0 and len(ev["confirmed_rational_cells"]) >= 2
    rat = [t for t in ev["rates"] if t["field"] == "rational" and t["bound"] <= 0.5]
    assert len(rat) >= 2 and all(t["verdict"] == "confirmed" and t["cp_upper"] <= t["bound"] for t in rat)
    for t in ev["rates"]:
        assert t["cp_lower"] <= t["rate"] <= t["cp_upper"]
        assert t["tightness"] == pytest.approx(t["rate"] / t["bound"], rel=1e-3, abs=1e-9)
    for tr in ev["trend"]:
        assert tr["falls"] and tr["limit_zero"] and tr["slope_within_bound"]
        assert 0 < tr["slope_limits"][0] <= tr["slope"] <= tr["slope_limits"][1] < tr["bound_slope"]
    points = ev["series"]["failure_vs_range"]["points"]
    assert len(points) == len(ev["rates"]) and {"runs", "failures", "bound", "range"} <= set(points[0])


# ---- the figure -------------------------------------------------------------------------

def test_failure_figure_has_clopper_pearson_bars_and_bound_below_one(monkeypatch, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install 'exactlearn[campaign]')")
    from proofs_check import figures
    saved = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: saved.append(fig))
    pts = [{"field": "rational", "d": 2, "H": 2, "range": R, "runs": 40, "failures": f, "wrong": 0,
            "bound": por.bound(2, 2, R)} for R, f in ((4, 17), (16, 5), (64, 3), (128, 0))]
    fig = figures.draw_failure(str(tmp_path / "f.png"), [("probability-one-rate", {"points": pts})], False)
    assert "Clopper" in fig.caption
    ax = saved[0].axes[0]
    bars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars) == 1
    segs = bars[0].lines[2][0].get_segments()          # the vertical bars, one per nonzero cell
    got = sorted(float(y) for s in segs for y in (s[0][1], s[1][1]))
    want = sorted(y for f in (17, 5, 3) for y in (por.cp_lower(f, 40, 0.025), por.cp_upper(f, 40, 0.025)))
    assert got == pytest.approx(want, rel=1e-9)
    bound_line = [ln for ln in ax.get_lines() if "bound" in (ln.get_label() or "")]
    assert len(bound_line) == 1 and list(bound_line[0].get_xdata()) == [64, 128]
