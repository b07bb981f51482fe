"""Scale (docs: explanation/performance.md#scale): the batched routines of the modular field against the
routines they replace, on random inputs; and one learn spread over Dask (a loopback
LocalCluster of two worker processes, through ``learn(executor=)`` and the CLI's
``--workers``) against the serial run: identical results and counts."""

from __future__ import annotations

import json
import random

import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.algebra import linalg
from exactlearn.errors import CertificateError
from exactlearn.fields import QQ, Modular
from exactlearn.generate import random_model
from exactlearn.model import Head, HeadEvaluator, distinct_tokens
from exactlearn.pipeline import confirmation, multimodular
from exactlearn.pipeline.analysis import ask_plan
from exactlearn.pipeline.certify import certify, certify_plan
from exactlearn.pipeline.interpolate import (cauchy_interpolate, interpolate_many, poles,
                                             poles_among, poles_paired)
from exactlearn.pipeline.plan import draw_paper_plan
from exactlearn.oracle import Recorder

from boxes import CallableBox

P = 2 ** 61 - 1          # a small prime keeps the random checks quick (any p works)


def _field(rng):
    return Modular(p=P, scale=1)


def _family(K, rng, H, rhos=None, cs=None):
    """Samples k = 0..2H of A + sum_h c_h / (1 + k rho_h) over K."""
    rhos = rhos or [K(rng.randrange(2, P - 1)) for _ in range(H)]
    cs = cs or [K(rng.randrange(1, P)) for _ in range(H)]
    A = K(rng.randrange(P))
    return [A + sum((c / (1 + K(k) * r) for r, c in zip(rhos, cs)), K.zero)
            for k in range(2 * H + 1)], rhos, cs


@pytest.mark.parametrize("seed", range(6))
def test_interpolate_many_equals_cauchy_interpolate(seed):
    rng = random.Random(seed)
    K = _field(rng)
    H = rng.randint(1, 6)
    ks = [K(k) for k in range(2 * H + 1)]
    yss = [_family(K, rng, rng.randint(1, H))[0] for _ in range(5)]
    yss.append([K(rng.randrange(P)) for _ in ks])            # random samples: often no fit
    want = []
    for ys in yss:
        try:
            want.append(cauchy_interpolate(ks, ys, H, K))
        except Exception as exc:                             # the same failure, in order
            want.append(type(exc))
    try:
        got = interpolate_many(ks, yss, H, K)
    except Exception as exc:
        first = next(w for w in want if isinstance(w, type))
        assert type(exc) is first
        return
    assert got == want


@pytest.mark.parametrize("seed", range(8))
def test_poles_paired_and_among_equal_root_finding(seed):
    rng = random.Random(100 + seed)
    K = _field(rng)
    H = rng.randint(1, 6)
    ks = [K(k) for k in range(2 * H + 1)]
    yb, gammas, cb = _family(K, rng, H)
    alphas = [K(rng.randrange(2, P - 1)) for _ in range(H)]
    if seed % 4 == 3 and H > 1:                  # a coincidence: the pairing cannot decide
        alphas[1] = alphas[0] * gammas[0] / gammas[1]
    yw, _, _ = _family(K, rng, H, [a * g for a, g in zip(alphas, gammas)],
                       [K(rng.randrange(1, P)) for _ in range(H)])
    rf_b, rf_w = cauchy_interpolate(ks, yb, H, K), cauchy_interpolate(ks, yw, H, K)
    got = poles_paired(rf_b, rf_w, alphas, K)
    if got is not None:
        basis, joint = got
        assert basis == poles(rf_b, K)
        if joint is not None:
            assert set(joint) == {r for r, _ in poles(rf_w, K)}
    else:
        assert seed % 4 == 3
    # the candidates' test on the reversed Q, with and without the known roots
    a_poles = [(a, K.one) for a in alphas]
    cands = [ra * rb for ra, _ in a_poles for rb, _ in poles(rf_b, K)]
    want = poles_among(rf_w, cands, QQ_like(K))
    assert poles_among(rf_w, cands, K) == want
    if got is not None and got[1] is not None:
        assert poles_among(rf_w, cands, K, got[1]) == want
        assert poles_among(rf_w, got[1], K, got[1]) == want      # the paired order


class QQ_like(Modular):
    """The same F_p without python-flint's polynomial ring: the generic code paths."""

    def __init__(self, K):
        super().__init__(K.p, K.omega, K.scale)
        self.poly_ring = None
        self.rational_interpolate = None


