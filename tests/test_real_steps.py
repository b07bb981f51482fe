"""Each real-field step written once (issue 21; docs: explanation/real-field.md).

* One asker for every plan: :class:`exactlearn.pipeline.ask.AskOnce` asks a batch of queries
  once each (one call of the box's ``batch``), reuses earlier answers with their observation
  indices, and enters ``around`` at every call of the box -- the counts checked against an
  independent counting box.  The stable plan asks through it (its own ``Asker`` is gone).
* One pipeline for both plans: the paper plan (``plan="paper"``) is
  :func:`~exactlearn.strategies.real.stable.run_stable` at the paper's nodes ``k = 0 .. 2H``,
  whose families are fitted in the field's precision; the thresholds are the pipeline's
  (``STABLE_*`` 1e-2, 1e2, 3; the paper plan's probe target ``PAPER_TARGET`` 1); no name of
  these is defined twice in ``exactlearn/strategies/real``, nor ``EPS``.
* The noise tests are one function for both plans: a sum of squares above 1 fails first, the
  Chebyshev bound is formed only after it passes.
* The stable plan's estimate is a typed value (``stable_checks.Estimate``), sorted to the
  canonical order (computed apart, by ``canonicalize``) with its bounds.
"""

from __future__ import annotations

import ast
import pathlib
from contextlib import contextmanager

import numpy as np
import pytest

from exactlearn.errors import ResidualsBeyondNoise
from exactlearn.fields import QQ
from exactlearn.oracle import Recorder
from exactlearn.pipeline.ask import AskOnce

import exactlearn.strategies.real as real_package

REAL = pathlib.Path(real_package.__file__).resolve().parent


class CountingBox:
    """Answers the sum of a query's first entries; counts its calls itself (no exactlearn
    code), and whether each happened inside ``around``."""

    def __init__(self):
        self.calls, self.batches, self.inside, self.depth = 0, 0, [], 0

    def __call__(self, tokens):
        self.calls += 1
        self.inside.append(self.depth)
        return sum(t[0] for t in tokens)

    def batch(self, queries):
        self.batches += 1
        return [self(q) for q in queries]


def test_ask_once_batches_each_distinct_query_once_inside_around():
    box = CountingBox()

    @contextmanager
    def around():
        box.depth += 1
        try:
            yield
        finally:
            box.depth -= 1

    ask = AskOnce(Recorder(box, QQ, convert=True), around=around)
    a, b = (1, 0), (2, 0)
    queries = [[a, a, b], [a, b], [(1, 0), (1, 0), (2, 0)], [a, b]]   # 2 distinct
    got = ask.ask(queries)
    assert box.calls == 2 and box.batches == 1 and ask.rec.queries == 2
    assert [y for y, _ in got] == [4, 3, 4, 3]
    assert [q for _, q in got] == [0, 1, 0, 1]
    # an earlier query is answered from memory, a new one asked once, each inside around
    assert ask.observe([a, b]) == (3, 1) and box.calls == 2
    assert ask.observe([b]) == (2, 2) and box.calls == 3
    assert ask.ask([[b], [a]]) == [(2, 2), (1, 3)] and box.calls == 4
    assert box.inside == [1, 1, 1, 1]
    assert [a, a, b] in ask and [b, a] not in ask


def test_stable_plan_asks_through_ask_once():
    from exactlearn.strategies.real import stable, stable_plan
    assert not hasattr(stable_plan, "Asker") and stable.AskOnce is AskOnce


def _definitions(name) -> list:
    out, paths = [], sorted(REAL.glob("*.py"))
    assert len(paths) > 20                  # the package's modules, not an empty folder
    for path in paths:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in node.targets):
                out.append(path.name)
    return out


@pytest.mark.parametrize("name", ["LINEAR_LIMIT", "UNEQUAL_FACTOR", "TARGET", "EPS"])
def test_no_threshold_defined_twice_under_one_name(name):
    assert len(_definitions(name)) <= 1, _definitions(name)


