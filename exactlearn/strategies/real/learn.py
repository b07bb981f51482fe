"""The largest parameter error of a real result against the true heads (docs:
explanation/real-field.md; docs/reference/api.md): what the tests, benchmarks and
``proofs-check`` compare a certified ``error_bound`` with.

Over :class:`~exactlearn.fields.real.Real` one pipeline learns, whatever the plan
(:mod:`exactlearn.strategies.real`): the paper plan (``plan="paper"``, the default with exact
tokens) is the stable pipeline at the paper's nodes ``k = 0 .. 2H``.

>>> from exactlearn import MultiHeadAttention, Oracle, learn
>>> from exactlearn.fields.real import Real
>>> model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
>>> res = learn(Oracle(model, Real(dps=40)), d=2, heads=1, seed=1)
>>> err, _ = max_parameter_error(res.heads, model.canonical_heads(), Real(dps=40))
>>> res.status, res.to_json()["exact"], err <= res.error_bound < 1e-20
('certified', False, True)
"""

from __future__ import annotations

from exactlearn.model import is_matrix

__all__ = ["max_parameter_error"]

#: names this module re-exported when it drove the paper plan's own pipeline: where they live now
_MOVED = {"verify_real": "certificate", "RealOutcome": "certificate", "SAFETY": "certificate",
          "cayley": "stable_plan", "EQUAL_FACTOR": "stable_plan", "PAPER_TARGET": "stable_plan",
          "LO": "sensitivity", "rounding": "sensitivity", "NOISE_FACTOR": "sensitivity",
          "check_noise": "sensitivity", "evaluate_with_bounds": "evaluate",
          "NoisierThanDeclared": "errors", "CertificateError": "errors"}
#: names of that pipeline's own steps, removed with it (docs/explanation/real-field.md)
_REMOVED = ("run_real", "orthogonal_plan", "scaled_plan", "scale_for", "probe_families",
            "probe_scale", "Sens", "sens_context", "Fit", "fit_family_with_sensitivities",
            "label_real", "PROBE_TRIES", "PROBE_SAMPLES", "PAPER_LINEAR_LIMIT",
            "PAPER_UNEQUAL_FACTOR", "LINEAR_LIMIT", "UNEQUAL_FACTOR", "TARGET")


def __getattr__(name):
    """The old names of :data:`_MOVED` from their new modules, with a ``DeprecationWarning``;
    those of :data:`_REMOVED` raise an ``AttributeError`` that says why.

    >>> import warnings
    >>> from exactlearn.strategies.real import learn
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     learn.SAFETY, caught[0].category.__name__
    (2, 'DeprecationWarning')
    >>> learn.run_real
    Traceback (most recent call last):
    AttributeError: exactlearn.strategies.real.learn.run_real was a step of the paper plan's own pipeline over the real field, removed: plan="paper" runs exactlearn.strategies.real.stable.run_stable at the paper's nodes (docs/explanation/real-field.md)
    """
    import warnings
    if name in _MOVED:
        from exactlearn import errors
        from exactlearn.strategies.real import certificate, evaluate, sensitivity, stable_plan
        home = {"certificate": certificate, "stable_plan": stable_plan, "errors": errors,
                "sensitivity": sensitivity, "evaluate": evaluate}[_MOVED[name]]
        warnings.warn(f"exactlearn.strategies.real.learn.{name} is deprecated: use "
                      f"{home.__name__}.{name}", DeprecationWarning, stacklevel=2)
        return getattr(home, name)
    if name in _REMOVED:
        raise AttributeError(f"{__name__}.{name} was a step of the paper plan's own pipeline over "
                             f"the real field, removed: plan=\"paper\" runs "
                             f"exactlearn.strategies.real.stable.run_stable at the paper's nodes "
                             f"(docs/explanation/real-field.md)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def max_parameter_error(recovered, truth, K) -> tuple:
    """(largest |entry difference| over W, v and u, and the constants, pairing) between
    recovered heads and the true heads, pairing each true head with the nearest recovered one
    (u and the constant are 0 for heads and results without biases, docs/explanation/biases.md).

    Raises ValueError when the numbers of heads differ or the pairing is not one-to-one.
    """
    def flat(c):                        # a number, or a length-m tuple (vector outputs)
        return [K(x) for x in c] if isinstance(c, (tuple, list)) else [K(c)]

    cr, ct = flat(getattr(recovered, "constant", 0)), flat(getattr(truth, "constant", 0))
    if len(cr) != len(ct):
        cr, ct = cr + [K.zero] * (len(ct) - len(cr)), ct + [K.zero] * (len(cr) - len(ct))
    constants = max((abs(a - b) for a, b in zip(cr, ct)), default=K.zero)
    truth = list(truth)
    recovered = list(recovered)
    if len(truth) != len(recovered):
        raise ValueError(f"{len(recovered)} recovered heads, {len(truth)} true heads")

    def entries(h):                     # v a vector, or an m x d matrix (vector outputs)
        v = [x for row in h.v for x in row] if is_matrix(h.v) else h.v
        return [K(x) for row in h.W for x in row] + [K(x) for x in v] + [K(x) for x in h.u]

    rec = [entries(h) for h in recovered]
    used, worst, pairing = set(), K.zero, []
    for ht in truth:
        et = entries(ht)
        dist = [max(abs(a - b) for a, b in zip(er, et)) for er in rec]
        best = min(range(len(rec)), key=dist.__getitem__)
        if best in used:
            raise ValueError("the recovered heads do not pair one-to-one with the true heads")
        used.add(best)
        pairing.append(best)
        worst = max(worst, dist[best])
    return max(worst, constants), pairing