@pytest.mark.parametrize("seed", range(4))
def test_evaluator_integer_path_equals_general_path(seed):
    rng = random.Random(200 + seed)
    d, H = rng.randint(1, 4), rng.randint(1, 4)
    model = random_model(d, H, 200 + seed, den=2)
    K = Modular(p=P, scale=model.scale())
    ev = HeadEvaluator(model.heads, d, K)
    for _ in range(20):
        toks = [tuple(rng.randint(-5, 5) for _ in range(d)) for _ in range(rng.randint(1, 4))]
        a = toks[0]
        toks = [a] * rng.randint(0, 3) + toks                  # runs of one object
        general = [tuple(QQ(c) for c in t) for t in toks]      # not ints: the general path
        assert ev(toks) == ev(general)
        if len(toks) >= 2 and toks[-1] != a:
            fam = ev.family(a, toks[-1])
            k = rng.randint(1, 5)
            want = ev([a] * k + [toks[-1]])
            assert sum(((k * w * A + B) / (k * w + 1) for w, A, B in fam), K.zero) == want


def test_distinct_tokens_runs_and_equal_tokens():
    a = (1, 2)
    assert distinct_tokens([a, a, (1, 2), [1, 2], (0, 0)]) == ([((1, 2), 4), ((0, 0), 1)], (0, 0))
    assert distinct_tokens([(3,)]) == ([((3,), 1)], (3,))


@pytest.mark.parametrize("seed", range(4))
def test_fp_inverse_equals_gauss_jordan(seed):
    rng = random.Random(300 + seed)
    K = _field(rng)
    n = rng.randint(1, 6)
    A = [[K(rng.randrange(P)) for _ in range(n)] for _ in range(n)]
    inv = linalg.inverse(A, K)
    assert inv == linalg.inverse(A, QQ_like(K))
    S = [[K(1)] * n for _ in range(n)]
    if n > 1:
        with pytest.raises(linalg.SingularMatrix):
            linalg.inverse(S, K)


def _asked(d, H, seed):
    rng = random.Random(seed)
    model = next(m for m in (random_model(d, H, 50 + seed + 100 * t, den=1) for t in range(50))
                 if len(m.canonical_heads()) == H)
    K = Modular(scale=1)
    plan = draw_paper_plan(d, H, rng, 2 ** 32)
    rec = Recorder(Oracle(model, K), K, convert=True)
    y0, values = ask_plan(plan, rec)
    return model, K, plan, rec, y0, values


@pytest.mark.parametrize("seed", range(3))
def test_certify_plan_equals_certify(seed):
    d, H = 2 + seed, 1 + seed
    model, K, plan, rec, y0, values = _asked(d, H, seed)
    heads = model.canonical_heads()
    assert heads
    assert certify_plan(heads, plan, y0, values, K) == certify(heads, d, rec.observations, K)
    wrong = list(heads)
    wrong[0] = Head(wrong[0].W, tuple(x + 1 for x in wrong[0].v))
    msgs = []
    for fn in (lambda: certify_plan(wrong, plan, y0, values, K),
               lambda: certify(wrong, d, rec.observations, K)):
        with pytest.raises(CertificateError) as exc:
            fn()
        msgs.append(str(exc.value))
    assert msgs[0] == msgs[1]


def test_certify_plan_in_small_batches(monkeypatch):
    """Batches of two families (the batched evaluation's chunks) give the same count, and
    a wrong v the same first failure, as the query-by-query certificate."""
    from exactlearn.pipeline import certify as cert
    monkeypatch.setattr(cert, "_CHUNK", 2)
    model, K, plan, rec, y0, values = _asked(3, 2, 7)
    heads = model.canonical_heads()
    assert certify_plan(heads, plan, y0, values, K) == certify(heads, 3, rec.observations, K)
    wrong = list(heads)
    wrong[-1] = Head(wrong[-1].W, tuple(x + 1 for x in wrong[-1].v))
    msgs = []
    for fn in (lambda: certify_plan(wrong, plan, y0, values, K),
               lambda: certify(wrong, 3, rec.observations, K)):
        with pytest.raises(CertificateError) as exc:
            fn()
        msgs.append(str(exc.value))
    assert msgs[0] == msgs[1]


