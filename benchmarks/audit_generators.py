"""Audit of the random-model generators: is a model labelled "merged" or "cancel" really so?

    python benchmarks/audit_generators.py          # 300 models per generator and kind
    python benchmarks/audit_generators.py --n 1000

A check of the canonical form compares a model with its canonical form.  When the
generated model is *already canonical* (no two heads share W, no v is 0), the two
sides are the same heads and the check compares a thing with itself.  This script
counts, for every generator the tests and claims use, how often that happens, and
how often the declared structure is missing:

* ``canonical``   the raw model is already canonical (H raw heads, H canonical heads);
* ``no merge``    (merged kinds) no W group holds two heads with nonzero v and a nonzero sum;
* ``no cancel``   (cancel kinds) no W group holds two heads with nonzero v and sum 0,
                  i.e. no group is really dropped;
* ``zero v``      some raw head has v = 0 (a head that vanishes on its own);
* ``count``       (proofs_check kinds) canonical heads other than documented
                  (H, H, H-1, H-2, H-3 by kind; H = 3 merged+cancel: 0);
* ``identity``    (pairs) both sides are the same raw model, head for head.

The classifier below is written here, apart from the generators and from
``exactlearn.model.canonicalize`` (pairwise comparison of W, Fractions), so that
it does not share their mistakes.  It runs on any version of the code: the counts
before and after a change come from the same script.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections import Counter
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))


# -- an independent classifier ------------------------------------------------------------
def _frac(x) -> Fraction:
    return Fraction(int(x.numerator), int(x.denominator))


def groups(model) -> list:
    """Raw heads grouped by equal W (pairwise comparison, first-seen order): [(W, [v, ...])]."""
    out = []
    for h in model.heads:
        W = [[_frac(x) for x in row] for row in h.W]
        v = [_frac(x) for x in h.v]
        for g in out:
            if g[0] == W:
                g[1].append(v)
                break
        else:
            out.append((W, [v]))
    return out


def classify(model) -> dict:
    merges = cancels = 0
    zero = any(not any(v) for h in model.heads for v in [[_frac(x) for x in h.v]])
    for _, vs in groups(model):
        nonzero = [v for v in vs if any(v)]
        if len(nonzero) < 2:
            continue
        total = [sum(col) for col in zip(*nonzero)]
        if any(total):
            merges += 1
        else:
            cancels += 1
    n_canon = sum(1 for _, vs in groups(model) if any(sum(col) for col in zip(*vs)))
    return {"canonical": n_canon == model.H, "merge": merges > 0, "cancel": cancels > 0,
            "cancels": cancels, "zero v": zero, "canonical heads": n_canon, "H": model.H}


def tally(models, wants: str) -> Counter:
    """Counts over models that should carry ``wants`` ("merge", "cancel", "both", "canonical")."""
    c = Counter()
    for m in models:
        k = classify(m)
        c["models"] += 1
        c["canonical"] += k["canonical"]
        c["zero v"] += k["zero v"]
        if wants in ("merge", "both"):
            c["no merge"] += not k["merge"]
        if wants in ("cancel", "both"):
            c["no cancel"] += not k["cancel"]
    return c


def show(name: str, c: Counter) -> None:
    keys = [k for k in ("canonical", "no merge", "no cancel", "zero v", "count", "identity") if k in c]
    print(f"{name:58} " + "  ".join(f"{k}: {c[k]:4d}/{c['models']}" for k in keys))


# -- the generators -------------------------------------------------------------------------
def proofs_check_models(n: int):
    from proofs_check.models import random_model, trial_rng
    for kind, wants in (("merged", "merge"), ("cancel", "cancel"), ("merged+cancel", "both"),
                        ("plain", "canonical"), ("den", "canonical")):
        ms = []
        for i in range(n):
            rng = random.Random(f"audit:{kind}:{i}")
            d = rng.randint(1, 3)
            H = rng.randint(2 if kind in ("merged", "cancel") else 3 if kind == "merged+cancel" else 1, 4)
            ms.append(random_model(trial_rng(0, "audit", i), d, H, kind))
        c = tally(ms, wants if kind != "merged+cancel" else "both")
        if kind == "merged+cancel":          # H = 3: one group of three heads that drops
            c["no merge"] = sum(1 for m in ms if m.H >= 4 and not classify(m)["merge"])
        doc = {"plain": 0, "den": 0, "merged": 1, "cancel": 2, "merged+cancel": 3}[kind]
        c["count"] = sum(1 for m in ms if classify(m)["canonical heads"]
                         != (0 if kind == "merged+cancel" and m.H == 3 else m.H - doc))
        show(f"proofs_check.models.random_model kind={kind}", c)


def strategies_seeded(n: int):
    from strategies import seeded_model
    for opts, wants in (({"merged": True}, "merge"), ({"cancelling": True}, "cancel"),
                        ({"merged": True, "cancelling": True}, "both")):
        ms = []
        for i in range(n):
            rng = random.Random(f"audit:seeded:{i}")
            d, H = rng.randint(1, 3), rng.randint(4 if len(opts) == 2 else 2, 4)
            ms.append(seeded_model(i, d, H, **opts))
        show(f"tests/strategies.seeded_model {'+'.join(opts)}", tally(ms, wants))


def _hypothesis_draws(strategy, n: int) -> list:
    from hypothesis import HealthCheck, given, settings
    got = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(x=strategy)
    def collect(x):
        got.append(x)
    collect()
    return got


def strategies_hypothesis(n: int):
    from strategies import models, random_models
    for name, strat in (("models", models), ("random_models", random_models)):
        for opts, wants in (({"merged": True}, "merge"), ({"cancelling": True}, "cancel"),
                            ({"merged": True, "cancelling": True}, "both")):
            kw = dict(opts, max_heads=4) if len(opts) < 2 else dict(opts)
            ms = _hypothesis_draws(strat(**kw), n)
            show(f"tests/strategies.{name}({', '.join(f'{k}=True' for k in opts)})", tally(ms, wants))


def invariance_pairs(n: int):
    import test_invariance as ti
    for name, strat, wants in (("merged_pairs", ti.merged_pairs(max_heads=4), "merge or cancel"),
                               ("cancelling_pairs", ti.cancelling_pairs(), "cancel"),
                               ("permuted_pairs", ti.permuted_pairs(), None),
                               ("split_pairs", ti.split_pairs(), None)):
        pairs = _hypothesis_draws(strat, n)
        c = Counter(models=len(pairs))
        for a, b in pairs:
            ka = classify(a)
            c["identity"] += a.heads == b.heads
            if name == "merged_pairs":
                c["canonical"] += ka["canonical"]
                c["no merge"] += not (ka["merge"] or ka["cancel"])
            if name == "cancelling_pairs":     # b must hold one more dropped group than a
                c["no cancel"] += classify(b)["cancels"] <= ka["cancels"]
        show(f"tests/test_invariance.{name}", c)


def nonidentifiability_pairs(n: int):
    """The "cancelling pair" reparameterisation of the nonidentifiability claim."""
    from proofs_check.claims.nonidentifiability import reparameterise
    from proofs_check.models import canonical_model, random_model, trial_rng
    c = Counter()
    for i in range(n):
        rng = trial_rng(0, "audit-nonident", i)
        A = canonical_model(random_model(rng, 1 + i % 3, 1 + (i // 3) % 3, "den" if i % 2 else "plain"))
        while A.H == 0:
            A = canonical_model(random_model(rng, 1 + i % 3, 1 + (i // 3) % 3, "plain"))
        A2 = reparameterise(rng, A, "cancelling pair")
        c["models"] += 1
        c["no cancel"] += classify(A2)["cancels"] == 0
        c["identity"] += A.heads == A2.heads
    show("proofs_check nonidentifiability 'cancelling pair'", c)


def cli_random_model(n: int):
    from exactlearn.cli.main import random_model
    for flag, wants in (("merge", "merge"), ("cancel", "cancel")):
        ms = []
        for i in range(n):
            rng = random.Random(f"audit:cli:{i}")
            d, H = rng.randint(1, 3), rng.randint(2, 4)
            ms.append(random_model(d, H, seed=i, **{flag: True}))
        show(f"exactlearn.cli.main.random_model --{flag}", tally(ms, wants))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300, help="models per generator and kind")
    args = ap.parse_args(argv)
    proofs_check_models(args.n)
    strategies_seeded(args.n)
    strategies_hypothesis(args.n)
    invariance_pairs(args.n)
    nonidentifiability_pairs(args.n)
    cli_random_model(args.n)


if __name__ == "__main__":
    main()
