"""Issue 22's acceptance checks rehearsed as a third party would, from the docs only
(docs/howto/torch-jax-layer.md, docs/explanation/biases.md).

By default it builds layers as they ship -- ``torch.nn.MultiheadAttention(d, H,
bias=True, batch_first=True)`` with torch's default init, a BERT-style self-attention of four
``nn.Linear`` maps (query, key, value, output) with default init, and
``flax.linen.MultiHeadDotProductAttention`` with flax's default init (``--kinds nnx``: a
``flax.nnx.MultiHeadAttention`` the same way) -- and gives every bias
random values N(0, s^2), s = 0.1, 0.5, 1.0 for seeds 0, 1, 2 (mod 3) (torch and flax start them
at 0).  It wraps each with its adapter, learns it with ``learn(box, d=d, heads=H,
field="real", tokens=dtype, noise="auto", bias=True, seed=seed, retries=2)`` read out by a
random readout r ~ N(0, 1)^d, seeded 1000 + seed (``--outputs scalar``) or as the whole output vector (``vector``:
``readout=None``, ``outputs=d``), and compares the result with parameters computed here from the
weights (W_h = K_h^T Q_h/sqrt(d_h), u_h = K_h^T b_q,h/sqrt(d_h), v_h = O_h V_h, c = O b_v + b_o;
times r for a scalar readout), independently of exactlearn; ``true_heads_dev`` is how far the
adapter's ``true_heads`` is from them.  Heads are paired by the assignment minimising the
largest entry difference.  ``rel`` is the largest |entry error| over W, u, v and c divided by
their largest |entry|; ``covers`` says whether the error is within ``error_bound``; vector runs
add ``readout_bound`` ("rigorous" or "first order") and ``fitted_answers``.  One JSON
line per run (``--json FILE`` appends them).

    python benchmarks/rehearse_layers.py --kinds torch bert flax --dtype float64 \
        --outputs scalar vector --cases 8x4 16x4 --seeds 0 1 2 --json runs.jsonl
    python benchmarks/rehearse_layers.py --dtype float32 --cases 4x2 8x4 --seeds 0

``--exact``: biased models over the exact fields, through the CLI as a user runs it
(``exactlearn random-model --bias [--merge | --cancel] [--outputs 2]``, then ``exactlearn learn
--bias --json`` over rational and modular): checks the certified heads and constant against the
canonical form computed here from the model file (equal (W, u) merged, v summed, zero v
dropped), the count 4Hd^2 + 4Hd - 2H + 1 (per prime over the modular field) and the longest
query 2H + 1.  ``--exe`` is the ``exactlearn`` command (default: the one on PATH).

    python benchmarks/rehearse_layers.py --exact --seeds 0 1 2 3

``--table FILE ...``: the markdown table of runs saved with ``--json`` (one row per layer,
dtype, output kind and d x H: certified / runs, the largest relative error and bound, whether
every bound covered, mean queries, largest wall time, mean load average), then every run that
failed or whose bound did not cover.

    python benchmarks/rehearse_layers.py --table runs.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import tempfile
import time
from fractions import Fraction

import numpy as np
from scipy.optimize import linear_sum_assignment


def bias_std(seed):
    return (0.1, 0.5, 1.0)[seed % 3]


# --- the layers, and their parameters computed here from the weights ------------------------------

def torch_mha(d, H, seed, dtype):
    import torch
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(d, H, bias=True, batch_first=True,
                                    dtype=getattr(torch, dtype)).eval()
    with torch.no_grad():
        m.in_proj_bias.normal_(0.0, bias_std(seed))
        m.out_proj.bias.normal_(0.0, bias_std(seed))
    g = lambda t: t.detach().double().numpy()            # noqa: E731
    Wq, Wk, Wv = np.split(g(m.in_proj_weight), 3)
    bq, bk, bv = np.split(g(m.in_proj_bias), 3)
    return m, dict(Wq=Wq, Wk=Wk, Wv=Wv, bq=bq, bv=bv, Wo=g(m.out_proj.weight), bo=g(m.out_proj.bias))


def torch_bert(d, H, seed, dtype):
    import torch

    class BertStyleAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = H
            self.query, self.key, self.value, self.dense = (
                torch.nn.Linear(d, d, dtype=getattr(torch, dtype)) for _ in range(4))

    torch.manual_seed(seed)
    att = BertStyleAttention().eval()
    with torch.no_grad():
        for lin in (att.query, att.key, att.value, att.dense):
            lin.bias.normal_(0.0, bias_std(seed))
    g = lambda t: t.detach().double().numpy()            # noqa: E731
    return att, dict(Wq=g(att.query.weight), Wk=g(att.key.weight), Wv=g(att.value.weight),
                     bq=g(att.query.bias), bv=g(att.value.bias), Wo=g(att.dense.weight),
                     bo=g(att.dense.bias))


def flax_mha(d, H, seed, dtype):
    import jax
    jax.config.update("jax_enable_x64", True)
    import flax.linen as nn
    import jax.numpy as jnp
    dt = getattr(jnp, dtype)
    layer = nn.MultiHeadDotProductAttention(num_heads=H, param_dtype=dt, dtype=dt)
    params = layer.init(jax.random.key(seed), jnp.zeros((1, 2, d), dt))
    rng = np.random.default_rng(seed)
    params = jax.tree_util.tree_map_with_path(
        lambda path, a: jnp.asarray(rng.normal(0.0, bias_std(seed), a.shape), dt)
        if "bias" in str(path[-1]) else a, params)
    p = params["params"]
    n = lambda a: np.asarray(a, dtype=np.float64)        # noqa: E731
    # kernels: query/key/value (d, H, dh), out (H, dh, m); q = x @ kernel + bias
    Wq = n(p["query"]["kernel"]).reshape(d, -1).T        # (H*dh, d), rows head-major
    Wk = n(p["key"]["kernel"]).reshape(d, -1).T
    Wv = n(p["value"]["kernel"]).reshape(d, -1).T
    Wo = n(p["out"]["kernel"]).reshape(-1, d).T          # (m, H*dh)
    return (layer, params), dict(Wq=Wq, Wk=Wk, Wv=Wv, bq=n(p["query"]["bias"]).reshape(-1),
                                 bv=n(p["value"]["bias"]).reshape(-1), Wo=Wo,
                                 bo=n(p["out"]["bias"]))


def nnx_mha(d, H, seed, dtype):
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from flax import nnx
    dt = getattr(jnp, dtype)
    layer = nnx.MultiHeadAttention(num_heads=H, in_features=d, param_dtype=dt, dtype=dt,
                                   decode=False, rngs=nnx.Rngs(seed))
    rng = np.random.default_rng(seed)
    for lin in (layer.query, layer.key, layer.value, layer.out):     # flax starts them at 0
        lin.bias[...] = jnp.asarray(rng.normal(0.0, bias_std(seed), lin.bias[...].shape), dt)
    n = lambda a: np.asarray(a[...], dtype=np.float64)  # noqa: E731
    return layer, dict(Wq=n(layer.query.kernel).reshape(d, -1).T,
                       Wk=n(layer.key.kernel).reshape(d, -1).T,
                       Wv=n(layer.value.kernel).reshape(d, -1).T,
                       bq=n(layer.query.bias).reshape(-1), bv=n(layer.value.bias).reshape(-1),
                       Wo=n(layer.out.kernel).reshape(-1, d).T, bo=n(layer.out.bias))


def my_params(w, H, r):
    """(W (H,d,d), u (H,d), v (H,m,d) or (H,d), c) from q = Wq x + bq etc., as the issue states."""
    d = w["Wq"].shape[1]
    dh = w["Wq"].shape[0] // H
    s = 1.0 / math.sqrt(dh)
    W, u, v = [], [], []
    for h in range(H):
        blk = slice(h * dh, (h + 1) * dh)
        Q, K, V, O = w["Wq"][blk], w["Wk"][blk], w["Wv"][blk], w["Wo"][:, blk]
        W.append(s * K.T @ Q)
        u.append(s * K.T @ w["bq"][blk])
        v.append(O @ V)
    c = w["Wo"] @ w["bv"] + w["bo"]
    v = np.array(v)
    if r is not None:
        v, c = v.transpose(0, 2, 1) @ r, np.array(r @ c)
    assert np.array(W).shape == (H, d, d)
    return np.array(W), np.array(u), v, c


# --- comparison -----------------------------------------------------------------------------------

def learned_arrays(res):
    W = np.array([[[float(x) for x in row] for row in h.W] for h in res.heads])
    u = np.array([[float(x) for x in h.u] for h in res.heads])
    v = np.array([np.array(h.v, dtype=object).astype(float) for h in res.heads])
    c = res.constant
    c = np.array([float(x) for x in c]) if isinstance(c, (tuple, list)) else np.array(float(c))
    return W, u, v, c


def compare(res, truth):
    W, u, v, c = learned_arrays(res)
    tW, tu, tv, tc = truth
    if W.shape != tW.shape or v.shape != tv.shape:
        return dict(shape=f"learned W{W.shape} v{v.shape}, true W{tW.shape} v{tv.shape}")
    cost = np.array([[max(np.abs(W[j] - tW[i]).max(), np.abs(u[j] - tu[i]).max(),
                          np.abs(v[j] - tv[i]).max()) for j in range(len(W))] for i in range(len(tW))])
    rows, cols = linear_sum_assignment(cost)
    err = max(cost[rows, cols].max(), float(np.abs(c - tc).max()))
    size = max(np.abs(tW).max(), np.abs(tu).max(), np.abs(tv).max(), float(np.abs(tc).max()))
    return dict(err=float(err), rel=float(err / size))


def run_one(kind, dtype, out, d, H, seed, retries):
    from exactlearn import learn
    from exactlearn.adapters import torch as ta
    r = None if out == "vector" else np.random.default_rng(1000 + seed).normal(size=d)
    if kind == "torch":
        m, w = torch_mha(d, H, seed, dtype)
        box, th = ta.black_box(m, readout=r), ta.true_heads(m, readout=r)
    elif kind == "bert":
        m, w = torch_bert(d, H, seed, dtype)
        lins = (m.query, m.key, m.value, m.dense)
        box = ta.black_box_linear(*lins, m.heads, readout=r)
        th = ta.true_heads_linear(*lins, m.heads, readout=r)
    elif kind == "nnx":
        from exactlearn.adapters import flax as fa
        layer, w = nnx_mha(d, H, seed, dtype)
        box, th = fa.black_box(layer, readout=r), fa.true_heads(layer, readout=r)
    else:
        from exactlearn.adapters import flax as fa
        (layer, params), w = flax_mha(d, H, seed, dtype)
        box, th = fa.black_box(layer, params, readout=r), fa.true_heads(layer, params, readout=r)
    truth = my_params(w, H, r)
    th_dev = max(float(np.abs(np.asarray(a) - b).max()) for a, b in
                 zip((th.W, th.u, th.v, th.c), truth))
    kw = {} if r is not None else {"outputs": d}
    t0 = time.perf_counter()
    res = learn(box, d=d, heads=H, field="real", tokens=dtype, noise="auto", bias=True, seed=seed,
                retries=retries, **kw)
    wall = time.perf_counter() - t0
    row = dict(kind=kind, dtype=dtype, out=out, d=d, H=H, seed=seed, status=res.status,
               queries=res.queries, noise_queries=res.noise_queries, max_length=res.max_length,
               wall=round(wall, 1), learner_s=round(res.learner_seconds, 1),
               box_s=round(res.oracle_seconds, 1), load=os.getloadavg()[0], true_heads_dev=th_dev)
    if res.certified:
        cmp = compare(res, truth)
        row.update(cmp, bound=float(res.error_bound))
        row["covers"] = "err" in cmp and cmp["err"] <= row["bound"]
        outs = (res.real_detail or {}).get("outputs")
        if outs:                    # the vector readouts' bound: "rigorous" or "first order"
            row["readout_bound"] = outs["readout_bound"].split(" given")[0].split(":")[0]
            row["fitted_answers"] = outs["fitted_answers"]
    else:
        row["error"] = res.error
    return row


# --- exact fields, through the CLI ----------------------------------------------------------------

def canon(model):
    """The canonical form of a model file's heads: equal (W, u) merged, v summed, zero v dropped."""
    def exact(v):                       # a vector, or an m x d matrix (vector outputs)
        return tuple(exact(a) for a in v) if isinstance(v, (list, tuple)) else Fraction(v)

    def add(a, b):
        return tuple(add(x, y) for x, y in zip(a, b)) if isinstance(a, tuple) else a + b

    def nonzero(v):
        return any(nonzero(a) for a in v) if isinstance(v, tuple) else v != 0

    groups = {}
    for h in model["heads"]:
        key = (exact(h["W"]), exact(h.get("u", ["0"] * len(h["W"]))))
        v = exact(h["v"])
        groups[key] = add(groups[key], v) if key in groups else v
    return sorted((W, u, v) for (W, u), v in groups.items() if nonzero(v))


