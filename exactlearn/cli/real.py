"""Command-line pieces for the real field, noisy oracles, snapping and the extra demos.

Kept out of :mod:`exactlearn.cli.main` so that its start-up stays light: nothing here imports
mpmath or sympy until a run needs it.

``exactlearn learn`` gains ``--inject-noise ETA [--noise-seed S]`` (a seeded
:class:`~exactlearn.noise.NoisyOracle`, real field only; ``--noise`` is its deprecated
spelling), ``--declared-noise auto|ETA`` (the eta the learner trusts, ``learn(noise=)``;
``auto`` measures it), ``--tokens float64|float32|float`` (the model file evaluated in that
float type by :class:`~exactlearn.floatbox.FloatAttention`, asked with float tokens,
``learn(tokens=)``), ``--query-scale S`` (fix the token scale, no probe), ``--snap``; over the real field the JSON has ``"exact": false``
(the result is certified within tolerance, not exactly; ``status`` stays ``"certified"``),
``error_bound``, ``probe_queries``, ``real_detail`` and ``model_error`` (the largest
difference from the model file's canonical heads: the CLI knows the file, the learner
never sees it).  ``exactlearn demo`` gains ``--symbolic`` and ``--minilm``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from exactlearn.cli.numbers import integer_option
from exactlearn.cli.paths import check_output_file

#: What ``--tokens`` may name: ``learn(tokens=)``'s kinds (:data:`exactlearn.oracle.TOKEN_KINDS`).
TOKEN_CHOICES = ("exact", "float", "float64", "float32")


class _NoiseOption(argparse.Action):
    """``--inject-noise ETA``, or its deprecated spelling ``--noise ETA``: stores ETA and
    the spelling used (``args.noise_option``), so that messages name the option given."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:     # no silent last-one-wins
            raise argparse.ArgumentError(self, f"given twice ({namespace.noise_option} "
                                               f"{getattr(namespace, self.dest)}, then "
                                               f"{option_string} {values}): give it once")
        setattr(namespace, self.dest, values)
        namespace.noise_option = option_string


def add_learn_options(lp) -> None:
    lp.set_defaults(noise_option="--inject-noise")
    lp.add_argument("--inject-noise", "--noise", dest="noise", action=_NoiseOption, default=None,
                    metavar="ETA",
                    help="perturb every oracle output by a seeded uniform amount in [-ETA, ETA] "
                         "and declare eta = ETA (real field; default: no noise); the learner "
                         "reports error_bound.  --noise is its deprecated spelling")
    lp.add_argument("--tokens", choices=TOKEN_CHOICES, default="exact",
                    help="what the black box is asked with: exact rationals (the model file's "
                         "exact oracle), or floats, the model file then evaluated in that float "
                         "type by numpy (float: Python floats, evaluated in float64); float "
                         "tokens need --field real and --plan stable (the default with them) and, without "
                         "--declared-noise or --noise-rel, --declared-noise auto")
    lp.add_argument("--noise-seed", type=integer_option("--noise-seed"), default=None,
                    help="seed of the noise (default: --seed)")
    lp.add_argument("--query-scale", default=None, metavar="S",
                    help="real field: scale the unit query tokens by S (default: a probe "
                         "chooses the scale)")
    lp.add_argument("--noise-rel", default=None, metavar="ETA_REL",
                    help="real field, --plan stable: the outputs are also trusted to ETA_REL "
                         "times |y| (relative output error; default: none)")
    lp.add_argument("--declared-noise", default=None, metavar="auto|ETA",
                    help="real field: the output error the learner trusts, a number, or 'auto' "
                         "(--plan stable): measured from the box's spread under permutations "
                         "of the non-final tokens, its queries counted (default: --inject-noise's "
                         "ETA, else auto with --tokens float*, else 0; unlike --inject-noise it "
                         "adds no noise)")
    lp.add_argument("--snap", action="store_true",
                    help="turn real results into bounded-height rationals and certify them")


