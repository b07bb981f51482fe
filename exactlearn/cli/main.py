"""Command line: ``exactlearn learn | random-model | demo``.

``random-model`` writes a model of :func:`exactlearn.generate.random_model`;
:func:`field_by_name` builds the field named by ``--field`` (the proofs-check
campaigns build theirs here too).

Exit status: 0 certified (or success), 1 a flagged failure, 2 bad input (one
line on stderr, no traceback, nothing on stdout).
"""

from __future__ import annotations

import argparse
import json
import sys

from exactlearn.errors import ClusterError, FieldError, ModelError
from exactlearn.generate import random_model
from exactlearn.io import load_json
from exactlearn import limits
from exactlearn.model import MultiHeadAttention

FIELD_NAMES = ("rational", "modular", "real", "symbolic")


class BadInput(ModelError):
    """Bad command-line input: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *a, **kw):
        kw.setdefault("formatter_class", HelpFormatter)
        super().__init__(*a, **kw)

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


def fresh_seed() -> int:
    """A seed for a run given no ``--seed``: drawn from the OS, then printed in the JSON
    (``"seed"``) so that the run can be repeated with ``--seed``."""
    import random
    return random.SystemRandom().randrange(2 ** 32)


#: ``exactlearn learn`` options that apply to one field only: option -> (dest, default, field).
#: Given with another field, they are bad input (exit 2), never silently ignored.
FIELD_OPTIONS = {"--dps": ("dps", None, "real"), "--inject-noise": ("noise", None, "real"),
                 "--noise-seed": ("noise_seed", None, "real"),
                 "--query-scale": ("query_scale", None, "real"),
                 "--noise-rel": ("noise_rel", None, "real"),
                 "--declared-noise": ("declared_noise", None, "real"),
                 "--prime": ("prime", None, "modular"),
                 "--max-primes": ("max_primes", None, "modular"),
                 "--max-height": ("max_height", None, "modular")}


def check_field_options(args) -> None:
    """Refuse options that do not apply to ``--field`` (one line, exit 2)."""
    for opt, (dest, default, fname) in FIELD_OPTIONS.items():
        if getattr(args, dest, default) != default and args.field != fname:
            opt = args.noise_option if dest == "noise" else opt      # the spelling given
            raise BadInput(f"{opt} needs --field {fname}; it does not apply to --field {args.field}")
    if args.noise_seed is not None and args.noise is None:
        raise BadInput("--noise-seed needs --inject-noise (formerly --noise)")
    if getattr(args, "plan", None) == "stable" and args.field != "real":
        raise BadInput(f"--plan stable needs --field real; it does not apply to --field {args.field}")
    if getattr(args, "noise_rel", None) is not None and getattr(args, "plan", None) != "stable":
        raise BadInput("--noise-rel needs --plan stable")


def field_by_name(name: str, *, scale: int | None = None, prime: int | None = None,
                  dps: int | None = None):
    """A new field named as ``--field`` names it (one of :data:`FIELD_NAMES`), with its options.

    ``scale`` is the field's D (None: the oracle takes it from the model);
    ``prime`` the modular field's first prime (None: 7*2^120+1); ``dps`` the real
    field's digits (None: 50).  The command line and the proofs-check campaigns
    build their fields here.  ValueError, in one line, for an unknown name or a
    field this installation lacks.

    >>> field_by_name("rational").name, field_by_name("real", dps=30).dps
    ('rational', 30)
    >>> field_by_name("complex")
    Traceback (most recent call last):
    ...
    ValueError: unknown field 'complex' (choose from rational, modular, real, symbolic)
    """
    from exactlearn import fields
    if name not in FIELD_NAMES:
        raise ValueError(f"unknown field {name!r} (choose from {', '.join(FIELD_NAMES)})")
    try:
        cls = getattr(fields, name.capitalize())
    except (AttributeError, ImportError):
        raise ValueError(f"the {name} field is not available in this installation") from None
    if name == "modular" and prime is not None:
        return cls(p=prime, omega=None, scale=scale)
    if name == "real":
        return cls(dps=dps or 50, scale=scale)
    return cls(scale=scale)


def make_field(name: str, args=None, scale: int | None = None):
    """:func:`field_by_name` with the command line's options (``--prime``, ``--dps``);
    an unknown or missing field is bad input (one line, exit 2)."""
    opts = vars(args) if args is not None else {}
    try:
        return field_by_name(name, scale=scale, prime=opts.get("prime"), dps=opts.get("dps"))
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def _int_at_least(what, low, high=None, limit=None):
    """argparse type: an integer >= low (and <= high, the limit named ``limit`` of
    :mod:`exactlearn.limits`), with a one-line message naming the option."""
    def conv(text):
        if len(text.strip().lstrip("+-")) > limits.MAX_ENTRY_DIGITS:   # never convert it
            raise argparse.ArgumentTypeError(f"{what} must be an integer of at most "
                                             f"{limits.MAX_ENTRY_DIGITS} digits (MAX_ENTRY_DIGITS), "
                                             f"got {len(text)} characters")
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"{what} must be >= {low}, got {n}")
        if high is not None and n > high:
            raise argparse.ArgumentTypeError(f"{what} must be <= {high} ({limit}; "
                                             f"docs/reference/cli.md, \"Limits\"), got {n}")
        return n
    return conv


def _heads_option(what):
    return _int_at_least(what, 1, limits.MAX_HEADS, "MAX_HEADS")


def _positive(what):
    return _int_at_least(what, 1)


def _nonneg(what):
    return _int_at_least(what, 0)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="exactlearn", description="Learn multi-head attention exactly from value queries.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    sub.required = True

    lp = sub.add_parser("learn", help="learn the canonical heads of a model file through a black box")
    lp.add_argument("--model", required=True,
                    help="model file (exactlearn.mha/1, /2, /3 or exactlearn.transformer/1 JSON)")
    lp.add_argument("--field", default="rational", choices=FIELD_NAMES,
                    help="number system of the black box and the learner (docs: choose a field)")
    g = lp.add_mutually_exclusive_group(required=True)
    g.add_argument("--heads", type=_heads_option("--heads"), help="number of heads H (required: this or --max-heads)")
    g.add_argument("--max-heads", type=_heads_option("--max-heads"), help="upper bound H0 on the heads (required: this or --heads)")
    lp.add_argument("--seed", type=int, default=None,
                    help="random seed of the query draw (default: a fresh one, printed as "
                         "\"seed\" in the JSON and in the summary)")
    lp.add_argument("--range", type=_positive("--range"), default=None, dest="range",
                    help="query entries are random integers in [-R, R] (default: rational 30, "
                         "modular 2^32, symbolic 8, real 1000)")
    lp.add_argument("--e-range", type=_positive("--e-range"), default=None,
                    help="separate range for the directions e (default: --range)")
    lp.add_argument("--retries", type=_int_at_least("--retries", 0, limits.MAX_RETRIES, "MAX_RETRIES"),
                    default=None,
                    help="redraw up to N times after a detected degenerate draw (default: "
                         "exactlearn.limits.DEFAULT_RETRIES: 3 over the symbolic field, 2 for a "
                         "Transformer file, else 0)")
    lp.add_argument("--verify", type=_int_at_least("--verify", 0, limits.MAX_VERIFY_QUERIES,
                                                   "MAX_VERIFY_QUERIES"), default=None,
                    help="N extra fresh random queries comparing the result with the oracle, "
                         "counted in queries (default: 0; a Transformer file: the certificate's "
                         "fresh random queries, default 200)")
    lp.add_argument("--dps", type=_int_at_least("--dps", 1, limits.MAX_DPS, "MAX_DPS"),
                    default=None, help="real field: decimal digits (default 50)")
    lp.add_argument("--prime", type=_positive("--prime"), default=None,
                    help="modular field: the first prime p (default 7*2^120+1; further primes "
                         "are c*2^120+1)")
    lp.add_argument("--max-primes", type=_int_at_least("--max-primes", 2), default=None,
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
    lp.add_argument("--outputs", type=_int_at_least("--outputs", 1, limits.MAX_OUTPUTS, "MAX_OUTPUTS"),
                    default=None, metavar="M",
                    help="the box answers M outputs per query (a model file exactlearn.mha/3; "
                         "default: the file's own M): each head's v is an M x d matrix "
                         "(docs: explanation/biases.md#vector-outputs)")
    from exactlearn.cli.real import add_learn_options
    add_learn_options(lp)
    from exactlearn.cli import cluster as cli_cluster
    cli_cluster.add_learn_options(lp)
    from exactlearn.cli import progress as cli_progress
    cli_progress.add_learn_options(lp)

    rp = sub.add_parser("random-model", help="write a random model file (attention or, with "
                                             "--transformer, a one-layer Transformer)")
    rp.add_argument("--d", type=_int_at_least("--d", 1, limits.MAX_DIMENSION, "MAX_DIMENSION"),
                    required=True, help="token dimension d")
    rp.add_argument("--heads", type=_heads_option("--heads"), required=True,
                    help="number of heads H")
    rp.add_argument("--seed", type=int, default=None,
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
    rp.add_argument("--outputs", type=_int_at_least("--outputs", 1, limits.MAX_OUTPUTS, "MAX_OUTPUTS"),
                    default=None, metavar="M",
                    help="attention: M outputs (default: one, a scalar model), each head's v "
                         "an M x d matrix (writes exactlearn.mha/3; docs: "
                         "explanation/biases.md#vector-outputs)")
    rp.add_argument("--out", default=None, help="output file (default: stdout)")

    dp = sub.add_parser("demo", help="step-by-step walk-through on a small model")
    dp.add_argument("--model", default=None, help="model file (default: a built-in d=2, H=2 model)")
    dp.add_argument("--heads", type=_heads_option("--heads"), default=None,
                    help="head bound H (default: the model's number of heads)")
    dp.add_argument("--seed", type=int, default=1, help="seed of the query draw")
    dp.add_argument("--range", type=_positive("--range"), default=4, dest="range",
                    help="query entries in [-R, R]")
    dp.add_argument("--plot", default=None, metavar="FILE.png",
                    help="also draw the first query family (samples, P/Q, poles, the heads' "
                         "terms) into FILE.png (needs matplotlib; default: no figure)")
    from exactlearn.cli.real import add_demo_options
    add_demo_options(dp)
    return p


def _cmd_learn(args) -> int:
    from exactlearn.api import learn
    from exactlearn.oracle import Oracle
    obj = load_json(args.model)
    from exactlearn.cli import real as cli_real
    cli_real.check_tokens(args, BadInput)          # and the plan it implies
    check_field_options(args)
    if args.seed is None:
        args.seed = fresh_seed()
    if isinstance(obj, dict) and obj.get("format") == "exactlearn.transformer/1":
        if args.bias:
            raise BadInput("--bias applies to attention models (exactlearn.mha/1 or /2), not to a Transformer")
        if args.outputs is not None:
            raise BadInput("--outputs applies to attention models (exactlearn.mha/3), not to a Transformer")
        from exactlearn.cli.transformer import run_cli
        return run_cli(args, obj, make_field)
    model = MultiHeadAttention.from_json(obj)
    limits.check_plan_size(model.d, args.heads or args.max_heads)   # before any allocation
    outputs = _outputs_of(args, model)
    if args.rank is not None and args.plan != "efficient":
        raise BadInput("--rank needs --plan efficient")
    if args.bias and args.field == "real" and args.plan != "stable":
        raise BadInput(f"--bias over the real field needs --plan stable (the default with --tokens "
                       f"float64 or float32), got --plan {args.plan}")
    if args.bias and args.field != "real" and args.plan != "paper":
        raise BadInput(f"--bias is not supported yet with --plan {args.plan} (the paper plan only)")
    if args.bias and (getattr(args, "workers", None) is not None or getattr(args, "scheduler", None)):
        raise BadInput("--bias is not supported yet with --workers or --scheduler")
    if args.bias and getattr(args, "max_height", None) is not None:
        raise BadInput("--bias is not supported yet with --max-height")
    field = make_field(args.field, args, scale=None)
    exact_box = Oracle(model, field)
    oracle = cli_real.wrap_oracle(args, exact_box, BadInput)
    cli_real.warn_deprecated(args)
    from exactlearn.cli import cluster as cli_cluster
    from exactlearn.cli.progress import progress_for
    try:
        with cli_cluster.executor(args, BadInput) as client, progress_for(args) as progress:
            res = learn(oracle, d=model.d, heads=args.heads, max_heads=args.max_heads,
                        field=exact_box.field, seed=args.seed, query_range=args.range,
                        e_range=args.e_range, retries=cli_real.retries(args), verify=args.verify or 0,
                        plan=args.plan, rank=args.rank, max_primes=args.max_primes,
                        max_height=args.max_height,
                        **({"bias": True} if args.bias else {}),
                        **({"outputs": outputs} if outputs is not None else {}),
                        **cli_real.learn_options(args, BadInput),
                        **({} if client is None else {"executor": client}), progress=progress)
    except ClusterError as exc:         # a cluster that never started: nothing was asked
        reason = f"{exc.kind}: {exc}"
        if args.json:
            print(json.dumps({"status": "failed", "error": reason, "queries": 0, "attempts": 0,
                              **seeds(args)}))
        else:
            print(f"exactlearn: error: {reason}", file=sys.stderr)
        return 1
    res.error = cli_real.flag_words(res.error)     # the learner names keywords, the CLI flags
    if args.json:
        print(cli_real.to_json(res, model, seeds(args)))
    else:
        print(summary(res, model) + f"\nseed: {args.seed} (repeat the run with --seed {args.seed})")
    return 0 if res.certified else 1


def _outputs_of(args, model):
    """``--outputs M`` checked against the model file: its M by default; a scalar file with
    ``--outputs``, another M, or an option the vector step lacks is bad input."""
    m = args.outputs
    if m is None:
        m = model.outputs
    elif model.outputs is None:
        raise BadInput(f"--outputs {m}: the model file is a scalar model (exactlearn.mha/1 or /2): "
                       f"its box answers one value per query")
    elif m != model.outputs:
        raise BadInput(f"--outputs {m}: the model file has {model.outputs} outputs")
    if m is None:
        return None
    for given, opt in ((getattr(args, "tokens", "exact") != "exact", "--tokens float*"),
                       (getattr(args, "noise", None) is not None, "--inject-noise"),
                       (getattr(args, "workers", None) is not None or getattr(args, "scheduler", None),
                        "--workers / --scheduler"),
                       (getattr(args, "max_height", None) is not None, "--max-height"),
                       (getattr(args, "snap", False), "--snap"),
                       (bool(getattr(args, "verify", None)) and args.field == "real",
                        "--verify over --field real")):
        if given:
            raise BadInput(f"--outputs is not supported yet with {opt}")
    return m


def _v_text(K, v) -> str:
    """A head's v for the summary: a vector, or the rows of a matrix (vector outputs)."""
    from exactlearn.model import is_matrix
    if is_matrix(v):
        return str([[K.format(x) for x in row] for row in v])
    return str([K.format(x) for x in v])


