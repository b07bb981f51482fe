"""The real field: true exp/log, tolerance decisions taken from the object, roots."""

from __future__ import annotations

import pickle
from fractions import Fraction

import mpmath
import pytest
from gmpy2 import mpq
from hypothesis import example, given, settings
from hypothesis import strategies as st

from exactlearn.fields.base import NotExponential, NotSplit
from exactlearn.fields.real import Real, Undecided
from exactlearn.pipeline.interpolate import InterpolationError, cauchy_interpolate, poles
from exactlearn.api import learn
from exactlearn.model import MultiHeadAttention
from exactlearn.oracle import Oracle

from field_table import poly_from_roots

K50 = Real(dps=50)
K100 = Real(dps=100)
K200 = Real(dps=200)


@st.composite
def rationals(draw, bound=40, max_den=12):
    den = draw(st.integers(1, max_den))
    num = draw(st.integers(-bound * den, bound * den))
    return mpq(num, den)


def poly_from_rhos(K, rhos):
    """Coefficients of prod(1 + k rho): the denominator Q(k) of the query family (docs: explanation/algorithm.md#how-it-works)."""
    cs = [K.one]
    for rho in rhos:
        new = [K.zero] * (len(cs) + 1)
        for i, c in enumerate(cs):
            new[i] += c
            new[i + 1] += c * rho
        cs = new
    return cs


# -- exp / log --------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(rationals())
@example(mpq(0))
@example(mpq(-40))
def test_exp_log_round_trip(s):
    for K in (K50, K100):
        rho = K.exp(s)
        assert K.eq(K.log(rho, scale=rho), K(s))
        # the mpf path agrees with the exact-rational path
        assert K.eq(K.exp(K(s)), K.exp(s))


@settings(max_examples=30, deadline=None)
@given(rationals(bound=30))
def test_exp_is_correctly_rounded_against_higher_precision(s):
    """exp of an exact score carries only the final rounding error."""
    exact = K200.exp(s)
    got = K50.exp(s)
    assert abs(got - exact) <= mpmath.ldexp(1, 1 - K50.prec) * abs(exact)


def test_exp_is_true_e_to_the_s_whatever_the_scale():
    K = Real(dps=40, scale=7)
    assert K.eq(K.exp(1), K("2.718281828459045235360287471352662497757"))
    assert K.eq(K.exp("1/7"), K.exp(1) ** (K.one / 7))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 10**12), st.integers(-40, 40))
def test_log_exp_round_trip_on_positive_reals(m, e):
    a = K100(m) * K100(2) ** e / 10**6
    assert K100.eq(K100.exp(K100.log(a, scale=a)), a)


@pytest.mark.parametrize("a", [0, -1, "-1e-60", "1e-60", "-5/3"])
def test_log_refuses_values_not_decided_positive(a):
    with pytest.raises(NotExponential):
        K50.log(a)


def test_log_of_tiny_value_is_undecided_not_positive():
    with pytest.raises(NotExponential, match="undecided"):
        K50.log("1e-20")                     # between tol = 1e-25 and sep ~ 3e-13
    assert K50.eq(K50.log("1e-20", scale="1e-20"), -20 * K50.log(10))


# -- tolerances come from the object ----------------------------------------------------------
def test_defaults_are_documented_and_reported():
    d = K50.describe()
    assert (d["field"], d["dps"], d["tol"], d["scale"]) == ("real", 50, "1.0e-25", 1)
    assert K50.tol == K50(10) ** -25
    assert abs(K50.sep ** 2 - K50.tol) <= K50.tol * K50(10) ** -40      # sep = sqrt(tol)
    assert Real(dps=31).tol == Real(dps=31)(10) ** -15
    assert K50.noise == K50(10) ** -45 and K50.describe()["noise"] == "1.0e-45"


def test_two_precisions_decide_differently():
    x = "1e-30"
    assert K50.is_zero(x) is True
    assert K200.is_zero(x) is False
    assert K100.decide_zero(x) is None
    with pytest.raises(Undecided):
        K100.is_zero(x)
    a, b = "1", "1.000000000000000000000000000001"
    assert K50.eq(a, b) is True and K200.eq(a, b) is False


