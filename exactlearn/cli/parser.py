"""The command line's parser: ``exactlearn learn | random-model | demo`` and their options (docs: reference/cli.md).

Bad input is :class:`BadInput`: one line on stderr, exit status 2 (argparse's usage
is not printed); ``--help`` shows every option's default (:class:`HelpFormatter`).
"""

from __future__ import annotations

import argparse

from exactlearn import limits
from exactlearn.cli.numbers import integer_option
from exactlearn.errors import ModelError

FIELD_NAMES = ("rational", "modular", "real", "symbolic")


class BadInput(ModelError):
    """Bad command-line input: reported in one line, exit status 2."""


class _Once(argparse.Action):
    """An option that takes a value, refused when given twice (argparse keeps the last one
    silently: ``--field real --field modular`` would run modular)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given_once", set())
        if self.dest in given:
            raise argparse.ArgumentError(self, "given twice: give it once")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (:class:`BadInput`, exit 2) and whose
    options that take a value are refused when given twice (``proofs-check`` uses it too)."""

    def __init__(self, *a, **kw):
        kw.setdefault("formatter_class", HelpFormatter)
        super().__init__(*a, **kw)
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        ns.__dict__.pop("_given_once", None)
        return ns, rest

    def error(self, message):  # one line, exit 2 (argparse would print usage too)
        raise BadInput(message)


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` shows every option's default: ``(default: X)`` is appended unless the help
    text already says what the default is; choices show in the metavar
    (``--field {rational,modular,real,symbolic}``)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" in text or any(action.default is x for x in (None, False, argparse.SUPPRESS))
                or action.required or not action.option_strings):
            return text
        return text + " (default: %(default)s)"




def _heads_option(what):
    return integer_option(what, 1, limits.MAX_HEADS, "MAX_HEADS")


def _positive(what):
    return integer_option(what, 1)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``exactlearn learn | random-model | demo`` (docs: reference/cli.md)."""
    p = OneLineParser(prog="exactlearn",
                      description="Learn multi-head attention exactly from value queries.")
    sub = p.add_subparsers(dest="command", parser_class=OneLineParser)
    sub.required = True

    _learn_options(sub)
    _random_model_options(sub)
    _demo_options(sub)
    return p


def _learn_options(sub) -> None:
    lp = sub.add_parser("learn", help="learn the canonical heads of a model file through a black box")
    lp.add_argument("--model", required=True,
                    help="model file (exactlearn.mha/1, /2, /3 or exactlearn.transformer/1 JSON)")
    lp.add_argument("--field", default="rational", choices=FIELD_NAMES,
                    help="number system of the black box and the learner (docs: choose a field)")
    g = lp.add_mutually_exclusive_group(required=True)
    g.add_argument("--heads", type=_heads_option("--heads"), help="number of heads H (required: this or --max-heads)")
    g.add_argument("--max-heads", type=_heads_option("--max-heads"), help="upper bound H0 on the heads (required: this or --heads)")
    lp.add_argument("--seed", type=integer_option("--seed"), default=None,
                    help="random seed of the query draw (default: a fresh one, printed as "
                         "\"seed\" in the JSON and in the summary)")
    lp.add_argument("--range", type=_positive("--range"), default=None, dest="range",
                    help="query entries are random integers in [-R, R] (default: rational 30, "
                         "modular 2^32, symbolic 8, real 1000)")
    lp.add_argument("--e-range", type=_positive("--e-range"), default=None,
                    help="separate range for the directions e (default: --range)")
    lp.add_argument("--retries", type=integer_option("--retries", 0, limits.MAX_RETRIES, "MAX_RETRIES"),
                    default=None,
                    help="redraw up to N times after a detected degenerate draw (default: "
                         "exactlearn.limits.DEFAULT_RETRIES: 3 over the symbolic field, 2 for a "
                         "Transformer file, else 0)")
    lp.add_argument("--verify", type=integer_option("--verify", 0, limits.MAX_VERIFY_QUERIES,
                                                   "MAX_VERIFY_QUERIES"), default=None,
                    help="N extra fresh random queries comparing the result with the oracle, "
                         "counted in queries (default: 0; a Transformer file: the certificate's "
                         "fresh random queries, default 200)")
    _learn_field_options(lp)
    from exactlearn.cli.real import add_learn_options
    add_learn_options(lp)
    from exactlearn.cli import cluster as cli_cluster
    cli_cluster.add_learn_options(lp)
    from exactlearn.cli import progress as cli_progress
    cli_progress.add_learn_options(lp)


def _learn_field_options(lp) -> None:
    lp.add_argument("--dps", type=integer_option("--dps", 1, limits.MAX_DPS, "MAX_DPS"),
                    default=None, help="real field: decimal digits (default 50)")
    lp.add_argument("--prime", type=_positive("--prime"), default=None,
                    help="modular field: the first prime p (default 7*2^120+1; further primes "
                         "are c*2^120+1)")
    lp.add_argument("--max-primes", type=integer_option("--max-primes", 2), default=None,
                    help="modular field: most primes combined for tall rationals (default 12)")
    lp.add_argument("--max-height", type=_positive("--max-height"), default=None,
                    help="modular field, paper plan: a declared bound B on the numerators and "
                         "denominators of the canonical heads; primes are combined until their "
                         "product exceeds 2B^2 (one pass for B < 2^60), no confirmation prime "
                         "(default: no bound; two passes)")
    lp.add_argument("--plan", choices=("paper", "efficient", "stable"), default=None,
                    help="query plan: the paper's (4Hd^2-2H+1 queries), the efficient one "
                         "(exact fields), or the stable one for finite-precision boxes (real "
                         "field) (default: paper; stable with --tokens float*)")
    lp.add_argument("--rank", type=_positive("--rank"), default=None,
                    help="promise that every head has rank <= r (needs --plan efficient; "
                         "default: no promise)")
    lp.add_argument("--json", action="store_true", help="print one JSON object")
    lp.add_argument("--bias", action="store_true",
                    help="learn biases too: each head's u and the constant c, with the plan for "
                         "biases (exact fields: paper plan; real field: stable plan; docs: "
                         "explanation/biases.md)")
    _outputs_option(lp, "the box answers M outputs per query (a model file exactlearn.mha/3; "
                        "default: the file's own M): each head's v is an M x d matrix "
                        "(docs: explanation/biases.md#vector-outputs)")


def _outputs_option(parser, help_text: str) -> None:
    """``--outputs M`` (1 to MAX_OUTPUTS), for ``learn`` and ``random-model``."""
    parser.add_argument("--outputs", type=integer_option("--outputs", 1, limits.MAX_OUTPUTS,
                                                        "MAX_OUTPUTS"),
                        default=None, metavar="M", help=help_text)


def _random_model_options(sub) -> None:
    rp = sub.add_parser("random-model", help="write a random model file (attention or, with "
                                             "--transformer, a one-layer Transformer)")
    rp.add_argument("--d", type=integer_option("--d", 1, limits.MAX_DIMENSION, "MAX_DIMENSION"),
                    required=True, help="token dimension d")
    rp.add_argument("--heads", type=_heads_option("--heads"), required=True,
                    help="number of heads H")
    rp.add_argument("--seed", type=integer_option("--seed"), default=None,
                    help="seed of the draw (default: a fresh one, written as \"seed\" in the file)")
    rp.add_argument("--merge", action="store_true",
                    help="some heads share W (merged in canonical form; attention only)")
    rp.add_argument("--cancel", action="store_true",
                    help="a pair of heads cancels (dropped; attention only)")
    rp.add_argument("--entries", type=_positive("--entries"), default=None,
                    help="attention: W, v numerators in [-N, N] (default 3)")
    rp.add_argument("--den", type=_positive("--den"), default=None,
                    help="attention: largest denominator of W entries (default 2)")
    rp.add_argument("--transformer", action="store_true",
                    help="write an exactlearn.transformer/1 file: H heads, then a ReLU layer "
                         "(learn it with `exactlearn learn --model FILE --heads H`)")
    rp.add_argument("--neurons", type=_positive("--neurons"), default=None,
                    help="Transformer: ReLU neurons r (default: d)")
    rp.add_argument("--bias", action="store_true",
                    help="attention: give every head a random query bias u and the model a random "
                         "constant c (writes exactlearn.mha/2)")
    _outputs_option(rp, "attention: M outputs (default: one, a scalar model), each head's v "
                        "an M x d matrix (writes exactlearn.mha/3; docs: "
                        "explanation/biases.md#vector-outputs)")
    rp.add_argument("--out", default=None, help="output file (default: stdout)")


def _demo_options(sub) -> None:
    dp = sub.add_parser("demo", help="step-by-step walk-through on a small model")
    dp.add_argument("--model", default=None, help="model file (default: a built-in d=2, H=2 model)")
    dp.add_argument("--heads", type=_heads_option("--heads"), default=None,
                    help="head bound H (default: the model's number of heads)")
    dp.add_argument("--seed", type=integer_option("--seed"), default=1,
                    help="seed of the query draw")
    dp.add_argument("--range", type=_positive("--range"), default=4, dest="range",
                    help="query entries in [-R, R]")
    dp.add_argument("--plot", default=None, metavar="FILE.png",
                    help="also draw the first query family (samples, P/Q, poles, the heads' "
                         "terms) into FILE.png (needs matplotlib; default: no figure)")
    from exactlearn.cli.real import add_demo_options
    add_demo_options(dp)
