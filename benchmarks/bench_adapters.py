"""The adapters (exactlearn.adapters; docs/howto/torch-jax-layer.md): speed and end-to-end runs.

``--speed``: the queries of one stable-plan run on a float64 d x H layer (recorded once), replayed
through the torch adapter one query at a time with torch's default threads (``threads=None``)
and with ``threads=1`` (the default), then as ``box.batch`` (grouped by length); and through the
flax adapter one at a time and batched.  Prints queries per second.

``--learn``: learns a bias-free float64 torch MultiheadAttention and a flax
MultiHeadDotProductAttention per seed through the adapters with a readout, and prints whether
each run certified, its error against ``true_heads``, the bound, the queries and the wall time.

    python benchmarks/bench_adapters.py --speed --d 4 --heads 2
    python benchmarks/bench_adapters.py --learn --d 4 --heads 2 --seeds 3
    python benchmarks/bench_adapters.py --learn --dtype float32 --noise auto --d 6 --heads 3

``--dtype float32`` builds the layers in float32 and learns them with ``tokens="float32"``;
``--noise auto`` measures eta from the box (``learn(noise="auto")``) instead of the float64
default ``NOISE``; ``--only torch`` (or ``flax``) runs one adapter.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from exactlearn import learn
from exactlearn.strategies.real.learn import max_parameter_error

NOISE = dict(noise=2e-12, noise_rel=2e-13)   # torch's float64 MHA errs up to ~3e-12 (issue 22)


def torch_layer(d, H, seed, bias=False, dtype="float64"):
    import torch
    torch.manual_seed(seed)
    return torch.nn.MultiheadAttention(d, H, bias=bias, batch_first=True,
                                       dtype=getattr(torch, dtype)).eval()


def flax_layer(d, H, seed, bias=False, dtype="float64"):
    import jax
    jax.config.update("jax_enable_x64", True)
    import flax.linen as nn
    import jax.numpy as jnp
    dt = getattr(jnp, dtype)
    layer = nn.MultiHeadDotProductAttention(num_heads=H, param_dtype=dt, dtype=dt, use_bias=bias)
    return layer, layer.init(jax.random.key(seed), jnp.zeros((1, 2, d), dt))


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
    d, H = args.d, args.heads
    r = np.linspace(-1.0, 1.5, d)
    noise = {"noise": "auto"} if args.noise == "auto" else NOISE
    for seed in range(args.seeds):
        runs = []
        if args.only in (None, "torch"):
            from exactlearn.adapters import torch as ta
            mha = torch_layer(d, H, seed, dtype=args.dtype)
            runs.append(("torch", ta.black_box(mha, readout=r), ta.true_heads(mha, readout=r)))
        if args.only in (None, "flax"):
            from exactlearn.adapters import flax as fa
            layer, params = flax_layer(d, H, seed, dtype=args.dtype)
            runs.append(("flax", fa.black_box(layer, params, readout=r),
                         fa.true_heads(layer, params, readout=r)))
        for name, box, truth in runs:
            t0 = time.perf_counter()
            res = learn(box, d=d, heads=H, field="real", tokens=args.dtype, seed=seed, retries=2,
                        **noise)
            wall = time.perf_counter() - t0
            if res.certified:
                err, _ = max_parameter_error(res.heads, truth.heads(), res.field)
                print(f"{name:5s} {args.dtype} d={d} H={H} seed {seed}: certified, error "
                      f"{float(err):.1e}, bound {float(res.error_bound):.1e}, covers "
                      f"{err <= res.error_bound}, {res.queries} queries, {wall:.1f} s", flush=True)
            else:
                print(f"{name:5s} {args.dtype} d={d} H={H} seed {seed}: FAILED "
                      f"({res.error[:300]}), {res.queries} queries, {wall:.1f} s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--learn", action="store_true")
    ap.add_argument("--d", type=int, default=4)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sample", type=int, default=300, help="queries replayed one at a time")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--noise", default=None, choices=["auto"],
                    help="auto: eta measured from the box (default: the float64 NOISE)")
    ap.add_argument("--only", default=None, choices=["torch", "flax"])
    args = ap.parse_args()
    if args.speed:
        speed(args)
    if args.learn:
        learn_runs(args)


if __name__ == "__main__":
    main()
