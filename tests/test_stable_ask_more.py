"""The families the polish asks for its weak entries (exactlearn.strategies.real.stable_ask_more;
docs/howto/float-black-box.md, "Fewer queries").

Every check compares the learned heads with the numpy layer's own exact weights
(tests/float_layers.py, written apart from exactlearn) and the counted queries with the box's
own counter.
"""

from __future__ import annotations

import numpy as np
import pytest

import exactlearn.strategies.real.stable_ask_more as more
from exactlearn import learn
from exactlearn.fields.real import Real
from exactlearn.strategies.real.learn import max_parameter_error
from exactlearn.strategies.real.ratio import ratio_nodes
from exactlearn.strategies.real.stable_plan import stable_count

from float_layers import NumpyAttention
from test_float_boxes import F64, truth


def _learn(box, d, H, seed):
    return learn(box, d=d, heads=H, field=Real(dps=30), tokens="float64", plan="stable",
                 seed=seed, **F64)


def test_the_polish_asks_for_its_weak_entries_and_they_end_within_1e_13(monkeypatch):
    """d=8, H=4, seed 1 of the float64 grid: the polish of the lean plan's families leaves one
    entry of W with a bound about 70 times the median, and errs there by 4.0e-13.  The
    families the polish asks for bring it to about 1.6e-14; without them (POLISH_ROUNDS = 0)
    the run stays above 1e-13 -- the step, not the rest of the plan, is what fixes it."""
    box = NumpyAttention.from_seed(8, 4, 1)
    res = _learn(box, 8, 4, 1)
    assert res.certified, res.error
    assert res.real_detail["targeted_families"] > 0
    err, _ = max_parameter_error(res.heads, truth(box), res.field)
    assert err <= res.error_bound and err <= 1e-13
    assert res.queries == box.calls
    assert res.queries <= 2.5 * (4 * 4 * 8 ** 2 - 2 * 4 + 1)

    monkeypatch.setattr(more, "POLISH_ROUNDS", 0)
    box0 = NumpyAttention.from_seed(8, 4, 1)
    res0 = _learn(box0, 8, 4, 1)
    assert res0.certified, res0.error
    # (the polish's undetermined directions, stable_supplement.target_families, still ask)
    assert res0.real_detail["targeted_families"] < res.real_detail["targeted_families"]
    err0, _ = max_parameter_error(res0.heads, truth(box0), res0.field)
    assert err0 > 1e-13 >= err
    assert res.queries > res0.queries == box0.calls


def test_a_run_without_weak_entries_asks_nothing_more():
    """d=4, H=2, seed 0: every entry's bound within 4 times the median; the run asks the plan
    and the probe only (no rescue, no supplement, no targeted family)."""
    box = NumpyAttention.from_seed(4, 2, 0)
    res = _learn(box, 4, 2, 0)
    assert res.certified, res.error
    det = res.real_detail
    assert det["targeted_families"] == det["supplementary_families"] == 0
    assert res.queries == res.plan_queries + res.probe_queries == box.calls
    assert res.plan_queries == stable_count(4, 2, nodes=ratio_nodes(2, lean=True))


def test_weak_families_rank_the_families_of_the_weakest_entry():
    """weak_families on a polished fit: the entries above POLISH_BOUND_FACTOR times the median
    are found, and the first family named carries the largest share of their bounds; with the
    factor out of reach nothing is weak."""
    captured = {}
    real = more.weak_families

    def spy(polished):
        out = real(polished)
        captured.setdefault("first", (polished, out))
        return out
    more.weak_families = spy
    try:
        box = NumpyAttention.from_seed(8, 4, 1)
        _learn(box, 8, 4, 1)
    finally:
        more.weak_families = real
    polished, out = captured["first"]
    fW = np.asarray(polished.W_bounds[0])
    assert fW.max() > more.POLISH_BOUND_FACTOR * np.median(fW)
    shares = [s for s, _, _ in out]
    assert shares == sorted(shares, reverse=True) and shares[0] > 0
    h = out[0][1]
    assert fW[h].max() == fW.max()          # the weakest entry's head
    old = more.POLISH_BOUND_FACTOR
    more.POLISH_BOUND_FACTOR = 1e9
    try:
        assert more.weak_families(polished) == []
    finally:
        more.POLISH_BOUND_FACTOR = old


