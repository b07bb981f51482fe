"""Learn a one-layer Transformer up to functional equivalence (arXiv:2608.03294, its
one-layer Transformer extension; docs: howto/transformer.md).

The black box is ``T(X) = sum_j u_j ReLU(sum_h gamma_{jh} . y_h(X))`` (see
:mod:`exactlearn.transformer_model`), with ``y_h`` head h's softmax average and
``gamma_{jh} = O_h^T b_j``.  Write ``beta_j = sum_h gamma_{jh}``: on a single
token x every softmax is 1, so ``T(x) = sum_j u_j ReLU(beta_j . x)``.

The paper states the result "under additional conditions" and does not give
its route in the material available to us; the route below is exact, and its
conditions C1-C6 are :data:`~.result.CONDITIONS`.  One module per step:

1. the path A -> P -> -A of single tokens, and 2. its exact kinks:
   :mod:`.path`;
3. one certified run of the paper's plan per cone between two kinks:
   :mod:`.cones`;
4. the neuron jumps across the kinks, their orientations, and 5. the model
   (merging, rank factorisation): :mod:`.assembly`;
6. the certificate on the observations and fresh queries: :mod:`.certificate`;

and the result with its JSON in :mod:`.result`.  :func:`learn_transformer`
drives them: a detected failure before the certificate (a check of steps 2-5,
or an assembled model that does not reproduce an observation) redraws the path;
the certificate's verdict is final.
"""

from __future__ import annotations

import random
import time

from exactlearn.errors import FieldError, LearningFailure, TransformerFailure
from exactlearn.fields.base import Field, as_mpq
from exactlearn.limits import default_retries
from exactlearn.algebra.rationals import simplest_rational
from exactlearn.oracle import Recorder, resolve_field
from exactlearn.pipeline.plan import head_bound
from exactlearn.strategies.transformer import certificate
from exactlearn.strategies.transformer.assembly import assemble
from exactlearn.strategies.transformer.certificate import hyperplane_point, reproduces
from exactlearn.strategies.transformer.cones import learn_cone
from exactlearn.strategies.transformer.path import Path, kinks, primitive, to_mpq
from exactlearn.strategies.transformer.result import CONDITIONS, TransformerLearnResult
from exactlearn.transformer_model import require_ordered

__all__ = ["learn_transformer", "CONDITIONS", "hyperplane_point", "TransformerLearnResult"]


