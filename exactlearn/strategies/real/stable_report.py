"""The stable pipeline's account of a run, ``real_detail`` of its result
(:mod:`~exactlearn.strategies.real.stable`; docs/reference/json.md): the certified estimate,
the certificate's ratios, the route's families, the probe, the plan's own count; and the
run's :class:`~exactlearn.strategies.real.certificate.RealOutcome` (:func:`outcome`).
"""
from __future__ import annotations

from exactlearn.errors import clip
from exactlearn.model import HeadSet
from exactlearn.strategies.real.certificate import RealOutcome
from exactlearn.strategies.real.ratio import MAX_COPIES
from exactlearn.strategies.real.sensitivity import LO
from exactlearn.strategies.real.stable_plan import (EQUAL_FACTOR, PAPER_TARGET,
                                                    STABLE_UNEQUAL_FACTOR, stable_count)
from exactlearn.strategies.real.stable_probe import STABLE_TARGET


def run_account(route, est, head_b, n_cert, ratios, resolution, *, sigma, tries, n_probe, nodes,
                paper, eta, eta_rel, d, H, bias, n_target, scale_etas=None) -> dict:
    """The run's account (``real_detail``): the certified estimate ``est`` (its per-head
    bounds ``head_b``) on ``n_cert`` observations, the certificate's two ratios, the route's
    families and the probe; ``paper``: the paper plan's (its ``nodes``)."""
    splan, fits, index, far = route.splan, route.fits, route.index, route.far
    worst_ratio, resid_ratio = ratios
    name = lambda n: f"{splan.configs[n].kind}{(splan.configs[n].i + 1, splan.configs[n].j + 1)}"
    detail = {
        "plan": ("paper: q_k = (a^k, x), k = 0 .. 2H, fitted in the field's precision" if paper
                 else "stable: ratio families t = k/m geometric on [1/%d, %d], %d finite nodes, "
                 "weighted least squares" % (MAX_COPIES, MAX_COPIES, len(nodes) - 2)),
        "certificate": "within tolerance (noise + propagated parameter uncertainty); not exact",
        "certified_observations": n_cert,
        "max_residual_over_tolerance": f"{worst_ratio:.3g}",
        "max_residual_over_noise_allowance": (None if resid_ratio is None
                                              else f"{float(resid_ratio):.3g}"),
        "eta": f"{float(eta):.6g}", "eta_rel": f"{float(eta_rel):.6g}",
        "head_error_bounds": [f"{b:.3g}" for b in head_b],
        "matching": f"per relation: equal within {EQUAL_FACTOR}, unequal beyond "
                    f"{STABLE_UNEQUAL_FACTOR} first-order bounds",
        "max_relative_pole_error_bound": f"{route.worst_rel:.3g}",
        "max_abs_exponent":
            f"{max((abs(float(x)) for f in fits.values() for x in f.logs), default=0.0):.4g}",
        "query_scale": str(sigma), "scale_rule": "dyadic near-orthogonal X, E; sigma^2 brings the "
        f"probe's rms log rho to about {PAPER_TARGET if paper else STABLE_TARGET}",
        "probe": tries, "probe_queries": n_probe,
        "stable_plan_queries": stable_count(d, H, bias, nodes=nodes),
        "unresolved_configurations": {name(n): clip(e, 160) for n, e in route.bad.items()},
        "unlabelled_configurations": [name(n) for n in fits
                                      if n not in index and n < len(splan.configs)],
        "supplementary_families": route.supplementary,
        "estimate": est.method,
        "start": "pencil" if far else "solve",
        "targeted_families": n_target,
        "rescued_configurations": {name(n): f for n, f in route.rescued.items()},
    }
    if resolution is not None:
        detail["resolution_test"] = resolution
    if scale_etas is not None:
        detail["eta_by_scale"] = scale_etas
    if bias:
        detail["bias"] = ("u and c learned (docs/explanation/biases.md): d + 1 final tokens, "
                          "across families at the midpoints (x_0 + x_i)/2")
        detail["constant_error_bound"] = f"{est.Bc:.3g}"
    if far:
        detail["pencil"] = route.pencil
        detail["max_relative_pole_error_bound"] = "n/a (pencil start: no family fitted)"
    return detail


def outcome(est, head_b, detail, sigma, n_probe, eta, etas, bias) -> tuple:
    """``(heads, RealOutcome)`` of the certified estimate ``est`` (with biases the heads a
    :class:`~exactlearn.model.HeadSet` with the constant, and its u and c bounds set)."""
    heads, BW, Bv, Bu, Bc, const = est.heads, est.BW, est.Bv, est.Bu, est.Bc, est.constant
    err = max(head_b + ([Bc] if bias else []), default=0.0)
    out = RealOutcome(sigma=sigma, probe_queries=n_probe, error_bound=LO.convert(err),
                      head_bounds=[LO.convert(b) for b in head_b], eta=eta, detail=detail,
                      W_bounds=[[[LO.convert(x) for x in row] for row in bw] for bw in BW],
                      v_bounds=[[LO.convert(x) for x in bv] for bv in Bv], etas=etas)
    if not bias:
        return tuple(heads), out
    out.u_bounds = [[LO.convert(x) for x in bu] for bu in Bu]
    out.c_bound = LO.convert(Bc)
    out.constant = const
    return HeadSet(heads, constant=const, bias=True), out