def test_the_pipelines_thresholds_keep_their_values():
    from exactlearn.strategies.real import lsq, outputs, stable_normal
    from exactlearn.strategies.real import stable_plan, stable_probe
    assert (stable_plan.STABLE_LINEAR_LIMIT, stable_plan.STABLE_UNEQUAL_FACTOR,
            stable_plan.EQUAL_FACTOR, stable_probe.STABLE_TARGET, stable_plan.PAPER_TARGET) \
        == (1e-2, 10 ** 2, 10, 3.0, 1.0)
    assert lsq.EPS == 2.0 ** -52 and outputs.EPS is lsq.EPS
    assert not hasattr(stable_normal, "EPS")


def test_the_paper_plan_is_the_one_pipeline_at_the_papers_nodes(monkeypatch):
    """plan="paper" runs run_stable with paper=True: nodes (k, 1), k = 0..2H (q_k = (a^k, x)); the
    paper pipeline and its modules are gone, and learn.py keeps max_parameter_error."""
    from exactlearn import MultiHeadAttention, Oracle, learn
    from exactlearn.fields.real import Real
    from exactlearn.strategies.real import learn as learn_module, stable
    seen = []
    run = stable.run_stable

    def spy(*args, **kw):
        seen.append(kw.get("paper"))
        return run(*args, **kw)

    monkeypatch.setattr(stable, "run_stable", spy)
    model = MultiHeadAttention([([[1, "1/2"], [0, -1]], [1, 2]), ([[0, 1], ["-1/2", 0]], [-1, 1])])
    res = learn(Oracle(model, Real(dps=40)), d=2, heads=2, seed=3, plan="paper")
    assert res.certified and res.plan == "paper"
    assert seen == [True] and res.max_length == 5          # (a^4, x): k = 2H = 4 at most
    assert res.real_detail["stable_plan_queries"] == 7 * 4 + 3      # (2d^2 - 1) 2H + 2d - 1
    assert res.real_detail["plan"].startswith("paper: q_k = (a^k, x)")
    for gone in ("analysis", "solve", "probe"):
        assert not (REAL / f"{gone}.py").exists()
    assert learn_module.__all__ == ["max_parameter_error"]


def test_noise_tests_one_function_sum_of_squares_first():
    from exactlearn.strategies.real.certificate import beyond_noise
    asked = []

    def cheb(value):
        def f():
            asked.append(value)
            return value
        return f

    with pytest.raises(ResidualsBeyondNoise, match="sum of squares 1.5 times") as exc:
        beyond_noise(3, 40, 1.5, cheb(9.0), "the fit leaves")
    assert asked == [] and exc.value.heads == 3            # the Chebyshev bound not formed
    with pytest.raises(ResidualsBeyondNoise, match="no model of 1 head keeps every output.* "
                                                   "of all 40 observations.* at least 1.03"):
        beyond_noise(1, 40, 0.5, cheb(1.03), "the fit leaves")
    for ok in (1.02, None):                                  # within 1 + SECOND_ORDER, or none
        assert beyond_noise(2, 40, 1.0, cheb(ok), "the fit leaves") is None


def test_the_stable_plans_estimate_is_a_typed_value():
    """The solve's and the polish's estimates pass to the certificate as an ``Estimate``:
    sorted to the canonical order with their bounds, their largest bound, finite or not."""
    import math
    from gmpy2 import mpq
    from exactlearn.model import Head, canonicalize
    from exactlearn.strategies.real.stable_checks import Estimate
    a = Head(((mpq(2),),), (mpq(1),))
    b = Head(((mpq(-1),),), (mpq(3),))
    truth = list(canonicalize([a, b]))                  # the canonical order, computed apart
    est = Estimate([a, b], [[[1e-9]], [[2e-9]]], [[3e-9], [4e-9]], method="polish")
    got = est.sorted()
    assert got.heads == truth and got.method == "polish"
    assert got.BW == ([[[1e-9]], [[2e-9]]] if truth[0] is a else [[[2e-9]], [[1e-9]]])
    assert got.Bv == ([[3e-9], [4e-9]] if truth[0] is a else [[4e-9], [3e-9]])
    assert est.largest() == 4e-9 and est.finite()
    biased = Estimate([a], [[[1e-9]]], [[1e-9]], Bu=[[5e-9]], Bc=6e-9)
    assert biased.largest() == 6e-9 and biased.finite()
    assert not Estimate([a], [[[math.inf]]], [[1e-9]]).finite()
    assert not Estimate([a], [[[1e-9]]], [[1e-9]], Bu=[[1e-9]], Bc=math.inf).finite()