def learn_transformer(oracle, d: int, heads: int | None = None, max_heads: int | None = None,
                      field: Field | None = None, seed=None, fresh: int = 200, retries: int | None = None,
                      cone_draws: int = 8, target: int = 24) -> TransformerLearnResult:
    """Learn a Transformer functionally equivalent to the black box ``oracle`` (module doc).

    Parameters
    ----------
    oracle : callable
        The black box: a :class:`~exactlearn.oracle.TransformerOracle`, or any callable on
        token lists over an ordered field (rational or real).
    d : int
        The token dimension (d = 1 gives a failed result: the kink path needs a plane).
    heads, max_heads : int, optional
        The number of distinct W (per cone plan and overall), or a bound on it; give one.
    field : Field or str, optional
        As in :func:`exactlearn.api.learn` (default ``oracle.field``).
    seed : int, optional
        Seeds the random path, cones and certificate queries.
    fresh : int, default 200
        Random queries of the certificate, besides its ReLU-boundary queries: up to 16 per
        recovered neuron (9 of one token; 7 longer ones, skipped over an exact field when
        their scores would be too large).
    retries : int, optional
        Redraws of the path after a detected failure (queries keep counting; ``attempts``
        reports how many paths were used); None: the one default policy,
        ``exactlearn.limits.DEFAULT_RETRIES["transformer"]`` (2; docs:
        reference/api.md#retries).
    cone_draws : int, default 8
        Draws per cone (M doubles from the third on).
    target : int, default 24
        The starting size ``|M c| ~ target`` of the cone draws.

    Returns
    -------
    TransformerLearnResult
        ``queries`` and ``max_length`` count every query the black box answered, the
        certificate's included; ``learning_queries`` / ``certificate_queries`` (and their
        ``*_max_length``) split them.
    """
    t_start = time.perf_counter()
    H = head_bound(d, heads, max_heads)
    model = getattr(oracle, "model", None)
    if isinstance(getattr(model, "d", None), int) and model.d != d:   # before any query (a
        # TransformerOracle, or one wrapped: NoisyOracle forwards .model)
        raise ValueError(f"the black box is a model in d={model.d}; learn_transformer() was "
                         f"given d={d}")
    if retries is None:
        retries = default_retries("transformer")
    K, convert = resolve_field(oracle, field)
    require_ordered(K)
    rng = random.Random(seed)
    rec = Recorder(oracle, K, convert)
    error, model, attempts, info, n_kinks = None, None, 0, [], 0
    while attempts <= retries:
        attempts += 1
        info = []
        try:
            if d < 2:
                raise TransformerFailure("d = 1 is not supported: the kink path needs a plane (d >= 2)")
            model, n_kinks = _attempt(rec, K, d, H, rng, cone_draws, target, info)
            bad = reproduces(model, rec.observations, K)
            if bad is not None:           # costs no query: a new path may avoid the cause
                raise TransformerFailure(
                    f"the assembled model does not reproduce an observed output of length "
                    f"{len(bad)} (two neurons switching at one point of the path, C4, or C1/C2)")
            error = None
            break
        except TransformerFailure as exc:
            error = str(exc)
        except (LearningFailure, FieldError) as exc:
            error = f"{type(exc).__name__}: {exc}"
    res = TransformerLearnResult("failed", None, error, d, H, K, rec.queries, rec.max_length,
                                 attempts=attempts, cones=info, kinks=n_kinks,
                                 learning_queries=rec.queries, learning_max_length=rec.max_length)
    if error is None:
        res.observations = len(rec.observations)
        # looked up on its module at call time, so the query-accounting tests can
        # substitute a certificate that asks the black box past the recorder
        ok, why, queries, kinds = certificate.fresh_certificate(model, rec, K, rng, fresh)
        res.certificate_ran = True
        res.fresh_queries, res.fresh_kinds = queries, kinds
        res.certificate_queries = rec.queries - res.learning_queries
        res.certificate_max_length = max((len(q) for q in queries), default=0)
        if ok:
            res.status, res.model = "certified", model
        else:
            res.error = f"certificate failed: {why}"
    res.queries, res.max_length = rec.queries, rec.max_length     # every answered query
    total = time.perf_counter() - t_start
    res.oracle_seconds = rec.seconds
    res.learner_seconds = max(0.0, total - res.oracle_seconds)
    return res


def _attempt(rec, K, d, H, rng, cone_draws, target, info):
    """One path: its kinks, one cone plan per piece, and the assembled model (steps 1-5)."""
    # 1. a path A -> P -> -A through the half-plane of directions; neither A (nor so -A)
    #    nor the corner P may lie on a hyperplane (a kink there would be invisible)
    for _ in range(20):
        A = tuple(rng.randint(-6, 6) for _ in range(d))
        P = tuple(rng.randint(-6, 6) for _ in range(d))
        if not any(A[i] * P[j] != A[j] * P[i] for i in range(d) for j in range(d)):
            continue
        path = Path(A, P, rec, K)
        step = tuple(p - a for a, p in zip(A, P))
        if path.off_hyperplanes(A, step) and path.off_hyperplanes(P, step):
            break
    else:
        raise TransformerFailure("no path whose end points avoid the neuron hyperplanes in 20 draws")
    # 2. kinks on both segments, as parameters t in (0, 2)
    ts = kinks(path, 0, 1)
    ts += [t for t in kinks(path, 1, 2)]
    if any(K.eq(K(t), K(1)) for t in ts):
        raise TransformerFailure("a kink at the path's corner P")
    bounds = [K(0)] + ts + [K(2)]
    # 3. one certified cone plan per piece, at a simple point of its middle third
    centres, cone_heads = [], []
    for lo, hi in zip(bounds, bounds[1:]):
        qlo, qhi = to_mpq(K, lo), to_mpq(K, hi)
        t = simplest_rational(qlo + (qhi - qlo) / 3, qhi - (qhi - qlo) / 3)
        x = tuple(as_mpq(a) + t * (p - a) for a, p in zip(A, P)) if t <= 1 else \
            tuple(p + (t - 1) * (-a - p) for a, p in zip(A, P))
        c = primitive(x)
        centres.append(c)
        cone_heads.append(learn_cone(rec, K, c, H, rng, target, cone_draws, info))
    # 4.-5. neurons from the jumps across the kinks, and the model
    return assemble(K, d, H, path, ts, centres, cone_heads), len(ts)
