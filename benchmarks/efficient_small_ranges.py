"""Certified right / certified wrong / failed counts of the efficient plan at small query ranges
(issue 20; docs/explanation/efficient-plan.md, "Small ranges").

    PYTHONPATH=$PWD python benchmarks/efficient_small_ranges.py issue     # the issue's two-head model
    PYTHONPATH=$PWD python benchmarks/efficient_small_ranges.py fuzz      # random models

``issue``: the model of issue 20 with ``heads=2``, seeds 0..199.  ``fuzz``: per seed a random
model (d <= 3, H <= 3, plain / den / merged / cancelling heads, proofs_check.models) learned with
the exact count H or the bound H + 1.  Both at R = 1, 2, 3 over the rational and the modular
field.  ``bound>2^-40`` counts certified answers whose ``plan_detail.check_miss_bound`` is over
2^-40 (or missing).  Only the public API is used, so the same script measures any commit.
"""

from __future__ import annotations

import collections
import random
import sys

from exactlearn import Modular, MultiHeadAttention, Oracle, Rational, learn
from proofs_check.models import kinds_for, random_model

ISSUE_20 = {"format": "exactlearn.mha/1", "d": 2, "heads": [
    {"W": [[-1, "1/2"], [0, 1]], "v": ["2/3", "-1/3"]},
    {"W": [[-1, "1/2"], [-2, -1]], "v": ["-3/2", "-3/2"]}]}


def case(mode: str, seed: int):
    """(model, d, heads, max_heads) of one seed."""
    if mode == "issue":
        return MultiHeadAttention.from_json(ISSUE_20), 2, 2, None
    rng = random.Random(f"efficient-small-ranges:{seed}")
    d, H = rng.randint(1, 3), rng.randint(1, 3)
    model = random_model(rng, d, H, rng.choice(kinds_for(H)))
    return (model, d, H, None) if rng.random() < 0.5 else (model, d, None, H + 1)


def main(mode: str, seeds: int = 200) -> None:
    for fname, F in (("rational", Rational), ("modular", Modular)):
        for R in (1, 2, 3):
            c = collections.Counter({"right": 0, "wrong": 0, "failed": 0})
            for seed in range(seeds):
                model, d, heads, bound = case(mode, seed)
                res = learn(Oracle(model, F()), d=d, heads=heads, max_heads=bound, seed=seed,
                            plan="efficient", query_range=R)
                if not res.certified:
                    c["failed"] += 1
                    continue
                c["right" if res.heads == model.canonical_heads() else "wrong"] += 1
                b = (res.plan_detail or {}).get("check_miss_bound")
                if b is None or b > 2.0 ** -40:
                    c["bound>2^-40"] += 1
            print(f"{mode} {fname} R={R}: " + ", ".join(f"{k} {v}" for k, v in c.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "issue")