def seeds(args) -> dict:
    """The JSON's seeds: ``seed`` always, ``noise_seed`` with ``--inject-noise`` (or ``--noise``)."""
    out = {"seed": args.seed}
    if getattr(args, "noise", None) is not None:
        out["noise_seed"] = args.noise_seed if args.noise_seed is not None else args.seed
    return out


def _plan_counts(res) -> str:
    """The efficient plan's counts, with its fallbacks, for :func:`summary`."""
    out = f"plan {res.plan}: {res.plan_queries} planned, paper count {res.plan_detail['paper_queries']}"
    for fb in res.plan_fallbacks:
        out += f"; {fb['kind']} fallback +{fb['queries']}"
    return out


def _modular_lines(res) -> list:
    """The modular field's primes and what is certified (docs: explanation/multimodular.md)."""
    mm = res.multimodular
    runs = mm["primes"]
    per = ", ".join(f"{r['queries']} ({r['role']}{', refuted' if 'refuted' in r else ''})"
                    for r in runs)
    if "modulus" in mm:
        out = [f"certified modulo p = {mm['modulus']} only (the black box answers modulo one "
               f"prime): v as residues, W exact only if the box's exponents did not wrap; "
               f"not exact over Q"]
        if res.certified:
            for n, g in enumerate(mm["rational_guess"], 1):
                out.append(f"  head {n}: rational guess (NOT certified): v = {g}")
        return out
    if not res.certified:
        return [f"primes asked: queries per prime: {per}"]
    if mm.get("route") == "height bound":
        confirmed = any(r["role"] == "confirmation" for r in runs)
        return [f"exact over Q: residues of {mm['stable_after']} prime(s) combined, their product "
                f"above 2B^2 for the declared height bound B = {mm['max_height']}"
                + (", confirmed modulo an independent prime" if confirmed else "")
                + f"; queries per prime: {per}",
                f"probability of a false certification (a degenerate reduction of the plan"
                + (", or a wrong reconstruction surviving the confirmation" if confirmed else "")
                + f"): <= 2^{mm['log2_wrong_reconstruction_bound']}, if the bound holds"]
    return [f"exact over Q: residues of {mm['stable_after']} prime(s) combined, confirmed "
            f"modulo an independent prime; queries per prime: {per}",
            f"probability that a wrong reconstruction survives the confirmation: "
            f"<= 2^{mm['log2_wrong_reconstruction_bound']}"]