def test_explicit_tolerances_decide_differently():
    loose = Real(dps=50, tol="1e-10", sep="1e-5")
    assert loose.is_zero("1e-14") is True
    assert K50.decide_zero("1e-14") is None
    assert loose.with_tolerance("1e-16").decide_zero("1e-14") is None      # sep = 1e-8
    assert K50.is_zero("1e-6") is False and loose.decide_zero("1e-6") is None


def test_decisions_are_relative():
    big = K50(10) ** 40
    assert K50.eq(big, big + 10**10)         # 1e10 <= 1e-25 * 1e40
    assert K50.is_zero(10**10, scale=big)
    assert K50.is_zero(10**10) is False
    tiny = K50("1e-40")
    assert K50.is_zero(tiny) and K50.is_zero(tiny, scale=tiny) is False
    assert K50.eq(tiny, 2 * tiny) and K50.eq(tiny, 2 * tiny, scale=tiny) is False
    with pytest.raises(ValueError):
        K50.is_zero(1, scale=0)
    assert K50.eq(big, 2 * big) is False
    with pytest.raises(Undecided):
        K50.eq(big, big + 10**20)             # 1e20: above tol*1e40, below sep*1e40


def test_undecided_is_never_nonzero():
    for s in ["1e-24", "1e-20", "1e-14", "3e-13"]:
        assert K50.decide_zero(s) is None
        with pytest.raises(Undecided, match="undecided"):
            K50.is_zero(s)


@pytest.mark.parametrize("tol, sep", [(0, None), ("1e-5", "1e-6"), (1, None), ("2", "3"), (1.0e-5, None)])
def test_bad_tolerances(tol, sep):
    with pytest.raises(ValueError):
        Real(dps=30, tol=tol, sep=sep)


# -- roots ------------------------------------------------------------------------------------
@st.composite
def spread_rhos(draw, max_deg=8):
    """rho = 2^n * u with u uniform in (0, 1]: pairwise distinct by a clear margin."""
    deg = draw(st.integers(1, max_deg))
    us = draw(st.lists(st.integers(1, 10**6), min_size=deg, max_size=deg, unique=True))
    ns = draw(st.lists(st.integers(-4, 4), min_size=deg, max_size=deg))
    rhos = [mpq(u, 10**6) * mpq(2) ** n for u, n in zip(us, ns)]
    ordered = sorted(rhos)
    rel_gap = min((b - a) / b for a, b in zip(ordered, ordered[1:])) if deg > 1 else 1
    return rhos if rel_gap > mpq(1, 10**8) else rhos[:1]


@settings(max_examples=25, deadline=None)
@given(spread_rhos())
def test_roots_recover_poles_of_q(rhos):
    K = K100
    got = K.roots(poly_from_rhos(K, [K(r) for r in rhos]))
    want = sorted(-1 / K(r) for r in rhos)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert abs(g - w) <= K.tol * abs(w)


@settings(max_examples=20, deadline=None)
@given(st.lists(rationals(bound=5, max_den=7), min_size=1, max_size=6, unique=True),
       rationals(bound=9).filter(lambda q: q != 0))
def test_roots_of_scaled_products_of_linear_factors(roots, lead):
    K = K50
    got = K.roots(poly_from_roots(K, [K(r) for r in roots], lead))
    assert len(got) == len(roots)
    for g, w in zip(got, sorted(roots)):
        assert K.eq(g, w)


def test_roots_are_invariant_under_rescaling_k():
    rhos = [K100(r) for r in ("1/3", "2/7", "5", "11/2")]
    base = K100.roots(poly_from_rhos(K100, rhos))
    for lam in ("1e-30", "1e30"):
        lam = K100(lam)
        scaled = K100.roots(poly_from_rhos(K100, [r / lam for r in rhos]))
        assert all(abs(s / lam - b) <= K100.tol * abs(b) for s, b in zip(scaled, base))


def test_roots_of_degree_twelve_with_spread_poles():
    # polyroots' absolute stopping test fails on this; the relative one must not
    rhos = [K100(mpq(2 * j + 1, 17)) * K100(2) ** (j - 6) for j in range(12)]
    got = K100.roots(poly_from_rhos(K100, rhos))
    for g, w in zip(got, sorted(-1 / r for r in rhos)):
        assert abs(g - w) <= K100.tol * abs(w)


