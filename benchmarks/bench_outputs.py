"""Vector outputs (``learn(..., outputs=m)``; docs/explanation/biases.md#vector-outputs).

``--exact``: random vector models over the rational and modular fields (and with biases):
whether each is recovered exactly (compared with the model's canonical form), its queries
against the scalar plan's count, and the time against learning output 1 alone as a scalar box.

``--real``: a float64 torch MultiheadAttention without a readout (bias-free), learned with
``outputs=d`` per seed: certified or not, the largest error against ``true_heads``, the bound,
the queries (every answer counted by a hook on the module) and the wall time.

    python benchmarks/bench_outputs.py --exact --d 3 --heads 2 --outputs 4 --seeds 3
    python benchmarks/bench_outputs.py --real --d 8 --heads 2 --seeds 3
"""

from __future__ import annotations

import argparse
import time

from exactlearn import Oracle, learn
from exactlearn.fields import Modular, Rational
from exactlearn.generate import random_model
from exactlearn.pipeline.plan import bias_count, paper_count


def exact(d, H, m, seeds):
    print("field     bias  seed  recovered  queries  plan x runs  vector s  scalar s")
    for name, K in (("rational", Rational), ("modular", Modular)):
        for bias in (False, True):
            for seed in range(seeds):
                model = random_model(d, H, seed=seed, bias=bias, outputs=m)
                t0 = time.perf_counter()
                res = learn(Oracle(model, K()), d=d, heads=H, seed=seed, outputs=m, bias=bias)
                tv = time.perf_counter() - t0
                t0 = time.perf_counter()
                learn(Oracle(model.output(0), K()), d=d, heads=H, seed=seed, bias=bias)
                ts = time.perf_counter() - t0
                count = bias_count(d, H) if bias else paper_count(d, H)
                print(f"{name:9s} {bias!s:5s} {seed:4d}  {res.heads == model.canonical_heads()!s:9s} "
                      f"{res.queries:7d}  {count} x {res.plan_runs}  {tv:8.3f}  {ts:8.3f}")


def real(d, H, seeds, noise, noise_rel):
    import torch
    from exactlearn.adapters import torch as ta
    from exactlearn.strategies.real.learn import max_parameter_error
    print("seed  status     error     bound     queries  answered  seconds")
    for seed in range(seeds):
        torch.manual_seed(seed)
        mha = torch.nn.MultiheadAttention(d, H, bias=False, batch_first=True,
                                          dtype=torch.float64).eval()
        with torch.no_grad():
            for p in mha.parameters():
                p.normal_(0.0, 0.4)
        answered = []
        mha.register_forward_hook(lambda mod, inp, out: answered.append(inp[0].shape[0]))
        t0 = time.perf_counter()
        res = learn(ta.black_box(mha), d=d, heads=H, field="real", tokens="float64", seed=seed,
                    noise=noise, noise_rel=noise_rel, outputs=d)
        dt = time.perf_counter() - t0
        err = bound = float("nan")
        if res.certified:
            e, _ = max_parameter_error(res.heads, ta.true_heads(mha).heads(), res.field)
            err, bound = float(e), float(res.error_bound)
        print(f"{seed:4d}  {res.status:9s} {err:9.2e} {bound:9.2e} {res.queries:8d}  "
              f"{sum(answered):8d}  {dt:7.1f}" + ("" if res.certified else f"  {res.error[:80]}"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--real", action="store_true")
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--outputs", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--noise", type=float, default=2e-12)
    ap.add_argument("--noise-rel", type=float, default=2e-13,
                    help="relative eta (torch's float64 MHA errs up to ~3e-12: issue 22)")
    a = ap.parse_args()
    if a.exact:
        exact(a.d, a.heads, a.outputs, a.seeds)
    if a.real:
        real(a.d, a.heads, a.seeds, a.noise, a.noise_rel)


if __name__ == "__main__":
    main()
