"""``proofs-check``: run the paper's claims as seeded campaigns and report them.

Exit status: 0 when no claim is refuted or inconclusive, 1 otherwise, 2 on bad
input.
"""

from __future__ import annotations

import argparse
import json
import sys

from .claim import INCONCLUSIVE, REFUTED, LocalExecutor, discover, run_claims


class BadInput(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise BadInput(message)


def build_parser():
    p = _Parser(prog="proofs-check", description="Check the claims of arXiv:2608.03294 mechanically.")
    p.add_argument("--quick", action="store_true", help="small campaigns (about a minute)")
    p.add_argument("--json", action="store_true", help="print {\"claims\": [...]} as JSON")
    p.add_argument("--only", nargs="+", metavar="ID", help="run only these claim ids")
    p.add_argument("--list", action="store_true", help="list the claim ids and exit")
    p.add_argument("--seed", type=int, default=0, help="base seed of every campaign")
    p.add_argument("--workers", type=int, default=1, help="local worker processes")
    return p


def _short(evidence: dict, width=70) -> str:
    keys = [k for k in evidence if k not in ("traceback", "seconds")]
    text = "; ".join(f"{k}={evidence[k]}" for k in keys[:4])
    return text if len(text) <= width else text[: width - 3] + "..."


def table(rows) -> str:
    w = max([len(r["id"]) for r in rows] + [5])
    lines = [f"{'claim'.ljust(w)}  {'status':13}  evidence", "-" * (w + 90)]
    for r in rows:
        lines.append(f"{r['id'].ljust(w)}  {r['status']:13}  {_short(r['evidence'])}")
        lines.append(f"{''.ljust(w)}  {'':13}  {r['statement']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.workers < 1:
            raise BadInput("--workers must be >= 1")
        registry = discover()
        if args.list:
            for cid, c in registry.items():
                print(f"{cid}: {c.statement}")
            return 0
        if args.only:
            unknown = [i for i in args.only if i not in registry]
            if unknown:
                raise BadInput(f"unknown claim id(s): {', '.join(unknown)}")
        ex = LocalExecutor(args.workers)
        try:
            rows = run_claims(args.only, quick=args.quick, seed=args.seed, executor=ex)
        finally:
            ex.close()
    except BadInput as exc:
        print(f"proofs-check: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"claims": rows, "quick": args.quick, "seed": args.seed,
                          "executor": "local"}, default=str))
    else:
        print(table(rows))
    return 1 if any(r["status"] in (REFUTED, INCONCLUSIVE) for r in rows) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