def test_small_cases():
    assert K50.roots([]) == [] and K50.roots([0, 0]) == [] and K50.roots([3]) == []
    assert K50.roots([2, 4, 0, 0]) == [K50(-1) / 2]
    assert K50.roots([0, 1, 1]) == [-1, 0]


@pytest.mark.parametrize("coeffs, reason", [
    ([1, 2, 1], "multiple"),                   # (k+1)^2
    ([1, 0, 1], "non-real"),                   # k^2 + 1
    ([-1, 0, 0, 1], "non-real"),               # k^3 - 1
    ([0, 0, 1], "multiplicity 2"),             # k^2
    ([2, -3, 1, 0], None),                     # (k-1)(k-2) with a zero leading coefficient
])
def test_not_split(coeffs, reason):
    if reason is None:
        got = K50.roots(coeffs)
        assert len(got) == 2 and K50.eq(got[0], 1) and K50.eq(got[1], 2)
        return
    with pytest.raises(NotSplit, match=reason):
        K50.roots(coeffs)


def test_near_double_root_is_decided_by_the_fields_own_tolerance():
    delta = "1e-30"
    for K, splits in ((K50, False), (K100, None), (K200, True)):
        cs = poly_from_roots(K, [K(-1), K(-1) - K(delta)])
        if splits:
            got = K.roots(cs)
            assert K.eq(got[1] - got[0], K(delta), scale=K(delta))
        else:
            with pytest.raises(NotSplit, match="multiple" if splits is False else "undecided"):
                K.roots(cs)


def test_complex_pair_with_tiny_imaginary_part():
    # (k+1)^2 + 1e-60 has roots -1 +- 1e-30 i
    cs = ["1.000000000000000000000000000000000000000000000000000000000001", 2, 1]
    with pytest.raises(NotSplit, match="multiple"):     # dps 50: real within tol, then equal
        K50.roots(cs)
    with pytest.raises(NotSplit, match="non-real"):     # dps 200: clearly complex
        K200.roots(cs)
    # (k+1)^2 + 1e-40: imaginary parts 1e-20, inside the band at dps 50
    with pytest.raises(NotSplit, match="undecided root"):
        K50.roots([K50(1) + K50("1e-40"), 2, 1])


# -- embedding, identity ----------------------------------------------------------------------
def test_embedding():
    K = Real(dps=30)
    assert K("0.1") == K(Fraction(1, 10))            # read exactly, rounded once
    assert K("0.1") != mpmath.mpf(0.1)
    x = K200(1) / 3
    assert K(x) == K("1/3") and K(x).context is K.ctx
    for bad in (0.5, 1j, True, "nan", "inf", "1/0", "abc", mpmath.mpf("inf"), mpmath.mpc(1, 1), None):
        with pytest.raises(ValueError):
            K(bad)


def test_own_context_leaves_global_mpmath_alone():
    old = mpmath.mp.dps
    K = Real(dps=300)
    K.exp(1), K.roots([6, -5, 1]), K.log(7)
    assert mpmath.mp.dps == old
    mpmath.mp.dps = 5
    try:
        assert K.exp(1).context.prec == K.prec
        assert K.eq(K.log(K.exp("1/3")), K("1/3"))
        assert len(K.format(K.exp(1)).replace(".", "")) == 300
    finally:
        mpmath.mp.dps = old


def test_identity_pickle_and_scale():
    assert Real(50) != Real(60) and Real(50) != Real(50, tol="1e-20")
    K = Real(40, tol="1e-15", scale=3)
    assert pickle.loads(pickle.dumps(K)) == K
    K2 = K.with_scale(6)
    assert (K2.dps, K2.tol, K2.sep, K2.D) == (40, K.tol, K.sep, 6)
    assert K.param is K and K.to_param(K("1/3")) == K("1/3")


def test_format_is_full_precision_decimal():
    K = Real(dps=40)
    s = K.format(K(1) / 7)
    assert s.startswith("0.142857142857") and len(s) == 42
    assert K.eq(K(s), K(1) / 7) and K.format("1/4") == "0.25"


