"""The adapters (exactlearn.adapters; docs/howto/torch-jax-layer.md): speed and end-to-end runs.

``--speed``: the queries of one stable-plan run on a float64 d x H layer (recorded once), replayed
through the torch adapter one query at a time with torch's default threads (``threads=None``)
and with ``threads=1`` (the default), then as ``box.batch`` (grouped by length); and through the
flax adapter one at a time and batched.  Prints queries per second.

``--learn``: learns a bias-free float64 torch MultiheadAttention and a flax
MultiHeadDotProductAttention per seed through the adapters with a readout, and prints whether
each run certified, its error against ``true_heads``, the bound, the queries and the wall time.

``--bias`` (with ``--learn``): the layers have all four biases (query, key, value, output),
drawn N(0, ``--bias-std``^2) over the default-initialised weights, and are learned with
``learn(..., bias=True)`` (docs/explanation/biases.md); ``--cases 4x2 8x3`` runs several
(d, H), ``--only torch`` one adapter.  A summary line per case and adapter gives certified /
total, the largest relative error (over the largest |entry| of W, v, u and c), the largest
error / bound, the mean queries / the paper's count and the mean and largest wall time.

    python benchmarks/bench_adapters.py --speed --d 4 --heads 2
    python benchmarks/bench_adapters.py --learn --d 4 --heads 2 --seeds 3
    python benchmarks/bench_adapters.py --learn --bias --only torch --cases 4x2 8x3 12x4 --seeds 5
    python benchmarks/bench_adapters.py --learn --dtype float32 --noise auto --d 6 --heads 3

``--dtype float32`` builds the layers in float32 and learns them with ``tokens="float32"``;
``--noise auto`` measures eta from the box (``learn(noise="auto")``) instead of the float64
default ``NOISE``; ``--only torch`` (or ``flax``) runs one adapter.

``--minilm LAYER``: one all-MiniLM-L6-v2 attention layer (the ``minilm`` extra) with its real
weights and its four biases, restricted to a d' = ``--dprime`` subspace (the random P of
``exactlearn.demo.minilm.random_subspace``, seed 0: ``q = W_Q P x + b_Q`` and likewise k, v;
``out = W_O ctx + b_O``; readout its unit r), built as torch ``nn.Linear`` maps in
``--dtype`` and learned through ``black_box_linear`` with ``bias=True`` and ``--noise``
(a float or ``auto``).  Prints the result against ``true_heads_linear``.

    python benchmarks/bench_adapters.py --minilm 0 --dprime 8 --noise auto

``--cause`` (with ``--minilm``): instead of learning, measures whether any family of the stable
plan can resolve the layer's heads at the box's precision.  eta comes from ``--noise`` (a float
with ``--noise-rel``, or ``auto``: ``estimate_noise`` on the very box, its queries printed).
For ``--families`` random orthonormal pairs (x, e) of the d' subspace, each scaled so that the
rms of the heads' ``log rho_h = e . (W_h x + u_h)`` is 0.75, 1.5, 3 (the probe's target), 6
or 12, it computes from ``true_heads_linear`` (not from the learner) the family's noise-free
values at the plan's nodes (``ratio_nodes(H)``), the Jacobian of
``f(t) = A + sum_h c_h / (1 + t rho_h)`` in (A, c, log rho), and in 60-digit mpmath the
first-order standard deviations of every ``log rho_h`` with each sample weighted by
``1 / (eta + eta_rel |y|)``.  It prints, per scale, the median and the smallest (best family)
of ``max_h sd(log rho_h) / (smallest gap between two heads' log rho)``: a family resolves
its heads only when that is well below 1.

    python benchmarks/bench_adapters.py --minilm 0 --dprime 8 --dtype float32 --noise auto --cause
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from exactlearn import learn
from exactlearn.strategies.real.learn import max_parameter_error

NOISE = dict(noise=2e-12, noise_rel=2e-13)   # torch's float64 MHA errs up to ~3e-12 (issue 22)


def torch_layer(d, H, seed, bias=False, bias_std=0.5, dtype="float64"):
    import torch
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(d, H, bias=bias, batch_first=True,
                                    dtype=getattr(torch, dtype)).eval()
    if bias:                            # torch initialises the biases to 0: draw them
        with torch.no_grad():
            m.in_proj_bias.normal_(0.0, bias_std)
            m.out_proj.bias.normal_(0.0, bias_std)
    return m


def flax_layer(d, H, seed, bias=False, bias_std=0.5, dtype="float64"):
    import jax
    jax.config.update("jax_enable_x64", True)
    import flax.linen as nn
    import jax.numpy as jnp
    dt = getattr(jnp, dtype)
    layer = nn.MultiHeadDotProductAttention(num_heads=H, param_dtype=dt, dtype=dt, use_bias=bias)
    params = layer.init(jax.random.key(seed), jnp.zeros((1, 2, d), dt))
    if bias:                            # flax initialises the biases to 0: draw them
        rng = np.random.default_rng(seed)
        params = jax.tree_util.tree_map_with_path(
            lambda path, a: (jnp.asarray(rng.normal(0.0, bias_std, a.shape), dt)
                             if "bias" in str(path[-1]) else a), params)
    return layer, params


def record_queries(d, H, seed):
    from exactlearn.adapters import torch as ta
    box = ta.black_box(torch_layer(d, H, seed), readout=np.ones(d))
    seen = []

    class Recording:
        def __call__(self, X):
            seen.append(X)
            return box(X)

    learn(Recording(), d=d, heads=H, field="real", tokens="float64", seed=seed, retries=2, **NOISE)
    return seen


def rate(fn, queries, batch=False):
    t0 = time.perf_counter()
    if batch:
        fn.batch(queries)
    else:
        for X in queries:
            fn(X)
    return len(queries) / (time.perf_counter() - t0)


def speed(args):
    from exactlearn.adapters import flax as fa
    from exactlearn.adapters import torch as ta
    qs = record_queries(args.d, args.heads, 0)
    lengths = [len(X) for X in qs]
    print(f"{len(qs)} queries of one stable-plan run, d={args.d}, H={args.heads}, "
          f"lengths {min(lengths)}..{max(lengths)}")
    mha = torch_layer(args.d, args.heads, 0)
    r = np.ones(args.d)
    some = qs[:args.sample]
    print(f"torch threads=None (default pool), one call per query: "
          f"{rate(ta.black_box(mha, readout=r, threads=None), some):9.0f} queries/s ({len(some)} queries)")
    print(f"torch threads=1, one call per query:                  "
          f"{rate(ta.black_box(mha, readout=r), some):9.0f} queries/s ({len(some)} queries)")
    print(f"torch threads=None, batch:                            "
          f"{rate(ta.black_box(mha, readout=r, threads=None), qs, True):9.0f} queries/s")
    print(f"torch threads=1, batch:                               "
          f"{rate(ta.black_box(mha, readout=r), qs, True):9.0f} queries/s")
    layer, params = flax_layer(args.d, args.heads, 0)
    fbox = fa.black_box(layer, params, readout=r)
    fbox.batch(qs)                                       # compile once per shape
    rate(fbox, some)
    print(f"flax (jitted), one call per query, compiled:          {rate(fbox, some):9.0f} queries/s")
    print(f"flax (jitted), batch, compiled:                       {rate(fbox, qs, True):9.0f} queries/s")


def learn_runs(args):
    from exactlearn.pipeline.plan import paper_count
    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases] if args.cases else \
        [(args.d, args.heads)]
    for d, H in cases:
        r = np.linspace(-1.0, 1.5, d)
        stats = {}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for name, box, truth in _boxes(args, d, H, seed, r):
                t0 = time.perf_counter()
                noise = {"noise": "auto"} if args.noise == "auto" else NOISE
                res = learn(box, d=d, heads=H, field="real", tokens=args.dtype, seed=seed,
                            retries=2, **({"bias": True} if args.bias else {}), **noise)
                wall = time.perf_counter() - t0
                st = stats.setdefault(name, {"n": 0, "cert": 0, "rel": 0.0, "ratio": 0.0,
                                             "q": [], "t": []})
                st["n"] += 1
                st["q"].append(res.queries / paper_count(d, H))
                st["t"].append(wall)
                if res.certified:
                    heads = truth.heads()
                    err, _ = max_parameter_error(res.heads, heads, res.field)
                    size = max([abs(float(x)) for h in heads for x in
                                [*(a for row in h.W for a in row), *h.v, *h.u]]
                               + [abs(float(getattr(heads, "constant", 0)))])
                    st["cert"] += 1
                    st["rel"] = max(st["rel"], float(err) / size)
                    st["ratio"] = max(st["ratio"], float(err) / float(res.error_bound))
                    print(f"{name:5s} d={d} H={H} seed {seed}: certified, error {float(err):.1e} "
                          f"(relative {float(err) / size:.1e}), bound {float(res.error_bound):.1e}, "
                          f"covers {err <= res.error_bound}, {res.queries} queries, {wall:.1f} s",
                          flush=True)
                else:
                    print(f"{name:5s} d={d} H={H} seed {seed}: FAILED ({res.error}), "
                          f"{res.queries} queries, {wall:.1f} s", flush=True)
        for name, st in stats.items():
            print(f"SUMMARY {name} d={d} H={H}{' bias' if args.bias else ''}: certified "
                  f"{st['cert']}/{st['n']}, max relative error {st['rel']:.2e}, max error/bound "
                  f"{st['ratio']:.2e}, queries / paper count {np.mean(st['q']):.2f}, "
                  f"wall mean {np.mean(st['t']):.1f} s max {np.max(st['t']):.1f} s", flush=True)


def _boxes(args, d, H, seed, r):
    """(name, box, true heads) of the adapters asked for (``--only``)."""
    out = []
    if args.only in (None, "torch"):
        from exactlearn.adapters import torch as ta
        mha = torch_layer(d, H, seed, args.bias, args.bias_std, args.dtype)
        out.append(("torch", ta.black_box(mha, readout=r), ta.true_heads(mha, readout=r)))
    if args.only in (None, "flax"):
        from exactlearn.adapters import flax as fa
        layer, params = flax_layer(d, H, seed, args.bias, args.bias_std, args.dtype)
        out.append(("flax", fa.black_box(layer, params, readout=r),
                    fa.true_heads(layer, params, readout=r)))
    return out


def resolvability(truth, eta, eta_rel, families, seed=0):
    """Per scale, the median and best ``max_h sd(log rho_h) / smallest gap`` over random
    families (the ``--cause`` measurement; values from ``truth``, not from the learner)."""
    import mpmath
    from exactlearn.strategies.real.ratio import ratio_nodes
    W, u, v, c = truth.W, truth.u, truth.v, float(truth.c)
    H, d = W.shape[0], W.shape[1]
    ts = [k / m for k, m in ratio_nodes(H) if m != 0]
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(families):
        Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        pairs.append((Q[:, 0], Q[:, 1]))
    out = []
    with mpmath.workdps(60):
        for rms in (0.75, 1.5, 3.0, 6.0, 12.0):
            ratios = []
            for x0, e0 in pairs:
                s0 = np.array([e0 @ (W[h] @ x0) for h in range(H)])
                s = np.sqrt(rms / np.sqrt(np.mean(s0 ** 2)))
                x, e = s * x0, s * e0
                logs = np.array([e @ (W[h] @ x + u[h]) for h in range(H)])
                cs = np.array([-(v[h] @ e) for h in range(H)])        # v.x - v.a, a = x + e
                A = c + sum(v[h] @ (x + e) for h in range(H))
                rho = np.exp(logs)
                rows = []
                for t in ts:
                    y = A + np.sum(cs / (1 + t * rho))
                    w = mpmath.mpf(1 / (eta + eta_rel * abs(y)))
                    rows.append([w * mpmath.mpf(a) for a in
                                 [1.0, *(1 / (1 + t * rho)), *(-cs * t * rho / (1 + t * rho) ** 2)]])
                J = mpmath.matrix(rows)
                C = mpmath.inverse(J.T * J)
                sd = max(float(mpmath.sqrt(C[1 + H + h, 1 + H + h])) for h in range(H))
                ratios.append(sd / np.min(np.diff(np.sort(logs))))
            out.append((rms, float(np.median(ratios)), float(np.min(ratios))))
    return out


def minilm(args):
    import torch
    from exactlearn.adapters import torch as ta
    from exactlearn.demo.minilm import HIDDEN, NHEADS, P_DIGITS, random_subspace, weights_path
    from safetensors.numpy import load_file
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    t = load_file(str(weights_path()))
    pre = f"encoder.layer.{args.minilm}.attention."
    P, r = random_subspace(HIDDEN, args.dprime, 0)
    P = np.array(P, dtype=float) / 10 ** P_DIGITS
    r = np.array(r, dtype=float) / 10 ** P_DIGITS
    maps = []
    for name, sub in (("self.query", True), ("self.key", True), ("self.value", True),
                      ("output.dense", False)):
        w = t[pre + name + ".weight"].astype(np.float64)
        b = t[pre + name + ".bias"].astype(np.float64)
        lin = torch.nn.Linear(args.dprime if sub else HIDDEN, HIDDEN, dtype=dtype)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w @ P if sub else w))
            lin.bias.copy_(torch.from_numpy(b))
        maps.append(lin)
    box = ta.black_box_linear(*maps, NHEADS, readout=r)
    box.chunk = args.chunk              # queries per forward: 1025-token queries at width 384
    truth = ta.true_heads_linear(*maps, NHEADS, readout=r)
    noise = dict(noise="auto") if args.noise == "auto" else dict(noise=float(args.noise),
                                                                  noise_rel=float(args.noise_rel))
    if args.cause:
        if args.noise == "auto":
            from exactlearn import estimate_noise
            est = estimate_noise(box, d=args.dprime, heads=NHEADS, tokens=args.dtype, seed=0)
            eta, eta_rel = float(est.noise), float(est.noise_rel)
            print(f"eta measured by estimate_noise: {eta:.3g} + {eta_rel:.3g} |y| "
                  f"({est.queries} queries)")
        else:
            eta, eta_rel = float(args.noise), float(args.noise_rel)
        print(f"MiniLM layer {args.minilm}, d'={args.dprime}, {NHEADS} heads, {args.dtype}, all four "
              f"biases, eta = {eta:.3g} + {eta_rel:.3g} |y|: max_h sd(log rho_h) / smallest gap "
              f"over {args.families} random families")
        for rms, med, best in resolvability(truth, eta, eta_rel, args.families):
            print(f"  rms log rho {rms:5.2f}: median {med:.3g}, best family {best:.3g}")
        return
    t0 = time.perf_counter()
    res = learn(box, d=args.dprime, heads=NHEADS, field="real", tokens=args.dtype, bias=True,
                seed=0, retries=args.retries, **noise)
    wall = time.perf_counter() - t0
    print(f"MiniLM layer {args.minilm}, d'={args.dprime}, {NHEADS} heads, {args.dtype}, all four "
          f"biases: {res.status}, {res.queries} queries (paper count "
          f"{4 * NHEADS * args.dprime ** 2 - 2 * NHEADS + 1}), longest {res.max_length}, "
          f"{wall:.0f} s, attempts {res.attempts}, noise_estimated {res.noise_estimated}")
    if res.certified:
        heads = truth.heads()
        err, _ = max_parameter_error(res.heads, heads, res.field)
        size = max([abs(float(x)) for h in heads for x in
                    [*(a for row in h.W for a in row), *h.v, *h.u]] + [abs(float(heads.constant))])
        print(f"error {float(err):.2e} (relative {float(err) / size:.2e}), bound "
              f"{float(res.error_bound):.2e}, covers {err <= res.error_bound}, start "
              f"{res.real_detail.get('start')}, estimate {res.real_detail.get('estimate')}")
    else:
        print(f"failure: {res.error}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--learn", action="store_true")
    ap.add_argument("--d", type=int, default=4)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="--learn: the first seed")
    ap.add_argument("--sample", type=int, default=300, help="queries replayed one at a time")
    ap.add_argument("--bias", action="store_true", help="--learn: layers with all four biases")
    ap.add_argument("--bias-std", type=float, default=0.5, help="the biases' standard deviation")
    ap.add_argument("--cases", nargs="*", default=None, help="--learn: d x H cases, e.g. 4x2 8x3")
    ap.add_argument("--only", choices=("torch", "flax"), default=None)
    ap.add_argument("--minilm", type=int, default=None, metavar="LAYER")
    ap.add_argument("--dprime", type=int, default=8)
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--noise", default="2e-12", help="--minilm: eta (a float) or auto; --learn: "
                    "auto measures eta from the box (else the float64 NOISE)")
    ap.add_argument("--noise-rel", default="2e-13")
    ap.add_argument("--retries", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=64, help="--minilm: queries per forward (memory)")
    ap.add_argument("--cause", action="store_true", help="--minilm: measure whether the plan's "
                    "families can resolve the heads at the box's eta, instead of learning")
    ap.add_argument("--families", type=int, default=20, help="--cause: random families")
    args = ap.parse_args()
    if args.speed:
        speed(args)
    if args.learn:
        learn_runs(args)
    if args.minilm is not None:
        minilm(args)


if __name__ == "__main__":
    main()