def _certificate_lines(res) -> list:
    """The efficient plan's certificate: unique, or by check configurations with their bound."""
    pd = res.plan_detail
    if not res.certified or not pd or not pd.get("certificate"):
        return []
    if pd["certificate"] == "unique":
        return ["efficient plan: unique certificate (no other model with at most "
                f"{res.heads_bound} head(s) reproduces the observations): miss bound 0"]
    return [f"efficient plan: certified by {pd['check_configs']} random check configuration(s); "
            f"probability that a wrong model passes them: <= 2^{pd['check_miss_bound_log2']}"]


def summary(res, model=None) -> str:
    """Readable summary of a learning run."""
    K = res.field.param
    lines = [f"status: {res.status}" + (f" ({res.error})" if res.error else "")
             + (" within tolerance (real field: not exact)" if res.certified and not res.field.is_exact
                else ""),
             f"field: {res.field.name}  d: {res.d}  head bound: {res.heads_bound}",
             f"queries: {res.queries} (" + (f"{'stable' if res.plan == 'stable' else 'paper'}"
                                            f"{' plan for biases' if res.bias else ''}"
                                            f"{' plan' if res.plan == 'stable' and not res.bias else ''} count "
                                            f"{res.plan_queries}" if res.plan_detail is None
                                            else _plan_counts(res))
             + (f"; verification {res.verify_queries}" if res.verify_queries else "")
             + (f"; earlier attempts {res.extra_queries}" if res.extra_queries else "")
             + f")  longest: {res.max_length}"
             + (f"  attempts: {res.attempts}" if res.attempts > 1 else "")]
    if res.multimodular is not None:
        lines.extend(_modular_lines(res))
    lines.extend(_certificate_lines(res))
    if res.certified:
        lines.append(f"canonical heads: {len(res.heads)}"
                     + ("  (v as residues modulo p: certified modulo p only)"
                        if not res.exact_over_Q and res.field.is_exact else ""))
        for n, h in enumerate(res.heads, 1):
            lines.append(f"  head {n}: W = {[[K.format(x) for x in r] for r in h.W]}")
            lines.append(f"          v = {_v_text(K, h.v)}")
            if res.bias:
                lines.append(f"          u = {[K.format(x) for x in h.u]}")
        if res.bias:
            c = res.constant
            lines.append(f"constant: c = {_v_text(K, c) if isinstance(c, tuple) else K.format(c)}")
        if model is not None and res.field.is_exact:
            same = res.heads == model.canonical_heads()
            lines.append(f"equal to the model's canonical heads: {same}")
    if res.real_detail is not None or res.snap is not None:
        from exactlearn.cli.real import summary_lines
        lines.extend(summary_lines(res, model))
    if res.verified is not None:
        lines.append(f"verification: {res.verify_queries} fresh queries, agreed: {res.verified}")
    lines.append(f"time: learner {res.learner_seconds:.3f} s, oracle {res.oracle_seconds:.3f} s")
    return "\n".join(lines)