def test_model_evaluation_matches_spec_formula():
    """arXiv:2608.03294: f(q_k) = V.a + sum_h c_h / (1 + k rho_h) with rho_h = e^(e^T W_h x)."""
    K = K100
    m = MultiHeadAttention([([[1, 2], [0, "1/3"]], [1, -2]), ([["-1/2", 0], [1, 1]], [3, "1/5"])])
    x, e = [mpq(1, 2), mpq(-1)], [mpq(1, 3), mpq(1, 4)]
    a = [xi + ei for xi, ei in zip(x, e)]
    for k in range(4):
        got = m.evaluate([a] * k + [x], K)
        want = K.zero
        for h in m.heads:
            score = sum(ei * sum(w * xj for w, xj in zip(row, x)) for ei, row in zip(e, h.W))
            rho = K.exp(score)
            va = sum(vi * ai for vi, ai in zip(h.v, a))
            vx = sum(vi * xi for vi, xi in zip(h.v, x))
            want += (k * rho * K(va) + K(vx)) / (k * rho + 1)
        assert K.eq(got, want)


# -- rational interpolation (the hook of exactlearn.pipeline.interpolate) ------------------------------
def family(K, rhos, cs, const, ks):
    """f(q_k) = const + sum_h c_h / (1 + k rho_h) (docs: explanation/algorithm.md#how-it-works) at the points ks."""
    return [K(const) + sum((K(c) / (1 + k * r) for c, r in zip(cs, rhos)), K.zero) for k in ks]


@st.composite
def families(draw, max_heads=6):
    """Distinct scores s_h (gaps >= 1/16), rho_h = e^(s_h), |c_h| >= 1/4."""
    m = draw(st.integers(1, max_heads))
    scores = draw(st.lists(st.integers(-32, 32), min_size=m, max_size=m, unique=True))
    cs = draw(st.lists(st.integers(1, 12).map(lambda n: mpq(n, 4)) | st.integers(-12, -1).map(
        lambda n: mpq(n, 4)), min_size=m, max_size=m))
    const = draw(rationals(bound=3))
    extra = draw(st.integers(0, 2))
    return [mpq(sc, 16) for sc in scores], cs, const, m + extra


@settings(max_examples=15, deadline=None)
@given(families())
def test_interpolation_recovers_poles_and_residues(fam):
    scores, cs, const, H = fam
    K = K100
    rhos = [K.exp(sc) for sc in scores]
    ks = [K(k) for k in range(2 * H + 1)]
    rf = cauchy_interpolate(ks, family(K, rhos, cs, const, ks), H, K)
    assert rf.n_poles == len(scores)                   # fewer heads than H come out naturally
    assert K.eq(rf.limit(K), const + 0)
    got = sorted(poles(rf, K))
    for (rho, c), (rho0, c0) in zip(got, sorted(zip(rhos, cs))):
        assert abs(rho - rho0) <= K.tol * rho0 and abs(c - c0) <= K.tol * abs(c0)


def test_interpolation_at_non_integer_points():
    """The efficient plan samples in t = 1/(k* - k), with t = 0 for the limit."""
    K, H = K100, 3
    ts = [K.one / (2 * H - k) for k in range(2 * H)] + [K.zero]
    rhos, cs = [K("1/3"), K(2), K(5)], [1, -2, "1/2"]
    rf = cauchy_interpolate(ts, family(K, rhos, cs, 7, ts), H, K)
    got = sorted(poles(rf, K))
    assert len(got) == 3 and all(abs(r - r0) <= K.tol * r0 for (r, _), r0 in zip(got, rhos))


def test_interpolation_of_twelve_heads_at_dps_100():
    """The generic Euclidean algorithm fails here (undecided degree tests)."""
    K, H = K100, 12
    rhos = [K.exp(mpq(2 * h - 11, 8)) for h in range(H)]
    cs = [mpq((-1) ** h * (h + 2), 3) for h in range(H)]
    ks = [K(k) for k in range(2 * H + 1)]
    rf = cauchy_interpolate(ks, family(K, rhos, cs, 1, ks), H, K)
    got = sorted(poles(rf, K))
    assert len(got) == H
    assert max(abs(r - r0) / r0 for (r, _), r0 in zip(got, rhos)) < K("1e-40")


