"""Learning over the real field: query scaling, error propagation, tolerance certificate
(docs: explanation/real-field.md; the paper's
approximate-oracle conditions, arXiv:2608.03294).

Over :class:`~exactlearn.fields.real.Real` nothing is exact, so the paper's plan is run
with three additions.  :func:`run_real` is what :func:`exactlearn.api.learn` calls for
an inexact field and the paper plan; one module does each step:

1. **Directions and scale** (:mod:`~exactlearn.strategies.real.probe`): exactly
   orthogonal rational X and E (Cayley), scaled by ``sigma = sqrt(1 / rms log rho)`` of
   a probe, to 1/16; queries are asked once each (:class:`~exactlearn.pipeline.ask.AskOnce`).
2. **Error propagation** (:mod:`~exactlearn.strategies.real.sensitivity`): every
   derived quantity is a linear functional of the observation errors, bounded by the
   worst case from ``eta_q``.  Each family is fitted with its sensitivities
   (:mod:`~exactlearn.strategies.real.fit`), V and the noise checks follow
   (:mod:`~exactlearn.strategies.real.analysis`), the heads come from a weighted least
   squares solve (:mod:`~exactlearn.strategies.real.solve`); ``error_bound`` is the
   largest a-posteriori bound on a parameter.
3. **Decisions and the certificate**: matching runs the one labelling traversal of
   :func:`exactlearn.pipeline.match.label_heads` with relations decided against their
   own bounds (equal within 10, unequal beyond 1e5, undecided -- a failure -- between);
   every observation must be reproduced within ``eta_q`` plus the effect of the
   parameter bounds (:mod:`~exactlearn.strategies.real.certificate`, evaluated by
   :mod:`~exactlearn.strategies.real.evaluate`).  A box noisier than declared fails with
   :class:`NoisierThanDeclared`.  Optionally the heads are snapped to bounded-height
   rationals (:mod:`~exactlearn.strategies.real.snap`).

>>> from exactlearn import MultiHeadAttention, Oracle, learn
>>> from exactlearn.fields.real import Real
>>> model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
>>> res = learn(Oracle(model, Real(dps=40)), d=2, heads=1, seed=1)
>>> err, _ = max_parameter_error(res.heads, model.canonical_heads(), Real(dps=40))
>>> res.status, res.to_json()["exact"], err <= res.error_bound < 1e-20
('certified', False, True)
"""

from __future__ import annotations

from gmpy2 import mpq

from exactlearn.errors import CertificateError, NoisierThanDeclared
from exactlearn.fields.rational import QQ
from exactlearn.noise import noise_bound
from exactlearn.model import is_matrix
from exactlearn.pipeline.ask import AskOnce
from exactlearn.progress import current
from exactlearn.strategies.real.analysis import (EQUAL_FACTOR, PAPER_LINEAR_LIMIT,
                                                 PAPER_UNEQUAL_FACTOR, analyse_real, label_real)
from exactlearn.strategies.real.certificate import SAFETY, RealOutcome, verify_real
from exactlearn.strategies.real.evaluate import evaluate_with_bounds
from exactlearn.strategies.real.fit import Fit, fit_family_with_sensitivities
from exactlearn.strategies.real.probe import (PAPER_TARGET, PROBE_SAMPLES, PROBE_TRIES, cayley,
                                              orthogonal_plan, probe_families, probe_scale,
                                              scale_for, scaled_plan)
from exactlearn.strategies.real.sensitivity import (LO, NOISE_FACTOR, Sens, check_noise, rounding,
                                                    sens_context)
from exactlearn.strategies.real.snap import snap_heads

__all__ = ["run_real", "verify_real", "max_parameter_error", "RealOutcome", "orthogonal_plan",
           "cayley", "scaled_plan", "scale_for", "probe_families", "probe_scale", "check_noise",
           "NoisierThanDeclared", "CertificateError", "Sens", "sens_context", "Fit",
           "fit_family_with_sensitivities", "label_real", "evaluate_with_bounds", "rounding",
           "LO", "PAPER_TARGET", "PROBE_TRIES", "PROBE_SAMPLES", "SAFETY",
           "PAPER_LINEAR_LIMIT", "NOISE_FACTOR", "EQUAL_FACTOR", "PAPER_UNEQUAL_FACTOR"]