def test_design_rank_from_the_plan_equals_the_rows():
    model, K, plan, rec, y0, values = _asked(3, 2, 7)
    heads = model.canonical_heads()
    confirmation.check_design_rank_plan(heads, plan, K)          # full rank: passes
    confirmation.check_design_rank(heads, rec.observations, K)
    # two equal heads' rows coincide: rank deficient, and both say so the same way
    twin = (heads[0], Head(heads[0].W, heads[1].v))
    msgs = []
    for fn in (lambda: confirmation.check_design_rank_plan(twin, plan, K),
               lambda: confirmation.check_design_rank(twin, rec.observations, K)):
        with pytest.raises(Exception) as exc:
            fn()
        msgs.append(str(exc.value))
    assert msgs[0] == msgs[1] and "rank" in msgs[0]


# ---- one learn on a loopback Dask cluster --------------------------------------------------

@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address="127.0.0.1:0") as cluster:
        with distributed.Client(cluster) as c:
            yield c


def _json(res):
    out = res.to_json()
    out.pop("learner_seconds"), out.pop("oracle_seconds")
    return out


@pytest.mark.parametrize("d,H,seed", [(3, 2, 1), (4, 3, 2)])
def test_executor_equals_serial(client, d, H, seed):
    model = random_model(d, H, seed, den=2)
    o1, o2 = Oracle(model, Modular()), Oracle(model, Modular())
    serial = learn(o1, d=d, heads=H, seed=seed)
    spread = learn(o2, d=d, heads=H, seed=seed, executor=client)
    assert serial.status == spread.status == "certified"
    assert _json(serial) == _json(spread)
    assert serial.queries == spread.queries == o1.queries == o2.queries
    assert spread.heads == model.canonical_heads()


def test_executor_chunks_stay_within_chunk_configs(client, monkeypatch):
    """Chunks of at most ``CHUNK_CONFIGS`` configurations (at d = 384 an analysis task's
    memory grows with its chunk): one group a chunk here, the same result and counts."""
    from exactlearn.pipeline import distributed
    model = random_model(10, 1, 3, den=2)               # 9 groups past x_1: 2 a chunk by default
    serial = learn(Oracle(model, Modular()), d=10, heads=1, seed=3)
    monkeypatch.setattr(distributed, "CHUNK_CONFIGS", 1)
    sizes = []
    real = distributed.ClusterPlan.__init__
    monkeypatch.setattr(distributed.ClusterPlan, "__init__", lambda self, *a: real(self, *a)
                        or sizes.append([len(g) for g in self.groups]))
    spread = learn(Oracle(model, Modular()), d=10, heads=1, seed=3, executor=client)
    assert sizes and all(n <= 2 * 10 for got in sizes for n in got) and len(sizes[0]) == 10
    assert _json(serial) == _json(spread) and spread.heads == model.canonical_heads()


def test_executor_follows_the_two_pass_protocol(client):
    """Issue 23 on the cluster: a refuted confirmation joins the CRT (v modulo that prime
    from the group of x_1's answers, which the cluster sends back), ordinary heights take 2
    passes and a declared height bound 1; every JSON equals the serial run's."""
    tall = MultiHeadAttention([([[1, 0, 2], [0, 1, 0], [1, 1, 1]],
                                ["1/" + str(2 ** 78 - 1), 1, "3/7"])], d=3)
    small = random_model(3, 2, 4, den=1)
    B = max(int(max(abs(x.numerator), x.denominator)) for h in small.canonical_heads()
            for x in list(h.v) + [y for row in h.W for y in row])
    for model, kw, roles in ((tall, {}, ["analysis", "confirmation", "confirmation"]),
                             (small, {}, ["analysis", "confirmation"]),
                             (small, {"max_height": B}, ["analysis"])):
        H = len(model.heads)
        o1, o2 = Oracle(model, Modular()), Oracle(model, Modular())
        serial = learn(o1, d=3, heads=H, seed=1, **kw)
        spread = learn(o2, d=3, heads=H, seed=1, executor=client, **kw)
        assert serial.certified and spread.heads == model.canonical_heads()
        assert _json(serial) == _json(spread)
        assert [r["role"] for r in spread.multimodular["primes"]] == roles
        assert spread.queries == o2.queries == len(roles) * (4 * H * 9 - 2 * H + 1)