def test_the_polish_families_with_biases_are_counted_and_certified():
    """A float64 box with biases (exactlearn.floatbox over a random biased model, d=4, H=2,
    seed 2): the polish asks 3 families, built on the (x_i; 1) columns of [W | u]; every
    query is counted and the run is certified within its bound against the model's canonical
    heads."""
    from boxes import Counting
    from exactlearn.floatbox import FloatAttention
    from exactlearn.generate import random_model
    model = random_model(4, 2, seed=2, bias=True)
    box = Counting(FloatAttention(model, "float64"))
    res = learn(box, d=4, heads=2, field="real", tokens="float64", bias=True, seed=2,
                noise=1e-14, noise_rel=1e-15)
    assert res.certified, res.error
    assert res.real_detail["targeted_families"] > 0
    assert res.queries == box.answered
    err, _ = max_parameter_error(res.heads, model.canonical_heads(), Real(dps=30))
    assert err <= float(res.error_bound)


def _dense_jacobian(fam, W, V, c):
    """Every observation's row of d f / d(W, v[, c]), family by family from
    ``stable_normal.family_values`` (per family, written apart from the vectorised
    ``normal_equations`` and the batched ``sensitivity_rows``), weighted by 1 / eta."""
    from exactlearn.strategies.real.stable_normal import family_values, v_jacobian
    H = len(W)
    rows = []
    for f in range(len(fam.pairs)):
        val, gz, gv, _ = family_values(fam, f, W, V, c=c)
        J = np.concatenate([gz[:, h:h + 1] * fam.D[f][None, :] for h in range(H)]
                           + [v_jacobian(fam, gv, len(val))], axis=1)
        rows.append(J / fam.eta[f][:, None])
    return np.concatenate(rows)


@pytest.mark.parametrize("bias", [False, True])
def test_the_polish_normal_matrix_and_sensitivities_match_a_dense_jacobian(monkeypatch, bias):
    """The polish's normal matrix (only the families that see W enter its W blocks; one
    product for the v-v block) and its batched sensitivities ``S = A^-1 J^T Sigma^-1``
    (groups of equal-size families) equal those formed from a dense Jacobian, row by row, on
    a run's own observations (d=4, H=2, seed 0; with biases the [W | u] columns and the
    constant).  A sensitivity that drops the W part, or a W block that drops a family that
    sees W, fails here."""
    import exactlearn.strategies.real.stable as stable
    from exactlearn.strategies.real.stable_normal import head_arrays, normal_equations
    from exactlearn.strategies.real.stable_polish import sensitivity_rows
    got = []
    real_polish = stable.polish

    def spy(*a, **k):
        out = real_polish(*a, **k)
        got.append(out)
        return out

    monkeypatch.setattr(stable, "polish", spy)
    if bias:
        from exactlearn.floatbox import FloatAttention
        from exactlearn.generate import random_model
        res = learn(FloatAttention(random_model(4, 2, seed=2, bias=True), "float64"), d=4,
                    heads=2, field="real", tokens="float64", bias=True, seed=2, noise=1e-14,
                    noise_rel=1e-15)
    else:
        res = _learn(NumpyAttention.from_seed(4, 2, 0), 4, 2, 0)
    assert res.certified, res.error
    pol = [p for p in got if p.solved][-1]
    fam, parts, inv = pol.normal[3:]
    assert len(fam.live) < len(fam.pairs)                     # single tokens repeated: present
    W, V, c = head_arrays(pol.heads, bias)
    J = _dense_jacobian(fam, W, V, c)
    A = normal_equations(fam, W, V, c)[0]
    assert np.abs(A - J.T @ J).max() <= 1e-11 * np.abs(A).max()
    ST = J @ inv / np.concatenate(fam.eta)[:, None]           # Sigma^-1 J A^-1, n x P
    H, dd = len(W), W[0].size
    seen = 0
    for g, obs, S in sensitivity_rows(fam, parts, inv, H, dd):
        for f, o, Sf in zip(g, obs, S):
            lo = fam.starts[f]
            assert list(o) == list(range(lo, lo + len(Sf)))
            ref = ST[lo:lo + len(Sf)]
            assert np.abs(Sf - ref).max() <= 1e-9 * np.abs(ST).max(), f
            seen += 1
    assert seen == len(fam.pairs)