def test_interpolation_small_cases():
    K = K50
    ks = [K(k) for k in range(5)]
    rf = cauchy_interpolate(ks, [K(3)] * 5, 2, K)
    assert (rf.P, rf.Q) == ([3], [1])
    rf = cauchy_interpolate(ks, [K.zero] * 5, 2, K)
    assert (rf.P, rf.Q) == ([], [1])
    rf = cauchy_interpolate(ks, family(K, [K(2)], [1], 0, ks), 2, K)   # V.a = 0: deg P < deg Q
    assert len(rf.P) == 1 and len(rf.Q) == 2 and K.eq(rf.Q[1], 2)
    with pytest.raises(ValueError):
        K.rational_interpolate(ks[:4], [K(1)] * 4, 2)


def test_interpolation_refuses_what_attention_cannot_produce():
    K = K50
    ks = [K(k) for k in range(1, 4)]
    with pytest.raises(InterpolationError, match="k = 0"):          # 1 + 1/k: a pole at 0
        cauchy_interpolate(ks, [1 + 1 / k for k in ks], 1, K)
    ks = [K(k) for k in range(3)]
    with pytest.raises(InterpolationError, match="infinity"):       # f = k: deg P > deg Q
        cauchy_interpolate(ks, list(ks), 1, K)


def test_pole_count_is_decided_by_the_fields_noise():
    """Two poles 1e-30 apart: Loewner singular value 2 is about 1e-62."""
    def fit(**kw):
        K = Real(dps=100, **kw)
        ks = [K(k) for k in range(7)]
        return K, cauchy_interpolate(ks, family(K, [K(1), K(1) + K("1e-30")], [1, 2], 2, ks), 3, K)

    K, rf = fit()                                  # noise 1e-90: two poles, ...
    assert rf.n_poles == 2
    with pytest.raises(NotSplit, match="undecided"):
        poles(rf, K)                               # ... too close for tol to separate
    K, rf = fit(noise="1e-50")                     # invisible at this noise: one pole
    assert rf.n_poles == 1 and K.eq(poles(rf, K)[0][1], 3)
    with pytest.raises(Undecided, match="singular value 2"):
        fit(noise="1e-66")                         # within the margin above the bound


def test_learner_over_the_real_field_matches_the_exact_heads():
    m = MultiHeadAttention([([["1/3", "-1/5"], ["1/7", "1/2"]], [1, -2]),
                            ([["-1/4", "1/3"], ["1/6", "-1/9"]], ["3/2", 1])])
    K = Real(dps=60)
    res = learn(Oracle(m, K), d=2, heads=2, seed=3, query_range=3)
    assert res.certified, res.error
    # the paper's 4Hd^2 - 2H + 1, its 2d - 2 single tokens (x) computed from V, the probe
    assert res.queries == 4 * 2 * 4 - 2 * 2 + 1 + 2 + res.probe_queries
    for got, want in zip(sorted(res.heads, key=lambda h: h.v), sorted(m.canonical_heads(), key=lambda h: h.v)):
        for a, b in zip([x for r in got.W for x in r] + list(got.v),
                        [x for r in want.W for x in r] + list(want.v)):
            assert abs(a - K(b)) < K("1e-40")


def test_a_real_field_result_pickles_with_its_numbers():
    """A campaign learns in worker processes: the result over the real field crosses a process
    boundary with every number intact (each Real field has its own mpmath context, whose
    classes pickle cannot find by name)."""
    K = Real(dps=40)
    model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
    res = learn(Oracle(model, K), d=2, heads=1, seed=1)
    assert res.status == "certified"
    back = pickle.loads(pickle.dumps(res))
    assert back.heads == res.heads and back.error_bound == res.error_bound
    assert back.to_json() == res.to_json()
    x = K(2) / 3
    y = pickle.loads(pickle.dumps(x))
    assert y == x and y.context.prec == K.prec and K.eq(y * 3, 2)