def test_executor_with_a_callable_black_box(client):
    """A black box that is not a model's Oracle is asked here; the analysis runs there."""
    model = random_model(3, 2, 4, den=1)
    inner = Oracle(model, Modular())

    serial = learn(Oracle(model, Modular()), d=3, heads=2, seed=3)
    spread = learn(CallableBox(inner), d=3, heads=2, seed=3, executor=client)
    assert _json(serial) == _json(spread) and spread.queries == inner.queries


def test_executor_failure_is_the_serial_failure(client):
    """A black box outside the model class (more heads than the bound) fails with the
    serial run's reason and counts."""
    model = random_model(3, 3, 9, den=1)
    serial = learn(Oracle(model, Modular()), d=3, heads=1, seed=2)
    spread = learn(Oracle(model, Modular()), d=3, heads=1, seed=2, executor=client)
    assert serial.status == spread.status == "failed"
    assert _json(serial) == _json(spread)


def _wrong_beyond_group_0(heads, x1):
    """W_1 + u w^T with w orthogonal to x_1: every query of the group of x_1 (final token
    x_1) is answered as by the true heads, the others are not."""
    w = (x1[1], -x1[0]) + (0,) * (len(x1) - 2) if any(x1[:2]) else (1,) + (0,) * (len(x1) - 1)
    W = tuple(tuple(a + w[c] for c, a in enumerate(row)) for row in heads[0].W)
    return [Head(W, heads[0].v)] + list(heads[1:])


@pytest.mark.parametrize("wrong_in, box", [("v", "model"), ("W", "model"), ("W", "callable")])
def test_cluster_confirmation_failure_is_the_serial_failure(client, wrong_in, box):
    """Wrong heads modulo a confirmation prime: the one-round confirmation (ask and
    certify per chunk; a black box that is not a model: ask, then certify) fails with the
    serial certificate's message and counts, also when the group of x_1 passes and only
    later groups fail.  Each failing chunk sends back its first failure alone."""
    from exactlearn.pipeline import cluster_tasks
    from exactlearn.pipeline.distributed import ClusterPlan
    model = random_model(3, 2, 4, den=1)
    plan = draw_paper_plan(3, 2, random.Random(0), 20)
    wrong = list(model.canonical_heads())
    if wrong_in == "v":
        wrong[0] = Head(wrong[0].W, tuple(x + 1 for x in wrong[0].v))
    else:
        wrong = _wrong_beyond_group_0(wrong, plan.X[0])
    replayed = []
    original = ClusterPlan._replay
    ClusterPlan._replay = lambda self, heads, failing, K: replayed.append(failing) or original(self, heads, failing, K)
    msgs, counts = [], []
    try:
        for spread in (False, True):
            oracle = Oracle(model, Modular())
            Kc = multimodular.draw_confirmation_field(random.Random(1), oracle.field.D)
            rec = Recorder(oracle.over(Kc), Kc, convert=True, keep=False)
            with pytest.raises(CertificateError) as exc:
                if spread:
                    ClusterPlan(client, plan, oracle if box == "model" else CallableBox(oracle)
                                ).confirm(rec, wrong, Kc)
                else:
                    certify_plan(wrong, plan, *ask_plan(plan, rec), Kc)
            msgs.append(str(exc.value))
            counts.append((rec.queries, oracle.queries))
    finally:
        ClusterPlan._replay = original
    (failing,) = replayed
    assert all(len(a[1]) + (a[0] is not None) == 1 for a in failing)
    shared = any(a[0] is not None for a in failing)          # f((x_1)) = V.x_1: v wrong
    first = {n for a in failing for n in a[1]}
    assert shared == (wrong_in == "v") and (wrong_in == "v" or not first & set(cluster_tasks.groups(plan)[0]))
    assert len(failing) == len(cluster_tasks.groups(plan)) - (wrong_in == "W")
    assert msgs[0] == msgs[1] and counts[0] == counts[1] == (plan.count, plan.count)


