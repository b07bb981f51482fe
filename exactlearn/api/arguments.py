"""``learn()``'s arguments, checked before anything is drawn or asked (docs: reference/api.md).

:func:`check_arguments` validates every argument in one place (one-line ``ValueError``s,
before any query and before any allocation past the limits), resolves the field, the
retry default, the plan (:func:`exactlearn.strategies.default_plan`) and the strategy
(:func:`exactlearn.strategies.choose`), and returns them as a :class:`Checked`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gmpy2 import mpq

from exactlearn.api.options import check_option_fields
from exactlearn.api.vector import check_outputs, check_outputs_memory
from exactlearn.fields.base import Field
from exactlearn.limits import MAX_RETRIES, MAX_VERIFY_QUERIES, count_problem, default_retries
from exactlearn.oracle import Oracle, TokenAdapter, TransformerOracle, resolve_field
from exactlearn.pipeline.plan import head_bound
from exactlearn.strategies import PLANS, choose, default_plan


@dataclass
class Checked:
    """The checked arguments: the box (adapted to its tokens), the head bound, the field,
    whether answers are converted into it, the retries, the plan, the strategy, and whether
    eta is measured (``noise="auto"``)."""

    oracle: object
    H: int
    K: Field
    convert: bool
    retries: int
    plan: str
    strategy: object
    auto: bool


def field_named(name: str) -> Field:
    """The field of a name, with its defaults (``learn(field="real")``)."""
    from exactlearn.fields import Modular, Rational, Real, Symbolic
    table = {"rational": Rational, "modular": Modular, "symbolic": Symbolic, "real": Real}
    if name not in table:
        raise ValueError(f"field must be a field object or one of {', '.join(table)}, got {name!r}")
    return table[name]()


def plain_int(n):
    """A numpy (or other ``numbers.Integral``) integer as a Python int; anything else as it
    is (checked later).

    >>> import numpy as np
    >>> plain_int(np.int64(3)), plain_int(True), plain_int(2.0)
    (3, True, 2.0)
    """
    import numbers
    if isinstance(n, numbers.Integral) and not isinstance(n, (bool, int)):
        return int(n)
    return n


def check_arguments(oracle, d, heads, max_heads, field, a: dict, options) -> Checked:
    """Every check of ``learn()``'s arguments, in order; ``a`` holds the other keywords
    (the option objects' values merged in)."""
    H = head_bound(d, heads, max_heads)
    if isinstance(field, str):
        field = field_named(field)
    if a["tokens"] != "exact":
        oracle = TokenAdapter(oracle, a["tokens"])
    _check_counts(a)
    plan = a["plan"]
    if plan is not None and plan not in PLANS:
        raise ValueError(f"plan must be one of {', '.join(PLANS)}, got {plan!r}")
    if a["rank"] is not None and plan != "efficient":
        raise ValueError("rank= is a promise for the efficient plan (plan='efficient')")
    if a["rank"] is not None and a["rank"] > d:
        raise ValueError(f"rank must be at most d = {d} (each W_h is d x d), got {a['rank']}")
    K, convert = resolve_field(oracle, field)
    check_option_fields(options, K)
    retries = a["retries"]
    if retries is None:                # the one default policy (docs: reference/api.md#retries)
        retries = default_retries(K.name)
    plan = default_plan(plan, K, a["tokens"])
    auto = _check_real(a, K, plan)
    _check_modular(a, K, plan)
    if a["bias"] not in (True, False):
        raise ValueError(f"bias must be True or False, got {a['bias']!r}")
    _check_vector(oracle, a, K, d, H)
    if auto:
        _check_measurement(d, H, a)
    if a["bias"]:
        check_bias_options(K, plan, a["executor"])
        if a["max_height"] is not None:
            raise ValueError("max_height= does not apply to bias=True yet (the biased plan's "
                             "exponent check is not written for a height bound)")
    strategy = choose(plan, K, a["bias"])
    if a["outputs"] is not None:        # the answers it records, before any query
        check_outputs_memory(d, H, a["outputs"], K, plan,
                             strategy.plan_count(plan, d, H, bias=a["bias"]))
    if a["executor"] is not None and not (K.multimodular and getattr(oracle, "over", None)
                                          and strategy.ASKS_PLAN and not a["trace"]):
        raise ValueError("executor= spreads the paper plan over the modular field with a black "
                         "box that can be asked modulo other primes (a model's Oracle), "
                         "without trace")
    return Checked(oracle, H, K, convert, retries, plan, strategy, auto)


def _check_counts(a) -> None:
    for name, low, high, limit in (
            ("retries", 0, MAX_RETRIES, "MAX_RETRIES"),
            ("verify", 0, MAX_VERIFY_QUERIES, "MAX_VERIFY_QUERIES"),
            ("query_range", 1, None, ""), ("e_range", 1, None, ""), ("rank", 1, None, "")):
        n = a[name]
        problem = None if n is None and name != "verify" else \
            count_problem(name, n, low, high, limit)
        if problem is not None:           # before anything is drawn or asked
            raise ValueError(problem)


def _check_real(a, K, plan) -> bool:
    """The real field's options; True for ``noise="auto"``."""
    noise, noise_rel = a["noise"], a["noise_rel"]
    if noise_rel is not None and K.is_exact:
        raise ValueError(f"noise_rel= applies to the real field, not the {K.name} field")
    if (K.is_exact and noise is not None and noise != "auto"
            and not isinstance(noise, (list, tuple)) and not _is_zero(noise)):
        raise ValueError(f"noise= (the declared bound eta) applies to the real field: the "
                         f"{K.name} field's answers are exact, got noise={noise!r}")
    if a["query_scale"] is not None and K.is_exact:     # not ignored: it would not be run
        raise ValueError(f"query_scale= applies to the real field, not the {K.name} field")
    if a["query_scale"] is not None:
        _check_query_scale(a["query_scale"])
    if noise_rel is not None and not isinstance(noise_rel, str) and noise != "auto":
        from exactlearn.noise import noise_bound
        noise_bound(K, noise_rel, "noise_rel")
    if plan == "paper" and a["tokens"] not in ("exact", None) and not K.is_exact:
        raise ValueError(f"tokens={a['tokens']!r} needs plan='stable' (the default with float "
                         f"tokens): the paper plan runs over exact tokens")
    if isinstance(noise, (list, tuple)) and a["outputs"] is not None:   # one eta per output
        if K.is_exact:
            raise ValueError("noise as a list (one eta per output) needs outputs=m over the real "
                             "field")
        if any([check_noise(x, noise_rel, K, plan) for x in noise] + [False]):
            raise ValueError("noise='auto' is one setting for the whole box, not one per output")
        return False
    return check_noise(noise, noise_rel, K, plan)


def _check_measurement(d, H, a) -> None:
    """``noise="auto"``: the measurement's queries, tokens and recorded answers (all m of
    each query with ``outputs=m``) within the plan limits, before any query
    (docs: reference/cli.md#limits)."""
    from exactlearn.strategies.real.eta import (DRAWS, PERMUTATIONS, PLAN_DRAWS, PLAN_SCALES,
                                                SCALES, STEPPED, measurement_size_problem)
    # the measurement before the probe, and each attempt's on the plan's scales (one batch each)
    for n_scales, draws in ((len(SCALES), DRAWS), (PLAN_SCALES, PLAN_DRAWS)):
        problem = measurement_size_problem(d, H, n_scales, draws, PERMUTATIONS,
                                           steps=a["tokens"] in STEPPED, outputs=a["outputs"] or 1)
        if problem is not None:
            raise ValueError(problem)


def _check_modular(a, K, plan) -> None:
    max_primes, max_height = a["max_primes"], a["max_height"]
    if max_primes is not None and (isinstance(max_primes, bool) or not isinstance(max_primes, int)
                                   or max_primes < 2):
        raise ValueError(f"max_primes must be an integer >= 2, got {max_primes!r}")
    if max_primes is not None and not K.multimodular:
        raise ValueError(f"max_primes applies to the modular field only, not the {K.name} field")
    if max_height is not None:
        if isinstance(max_height, bool) or not isinstance(max_height, int) or max_height < 1:
            raise ValueError(f"max_height must be an integer >= 1, got {max_height!r}")
        if not K.multimodular:
            raise ValueError(f"max_height applies to the modular field only, not the {K.name} field")
        if plan != "paper":
            raise ValueError("max_height applies to the paper plan (plan='paper')")


def _unwrapped(box):
    """The box under exactlearn's own wrappers (:class:`TokenAdapter`, ``NoisyOracle``): the
    model whose d, outputs and kind the checks before any query read."""
    from exactlearn.noise import NoisyOracle
    while isinstance(box, (TokenAdapter, NoisyOracle)):
        box = box.box if isinstance(box, TokenAdapter) else box.oracle
    return box


def _check_vector(oracle, a, K, d, H) -> None:
    model_box = _unwrapped(oracle)      # before any query
    if isinstance(model_box, TransformerOracle):
        raise ValueError("the black box is a one-layer Transformer: learn it with "
                         "learn_transformer() (docs: howto/transformer.md)")
    own = model_box.model.d if isinstance(model_box, Oracle) else (
        getattr(model_box, "d", None) if type(model_box).__module__.startswith("exactlearn.")
        else None)                      # exactlearn's own boxes: adapters, FloatAttention
    if isinstance(own, int) and own != d:
        raise ValueError(f"the black box is a model in d={own}; learn() was given d={d}")
    if a["outputs"] is not None:
        check_outputs(a["outputs"], K, oracle, a["noise"], a["noise_rel"], a["snap"],
                      a["executor"], a["max_height"])
        return
    m = model_box.outputs if isinstance(model_box, Oracle) else None
    if m is not None:
        raise ValueError(f"the black box is a model of {m} outputs (m values per query): "
                         f"pass outputs={m} (docs: explanation/biases.md#vector-outputs)")


def check_bias_options(K, plan, executor) -> None:
    """``bias=True`` runs the plan for biases over the exact fields (also on a Dask cluster,
    ``executor=``, over the modular field) and the stable plan for biases over the real field
    (docs: explanation/biases.md)."""
    if not K.is_exact:
        if plan != "stable":
            raise ValueError(f"bias=True over the {K.name} field needs plan='stable' (the default "
                             f"with float tokens), got plan={plan!r}")
        if executor is not None:
            raise ValueError("bias=True is not supported yet with executor=")
        return
    if plan not in ("paper", None):
        raise ValueError(f"bias=True is not supported yet with plan={plan!r} (the paper plan, "
                         f"extended, only)")


#: query_scale= within [1/QUERY_SCALE_LIMIT, QUERY_SCALE_LIMIT]: beyond it the tokens' float64
#: norms overflow or vanish (the plan's entries are integers up to R times the scale)
QUERY_SCALE_LIMIT = 2 ** 64


def _check_query_scale(scale) -> None:
    """``query_scale=``: a finite rational in ``[2^-64, 2^64]`` (one line before any query)."""
    from exactlearn.fields.base import as_mpq
    try:
        q = mpq(scale) if isinstance(scale, float) else as_mpq(scale)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"query_scale must be a finite number > 0, got {scale!r}") from None
    if not 1 / mpq(QUERY_SCALE_LIMIT) <= q <= QUERY_SCALE_LIMIT:
        size = len(str(abs(q.numerator))) - len(str(q.denominator))
        shown = (repr(scale) if len(repr(scale)) <= 40
                 else f"{'-' if q < 0 else ''}a number of about 10^{size}")
        raise ValueError(f"query_scale must be > 0, within [2^-64, 2^64], got {shown}")


