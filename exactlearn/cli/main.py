"""Command line: ``exactlearn learn | random-model | demo``.

``random-model`` writes a model of :func:`exactlearn.generate.random_model`;
:func:`field_by_name` builds the field named by ``--field`` (the proofs-check
campaigns build theirs here too).

Exit status: 0 certified (or success), 1 a flagged failure, 2 bad input (one
line on stderr, no traceback, nothing on stdout).
"""

from __future__ import annotations

import json
import sys

from exactlearn.errors import ClusterError, FieldError, ModelError, box_failure
from exactlearn.generate import random_model
from exactlearn.io import check_format, load_json
from exactlearn import limits
from exactlearn.model import MultiHeadAttention
from exactlearn.model.attention import FORMAT, FORMAT_BIAS, FORMAT_VECTOR
from exactlearn.transformer_model import FORMAT as TRANSFORMER_FORMAT
from exactlearn.cli.parser import FIELD_NAMES, BadInput, HelpFormatter, build_parser
from exactlearn.cli.summary import summary

__all__ = ["main", "build_parser", "BadInput", "FIELD_NAMES", "HelpFormatter", "field_by_name",
           "make_field", "random_model", "summary", "seeds", "fresh_seed", "check_field_options"]


def fresh_seed() -> int:
    """A seed for a run given no ``--seed``: drawn from the OS, then printed in the JSON
    (``"seed"``) so that the run can be repeated with ``--seed``."""
    import random
    return random.SystemRandom().randrange(2 ** 32)


#: The model files ``exactlearn learn --model`` reads (docs: reference/model-files.md).
MODEL_FORMATS = (FORMAT, FORMAT_BIAS, FORMAT_VECTOR, TRANSFORMER_FORMAT)
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


def _cmd_learn(args) -> int:
    from exactlearn.api import learn
    from exactlearn.oracle import Oracle
    obj = load_json(args.model)
    from exactlearn.cli import real as cli_real
    cli_real.check_tokens(args, BadInput)          # and the plan it implies
    check_field_options(args)
    if args.seed is None:
        args.seed = fresh_seed()
    check_format(obj, MODEL_FORMATS, default=MODEL_FORMATS[0])           # the one message names every format accepted here
    if isinstance(obj, dict) and obj.get("format") == TRANSFORMER_FORMAT:
        if args.bias:
            raise BadInput("--bias applies to attention models (exactlearn.mha/1 or /2), not to a Transformer")
        if args.outputs is not None:
            raise BadInput("--outputs applies to attention models (exactlearn.mha/3), not to a Transformer")
        from exactlearn.cli.transformer import run_cli
        return run_cli(args, obj, make_field)
    model = MultiHeadAttention.from_json(obj)
    limits.check_plan_size(model.d, args.heads or args.max_heads)   # before any allocation
    outputs = _outputs_of(args, model)
    _check_plan_options(args)
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


def _check_plan_options(args) -> None:
    """``--rank`` and ``--bias`` with the plans and options they apply to (bad input)."""
    if getattr(args, "noise_rel", None) is not None and args.plan != "stable":
        raise BadInput("--noise-rel needs --plan stable")     # a Transformer file: run_cli's word
    if args.rank is not None and args.plan != "efficient":
        raise BadInput("--rank needs --plan efficient")
    if args.bias and args.field == "real" and args.plan != "stable":
        raise BadInput(f"--bias over the real field needs --plan stable (the default with --tokens "
                       f"float64 or float32), got --plan {args.plan}")
    if args.bias and args.field != "real" and args.plan != "paper":
        raise BadInput(f"--bias is not supported yet with --plan {args.plan} (the paper plan only)")
    if args.bias and getattr(args, "max_height", None) is not None:
        raise BadInput("--bias is not supported yet with --max-height")


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
    for given, opt in ((getattr(args, "workers", None) is not None or getattr(args, "scheduler", None),
                        "--workers / --scheduler"),
                       (getattr(args, "max_height", None) is not None, "--max-height"),
                       (getattr(args, "snap", False), "--snap")):
        if given:
            given = ("--outputs" if args.outputs is not None       # or read from the file
                     else f"a vector model (exactlearn.mha/3, {m} outputs)")
            raise BadInput(f"{given} is not supported yet with {opt}")
    return m


def seeds(args) -> dict:
    """The JSON's seeds: ``seed`` always, ``noise_seed`` with ``--inject-noise`` (or ``--noise``)."""
    out = {"seed": args.seed}
    if getattr(args, "noise", None) is not None:
        out["noise_seed"] = args.noise_seed if args.noise_seed is not None else args.seed
    return out


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
        for opt, given in (("--merge", args.merge), ("--cancel", args.cancel)):
            if given and args.heads < 2:        # random_model() ignores it there
                raise BadInput(f"{opt} needs --heads 2 or more (two heads share a W or "
                               f"cancel), got --heads {args.heads}")
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
    if model is not None and model.outputs is not None:
        raise BadInput(f"demo walks through a scalar model (exactlearn.mha/1 or /2); this file "
                       f"has {model.outputs} outputs (exactlearn.mha/3): learn it with "
                       f"exactlearn learn --model {args.model}")
    if model is not None and not model.H and not args.heads:
        raise BadInput("the model file has no heads: the walk-through needs one at least")
    if not args.minilm:                    # the walk-through's plan: refused before any output
        from exactlearn.demo.walkthrough import DEFAULT_MODEL
        shown = model or DEFAULT_MODEL
        limits.check_plan_size(shown.d, args.heads or shown.H or 1)
    from exactlearn.cli.real import run_demo_extra
    extra = run_demo_extra(args, model, BadInput)          # --symbolic, --minilm
    if extra is not None:
        return extra
    if args.plot is not None:
        from exactlearn.demo.plot import PlotUnavailable, pyplot
        _check_writable(args.plot, "--plot")          # before the walk-through prints anything
        try:
            pyplot()
            return run_demo(model, heads=args.heads, seed=args.seed, query_range=args.range,
                            plot=args.plot)
        except PlotUnavailable as exc:
            raise BadInput(str(exc)) from None
    return run_demo(model, heads=args.heads, seed=args.seed, query_range=args.range)


def _check_writable(path: str, option: str) -> None:
    import os
    from exactlearn.cli.paths import check_output_file
    check_output_file(path, option, BadInput)
    ext = os.path.splitext(path)[1][1:].lower()
    if ext:                             # a format matplotlib writes (none given: png)
        try:
            from matplotlib.backend_bases import FigureCanvasBase
        except ImportError:             # the plot itself says what to install
            pass
        else:
            formats = FigureCanvasBase.get_supported_filetypes()
            if ext not in formats:
                raise BadInput(f"cannot write {option} {path}: .{ext} is not a figure format "
                               f"(one of {', '.join(sorted(formats))})")


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
    except Exception as exc:            # the box's own exception, memory, or a bad value
        reason = box_failure(exc)
        if reason is None and isinstance(exc, MemoryError):
            reason = "out of memory (lower --outputs, d or the head bound)"
        if reason is None and not isinstance(exc, (ValueError, FieldError)):
            raise
        print(f"exactlearn: error: {reason or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
