"""Differential: every route to the heads gives the same answer.

* Cauchy interpolation: the generic extended-Euclid code of
  :mod:`exactlearn.pipeline.interpolate` / :mod:`exactlearn.algebra.polys` against the rational
  field's python-flint fast path ``Rational.rational_interpolate``, on the same
  samples (query-family values of random models, random rational functions of
  k, and arbitrary data that fits nothing).
* The learner over the rational field by each of its analysis routes (the
  default multi-modular analysis, the flint fast path over Q, the generic code
  over Q), and over the other exact fields of the field table (tests/field_table.py:
  the modular field F_p and the symbolic field Q(T)), on the same model with the same
  seed and query range (hence the same plan): same status, same heads.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.fields import ConfirmationModular, Modular, ModularImage, Rational, ResidueModular
from exactlearn.pipeline.interpolate import cauchy_interpolate, poles
from exactlearn.pipeline.plan import draw_paper_plan

from field_table import LEARNER_FIELDS, over
from strategies import any_models, nonzero_models, scaled, seeds


class GenericRational(Rational):
    """The rational field without its flint fast path: the generic EEA runs."""

    rational_interpolate = None

    def __init__(self, scale=None):
        super().__init__(scale=scale, via_modular=False)

    def with_scale(self, scale):
        return GenericRational(scale)


def outcome(ks, ys, H, K):
    """(P, Q, sorted poles) or the name of the exception, for comparison."""
    try:
        rf = cauchy_interpolate(ks, ys, H, K)
    except ArithmeticError as exc:
        return type(exc).__name__
    try:
        pl = sorted(poles(rf, K), key=lambda pc: (str(pc[0]), str(pc[1])))
    except ArithmeticError as exc:
        pl = type(exc).__name__
    return rf.P, rf.Q, pl


def test_generic_route_really_is_generic(monkeypatch):
    """Guard: GenericRational does not reach the fast path, Rational does."""
    calls = []
    orig = Rational.rational_interpolate
    monkeypatch.setattr(Rational, "rational_interpolate",
                        lambda self, *a: calls.append(1) or orig(self, *a))
    ks = [Rational()(k) for k in range(3)]
    ys = [Rational()(y) for y in (1, 2, 5)]
    a = outcome(ks, ys, 1, GenericRational(1))
    assert calls == []
    b = outcome(ks, ys, 1, Rational(scale=1, via_modular=False))
    assert calls == [1] and a == b


# -- interpolation on the same samples ----------------------------------------------------
@settings(max_examples=scaled(30))
@given(model=nonzero_models(max_d=3, max_heads=3), seed=seeds, extra=st.integers(0, 1),
       which=st.integers(0, 10 ** 6))
def test_interpolation_routes_agree_on_query_families(model, seed, extra, which):
    """f(q_k), k = 0..2H0, for one configuration of a random plan."""
    H0 = model.H + extra
    oracle = Oracle(model, Rational())
    plan = draw_paper_plan(model.d, H0, random.Random(seed), 30)
    config = plan.configs[which % len(plan.configs)]
    K = oracle.field
    ks = [K(k) for k in range(2 * H0 + 1)]
    ys = [oracle(config.tokens(k)) for k in range(2 * H0 + 1)]
    fast = outcome(ks, ys, H0, Rational(scale=K.D, via_modular=False))
    generic = outcome(ks, ys, H0, GenericRational(K.D))
    assert fast == generic
    event("fit" if isinstance(fast, tuple) else fast)


@st.composite
def samples(draw):
    """2H+1 values at k = 0..2H: a type-(m, m) rational function (m <= H) with
    poles at powers of 2, or arbitrary small rationals (which may fit nothing)."""
    Q = Rational(scale=1)
    H = draw(st.integers(1, 4))
    ks = [Q(k) for k in range(2 * H + 1)]
    if draw(st.booleans()):
        m = draw(st.integers(0, H))
        rho = [Q(2) ** draw(st.integers(-4, 4)) for _ in range(m)]
        c = [Q(draw(st.integers(-3, 3))) for _ in range(m)]
        V = Q(draw(st.integers(-3, 3)))
        ys = [V + sum((ci / (1 + k * r) for ci, r in zip(c, rho)), Q(0)) for k in ks]
    else:
        ys = [Q(draw(st.integers(-2, 2))) / draw(st.integers(1, 3)) for _ in ks]
    return ks, ys, H


@settings(max_examples=scaled(100))
@given(s=samples())
def test_interpolation_routes_agree_on_arbitrary_samples(s):
    ks, ys, H = s
    fast = outcome(ks, ys, H, Rational(scale=1, via_modular=False))
    generic = outcome(ks, ys, H, GenericRational(1))
    assert fast == generic
    event("fit" if isinstance(fast, tuple) else fast)


class GenericModular(Modular):
    """The modular field without its flint fast path: the generic EEA runs."""

    rational_interpolate = None


@settings(max_examples=scaled(100))
@given(s=samples())
def test_modular_interpolation_routes_agree(s):
    """The fmpz_mod_poly fast path and the generic EEA give the same P, Q and
    poles on the reductions mod p of the same samples."""
    ks, ys, H = s
    F, G = Modular(scale=1), GenericModular(scale=1)
    fast = outcome([F(k) for k in ks], [F(y) for y in ys], H, F)
    generic = outcome([G(k) for k in ks], [G(y) for y in ys], H, G)
    assert fast == generic
    event("fit" if isinstance(fast, tuple) else fast)


class WithoutFastPath:
    """Any field, seen without its ``rational_interpolate`` hook: the generic EEA runs."""

    rational_interpolate = None

    def __init__(self, K):
        self.K = K

    def __getattr__(self, name):
        return getattr(self.K, name)


#: Every field with a fast polynomial ring (``poly_ring``); the others have none.
POLY_RING_FIELDS = [Rational(scale=1, via_modular=False), Modular(scale=1),
                    Modular(p=3 * 2**30 + 1, scale=1), ResidueModular(scale=1), ModularImage(scale=1),
                    ConfirmationModular(2**127 - 1, omega=5, scale=1)]


def test_poly_ring_capability():
    from exactlearn.fields import Real, Symbolic
    from exactlearn.fields.base import flint_rational_interpolate
    for F in POLY_RING_FIELDS:
        assert F.poly_ring is not None and F.rational_interpolate.__func__ is flint_rational_interpolate
    for F in (Symbolic(), Real(dps=20)):
        assert F.poly_ring is None
    assert Symbolic().rational_interpolate is None


@settings(max_examples=scaled(40))
@given(s=samples(), which=st.integers(0, len(POLY_RING_FIELDS) - 1))
def test_poly_ring_path_agrees_with_generic_on_every_field(s, which):
    """The one flint fast path (``flint_rational_interpolate`` on ``K.poly_ring``) and the
    generic EEA give the same P, Q and poles over every field that has a poly_ring."""
    ks, ys, H = s
    F = POLY_RING_FIELDS[which]
    fast = outcome([F(k) for k in ks], [F(y) for y in ys], H, F)
    generic = outcome([F(k) for k in ks], [F(y) for y in ys], H, WithoutFastPath(F))
    assert fast == generic
    event(f"{type(F).__name__}: {'fit' if isinstance(fast, tuple) else fast}")


# -- the learner by every route -------------------------------------------------------------
def _key(res):
    return res.status, res.heads


def _rational_routes(model, seed, H, R):
    D = model.scale()
    routes = {"multi-modular": Rational(scale=D),
              "flint over Q": Rational(scale=D, via_modular=False),
              "generic over Q": GenericRational(D)}
    oracle = Oracle(model, Rational())
    return {name: learn(oracle, d=model.d, heads=H, field=K, seed=seed, query_range=R)
            for name, K in routes.items()}


@settings(max_examples=scaled(20))
@given(model=st.one_of(any_models(max_d=3, max_heads=2), any_models(max_d=2, merged=True),
                       any_models(max_d=2, cancelling=True)),
       seed=seeds, R=st.sampled_from([2, 30]))
def test_learner_rational_routes_agree(model, seed, R):
    res = _rational_routes(model, seed, model.H, R)
    keys = {name: _key(r) for name, r in res.items()}
    assert len(set(keys.values())) == 1, keys
    r = res["multi-modular"]
    if r.certified:
        assert r.heads == model.canonical_heads()
    event(r.status)


@over(LEARNER_FIELDS)
@settings(max_examples=scaled(30))
@given(data=st.data(), seed=seeds)
def test_learner_agrees_with_rational(F, data, seed):
    """The same model, seed and query range (hence the same plan) in another exact field:
    the modular field F_p, and Q(T), the ground truth whose T -> 2 is the rational field.
    Same status and heads; certified heads are the canonical ones.  Each field's row of
    the table (tests/field_table.py) gives its models and ranges (Q(T): tiny, range 2)."""
    model = data.draw(F.models, label="model")
    R = data.draw(st.sampled_from(F.ranges), label="range")
    # retries=0 on both: the fields' retry defaults differ (3 over Q(T)), and a redraw after a
    # degenerate draw is another plan (seed 0, R = 2, W = [[-1, -1], [-1, -1]], v = (0, 1):
    # failed over Q on its one draw, certified over Q(T) on its second)
    rq = learn(Oracle(model, Rational()), d=model.d, heads=model.H, seed=seed, query_range=R,
               retries=0)
    rf = learn(Oracle(model, F()), d=model.d, heads=model.H, seed=seed, query_range=R, retries=0)
    assert _key(rq) == _key(rf), (rq.error, rf.error)
    if rf.certified:
        assert rf.heads == model.canonical_heads()
    event(f"{F.name}: {rf.status}")


def test_rational_routes_agree_on_high_height_values():
    v = "1/" + str(2 ** 50 + 1)
    model = MultiHeadAttention([([[1, 0], [0, 1]], [v, 1])])
    res = _rational_routes(model, 0, 1, 30)
    assert res["flint over Q"].certified
    assert res["flint over Q"].heads == model.canonical_heads()
    assert _key(res["multi-modular"]) == _key(res["flint over Q"]), res["multi-modular"].error