def check_tokens(args, bad_input) -> None:
    """``--tokens`` against the other options (one line, exit 2), and the plan it implies:
    ``--plan`` left out is ``stable`` with float tokens, ``paper`` otherwise."""
    floats = getattr(args, "tokens", "exact") != "exact"
    args.plan_given = args.plan is not None     # a Transformer file refuses it (even paper)
    if args.plan is None:
        args.plan = "stable" if floats and args.field == "real" else "paper"
    if not floats:
        return
    if args.field != "real":
        raise bad_input(f"--tokens {args.tokens} needs --field real (a float box's answers are "
                        f"not exact values of the {args.field} field)")
    if args.plan != "stable":
        raise bad_input(f"--tokens {args.tokens} needs --plan stable (the {args.plan} plan's "
                        f"query tokens are not float numbers)")
    if args.noise is not None:
        raise bad_input(f"{args.noise_option} needs --tokens exact: a float box's own rounding is "
                        f"its noise (declare it with --declared-noise)")
    if args.query_scale is not None:
        raise bad_input(f"--query-scale needs --tokens exact (the stable plan's float tokens "
                        f"choose their own scale)")


def wrap_oracle(args, oracle, bad_input):
    """The black box of ``exactlearn learn``: the oracle, a NoisyOracle with
    ``--inject-noise`` (or its deprecated spelling ``--noise``, said in one line on stderr),
    or with ``--tokens float64|float32|float`` the model file evaluated in floats
    (:class:`~exactlearn.floatbox.FloatAttention`, float64 for ``float``)."""
    if getattr(args, "tokens", "exact") != "exact":
        from exactlearn.floatbox import FloatAttention
        return FloatAttention(oracle.model, "float32" if args.tokens == "float32" else "float64")
    if args.noise is None:
        return oracle
    option = args.noise_option
    rational_option(args.noise, option, bad_input, positive=False)
    if oracle.field.is_exact:
        raise bad_input(f"{option} needs --field real (the {oracle.field.name} field is exact)")
    from exactlearn.noise import NoisyOracle
    seed = args.noise_seed if args.noise_seed is not None else args.seed
    return NoisyOracle(oracle, args.noise, seed=seed)


def warn_deprecated(args) -> None:
    """One line on stderr for a deprecated spelling that was used (``--noise``)."""
    if getattr(args, "noise_option", None) == "--noise":
        print("exactlearn: warning: --noise is deprecated: use --inject-noise ETA (it injects "
              "noise; --declared-noise ETA declares the bound without adding any)", file=sys.stderr)


def retries(args) -> int:
    """``--retries N``, or without it the one default policy for ``--field``
    (:data:`exactlearn.limits.DEFAULT_RETRIES`; docs: reference/cli.md)."""
    from exactlearn.limits import default_retries
    return args.retries if args.retries is not None else default_retries(args.field)


def learn_options(args, bad_input) -> dict:
    out = {"snap": bool(args.snap)}
    if args.query_scale is not None:
        out["query_scale"] = rational_option(args.query_scale, "--query-scale", bad_input,
                                             positive=True)
    if getattr(args, "noise_rel", None) is not None:
        out["noise_rel"] = rational_option(args.noise_rel, "--noise-rel", bad_input,
                                           positive=False)
    declared = getattr(args, "declared_noise", None)
    if (declared is None and getattr(args, "tokens", "exact") != "exact" and "noise_rel" not in out
            and args.plan == "stable"):
        declared = "auto"                 # a float box's rounding, measured (documented default)
    if getattr(args, "tokens", "exact") != "exact":
        out["tokens"] = args.tokens
    if declared is not None:
        if declared == "auto":
            if args.plan != "stable":
                raise bad_input("--declared-noise auto needs --plan stable")
            if "noise_rel" in out:
                raise bad_input("--declared-noise auto measures the relative part too: drop "
                                "--noise-rel")
            out["noise"] = "auto"
        else:
            out["noise"] = rational_option(declared, "--declared-noise", bad_input,
                                           positive=False)
    return out