def _cmd_random_model(args) -> int:
    seed = fresh_seed() if args.seed is None else args.seed
    if args.transformer:
        for opt, given in (("--merge", args.merge), ("--cancel", args.cancel),
                           ("--entries", args.entries is not None), ("--den", args.den is not None),
                           ("--bias", args.bias), ("--outputs", args.outputs is not None)):
            if given:
                raise BadInput(f"{opt} applies to attention models, not --transformer")
        from exactlearn.transformer_model import random_transformer
        limits.check_model_size(args.d, args.heads, neurons=args.neurons or args.d, m=args.d)
        obj = random_transformer(args.d, args.heads, args.neurons or args.d, seed=seed).to_json()
    else:
        if args.neurons is not None:
            raise BadInput("--neurons applies to --transformer only")
        limits.check_model_size(args.d, args.heads)     # before anything is drawn
        if args.outputs is not None:
            limits.check_outputs_size(args.d, args.heads, args.outputs)
        obj = random_model(args.d, args.heads, seed, args.merge, args.cancel,
                           3 if args.entries is None else args.entries,
                           2 if args.den is None else args.den, bias=args.bias,
                           outputs=args.outputs).to_json()
    obj["seed"] = seed                  # the draw is repeatable: --seed SEED
    text = json.dumps(obj, indent=1)
    if args.out:
        try:
            with open(args.out, "w") as fh:
                fh.write(text + "\n")
        except OSError as exc:
            raise BadInput(f"cannot write {args.out}: {exc.strerror}") from None
    else:
        print(text)
    return 0


