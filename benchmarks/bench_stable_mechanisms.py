"""Which of the stable plan's mechanisms earn their queries (issue 21's "measure on the grid",
issue 23 section 3): ``benchmarks/bench_float.py`` with the lean plan's dials set.

``--nodes P E`` draws ``P H + E`` ratio nodes for a box declared at float64 rounding
(:data:`exactlearn.strategies.real.ratio.LEAN_NODES_PER_HEAD` and ``LEAN_NODES_EXTRA``;
``4 4`` is the plan before the lean one); ``--rescue-scales`` are the scales a family that
fails is asked at again (:data:`exactlearn.strategies.real.stable_families.RESCUE`; ``1/2 2 1/4
4`` is the plan before 6 Dec 2026); the weak-entry supplements the lean plan asked before the
polish (``--weak-rounds``, last at cd4802c) are removed: the polish asks for its weak entries on
every route; ``--polish-rounds``, ``--polish-factor`` and ``--polish-families``
set the families the polish asks for its weak entries
(:mod:`exactlearn.strategies.real.stable_ask_more`; ``--polish-rounds 0``: none).  The remaining arguments go to bench_float.py, whose
rows print the queries and where they went (probe, supplementary and targeted families,
rescued configurations) beside each run's error and bound:

    python benchmarks/bench_stable_mechanisms.py --polish-rounds 0 -- --grid --seeds 6
    python benchmarks/bench_stable_mechanisms.py --rescue-scales 1/2 2 1/4 4 -- --grid --seeds 6
    python benchmarks/bench_stable_mechanisms.py --nodes 4 4 -- --grid --seeds 6

The first is the lean plan with nothing asked after the polish, the second with the rescues
at 1/4 and 4 that it asked until 6 Dec 2026, the last the stable plan's nodes before the lean
plan (docs/howto/float-black-box.md, "Fewer queries").
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections import Counter
from fractions import Fraction

from gmpy2 import mpq

import exactlearn.strategies.real.ratio as ratio
import exactlearn.strategies.real.stable_ask_more as more
import exactlearn.strategies.real.stable_families as families
import exactlearn.strategies.real.stable_supplement as supplement


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", nargs=2, type=int, metavar=("PER_HEAD", "EXTRA"),
                    default=[ratio.LEAN_NODES_PER_HEAD, ratio.LEAN_NODES_EXTRA])
    ap.add_argument("--rescue-scales", nargs="+", type=Fraction, metavar="F",
                    default=[Fraction(str(f)) for f in families.RESCUE])
    ap.add_argument("--polish-rounds", type=int, default=more.POLISH_ROUNDS,
                    help="rounds of families the polish asks for its weak entries "
                         "(stable_ask_more.POLISH_ROUNDS; 0: none)")
    ap.add_argument("--polish-factor", type=float, default=more.POLISH_BOUND_FACTOR,
                    help="a W entry is weak above this many times the median bound")
    ap.add_argument("--polish-families", type=int, default=more.POLISH_FAMILIES,
                    help="families (token pairs) the polish asks about a round")
    ap.add_argument("--query-budget", type=float, default=more.QUERY_BUDGET,
                    help="the polish's families stop at this many times the paper's count "
                         "(stable_ask_more.QUERY_BUDGET; 0: no budget)")
    ap.add_argument("--target-scales", nargs="+", type=Fraction, metavar="F",
                    default=[Fraction(str(f)) for f in more.TARGET_SCALES],
                    help="an undetermined direction's family at these times its scale "
                         "(stable_ask_more.TARGET_SCALES)")
    ap.add_argument("--trace-rescues", action="store_true",
                    help="print, at the end, how many families of each kind resolved at each "
                         "scale (or failed at all)")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then bench_float.py's arguments")
    args = ap.parse_args(argv)
    ratio.LEAN_NODES_PER_HEAD, ratio.LEAN_NODES_EXTRA = args.nodes
    more.POLISH_ROUNDS, more.POLISH_BOUND_FACTOR = args.polish_rounds, args.polish_factor
    more.POLISH_FAMILIES = args.polish_families
    more.QUERY_BUDGET = args.query_budget or float("inf")
    more.TARGET_SCALES = tuple(mpq(f.numerator, f.denominator) for f in args.target_scales)
    # fit_all reads RESCUE from its module at each call, supplement from its own import
    families.RESCUE = supplement.RESCUE = tuple(mpq(f.numerator, f.denominator)
                                                for f in args.rescue_scales)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    print(f"# lean plan: {args.nodes[0]}H + {args.nodes[1]} nodes, "
          f"a failed family re-asked at {' '.join(map(str, args.rescue_scales))}; the polish asks about "
          f"{args.polish_families} families a round for W entries above {args.polish_factor:g} "
          f"times the median bound, at most {args.polish_rounds} rounds; undetermined "
          f"directions at {' '.join(map(str, args.target_scales))} times their scale; the "
          f"polish's families up to {args.query_budget or 'any'} times the paper's count",
          flush=True)
    sys.argv = ["bench_float.py"] + rest
    tally = _trace_rescues() if args.trace_rescues else None
    try:
        runpy.run_path(os.path.join(os.path.dirname(__file__), "bench_float.py"),
                       run_name="__main__")
    finally:
        for (kind, scale), n in sorted((tally or {}).items()):
            at = "failed at every scale" if scale == "failed" else f"resolved at scale {scale}"
            print(f"# families of kind {kind} {at}: {n}")


def _trace_rescues() -> Counter:
    """Counts ``(configuration kind, scale it resolved at, or "failed")`` over every family the
    stable plan asks through ``resolve_family`` (the plan's and the supplementary ones)."""
    import exactlearn.strategies.real.stable_families as families
    import exactlearn.strategies.real.stable_supplement as supplement
    tally: Counter = Counter()
    resolve = families.resolve_family

    def traced(c, *a, **k):
        try:
            out = resolve(c, *a, **k)
        except Exception:
            tally[(c.kind, "failed")] += 1
            raise
        tally[(c.kind, str(out[2]))] += 1
        return out
    families.resolve_family = supplement.resolve_family = traced    # fit_all's and supplement's
    return tally


if __name__ == "__main__":
    main()