@pytest.mark.parametrize("d,H,seed,tall", [(3, 2, 1, False), (4, 3, 2, False), (3, 2, 5, True)])
def test_executor_with_biases_equals_serial(client, d, H, seed, tall):
    """The plan for biases on the cluster (docs: explanation/biases.md): the same JSON as the
    serial run, timings aside, the same counts, and the model's own canonical heads, u and c;
    ``tall``: v and c past one prime's reconstruction bound, so a further prime's residues
    join on the cluster too."""
    from gmpy2 import mpq
    model = random_model(d, H, seed, den=2, bias=True)
    if tall:
        model = MultiHeadAttention([(h.W, tuple(x * 2 ** 70 + 1 for x in h.v), h.u)
                                    for h in model.heads], constant=mpq(2 ** 90 + 3, 7), bias=True)
    o1, o2 = Oracle(model, Modular()), Oracle(model, Modular())
    serial = learn(o1, d=d, heads=H, seed=seed, bias=True)
    spread = learn(o2, d=d, heads=H, seed=seed, bias=True, executor=client)
    assert serial.status == spread.status == "certified"
    assert _json(serial) == _json(spread)
    assert serial.queries == spread.queries == o1.queries == o2.queries
    assert spread.heads == model.canonical_heads()
    assert spread.heads.constant == model.canonical_heads().constant
    assert (len(spread.multimodular["primes"]) > 2) == tall


def test_executor_refused_where_it_does_not_apply(client):
    model = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2])])
    from exactlearn.fields import Rational
    with pytest.raises(ValueError, match="executor="):
        learn(Oracle(model, Rational()), d=2, heads=1, seed=0, executor=client)
    with pytest.raises(ValueError, match="executor="):
        learn(Oracle(model, Modular()), d=2, heads=1, seed=0, plan="efficient", executor=client)


@pytest.mark.slow
@pytest.mark.parametrize("bias", [[], ["--bias"]])
def test_cli_workers_equals_serial(tmp_path, capsys, bias):
    pytest.importorskip("distributed")
    from exactlearn.cli import main
    path = tmp_path / "m.json"
    random_model(3, 2, 5, den=1, bias=bool(bias)).dump(path)
    outs = []
    for extra in ([], ["--workers", "2"]):
        assert main(["learn", "--model", str(path), "--field", "modular", "--heads", "2",
                     "--seed", "1", "--json"] + bias + extra) == 0
        out = json.loads(capsys.readouterr().out)
        out.pop("learner_seconds"), out.pop("oracle_seconds")
        outs.append(out)
    assert outs[0] == outs[1]
    assert main(["learn", "--model", str(path), "--heads", "2", "--workers", "2"]) == 2
    assert "--field modular" in capsys.readouterr().err


def test_executor_joins_a_tall_model_as_the_serial_run_does(client):
    """A v too tall for one analysis prime: the cluster's further prime is asked (not certified)
    and its residues join the CRT, certifying the serial run's heads with its queries (the
    final review: the cluster path iterated over Head objects as if they were W, and failed)."""
    tall = MultiHeadAttention([([[1, 0], [0, 1]],
                                ["1/3", "123456789012345678901234567890123456789/987654321098765432109876543210987"])])
    serial = learn(Oracle(tall, Modular()), d=2, heads=1, seed=0)
    spread = learn(Oracle(tall, Modular()), d=2, heads=1, seed=0, executor=client)
    assert serial.certified and spread.certified, spread.error
    assert spread.heads == serial.heads == tall.canonical_heads()
    assert spread.queries == serial.queries
    assert [r["role"] for r in spread.multimodular["primes"]] == [r["role"] for r in serial.multimodular["primes"]]


@pytest.mark.parametrize("seed", range(4))
def test_families_equal_family(seed):
    """HeadEvaluator.families (the certificate's batch, two fmpz_mat products per final
    token) gives every pair exactly what family gives it, biases and odd pairs included."""
    rng = random.Random(400 + seed)
    d, H = rng.randint(1, 4), rng.randint(1, 4)
    model = random_model(d, H, 400 + seed, den=2, bias=seed % 2 == 1)
    K = Modular(p=P, scale=model.scale())
    ev = HeadEvaluator(model.heads, d, K)
    xs = [tuple(rng.randint(-5, 5) for _ in range(d)) for _ in range(3)]
    pairs = [(tuple(rng.randint(-5, 5) for _ in range(d)), rng.choice(xs)) for _ in range(12)]
    pairs += [(xs[0], xs[0]), ((QQ(1),) * d, xs[1]), ((1,) * (d + 1), xs[2])]
    got = ev.families(pairs)
    assert got == [ev.family(a, x) for a, x in pairs]
    assert all(f is not None for f in got[:12]) and got[-3:] == [None, None, None]