def run_exact(exe, field, d, H, seed, extra, out):
    """One `random-model --bias` file learned by `exactlearn learn --bias --json`, checked."""
    f = os.path.join(tempfile.gettempdir(), f"rehearse_{d}_{H}_{seed}.json")
    subprocess.run([exe, "random-model", "--d", str(d), "--heads", str(H), "--bias",
                    "--seed", str(seed), "--out", f, *extra, *out], check=True)
    with open(f) as fh:
        model = json.load(fh)
    p = subprocess.run([exe, "learn", "--model", f, "--heads", str(H), "--bias", "--field", field,
                        "--json", "--seed", str(seed), "--quiet"], capture_output=True, text=True)
    if p.returncode not in (0, 1) or not p.stdout.strip():
        return dict(field=field, d=d, H=H, seed=seed, rc=p.returncode, stderr=p.stderr[-500:])
    j = json.loads(p.stdout)
    got = [dict(W=h["W"], v=h["v"], u=h["u"]) for h in j["heads"]]
    ok = j["status"] == "certified" and canon(dict(heads=got)) == canon(model) and \
        (Fraction(j["constant"]) == Fraction(model.get("constant", "0")) if not out else
         [Fraction(c) for c in j["constant"]] == [Fraction(c) for c in model["constant"]])
    formula = 4 * H * d * d + 4 * H * d - 2 * H + 1
    primes = j["multimodular"]["primes"] if j.get("multimodular") else None
    per = [q["queries"] for q in primes] if primes else [j["queries"]]
    counts = all(q == formula for q in per) and sum(per) == j["queries"] and \
        j["max_length"] == 2 * H + 1
    return dict(field=field, d=d, H=H, seed=seed, extra=" ".join(extra + out),
                status=j["status"], exact=ok, counts=counts, queries=j["queries"],
                formula=formula, primes=len(per), error=j["error"])