def _spectrum(lam):
    """8 x 8 symmetric Q diag(lam) Q^T, Q a normalised Hadamard matrix: a constant diagonal, so
    its Jacobi scaling keeps the eigenvalues' ratios."""
    from scipy.linalg import hadamard
    Q = hadamard(8) / np.sqrt(8)
    return Q @ np.diag(lam) @ Q.T, Q


def test_solve_scaled_decides_weak_directions_by_the_eigenvalues():
    """solve_scaled's weak directions are the eigenvectors below the largest eigenvalue over
    WEAK_COND, whether or not its Cholesky pre-test (As - tau I, tau = ||As||_inf / WEAK_COND,
    which skips eigvalsh) passes: at a ratio of 1.3e-8 the pre-test fails and the eigenvalues
    still say no direction is weak; at 1e-9 one is, at 1e-13 the solve is refused."""
    from exactlearn.strategies.real.stable_scaled import COND_LIMIT, WEAK_COND, solve_scaled
    b = np.arange(8.0)
    A, _ = _spectrum([1.0] * 8)                      # well conditioned: no weak direction
    x, inv, weak = solve_scaled(A, b)
    assert weak == [] and np.allclose(x, np.linalg.solve(A, b)) and np.allclose(inv @ A, np.eye(8))
    A, _ = _spectrum([1.3 / WEAK_COND] + [1] * 3 + [1.3 / WEAK_COND] * 4)   # the borderline
    x, inv, weak = solve_scaled(A, b)
    assert weak == [] and np.allclose(A @ x, b, atol=1e-6)
    A, Q = _spectrum([0.1 / WEAK_COND] + [1] * 7)    # one weak direction, still solved
    x, inv, weak = solve_scaled(A, b)
    assert len(weak) == 1 and x is not None
    u = weak[0] / np.linalg.norm(weak[0])
    assert abs(abs(u @ Q[:, 0]) - 1) < 1e-9
    A, _ = _spectrum([0.1 / COND_LIMIT] + [1] * 7)   # beyond float64: refused, directions named
    x, inv, weak = solve_scaled(A, b)
    assert x is None and inv is None and len(weak) == 1