@pytest.mark.parametrize("d, H, seed", [(4, 2, 0), (6, 3, 1), (5, 4, 2)])
def test_one_root_finding_per_analysis_prime(monkeypatch, d, H, seed):
    """The analysis finds roots for (x_1, e_1) only: the other basis configurations'
    poles come from pairings through the within and across configurations (before,
    2d - 1 root findings per prime); the heads are the model's canonical ones."""
    calls = []
    roots = Modular.roots

    def counted(self, coeffs):
        calls.append(self.p)
        return roots(self, coeffs)

    monkeypatch.setattr(Modular, "roots", counted)
    model = next(m for m in (random_model(d, H, 60 + seed + 100 * t, den=2) for t in range(50))
                 if len(m.canonical_heads()) == H)
    res = learn(Oracle(model, Modular()), d=d, heads=H, seed=seed)
    assert res.status == "certified" and res.heads == model.canonical_heads()
    analysed = [r for r in res.multimodular["primes"] if r["role"] == "analysis"]
    assert len(calls) == len(analysed) == 1


@pytest.mark.parametrize("seed", range(4))
def test_averages_integer_path_equals_general_path(seed):
    """HeadEvaluator.averages on integer tokens (the integer path, used by the confirmation's
    rank check and v solve) equals the general path on the same tokens as rationals."""
    rng = random.Random(500 + seed)
    d, H = rng.randint(1, 4), rng.randint(1, 4)
    model = random_model(d, H, 500 + seed, den=2, bias=seed % 2 == 1)
    K = Modular(p=P, scale=model.scale())
    ev = HeadEvaluator(model.heads, d, K)
    exps = []
    exp = K.exp
    K.exp = lambda s: exps.append(s) or exp(s)         # the general path's exponentials
    for _ in range(10):
        toks = [tuple(rng.randint(-5, 5) for _ in range(d)) for _ in range(rng.randint(1, 4))]
        toks = [toks[0]] * rng.randint(0, 3) + toks
        general = [tuple(QQ(c) for c in t) for t in toks]
        before = len(exps)
        fast = ev.averages(toks)
        assert len(exps) == before                   # integer tokens: no K.exp of a rational
        assert fast == ev.averages(general) and len(exps) > before


def test_confirmation_over_recorded_answers_solves_small_systems(monkeypatch):
    """The efficient plan's confirmation (answers recorded, not a paper plan): the rank check
    and, after a refuted confirmation, the v solve run on per-family (#k + 1) x (m + 1)
    systems and a d x d one, not on dense systems of m d columns; the heads are the model's."""
    import flint
    shapes = []
    real = flint.fmpz_mod_mat

    class Recording:
        def __new__(cls, *args):
            M = real(*args)
            shapes.append((M.nrows(), M.ncols()))
            return M

    monkeypatch.setattr(confirmation.flint, "fmpz_mod_mat", Recording)
    d, H = 4, 2
    tall = MultiHeadAttention([([[1, 0, 2, 0], [0, 1, 0, -1], [1, 1, 0, 0], [0, 0, 1, 1]],
                                ["1/" + str(2 ** 78 - 1), 1, 2, -1]),
                               ([[0, 1, 0, 0], [2, 0, 0, 1], [0, 0, -1, 0], [1, 0, 0, 1]],
                                [3, "1/5", -2, 1])])
    res = learn(Oracle(tall, Modular()), d=d, heads=H, seed=0, plan="efficient")
    assert res.status == "certified" and res.heads == tall.canonical_heads()
    roles = [(r["role"], "refuted" in r, r.get("joined", False)) for r in res.multimodular["primes"]]
    assert ("confirmation", True, True) in roles             # a refuted one joined: v was solved
    assert shapes and max(cols for _, cols in shapes) < H * d


def test_rank_plan_core_solved_in_flint(monkeypatch):
    """The rank plan's M_h = C U^-1 R over Q is python-flint fmpq_mat products and a solve
    (not the pure-Python matrix product); the heads are the model's canonical ones."""
    from exactlearn.algebra import linalg as la

    def refused(*args):
        raise AssertionError("a pure-Python matrix product")

    monkeypatch.setattr(la, "matmul", refused)
    model = MultiHeadAttention([([[1, 2, 0, 0], [2, 4, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], [1, 2, 3, 4]),
                                ([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, -1], [0, 0, 2, -2]], [2, -1, 1, 3])])
    res = learn(Oracle(model, Modular()), d=4, heads=2, seed=3, plan="efficient", rank=1)
    assert res.status == "certified" and res.heads == model.canonical_heads()


