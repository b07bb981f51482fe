"""Hints a failed attempt's message ends with: what to declare or raise (docs:
reference/api.md#retries; explanation/real-field.md#the-residual-test)."""
from __future__ import annotations

from exactlearn.errors import ClusterError, ExactnessError, HeightExceeded, ModelError


def undeclared_noise_hint(K, a: dict, oracle=None) -> str:
    """A float box over the real field with no ``noise=`` declared is taken to err by its
    field's rounding alone, which a computed layer exceeds: a failure says how to declare it.
    A plain callable (no ``field`` of its own) sent the default exact tokens is told about
    ``tokens=`` too."""
    if K.is_exact or a["noise"] is not None or a["noise_rel"] is not None:
        return ""
    if a["tokens"] in ("exact", None):
        if oracle is None or getattr(_user_box(oracle), "field", None) is not None:
            return ""
        return (" [tokens= was not given, so the box was sent exact rationals (tuples of "
                "gmpy2.mpq), and no noise= was declared: a float layer takes "
                "tokens='float64' (the stable plan) with noise= (a bound on its error) or "
                "noise='auto' to measure it]")
    return (" [no noise= was declared, so the box was taken to err by the field's rounding "
            "alone; a float layer errs by more: give noise= (a bound on its error) or "
            "noise='auto' to measure it]")


def _user_box(oracle):
    """The box the user gave (its :class:`~exactlearn.oracle.TokenAdapter` when tokens were
    converted), out of an outputs= view."""
    from exactlearn.oracle import OutputsView
    return oracle.box if isinstance(oracle, OutputsView) else oracle


def coarse_answer_hint(oracle, K, a: dict) -> str:
    """A float box whose answers are typed float32 (or coarser: a float32 torch tensor, a JAX
    array without x64) rounds them to about 6e-8 of their size; a declared eta below that
    fails at every scale without saying why: say so."""
    from exactlearn.oracle import TokenAdapter
    box = _user_box(oracle)
    dtype = box.coarse if isinstance(box, TokenAdapter) else None
    if K.is_exact or dtype is None or a["noise"] == "auto":
        return ""
    try:
        declared = [float(x) for x in (a["noise"] if isinstance(a["noise"], (list, tuple))
                                       else [a["noise"] or 0])] + [float(a["noise_rel"] or 0)]
    except (TypeError, ValueError):
        return ""
    if max(declared) >= 2.0 ** -24:
        return ""
    return (f" [the black box answered {dtype}: their rounding alone, about "
            f"{2.0 ** -24:.1e} of their size or more, exceeds the declared noise; give "
            f"noise='auto' (or a noise above that rounding), or answer in float64 (JAX: "
            f"jax.config.update('jax_enable_x64', True) before the layer is made)]")


def bound_hint(exc, H, exact_count: bool = False) -> str:
    """A black box with more canonical heads than the bound fails like a degenerate draw or
    a box outside the class: say so, since the bound is the user's to raise.  Over the real
    field ``heads=H`` (``exact_count``) fits exactly H heads to every family, so a box with
    fewer canonical heads fails too: say that as well, and that ``max_heads=`` is the bound.

    >>> bound_hint(ValueError(), 3, exact_count=True).split("; ")[1]
    'over the real field a box with fewer canonical heads fails this way too (heads= is the exact count there, max_heads= a bound)]'
    """
    if (isinstance(exc, (ExactnessError, HeightExceeded, ClusterError, ModelError))
            or not getattr(exc, "bound_hint", True)):
        return ""
    fewer = (f"; over the real field a box with fewer canonical heads fails this way too "
             f"(heads= is the exact count there, max_heads= a bound)" if exact_count else "")
    return (f" [note: a black box with more than {H} canonical head{'s' if H > 1 else ''} "
            f"(the bound) fails this way too: raise heads= / max_heads={fewer}]")