def _big_spectrum(lam, seed=0):
    """n x n symmetric Q diag(lam) Q^T with a random orthogonal Q and unit diagonal entries
    up to rounding (its rows' absolute sums far above its largest eigenvalue)."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((len(lam), len(lam))))
    A = Q @ np.diag(lam) @ Q.T
    s = np.sqrt(np.diag(A))
    return A / s[:, None] / s[None, :]


def test_solve_scaled_proves_no_direction_weak_without_eigh(monkeypatch):
    """Where the row sums' pre-test fails but every eigenvalue is above the largest over
    WEAK_COND (a condition of 5e7, as the d = 16, H = 6 polish's normal matrix), Lanczos' bound
    on the largest eigenvalue, proved by a Cholesky factor, decides without ``eigh``; the
    solution is Cholesky's. Just below the threshold the weak direction is still found."""
    from exactlearn.strategies.real import stable_scaled as sn
    n = 200
    lam = np.logspace(np.log10(1 / 5e7), 0, n)
    A = _big_spectrum(lam)
    ev = np.linalg.eigvalsh(A)
    assert ev[0] > ev[-1] / sn.WEAK_COND                 # no weak direction ...
    tau = np.abs(A).sum(axis=1).max() / sn.WEAK_COND
    assert not sn._definite(A - tau * np.eye(n))         # ... which the row sums cannot show
    b = np.arange(float(n))
    eigh = np.linalg.eigh
    monkeypatch.setattr(np.linalg, "eigh", lambda *a, **k: pytest.fail("eigh was called"))
    x, inv, weak = sn.solve_scaled(A, b)
    assert weak == [] and np.allclose(A @ x, b, rtol=1e-6, atol=1e-6 * np.abs(b).max())
    monkeypatch.setattr(np.linalg, "eigh", eigh)
    A2 = _big_spectrum(np.concatenate([[0.5 / sn.WEAK_COND], lam[1:]]))
    ev2 = np.linalg.eigvalsh(A2)
    assert ev2[0] < ev2[-1] / sn.WEAK_COND
    x, inv, weak = sn.solve_scaled(A2, b)
    assert len(weak) == 1 and x is not None


def test_scaled_without_weak_names_solves_by_cholesky_without_eigh(monkeypatch):
    """``Scaled(A, name_weak=False)`` (a Gauss--Newton step after the first, the polish's
    bounds, the hat): with a weak direction (ratio 1e-9: the pre-tests fail) the eigenvalues
    alone decide (no ``eigh``), the solve and the inverse are Cholesky's and agree with
    ``name_weak=True``'s eigenvector solve to the conditioning's rounding; beyond COND_LIMIT
    nothing solves, as with the names."""
    from exactlearn.strategies.real import stable_scaled as sn
    n = 200
    lam = np.logspace(-9, 0, n)
    A = _big_spectrum(lam, seed=1)
    b = np.arange(float(n))
    x1, inv1, weak1 = sn.Scaled(A).solved(b)
    assert len(weak1) >= 1 and x1 is not None
    eigh = np.linalg.eigh
    monkeypatch.setattr(np.linalg, "eigh", lambda *a, **k: pytest.fail("eigh was called"))
    sc = sn.Scaled(A, name_weak=False)
    assert sc.fac is not None and sc.weak == []
    x2, inv2, weak2 = sc.solved(b)
    assert weak2 == []
    assert np.abs(x2 - x1).max() <= 1e-4 * np.abs(x1).max()      # cond 1e9 x 2^-53, with room
    assert np.allclose(inv2, inv2.T) and np.abs(inv2 - inv1).max() <= 1e-4 * np.abs(inv1).max()
    monkeypatch.setattr(np.linalg, "eigh", eigh)
    A3 = _big_spectrum(np.concatenate([[0.1 / sn.COND_LIMIT], lam[1:]]), seed=1)
    for name_weak in (True, False):
        x3, inv3, _ = sn.Scaled(A3, name_weak=name_weak).solved(b)
        assert x3 is None and inv3 is None


@pytest.mark.parametrize("low", [1e-3, 1e-9, 0.1 / 1e12])
def test_scaled_in_place_is_the_same_scaled(low):
    """``Scaled(A, overwrite_a=True)`` (the polish's normal matrices, read by nobody after):
    A holds ``A / s s^T`` afterwards, and the factor, weak directions, solve and inverse are
    those of ``Scaled`` on an untouched copy, bit for bit -- well conditioned, with a weak
    direction, and beyond COND_LIMIT (nothing solves)."""
    from exactlearn.strategies.real import stable_scaled as sn
    n = 120
    A = _big_spectrum(np.logspace(np.log10(low), 0, n), seed=2)
    b = np.linspace(-2, 3, n)
    keep = A.copy()
    for name_weak in (True, False):
        A1 = keep.copy()
        ref, got = sn.Scaled(keep.copy(), name_weak=name_weak), sn.Scaled(A1, name_weak=name_weak,
                                                                          overwrite_a=True)
        s = np.sqrt(np.diag(keep))
        assert np.array_equal(A1, keep / s[:, None] / s[None, :])
        assert (ref.fac is None) == (got.fac is None)
        if ref.fac is not None:
            assert np.array_equal(ref.fac[0], got.fac[0])
        assert all(np.array_equal(u, w) for u, w in zip(ref.weak, got.weak))
        assert len(ref.weak) == len(got.weak)
        for x, y in zip(ref.solved(b), got.solved(b)):
            assert (x is None and y is None) or np.array_equal(np.asarray(x), np.asarray(y))
    frozen = keep.copy()                # read-only (or not float64): scaled in a copy, untouched
    frozen.flags.writeable = False
    assert np.array_equal(sn.Scaled(frozen, overwrite_a=True).s, ref.s) and \
        np.array_equal(frozen, keep)


def test_shifted_is_the_shift_and_the_eigen_step_needs_no_inverse():
    """``_shifted`` moves only the diagonal, bit for bit as ``As - s I`` and ``s I - As``;
    with weak directions named (the eigenpairs' path) ``solved(b, inverse=False)`` is the
    eigenpairs' solve, as ``A^-1 b``, with no inverse returned."""
    from exactlearn.strategies.real import stable_scaled as sn
    A = _big_spectrum(np.logspace(-10, 0, 80), seed=3)
    assert np.array_equal(sn._shifted(A, 0.25), A - 0.25 * np.eye(80))
    assert np.array_equal(sn._shifted(A, 3.0, below=True), 3.0 * np.eye(80) - A)
    sc = sn.Scaled(A)
    assert sc.fac is None and len(sc.weak) >= 1
    b = np.linspace(-1, 1, 80)
    x, inv, weak = sc.solved(b, inverse=False)
    assert inv is None and len(weak) == len(sc.weak)
    x2, inv2, _ = sc.solved(b)
    assert np.abs(x - x2).max() <= 1e-5 * np.abs(x2).max()


def test_scaled_without_a_solve_names_the_same_weak_directions(monkeypatch):
    """``Scaled(A, solve=False)`` (the polish's deferred first step) names the weak directions
    by the eigenpairs below the largest eigenvalue over WEAK_COND alone (LAPACK's MRRR on that
    range, no ``eigh``): the same subspace as ``eigh``'s, and no solve; with no weak direction
    it is ``Scaled(A)``, Cholesky's factor bit for bit."""
    from exactlearn.strategies.real import stable_scaled as sn
    lam = np.concatenate([[3e-11, 2e-10, 4e-9], np.logspace(-6, 0, 97)])     # 3 below 1e-8
    A = _big_spectrum(lam, seed=4) * np.outer(np.arange(1, 101), np.arange(1, 101))
    full = sn.Scaled(A)
    eigh = np.linalg.eigh
    monkeypatch.setattr(np.linalg, "eigh", lambda *a, **k: pytest.fail("eigh was called"))
    only = sn.Scaled(A, solve=False)
    assert len(only.weak) == len(full.weak) == 3
    P = np.array(full.weak).T
    Q = np.array(only.weak).T
    # the same span: each of one set is its projection on the other's (least squares)
    for X, Y in ((P, Q), (Q, P)):
        coef = np.linalg.lstsq(Y, X, rcond=None)[0]
        assert np.abs(Y @ coef - X).max() <= 1e-6 * np.abs(X).max()
    assert only.solved(np.ones(100), inverse=False) == (None, None, only.weak)
    monkeypatch.setattr(np.linalg, "eigh", eigh)
    B = _big_spectrum(np.logspace(-6, 0, 100), seed=5)          # condition 1e6: none weak
    a, b = sn.Scaled(B), sn.Scaled(B, solve=False)
    assert b.weak == [] and np.array_equal(a.fac[0], b.fac[0])


def test_scaled_inverse_by_potri_is_the_inverse():
    """:meth:`Scaled.inverse` from LAPACK's potri (both triangles filled in) is ``A^-1``."""
    from exactlearn.strategies.real import stable_scaled as sn
    A = _big_spectrum(np.logspace(-3, 0, 60), seed=2) * np.outer(np.arange(1, 61), np.arange(1, 61))
    inv = sn.Scaled(A).inverse()
    assert np.abs(inv - inv.T).max() <= 1e-14 * np.abs(inv).max()     # the scaling's rounding
    assert np.abs(inv @ A - np.eye(60)).max() < 1e-9


@pytest.mark.parametrize("spread", [0.5, 3.0])
def test_chebyshev_bound_with_a_limit_decides_as_without(monkeypatch, spread):
    """With ``limit`` the reweighting stops once a step's largest residual (an upper bound on
    the minimum) is within it; the answer to "above the limit?" is the one the full iteration
    gives: outputs within 0.5 of a linear fit stop after one solve, outputs 3 off still refute."""
    from exactlearn.strategies.real import stable_minimax as sm
    rng = np.random.default_rng(1)
    Js = rng.normal(size=(200, 5))
    s = Js @ rng.normal(size=5) + rng.uniform(-spread, spread, size=200)
    full = sm.chebyshev_bound(Js, s)
    solves = []
    lstsq = np.linalg.lstsq
    monkeypatch.setattr(np.linalg, "lstsq", lambda *a, **k: solves.append(1) or lstsq(*a, **k))
    short = sm.chebyshev_bound(Js, s, limit=1.02)
    assert (short > 1.02) == (full > 1.02) == (spread > 1)
    assert short <= full + 1e-12
    assert (len(solves) == 1) == (spread < 1)


def test_family_keys_are_kept_per_recorder_and_follow_its_observations():
    """``family_keys`` computes only the new observations' keys of an appended recorder, and
    all again when the observations are not the ones it kept (a recorder reset)."""
    from exactlearn.strategies.real import stable_certificate as sc

    class Rec:
        observations: list = []

    rec = Rec()
    rec.observations = [(((1, 2), (1, 2), (3, 4)), 0.5), (((3, 4),), 0.25)]
    assert sc.family_keys(rec, 0, 2) == [((1, 2), (3, 4), 2, 1), ((3, 4), (3, 4), 0, 1)]
    calls = []
    real = sc.family_key
    sc_key = (lambda t: calls.append(t) or real(t))
    try:
        sc.family_key = sc_key
        rec.observations.append((((5, 6), (7, 8), (7, 8)), 1.0))
        assert sc.family_keys(rec, 1, 3) == [((3, 4), (3, 4), 0, 1), ((5, 6), (7, 8), 1, 2)]
        assert len(calls) == 1                                   # the new observation only
        rec.observations = [(((9, 9),), 0.0)]                    # not the observations kept
        assert sc.family_keys(rec, 0, 1) == [((9, 9), (9, 9), 0, 1)]
        last = rec.observations[-1]                              # another list, the same last
        rec.observations = [(((1, 1), (2, 2)), 0.0), last]
        sc.family_keys(rec, 0, 2)
        rec.observations = [(((3, 3), (2, 2)), 0.0), last]
        assert sc.family_keys(rec, 0, 2) == [((3, 3), (2, 2), 1, 1), ((9, 9), (9, 9), 0, 1)]
    finally:
        sc.family_key = real


def test_the_normal_matrix_of_families_that_never_see_W():
    """Every family a single token repeated (``a == x``: no live family, the grouping by final
    token empty): the W blocks of the normal matrix are 0, as the sum over no family is, and
    the v block is formed (the per-final-token sums of stable_blocks once raised on it)."""
    from gmpy2 import mpq

    from exactlearn.fields import Real
    from exactlearn.strategies.real.ratio import family_tokens, ratio_nodes
    from exactlearn.strategies.real.stable_normal import Families, normal_equations

    K = Real(dps=30)

    class Rec:
        observations: list = []

    rec = Rec()
    rec.observations = []
    for x in [(1, 0), (0, 1)]:
        xq = tuple(mpq(t) for t in x)
        for k, m in ratio_nodes(1):
            rec.observations.append((family_tokens(xq, xq, k, m), K(1)))
    fam = Families(rec, 0, np.full(len(rec.observations), 1e-13))
    assert len(fam.live) == 0
    A = normal_equations(fam, np.zeros((1, 2, 2)), np.ones((1, 2)))[0]
    assert A.shape == (6, 6) and not A[:4].any() and not A[:, :4].any()
    assert np.all(np.diag(A)[4:] > 0)