#: the paper plan's thresholds under the names they had when the stable plan had its own
_RENAMED = {"LINEAR_LIMIT": "PAPER_LINEAR_LIMIT", "UNEQUAL_FACTOR": "PAPER_UNEQUAL_FACTOR",
            "TARGET": "PAPER_TARGET"}


def __getattr__(name):
    """The old names of :data:`_RENAMED`, with a ``DeprecationWarning``."""
    if name in _RENAMED:
        import warnings
        where = "stable_probe" if name == "TARGET" else "stable_plan"
        warnings.warn(f"exactlearn.strategies.real.learn.{name} is deprecated: use "
                      f"{_RENAMED[name]} (the stable plan's differs: {where}.STABLE_{name})",
                      DeprecationWarning, stacklevel=2)
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_real(plan, rec, K, *, noise=None, query_scale=None, snap=False, snap_height=None,
             probe_log=None, fit_heads=None):
    """Probe, scale, ask and analyse the paper plan over the real field ``K``.

    Returns ``(heads, certified_observations, RealOutcome)``; raises the learner's
    failure exceptions (degenerate draw, field errors, :class:`CertificateError` --
    :class:`NoisierThanDeclared` among them).  ``noise`` is eta (see
    :func:`exactlearn.noise.noise_bound`: a float is read as its exact binary value).
    ``probe_log``, a list, gets one entry per call: the probe queries asked, kept up to
    date as they are asked, so a run that fails still reports them.
    """
    H = plan.H
    start = len(rec.observations)
    eta = K(0) if noise is None else noise_bound(K, noise)
    if query_scale is not None:
        sigma = mpq(query_scale) if not isinstance(query_scale, str) else QQ(query_scale)
    ask = AskOnce(rec)
    S = sens_context(K)
    probe_log = [] if probe_log is None else probe_log
    probe_log.append(0)

    def yguess(ys):
        return H * max(abs(y) for y in ys)

    probe = []
    nplan = orthogonal_plan(plan)
    if query_scale is None:
        current().stage("probe")
        try:
            sigma, probe = probe_scale(nplan, ask, K, S, H, eta, yguess)
        finally:
            probe_log[-1] = len(rec.observations) - start
    n_probe = len(rec.observations) - start
    splan = scaled_plan(nplan, sigma)
    current().phase("ask", len(splan.queries))          # progress=
    reused = set()           # probe queries the plan repeats (sigma = 1): plan queries, not probe
    y_shared = q_shared = None
    values: dict = {}
    for q in splan.queries:
        y, idx = ask.observe(splan.tokens(q))
        if idx < start + n_probe and idx not in reused:
            reused.add(idx)
            probe_log[-1] = n_probe - len(reused)
        if q.k == 0:
            y_shared, q_shared = y, idx
        else:
            values.setdefault(q.config, []).append((y, idx))
    probe_queries = probe_log[-1]
    obs = rec.observations[start:]
    Y = yguess([y for _, y in obs])
    etas = {start + i: LO.convert(eta) + rounding(K, Y) for i in range(len(obs))}
    current().stage("analyse")
    heads, n_cert, out = analyse_real(splan, y_shared, q_shared, values, K, S, etas, eta, obs, start,
                                      fit_heads=fit_heads)
    out.sigma = sigma
    out.probe_queries = probe_queries
    out.detail.update({"query_scale": str(sigma), "scale_rule": "orthogonal X, E (Cayley); "
                       "sigma = sqrt(1 / rms log rho of the probe families), to 1/16",
                       "probe": probe, "probe_queries": probe_queries})
    if snap:
        out.snap = snap_heads(heads, out, K, obs, start, height=snap_height)
    return heads, n_cert, out


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
