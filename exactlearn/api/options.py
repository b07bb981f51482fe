"""The field- and plan-specific options of ``learn()``, grouped in typed objects (docs: reference/api.md#options).

``learn()`` keeps its common arguments (the box, ``d``, the head count, the field, the
seed, the range, retries, ``verify``, ``plan``, ``tokens``, ``bias``, ``outputs``); the
options that belong to one field or plan are grouped:

* [`RealOptions`][exactlearn.api.options.RealOptions]: the real field's declared noise
  ``noise`` and ``noise_rel``, its ``query_scale`` and ``snap``;
* [`ModularOptions`][exactlearn.api.options.ModularOptions]: the modular field's
  ``max_primes``, ``max_height`` and ``executor`` (a Dask client);
* [`EfficientOptions`][exactlearn.api.options.EfficientOptions]: the efficient plan's
  ``rank``.

Pass them as ``learn(box, d, ..., options=RealOptions(noise=1e-12))``, or several as a
tuple.  The flat keywords of the same names (``learn(..., noise=1e-12)``) keep working and
mean the same; giving one option both ways is a one-line ``ValueError``.

>>> from exactlearn.api.options import RealOptions, merge_options
>>> merge_options(RealOptions(noise=1e-12), {"noise": None, "snap": False})["noise"]
1e-12
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class RealOptions:
    """The real field's options (docs: explanation/real-field.md).

    Parameters
    ----------
    noise : float, str, list or None
        The declared bound eta on the absolute error of every output (default: the box's
        ``noise``, else 0); ``"auto"`` measures it (stable plan); with ``outputs=m`` a list
        of m.  The same as ``learn(noise=...)``.
    noise_rel : float or None
        A relative output error on top of ``noise`` (stable plan).
    query_scale : number or None
        The scale of the queries (default: found by a probe, counted in ``probe_queries``).
    snap : bool
        Paper plan: add bounded-height rationals certified against the observations.
    """

    noise: object = None
    noise_rel: object = None
    query_scale: object = None
    snap: bool = False


@dataclass(frozen=True)
class ModularOptions:
    """The modular field's options (docs: explanation/multimodular.md).

    Parameters
    ----------
    max_primes : int or None
        At most this many primes (>= 2) for the multi-modular method.
    max_height : int or None
        Paper plan: a declared bound B on the numerators and denominators of the canonical
        heads; primes are combined until their product exceeds ``2 B^2``.
    executor : distributed.Client or None
        A Dask client that spreads the paper plan over its cluster
        (docs: howto/dask-campaign.md).
    """

    max_primes: int | None = None
    max_height: int | None = None
    executor: object = None


@dataclass(frozen=True)
class EfficientOptions:
    """The efficient plan's options (docs: explanation/efficient-plan.md).

    Parameters
    ----------
    rank : int or None
        A promise that every head has rank at most r.
    """

    rank: int | None = None


#: The option objects, each for one field or plan.
OPTION_TYPES = (RealOptions, ModularOptions, EfficientOptions)

#: Each option's value when not given (the flat keyword's default).
_UNSET = {"noise": None, "noise_rel": None, "query_scale": None, "snap": False,
          "max_primes": None, "max_height": None, "executor": None, "rank": None}


def option_objects(options) -> tuple:
    """``options=`` as a tuple of option objects, at most one of each type (one-line
    ``ValueError`` otherwise)."""
    if options is None:
        return ()
    given = tuple(options) if isinstance(options, (tuple, list)) else (options,)
    seen = set()
    for obj in given:
        if not isinstance(obj, OPTION_TYPES):
            raise ValueError(f"options must be RealOptions, ModularOptions or EfficientOptions "
                             f"(or a tuple of them), got {type(obj).__name__}")
        if type(obj) in seen:
            raise ValueError(f"options has two {type(obj).__name__} objects: give one")
        seen.add(type(obj))
    return given


def is_set(name: str, value) -> bool:
    """Whether an option was given: its value differs from the keyword's default."""
    default = _UNSET[name]
    return value is not default and not (default is False and value is False)


def merge_options(options, flat: dict) -> dict:
    """The flat keywords ``flat`` (name to value) with the option objects' values filled
    in; an option given both as a keyword and in an object is a one-line ``ValueError``."""
    merged = dict(flat)
    for obj in option_objects(options):
        for f in fields(obj):
            value = getattr(obj, f.name)
            if not is_set(f.name, value):
                continue
            if is_set(f.name, merged.get(f.name, _UNSET[f.name])):
                raise ValueError(f"{f.name} is given twice: as the keyword {f.name}= and in "
                                 f"{type(obj).__name__}: give it once")
            merged[f.name] = value
    return merged


def check_option_fields(options, K) -> None:
    """An option object given for another field is a one-line ``ValueError`` (before any
    query); the efficient plan's ``rank`` is checked with the plan."""
    for obj in option_objects(options):
        if not any(is_set(f.name, getattr(obj, f.name)) for f in fields(obj)):
            continue
        if isinstance(obj, RealOptions) and K.is_exact:
            raise ValueError(f"RealOptions applies to the real field, not the {K.name} field")
        if isinstance(obj, ModularOptions) and not K.multimodular:
            raise ValueError(f"ModularOptions applies to the modular field, not the {K.name} "
                             f"field")