@pytest.mark.parametrize("bias", [False, True])
def test_a_groups_z_rows_are_its_families_d_against_the_rows(bias):
    """``_ZRows.of`` (a group of live families at a time, ``R xt`` once per final token) against
    the definition ``Z[f, h, p] = D_f . rows[p, head h's W block]`` with ``Families.D``, for
    groups that mix final tokens, skip families and hold one family.  A product against the
    wrong final token or head block fails here."""
    from exactlearn.strategies.real.stable_normal import Families
    from exactlearn.strategies.real.stable_polish import _ZRows
    rng = np.random.default_rng(3)
    d, H, F = 4, 2, 40
    xs = [tuple(rng.integers(-3, 4, d) / 4) for _ in range(5)]
    obs = [((tuple(rng.integers(-3, 4, d) / 4), xs[f % 5]), 0.5) for f in range(F)]

    class Rec:                          # Families reads (tokens, value) observations
        observations = [([a] * 2 + [x], y) for (a, x), y in obs]

    fam = Families(Rec, 0, [1e-15] * F, bias=bias)
    dd = d * (d + bias)
    rows = rng.standard_normal((7, H * dd + H * d + bias))
    zr = _ZRows(fam, rows, H, dd)
    for li in (np.arange(len(fam.live)), np.arange(0, len(fam.live), 3), np.array([5])):
        want = np.stack([[rows[:, h * dd:(h + 1) * dd] @ fam.D[fam.live[i]] for h in range(H)]
                         for i in li])
        assert np.allclose(zr.of(li), want, rtol=1e-13, atol=1e-13)


def test_a_normal_matrix_formed_in_a_reused_array_is_the_same(monkeypatch):
    """``normal_equations(..., out=)`` (the Gauss--Newton points' arrays reused: page faults at
    d = 32, H = 4) fills an array holding anything -- here nan -- with the same A as a fresh
    one, bit for bit; an array of another shape or type is not used."""
    import exactlearn.strategies.real.stable as stable
    from exactlearn.strategies.real.stable_normal import head_arrays, normal_equations
    got, real_polish = [], stable.polish
    monkeypatch.setattr(stable, "polish", lambda *a, **k: got.append(real_polish(*a, **k)) or got[-1])
    assert _learn(NumpyAttention.from_seed(4, 2, 0), 4, 2, 0).certified
    pol = [p for p in got if p.solved][-1]
    fam = pol.normal[3]
    W, V, c = head_arrays(pol.heads, False)
    A0, b0 = normal_equations(fam, W, V)[:2]
    buf = np.full_like(A0, np.nan)
    A1, b1 = normal_equations(fam, W, V, out=buf)[:2]
    assert A1 is buf and np.array_equal(A1, A0) and np.array_equal(b1, b0)
    for other in (np.zeros((3, 3)), np.zeros(A0.shape, dtype=np.float32)):
        A2 = normal_equations(fam, W, V, out=other)[0]
        assert A2 is not other and np.array_equal(A2, A0)


def test_the_first_polish_waits_while_targeted_families_are_asked(monkeypatch):
    """d=6, H=3, seed 0: the first polish's start names a weak direction, so (``defer``) it
    takes no Gauss--Newton step before the targeted families are asked; the polish after them
    starts from the solve's heads anyway.  ``resume()`` is the polish without ``defer`` bit for
    bit, and the run's heads, bounds and count are those of a run that polishes first."""
    import exactlearn.strategies.real.stable as stable
    from exactlearn.strategies.real.stable_polish import polish as real_polish

    seen = []

    def spy(*a, **k):
        out = real_polish(*a, **k)
        if k.get("defer"):              # the observations the polish saw, kept apart
            then = type("Then", (), {"observations": list(a[2].observations)})()
            seen.append((a[:2] + (then,) + a[3:], dict(k), out))
        return out

    monkeypatch.setattr(stable, "polish", spy)
    box = NumpyAttention.from_seed(6, 3, 0)
    res = _learn(box, 6, 3, 0)
    assert res.certified and len(seen) == 1
    a, k, deferred = seen[0]
    assert not deferred.solved and deferred.resume is not None and deferred.weak.directions
    k["defer"] = False
    whole, resumed = real_polish(*a, **k), deferred.resume()
    assert whole.solved and resumed.solved and whole.weak.directions
    for got, want in ((resumed.W_bounds, whole.W_bounds), (resumed.v_bounds, whole.v_bounds)):
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert resumed.heads == whole.heads and resumed.excess == whole.excess
    assert [(h, U.tolist()) for h, U in resumed.weak.directions] == \
        [(h, U.tolist()) for h, U in whole.weak.directions]

    def eager(*a, **k):                 # the first polish fitted at once, as before defer
        k.pop("defer", None)
        return real_polish(*a, **k)

    monkeypatch.setattr(stable, "polish", eager)
    box2 = NumpyAttention.from_seed(6, 3, 0)
    res2 = _learn(box2, 6, 3, 0)
    assert res2.heads == res.heads and res2.error_bound == res.error_bound
    assert res2.queries == res.queries == box.calls == box2.calls
    assert res.real_detail["targeted_families"] > 0