def rational_option(value, name, bad_input, positive):
    """The exact rational of an option's value (``"1e-15"``, ``"1/3"``): bad input (one line,
    exit 2) when it is not a number, or not > 0 (``positive``) / not >= 0."""
    from exactlearn.fields.base import as_mpq
    try:
        q = as_mpq(value)
    except ValueError as exc:
        raise bad_input(f"{name}: {exc}") from None
    if positive and q <= 0:
        raise bad_input(f"{name} must be > 0")
    if not positive and q < 0:
        raise bad_input(f"{name} must be >= 0")
    return q


#: learn() keywords that failure messages name, and the flags that set them on the command line
FLAGS = {"max_heads": "--max-heads", "heads": "--heads", "noise_rel": "--noise-rel",
         "noise": "--declared-noise", "retries": "--retries", "query_scale": "--query-scale"}
#: a keyword named as such (``noise=,``, ``noise='auto'``), not one reporting a value
#: (``(noise=6.7e-8, dps=50)`` stays as written)
_KEYWORD = re.compile(r"\b(" + "|".join(FLAGS) + r")=(?:'(\w+)'|(?![\w.+-]))")


def flag_words(text):
    """A failure message as the command line says it: each learn() keyword it names
    (``noise=``, ``noise='auto'``, ``max_heads=``) as its flag (``--declared-noise``,
    ``--declared-noise auto``, ``--max-heads``); the learner's messages name keywords.

    >>> flag_words("declare a larger noise=, or use noise='auto'; raise heads= / max_heads=")
    'declare a larger --declared-noise, or use --declared-noise auto; raise --heads / --max-heads'
    >>> flag_words("its sample-noise bound 0.00214 (noise=6.7e-8, dps=50)")
    'its sample-noise bound 0.00214 (noise=6.7e-8, dps=50)'
    """
    if not text:
        return text
    return _KEYWORD.sub(lambda m: FLAGS[m.group(1)] + (f" {m.group(2)}" if m.group(2) else ""),
                        text)


def model_error(res, model):
    """Largest entry difference between certified real heads and the model's canonical
    heads (None when not comparable)."""
    if res.field.is_exact or not res.certified:
        return None
    from exactlearn.strategies.real.learn import max_parameter_error
    try:
        err, _ = max_parameter_error(res.heads, model.canonical_heads(), res.field)
    except ValueError:
        return None
    return res.field.ctx.nstr(err, 6)


def to_json(res, model, extra=None) -> str:
    """``learn --json``: the result's JSON, ``model_error`` over the real field, and ``extra``
    (the command line adds the seeds)."""
    out = res.to_json()
    out.update(extra or {})
    if not res.field.is_exact:
        out["model_error"] = model_error(res, model)
    return json.dumps(out)


def summary_lines(res, model) -> list:
    lines = []
    if res.probe_queries:
        lines.append(f"probe queries: {res.probe_queries} (included in queries; the "
                     f"{'stable plan' if res.plan == 'stable' else 'paper plan'} count is "
                     f"{res.plan_queries})")
    if res.noise_estimated is not None:
        est = res.noise_estimated
        at = (f" at the plan's scale {est['query_scale']} (each of the {len(est['by_scale'])} "
              f"scales it asks measured apart: noise_estimated.by_scale)"
              if est.get("by_scale") else "")
        lines.append(f"noise measured: eta = {float(est['noise']):.3g} + {float(est['noise_rel']):.3g}"
                     f" |y|{at} ({est['safety']} x the permutation spread; {res.noise_queries} "
                     f"queries, included in queries)")
    if res.real_detail is not None and res.certified:
        det = res.real_detail
        lines.append(f"query scale: {det.get('query_scale')}  certificate: {det.get('certificate')}")
        lines.append(f"error bound (largest parameter error): {float(res.error_bound):.3e}")
        if det.get("head_bound_caveat"):
            lines.append(f"note: {det['head_bound_caveat']}")
        if model is not None:
            lines.append(f"largest difference from the model file's heads: {model_error(res, model)}")
    if res.snap is not None:
        lines.append(f"snap: {res.snap.get('status')}"
                     + (f" ({res.snap['reason']})" if res.snap.get("reason") else ""))
        for n, h in enumerate(res.snap.get("heads", []), 1):
            lines.append(f"  snapped head {n}: W = {h['W']}, v = {h['v']}")
    return lines


