"""One cone of the path: the paper's plan at its centre, certified on the whole cone.

Between two kinks (:mod:`.path`) the set S of active neurons is fixed on a
whole open cone (no biases).  At the cone's centre c the paper's plan
(arXiv:2608.03294; :func:`exactlearn.pipeline.plan.paper_plan`) is run with
final tokens ``M c + delta_i`` and directions ``e_j`` (entries in [-2, 2]):
while the final token dominates, T restricted to the plan *is* a multi-head
attention with heads ``(W_h, w_h^S)``, ``w_h^S = sum_{j in S} u_j gamma_{jh}``,
``gamma_{jh} = O_h^T b_j``, so the learner core
(:func:`exactlearn.pipeline.analysis.ask_and_analyse`: interpolate, poles,
match, solve) returns the W_h and w^S exactly.  The k = 0 shortcut of the
paper's plan does not apply to T, so the single-token query is asked at
*every* distinct final token (2d - 1 per cone) and at c itself, and all must
agree with the recovered cone heads: the whole cone is certified (every
observation recomputed exactly).  A failure redraws, with M doubled from the
third draw on (condition C3 of :data:`.result.CONDITIONS`).  Per cone
``2d + 2H(2d^2 - 1)`` queries, longest ``2H + 1`` (docs: howto/transformer.md).

>>> import random
>>> E = draw_directions(3, random.Random(0))
>>> all(1 <= abs(a) <= E_RANGE for e in E for a in e)
True
"""

from __future__ import annotations

import math

from gmpy2 import mpq

from exactlearn.algebra import linalg
from exactlearn.errors import ExactnessError, FieldError, LearningFailure, TransformerFailure
from exactlearn.fields.rational import QQ
from exactlearn.pipeline.analysis import ask_and_analyse
from exactlearn.pipeline.certify import certify
from exactlearn.pipeline.plan import paper_plan

E_RANGE = 2
"""Entries of the query directions e_j (and of the perturbations delta_i) lie in [-2, 2]."""


def draw_directions(d, rng) -> tuple:
    """Invertible E with nonzero entries in [-E_RANGE, E_RANGE] whose within-group sums
    e_1 + e_j have no zero entry either: a zero entry would make e^T (W_h - W_g) x or
    w_h . e vanish whenever those have a zero coordinate, which small integer models
    often do (a wider range makes such coincidences rarer but needs a larger M)."""
    vals = [v for v in range(-E_RANGE, E_RANGE + 1) if v]
    for _ in range(1000):
        E = tuple(tuple(rng.choice(vals) for _ in range(d)) for _ in range(d))
        if any(a + b == 0 for e in E[1:] for a, b in zip(E[0], e)):
            continue
        if linalg.is_invertible([[mpq(e[r]) for e in E] for r in range(d)], QQ):
            return E
    raise TransformerFailure("cannot draw invertible query directions")


def learn_cone(rec, K, c, H, rng, target, draws, info):
    """Heads (W_h, w_h^S) of the cone of direction c (primitive integer vector), certified.

    ``rec`` is the run's :class:`exactlearn.oracle.Recorder`; ``draws`` the number
    of draws (the scale starts at ``|M c| ~ target``); a summary of the cone is
    appended to ``info``.  Raises :class:`TransformerFailure` when no draw gives a
    consistent plan.
    """
    d = len(c)
    norm = max(abs(a) for a in c)
    last = None
    for attempt in range(draws):
        M = -(-target * 2 ** max(0, attempt - 1) // norm)   # two draws at the first scale
        for _ in range(100):
            X = tuple(tuple(M * a + rng.randint(-E_RANGE, E_RANGE) for a in c) for _ in range(d))
            if linalg.is_invertible([[K(col[r]) for col in X] for r in range(d)], K):
                break
        else:
            raise TransformerFailure(f"cannot draw invertible final tokens near direction {list(c)}")
        E = draw_directions(d, rng)
        if not K.is_exact:                    # real field: scores of order one, same ratio e/x
            lam = mpq(1, math.isqrt(4 * d * M * norm) + 1)
            X = tuple(tuple(lam * a for a in col) for col in X)
            E = tuple(tuple(lam * a for a in col) for col in E)
        plan = paper_plan(X, E, H)
        start = len(rec.observations)
        q0 = rec.queries
        try:
            heads = ask_and_analyse(plan, rec, K, None)
            asked = {plan.configs[0].x}
            for cfg in plan.configs:         # k = 0 at every distinct final token
                if cfg.x not in asked:
                    asked.add(cfg.x)
                    rec([cfg.x])
            # ... and at the centre itself: the plan's final tokens lie in c's cone
            rec([c if K.is_exact else tuple(mpq(a, norm) for a in c)])
            certify(heads, d, rec.observations[start:], K)
            info.append({"direction": [int(a) for a in c], "M": int(M), "draws": attempt + 1,
                         "queries": rec.queries - q0, "visible_heads": len(heads)})
            return heads
        except ExactnessError as exc:
            last = exc
            break
        except TransformerFailure:
            raise
        except (LearningFailure, FieldError) as exc:
            last = exc
    raise TransformerFailure(f"cone of direction {list(c)}: no consistent plan in {attempt + 1} "
                             f"draw(s) up to M = {M} (margin condition C3, degenerate draws C4, or more "
                             f"heads than the bound {H}): "
                             f"{type(last).__name__}: {last}")