def exact_runs(exe, seeds):
    for field, (d, H), seed, extra, out in itertools.product(
            ["rational", "modular"], [(1, 1), (2, 1), (2, 2), (3, 2), (4, 2), (3, 3), (4, 4)],
            seeds, [[], ["--merge"], ["--cancel"]], [[], ["--outputs", "2"]]):
        if H == 1 and extra:
            continue
        print(json.dumps(run_exact(exe, field, d, H, seed, extra, out)), flush=True)


# --- the table of a campaign ----------------------------------------------------------------------

def table(paths):
    """A markdown table of the JSON lines in ``paths``: one row per layer, dtype, output kind and
    d x H; then every run that failed or whose bound did not cover."""
    rows = []
    for path in paths:
        with open(path) as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    groups = {}
    for r in rows:
        groups.setdefault((r["dtype"], r["d"], r["H"], r["kind"], r["out"]), []).append(r)
    print("| layer | dtype | output | d×H | seeds | certified | max rel. error | max bound | "
          "bounds cover | queries (mean) | wall s (max) | load (mean) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (dt, d, H, kind, out), rs in sorted(groups.items()):
        cert = [r for r in rs if r["status"] == "certified"]
        rel = max((r["rel"] for r in cert), default=float("nan"))
        bound = max((r["bound"] for r in cert), default=float("nan"))
        covers = "yes" if all(r["covers"] for r in cert) else "NO"
        print(f"| {kind} | {dt} | {out} | {d}×{H} | {','.join(str(r['seed']) for r in rs)} | "
              f"{len(cert)}/{len(rs)} | {rel:.1e} | {bound:.1e} | {covers} | "
              f"{sum(r['queries'] for r in rs) / len(rs):,.0f} | {max(r['wall'] for r in rs):.0f} | "
              f"{sum(r['load'] for r in rs) / len(rs):.1f} |")
    for r in rows:
        if r["status"] != "certified" or not r.get("covers"):
            print("FAILED OR NOT COVERED:", json.dumps(r))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", nargs="+", default=["torch", "bert", "flax"])
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    ap.add_argument("--outputs", nargs="+", default=["scalar", "vector"])
    ap.add_argument("--cases", nargs="+", default=["8x4"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--json", default=None, help="append one JSON line per run")
    ap.add_argument("--exact", action="store_true", help="biased models over the exact fields (CLI)")
    ap.add_argument("--exe", default="exactlearn", help="--exact: the exactlearn command")
    ap.add_argument("--table", nargs="+", default=None, metavar="JSONL",
                    help="print the markdown table of earlier runs' JSON lines, run nothing")
    a = ap.parse_args()
    if a.table:
        table(a.table)
        return
    if a.exact:
        exact_runs(a.exe, a.seeds)
        return
    for case in a.cases:
        d, H = (int(x) for x in case.split("x"))
        for kind in a.kinds:
            for out in a.outputs:
                for seed in a.seeds:
                    row = run_one(kind, a.dtype, out, d, H, seed, a.retries)
                    print(json.dumps(row), flush=True)
                    if a.json:
                        with open(a.json, "a") as f:
                            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