def _cmd_demo(args) -> int:
    from exactlearn.demo.walkthrough import run_demo
    model = MultiHeadAttention.from_json(load_json(args.model)) if args.model else None
    if not args.minilm:                    # the walk-through's plan: refused before any output
        from exactlearn.demo.walkthrough import DEFAULT_MODEL
        shown = model or DEFAULT_MODEL
        limits.check_plan_size(shown.d, args.heads or shown.H or 1)
    from exactlearn.cli.real import run_demo_extra
    extra = run_demo_extra(args, model, BadInput)          # --symbolic, --minilm
    if extra is not None:
        return extra
    if args.plot is not None:
        from exactlearn.demo.plot import PlotUnavailable
        try:
            return run_demo(model, heads=args.heads, seed=args.seed, query_range=args.range,
                            plot=args.plot)
        except PlotUnavailable as exc:
            raise BadInput(str(exc)) from None
    return run_demo(model, heads=args.heads, seed=args.seed, query_range=args.range)


def main(argv=None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command == "learn":
            return _cmd_learn(args)
        if args.command == "random-model":
            return _cmd_random_model(args)
        return _cmd_demo(args)
    except (BadInput, ModelError) as exc:
        print(f"exactlearn: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, FieldError) as exc:
        print(f"exactlearn: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