def add_demo_options(dp) -> None:
    dp.add_argument("--symbolic", action="store_true",
                    help="run over Q(T): f(q_k) as an explicit function of k and T")
    dp.add_argument("--minilm", action="store_true",
                    help="learn the 12 heads of an all-MiniLM-L6-v2 layer in a random subspace "
                         "(needs the 'minilm' extra)")
    dp.add_argument("--layer", type=integer_option("--layer"), default=None, help="MiniLM layer 0..5 (default 0)")
    dp.add_argument("--dprime", type=integer_option("--dprime"), default=None,
                    help="MiniLM subspace dimension d' (default 3)")
    dp.add_argument("--subspace-seed", type=integer_option("--subspace-seed"), default=None,
                    help="seed of the MiniLM subspace (default 0)")
    dp.add_argument("--dps", type=integer_option("--dps"), default=None,
                    help="digits of the real field (MiniLM; default 100)")
    dp.add_argument("--write", default=None, metavar="FILE",
                    help="write the MiniLM subspace model (exactlearn.mha/1, decimal strings; "
                         "default: not written)")


#: ``exactlearn demo`` options that need ``--minilm`` (refused without it, exit 2)
MINILM_OPTIONS = {"--layer": "layer", "--dprime": "dprime", "--subspace-seed": "subspace_seed",
                  "--dps": "dps", "--write": "write"}


def run_demo_extra(args, model, bad_input) -> int | None:
    """``--symbolic`` / ``--minilm``; None when neither was asked for."""
    if args.symbolic and args.minilm:
        raise bad_input("give --symbolic or --minilm, not both")
    if not args.minilm:
        for opt, dest in MINILM_OPTIONS.items():
            if getattr(args, dest) is not None:
                raise bad_input(f"{opt} applies to demo --minilm only")
    if args.plot is not None and (args.symbolic or args.minilm):
        raise bad_input("--plot draws the rational walk-through; it does not apply to "
                        + ("--symbolic" if args.symbolic else "--minilm"))
    if args.symbolic:
        from exactlearn.demo.walkthrough import run_demo
        return run_demo(model, heads=args.heads, seed=args.seed, query_range=args.range,
                        symbolic=True)
    if args.minilm:
        from exactlearn.demo.minilm import MiniLMUnavailable, run_minilm_demo
        for dest, default in (("layer", 0), ("dprime", 3), ("subspace_seed", 0), ("dps", 100)):
            if getattr(args, dest) is None:
                setattr(args, dest, default)
        for bad, says in ((not 0 <= args.layer < 6, f"--layer must be 0..5, got {args.layer}"),
                          (args.dprime < 1, f"--dprime must be >= 1, got {args.dprime}"),
                          (args.dps < 20, f"--dps must be >= 20, got {args.dps}")):
            if bad:
                raise bad_input(says)
        from exactlearn.limits import check_dps, check_plan_size
        check_dps(args.dps)
        check_plan_size(args.dprime, 12)           # the layer's 12 heads in d' dimensions
        if args.write is not None:
            check_output_file(args.write, "--write", bad_input)   # before the layer is built
        try:
            return run_minilm_demo(layer=args.layer, dprime=args.dprime, seed=args.subspace_seed,
                                   dps=args.dps, learn_seed=args.seed, write=args.write)
        except MiniLMUnavailable as exc:
            raise bad_input(str(exc)) from None
        except OSError as exc:
            raise bad_input(f"cannot write {args.write}: {exc.strerror}") from None
    return None