def test_the_learners_exact_work_runs_with_the_collector_paused_and_the_box_without(monkeypatch):
    """The analysis and the plan's certificate run with the cyclic garbage collector paused
    (docs: explanation/performance.md#scale), the black box's own evaluation never does, and
    the collector is back on afterwards -- after a failing run too.  The heads are the model's
    canonical form (computed from the model, not by the learner)."""
    import gc

    import exactlearn.pipeline.analysis as analysis_mod
    import exactlearn.pipeline.certify as certify_mod

    seen = {"analysis": [], "certificate": [], "box": []}
    real_interpolate, real_sum = analysis_mod.interpolate_many, certify_mod.sum_of_fractions

    def interpolate_spy(*args, **kwargs):
        seen["analysis"].append(gc.isenabled())
        return real_interpolate(*args, **kwargs)

    def sum_spy(*args, **kwargs):
        seen["certificate"].append(gc.isenabled())
        return real_sum(*args, **kwargs)

    class Box(Oracle):
        def __call__(self, tokens):
            seen["box"].append(gc.isenabled())
            return super().__call__(tokens)

    monkeypatch.setattr(analysis_mod, "interpolate_many", interpolate_spy)
    monkeypatch.setattr(certify_mod, "sum_of_fractions", sum_spy)
    model = random_model(5, 3, 11)
    assert gc.isenabled()
    try:
        res = learn(Box(model, Modular()), d=5, heads=3, seed=2)
        assert res.status == "certified" and res.heads == model.canonical_heads()
        assert seen["analysis"] and not any(seen["analysis"])
        assert seen["certificate"] and not any(seen["certificate"])
        assert seen["box"] and all(seen["box"])
        assert gc.isenabled()
        failed = learn(Box(model, Modular()), d=5, heads=1, seed=2)       # too few heads
        assert failed.status != "certified" and gc.isenabled()
    finally:
        gc.enable()


def test_distinct_dots_are_the_plain_sums():
    """V.x over the distinct vectors of a list, against sums of products modulo p."""
    from exactlearn.pipeline.analysis import distinct_dots

    rng = random.Random(5)
    K = _field(rng)
    u = [rng.randrange(P) for _ in range(4)]
    base = [tuple(rng.randint(-9, 9) for _ in range(4)) for _ in range(6)]
    xs = [base[rng.randrange(6)] for _ in range(40)]
    got = distinct_dots([K(a) for a in u], xs, K)
    assert set(got) == set(xs)
    for x in xs:
        assert int(got[x]) == sum(a * b for a, b in zip(u, x)) % P


def test_an_exact_run_loads_no_float_stack():
    """The exact fields' start-up and runs import neither numpy, mpmath nor scipy (the real
    field's learner imports them where it runs): about 0.3 s of CPU, and more of the wall
    time, of every exact process (docs: explanation/performance.md#scale)."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from exactlearn import MultiHeadAttention, Oracle, learn\n"
            "from exactlearn.cli import main\n"
            "from exactlearn.fields import Modular, Rational\n"
            "m = MultiHeadAttention([([[1, 0], [0, 1]], ['1/3', 1])])\n"
            "r = [learn(Oracle(m, K), d=2, heads=1, seed=0).status for K in (Modular(), Rational())]\n"
            "print(r, sorted(x for x in ('numpy', 'scipy', 'mpmath') if x in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == "['certified', 'certified'] []"


def test_small_logs_first_are_the_logs():
    """DiscreteLog.symmetric tries a small log from the low 80 bits of the 2-power part of
    p - 1 = 7 * 2^120 first, and goes whole after a taller log (until a small one again):
    every log, small, tall, at the ends of the range and alternating, is the plain one."""
    from exactlearn.algebra.dlog import DiscreteLog
    from exactlearn.fields.modular import DEFAULT_P
    p, half = DEFAULT_P, (DEFAULT_P - 1) // 2
    dl = DiscreteLog(p, 3, {2: 120, 7: 1})
    rng = random.Random(4)
    ns = [0, 1, -1, 2 ** 79 - 1, -(2 ** 79) + 1, 2 ** 79, -(2 ** 79), half, -half + 1]
    ns += [rng.randrange(-2 ** b, 2 ** b) for b in (8, 60, 78, 79, 80, 81, 100, 121) for _ in range(6)]
    ns += [n for pair in zip(ns[::2], ns[::-3]) for n in pair]          # small and tall mixed
    ns = [n for n in ns if -half < n <= half]
    assert [dl.symmetric(pow(3, n % (p - 1), p), 3) for n in ns] == ns
    plain = [dl(pow(3, n % (p - 1), p)) for n in ns]
    assert [x - (p - 1) if x > half else x for x in plain] == ns


@pytest.mark.parametrize("bias", [False, True])
def test_the_solve_in_chunks_of_heads_gives_the_canonical_heads(monkeypatch, bias):
    """W (with biases [W | u]) solved one head at a time (``SOLVE_BUDGET`` as at d = 384)
    gives the model's own canonical heads, with the same JSON as all heads at once."""
    from exactlearn.pipeline import solve
    model = random_model(4, 3, 2, den=2, bias=bias)
    whole = learn(Oracle(model, Modular()), d=4, heads=3, seed=2, bias=bias)
    monkeypatch.setattr(solve, "SOLVE_BUDGET", 1)
    calls = []
    real = solve._solve_W_all_flint
    monkeypatch.setattr(solve, "_solve_W_all_flint",
                        lambda plan, logs, bias=False: calls.append(len(logs)) or real(plan, logs, bias))
    chunked = learn(Oracle(model, Modular()), d=4, heads=3, seed=2, bias=bias)
    assert chunked.certified and chunked.heads == model.canonical_heads()
    assert _json(chunked) == _json(whole)
    assert 1 in calls                      # the heads did go one at a time