def _is_zero(noise) -> bool:
    """``noise`` is the number 0 (``0``, ``0.0``, ``"0"``, ``mpq(0)``): no bound to declare."""
    from exactlearn.fields.base import as_mpq
    try:
        return bool((as_mpq(noise) if isinstance(noise, str) else noise) == 0)
    except (ValueError, TypeError):
        return False


def check_noise(noise, noise_rel, K, plan) -> bool:
    """True for ``noise="auto"`` (checked: real field, stable plan, no ``noise_rel``); any
    other string must be a number (one-line ``ValueError`` before any query)."""
    if not isinstance(noise, str):
        return False
    if noise == "auto":
        if K.is_exact:
            raise ValueError(f"noise='auto' measures a float box over the real field, not the "
                             f"{K.name} field")
        if plan != "stable":
            raise ValueError("noise='auto' measures eta for the stable plan (plan='stable', the "
                             "default with float tokens)")
        if noise_rel is not None:
            raise ValueError("noise='auto' measures noise_rel too: give one or the other")
        return True
    from exactlearn.fields import Real
    from exactlearn.noise import noise_bound
    try:
        noise_bound(K if not K.is_exact else Real(dps=30), noise)
    except ValueError:
        raise ValueError(f"noise must be a number >= 0 or 'auto', got {noise!r}") from None
    return False