def test_a_polish_that_names_no_weak_directions_forms_no_eigenvectors(monkeypatch):
    """d=6, H=3, seed 0: at the observations where the first polish's start names a weak
    direction, ``named=False`` (the polishes whose ``weak`` nobody reads: after the targeted
    families, and the warm one) fits the same heads without any eigendecomposition: Cholesky's
    solve instead of the eigenpairs', the heads within the bounds of the polish that named them."""
    import scipy.linalg
    import exactlearn.strategies.real.stable as stable
    from exactlearn.strategies.real.stable_polish import polish as real_polish
    seen = []

    def spy(*a, **k):
        out = real_polish(*a, **k)
        if k.get("defer"):
            then = type("Then", (), {"observations": list(a[2].observations)})()
            seen.append((a[:2] + (then,) + a[3:], dict(k)))
        return out

    monkeypatch.setattr(stable, "polish", spy)
    assert _learn(NumpyAttention.from_seed(6, 3, 0), 6, 3, 0).certified and len(seen) == 1
    a, k = seen[0]
    k["defer"] = False
    whole = real_polish(*a, **k)
    assert whole.solved and whole.weak.directions

    def refused(*_, **__):
        raise AssertionError("an eigendecomposition was formed")

    monkeypatch.setattr(np.linalg, "eigh", refused)
    monkeypatch.setattr(scipy.linalg, "eigh", refused)
    quiet = real_polish(*a, **k, named=False)
    assert quiet.solved and not quiet.weak.directions
    K = a[1]
    for hq, hw, bw, bv in zip(quiet.heads, whole.heads, whole.W_bounds[0], whole.v_bounds[0]):
        dW = np.array([[float(K(p) - K(q)) for p, q in zip(r, s)] for r, s in zip(hq.W, hw.W)])
        dv = np.array([float(K(p) - K(q)) for p, q in zip(hq.v, hw.v)])
        assert np.all(np.abs(dW) <= bw) and np.all(np.abs(dv) <= bv)


def test_gauss_newton_stops_at_float64s_floor(monkeypatch):
    """d=8, H=4, seed 1: a float64 box declared at 5e-14 leaves residuals of rounding size, so
    a step from the solve's heads reaches float64's floor (every residual within its rounding:
    ``beyond`` 0) and the Gauss--Newton iteration settles there; before, three to five more
    steps only moved the cost's rounding.  The run stays certified within 1e-13."""
    import exactlearn.strategies.real.stable_polish as sp

    from spies import while_inside
    runs, real_ne = [], sp.normal_equations

    def ne(*a, **k):
        out = real_ne(*a, **k)
        if inside[0]:                   # a point the iteration judged
            runs[-1].append(out[3])
        return out

    monkeypatch.setattr(sp, "normal_equations", ne)
    inside = while_inside(monkeypatch, sp, "_gauss_newton", before=lambda: runs.append([]))
    box = NumpyAttention.from_seed(8, 4, 1)
    res = _learn(box, 8, 4, 1)
    assert res.certified, res.error
    iterations = [r for r in runs if len(r) > 1]    # a point judged after a step
    assert iterations
    for points in iterations:
        floor = [n for n, (_, beyond) in enumerate(points) if beyond == 0]
        assert floor and floor[0] == len(points) - 1, points   # the first floor point is the last
    err, _ = max_parameter_error(res.heads, truth(box), res.field)
    assert err <= res.error_bound and err <= 1e-13


def test_the_last_round_leaves_its_bounds_to_the_warm_polish(monkeypatch):
    """d=8, H=4, seed 1 with POLISH_ROUNDS = 2: both rounds ask families, and only the first
    round's observations are judged by a polish without steps (``iterate=False``); after the
    last round no round is left to read such bounds, so the warm polish comes next at once."""
    import exactlearn.strategies.real.stable as stable
    from exactlearn.strategies.real.stable_polish import polish as real_polish

    calls = []

    def spy(*a, **k):
        calls.append("bounds" if k.get("iterate") is False else "warm" if k.get("warm")
                     else "fit")
        return real_polish(*a, **k)

    asked, real_again = [], more.ask_families_again

    def again(*a, **k):
        n = real_again(*a, **k)
        asked.append(n)
        calls.append("ask")
        return n

    monkeypatch.setattr(more, "POLISH_ROUNDS", 2)
    monkeypatch.setattr(more, "ask_families_again", again)
    monkeypatch.setattr(stable, "polish", spy)
    box = NumpyAttention.from_seed(8, 4, 1)
    res = _learn(box, 8, 4, 1)
    assert res.certified, res.error
    assert len(asked) == 2 and all(asked)
    assert calls[-4:] == ["ask", "bounds", "ask", "warm"]
    assert res.queries == box.calls
