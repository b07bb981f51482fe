"""``exactlearn learn`` on a one-layer Transformer file (docs: howto/transformer.md).

:func:`run_cli` builds the black box, runs
:func:`~exactlearn.strategies.transformer.learn.learn_transformer` and prints
the result (:func:`summary` or JSON).
"""

from __future__ import annotations

import json

from exactlearn.oracle import TransformerOracle
from exactlearn.strategies.transformer.learn import learn_transformer
from exactlearn.transformer_model import OneLayerTransformer


def run_cli(args, obj, make_field) -> int:
    """``exactlearn learn --model T.json ...`` for an ``exactlearn.transformer/1`` file.

    Called by :func:`exactlearn.cli.main._cmd_learn` after it read the file.  Bad
    input raises ModelError/ValueError/FieldError (exit 2 there); returns 0
    when certified, 1 on a flagged failure.  ``--retries N`` allows N path
    redraws (default: the learner's, ``DEFAULT_RETRIES["transformer"]`` = 2); ``--verify N`` sets the number of fresh
    random certificate queries (default 200, plus the boundary queries; N >= 1:
    the certificate needs them).  Options that do not apply to a Transformer
    (the attention plans' options, ``--workers``, ``--scheduler``) are refused, never
    ignored.
    """
    model = OneLayerTransformer.from_json(obj)
    if args.field not in ("rational", "real", "modular", "symbolic"):
        raise ValueError(f"unknown field {args.field!r} (choose from rational, real)")
    for opt, default in (("tokens", "exact"), ("plan_given", False), ("rank", None), ("range", None),
                         ("e_range", None), ("noise", None), ("declared_noise", None),
                         ("query_scale", None), ("noise_rel", None), ("snap", False),
                         ("max_primes", None), ("max_height", None)):
        if getattr(args, opt, default) != default:
            why = ("the Transformer learner chooses its query tokens per cone"
                   if opt in ("plan_given", "rank", "range", "e_range") else "not to a Transformer file")
            name = (args.noise_option if opt == "noise" else "--plan" if opt == "plan_given"
                    else f"--{opt.replace('_', '-')}")
            raise ValueError(f"{name} applies to attention models only; {why}")
    for opt in ("workers", "scheduler"):
        if getattr(args, opt, None) is not None:
            raise ValueError(f"--{opt} spreads the paper plan of an attention model over a Dask "
                             f"cluster; the Transformer learner runs serially (drop --{opt})")
    if args.verify == 0:
        raise ValueError("--verify 0 does not apply to a Transformer file: its certificate needs "
                         "fresh random queries (give --verify N >= 1; default 200)")
    field = make_field(args.field, args, scale=None)
    oracle = TransformerOracle(model, field)       # refuses unordered fields (NotOrdered)
    res = learn_transformer(oracle, d=model.d, heads=args.heads, max_heads=args.max_heads,
                            seed=args.seed, retries=args.retries,
                            fresh=200 if args.verify is None else args.verify)
    if args.json:
        out = res.to_json()
        out["seed"] = args.seed            # a run without --seed can be repeated
        print(json.dumps(out))
    else:
        print(summary(res) + f"\nseed: {args.seed} (repeat the run with --seed {args.seed})")
    return 0 if res.certified else 1


def summary(res) -> str:
    """Readable summary of a Transformer learning run."""
    K = res.field
    lines = [f"status: {res.status}" + (f" ({res.error})" if res.error else ""),
             f"field: {K.name}  d: {res.d}  head bound: {res.heads_bound}",
             f"queries: {res.queries} (learning {res.learning_queries}: kink search and cone plans, "
             f"{len(res.cones)} cones, {res.kinks} kinks; certificate {res.certificate_queries})  "
             f"longest: {res.max_length} (learning {res.learning_max_length}, certificate "
             f"{res.certificate_max_length})"
             + (f"  attempts: {res.attempts}" if res.attempts > 1 else "")]
    if res.certified:
        m = res.model
        lines.append(f"recovered: {m.H} distinct W, {m.r} neurons, m = {m.m}")
        for n, (W, O) in enumerate(m.heads, 1):
            lines.append(f"  head {n}: W = {[[K.format(x) for x in r] for r in W]}")
            lines.append(f"          O = {[[K.format(x) for x in r] for r in O]}")
        lines.append(f"  ffn: B = {[[K.format(x) for x in b] for b in m.B]}")
        lines.append(f"       u = {[K.format(x) for x in m.u]}")
        lines.append(f"certificate: {res.observations} observed outputs and "
                     f"{len(res.fresh_queries)} fresh queries ({res.fresh_kinds.get('random', 0)} random, "
                     f"{res.fresh_kinds.get('boundary', 0)} on ReLU boundaries) reproduced"
                     + (" exactly" if K.is_exact else " within tolerance"))
    lines.append(f"time: learner {res.learner_seconds:.3f} s, oracle {res.oracle_seconds:.3f} s")
    return "\n".join(lines)