def test_the_analysis_leaves_no_reference_cycles():
    """The analysis holds no field elements in reference cycles, so its poles and labels are
    freed by reference counting when it returns: label_heads' recursive walk held every
    configuration's poles in a cycle until the collector's next run, about 0.1 s at d = 32,
    H = 16 right after the analysis (docs: explanation/performance.md).  In a fresh
    interpreter (other tests' state aside)."""
    import subprocess
    import sys
    code = ("import gc, random\n"
            "from exactlearn import Oracle\n"
            "from exactlearn.fields import Modular\n"
            "from exactlearn.generate import random_model\n"
            "from exactlearn.pipeline.analysis import analyse, ask_plan\n"
            "from exactlearn.pipeline.plan import draw_paper_plan\n"
            "model, K = random_model(4, 2, seed=3, den=1), Modular()\n"
            "plan = draw_paper_plan(4, 2, random.Random(1), 30)\n"
            "y0, values = ask_plan(plan, Oracle(model, K))\n"
            "gc.collect(); gc.disable(); gc.set_debug(gc.DEBUG_SAVEALL)\n"
            "heads = analyse(plan, y0, values, K, None)\n"
            "gc.collect()\n"
            "print(heads == model.canonical_heads(),\n"
            "      sum(type(o).__name__ == 'fmpz_mod' for o in gc.garbage))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "0"]


@pytest.mark.parametrize("seed", range(3))
def test_field_logs_equal_log_by_log(seed):
    """Modular.logs (the small logs at once, algebra.dlog_many) gives K.log's logs and leaves
    the same remembered powers -- small and tall logs mixed, on the default prime and on a
    small one whose logs are mostly taller than the early path -- and raises as K.log
    raises (a zero in the list); a field whose log differs keeps its own."""
    from exactlearn.errors import ExactLearnError
    from exactlearn.fields.modular import ConfirmationModular, ResidueModular
    rng = random.Random(400 + seed)
    for p in (None, 97):
        make = (lambda: ResidueModular()) if p is None else (lambda: ResidueModular(p=p))
        K1, K2 = make(), make()
        half = (K1.p - 1) // 2
        ns = [rng.randrange(-half + 1, half + 1) if rng.random() < 0.2
              else rng.choice([-1, 1]) * rng.randrange(min(2 ** 70, half)) for _ in range(300)]
        els = [K1.power(n) for n in ns]
        K1._exp_cache.clear()
        assert K2.logs(els) == [K1.log(e) for e in els] == [mpq_(n) for n in ns]
        assert K2._exp_cache == K1._exp_cache
        with pytest.raises(ExactLearnError) as want:
            K1.log(K1.zero)
        with pytest.raises(type(want.value), match="0 is not an exponential"):
            K2.logs(els[:3] + [K2.zero] + els[3:])
    C = ConfirmationModular(2 ** 61 - 1, 3)
    with pytest.raises(ExactLearnError):
        C.logs([C(2), C(3)])


def mpq_(n):
    from gmpy2 import mpq
    return mpq(n, 1)
