"""Random models and random queries for the proofs-check campaigns.

Every generator takes a ``random.Random`` so that a trial is a pure function of
its seed (the claims derive one ``Random`` per trial from the base seed, the
claim id and the trial index: :func:`trial_rng`).  Models are
:class:`~exactlearn.model.MultiHeadAttention` with exact rational weights, built
from the pieces of :mod:`exactlearn.generate` (entries, shared W, cancelling
groups, the structure check and the redraw loop) with this module's own draws.

Model *kinds* (the structures the paper's canonical form has to handle):

``plain``        H heads, integer W entries, distinct W (almost surely)
``den``          W entries with denominators (2 or 3): the field's scale D > 1
``merged``       two heads share W (one canonical head for the pair), W with denominators
``cancel``       two heads share W and their v sum to 0 (the pair drops out);
                 for H = 2 the canonical form is empty: the zero function
``merged+cancel`` both of the above (H >= 4); for H = 3 three heads share W and
                 their v sum to 0.

Canonical heads: H, H, H-1, H-2, H-3 by kind.  For the structured kinds
(``merged``, ``cancel``, ``merged+cancel``) this is exact: a draw whose random W
collide with the special group's W (so that nothing is really merged or
dropped), or with each other, is redrawn from the same ``rng``
(:func:`kind_holds`).  A check of the canonical form on such a model therefore
always compares two different lists of heads.  ``plain`` and ``den`` are
canonical almost surely (random W may collide, and d = 1 collides often).

>>> m = random_model(trial_rng(0, "doc", 0), d=2, H=3, kind="merged")
>>> m.H, len(m.canonical_heads())
(3, 2)
>>> len(random_model(trial_rng(0, "doc", 1), d=2, H=2, kind="cancel").canonical_heads())
0
"""

from __future__ import annotations

import random

from gmpy2 import mpq

from exactlearn import Head, MultiHeadAttention
from exactlearn.generate import (MAX_DRAWS, cancelling_group, random_heads, random_matrix, random_vector,
                                 redraw, share_W, structure_holds)

KINDS = ("plain", "den", "merged", "cancel", "merged+cancel")


def trial_rng(seed: int, claim_id: str, index: int) -> random.Random:
    """The Random of one trial: a deterministic function of (seed, claim, index)."""
    return random.Random(f"{seed}:{claim_id}:{index}")


def random_W(rng: random.Random, d: int, den: int = 1, entries: int = 3) -> list:
    """d x d matrix with entries in [-entries, entries] / {1..den}."""
    return random_matrix(rng.randint, d, entries, den)


def random_v(rng: random.Random, d: int, entries: int = 4, den: int = 3) -> list:
    """Nonzero vector with entries in [-entries, entries] / {1..den}."""
    return random_vector(rng.randint, d, entries, den, nonzero=True)


def kinds_for(H: int) -> tuple:
    """The kinds that make sense for H raw heads."""
    if H == 1:
        return ("plain", "den")
    if H == 2:
        return ("plain", "den", "merged", "cancel")
    return KINDS


def expected_canonical_heads(H: int, kind: str) -> int:
    """The number of canonical heads of a model of ``kind`` with H raw heads."""
    if kind == "merged+cancel" and H == 3:
        return 0
    return H - {"plain": 0, "den": 0, "merged": 1, "cancel": 2, "merged+cancel": 3}[kind]


def kind_holds(model: MultiHeadAttention, kind: str) -> bool:
    """Whether ``model`` really has the structure its kind promises: for ``merged``
    one merged group, for ``cancel`` one dropped group (two heads, v and -v, a W
    no other head has), for ``merged+cancel`` both (H = 3: one dropped group of
    three), and exactly :func:`expected_canonical_heads` canonical heads."""
    merged, cancelled = {"plain": (0, 0), "den": (0, 0), "merged": (1, 0), "cancel": (0, 1),
                         "merged+cancel": (0, 1) if model.H == 3 else (1, 1)}[kind]
    return (structure_holds(model, merged=merged, cancelled=cancelled, exact=True)
            and len(model.canonical_heads()) == expected_canonical_heads(model.H, kind))


# MAX_DRAWS (from exactlearn.generate): draws before :func:`random_model` gives up on a
# structured kind (at d = 1, where W is one of 13 numbers, about one draw in three
# collides and is redrawn for H <= 6; at d >= 2 practically none)


def random_model(rng: random.Random, d: int, H: int, kind: str = "plain") -> MultiHeadAttention:
    """A random model with H raw heads of the given kind (see the module docstring).

    Structured kinds are redrawn from ``rng`` until :func:`kind_holds`; the first
    draw is the one earlier versions returned, so models that always had their
    structure are unchanged."""
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}")
    if kind not in kinds_for(H):
        raise ValueError(f"kind {kind!r} needs more than H = {H} heads")
    return redraw(lambda: _draw_model(rng, d, H, kind),
                  lambda model: kind in ("plain", "den") or kind_holds(model, kind),
                  tries=MAX_DRAWS, failure=f"no {kind!r} model with d = {d}, H = {H} in {MAX_DRAWS} draws")


def _draw_model(rng: random.Random, d: int, H: int, kind: str) -> MultiHeadAttention:
    den = 1 if kind == "plain" else 3
    heads = random_heads(rng.randint, d, H, w=(3, den), v=(4, 3), nonzero_v=True)
    if kind == "merged+cancel" and H == 3:
        # three heads share W and their v sum to 0: merged, then dropped
        W, v0, v1 = heads[0][0], heads[0][1], heads[1][1]
        heads[:] = cancelling_group(W, [v0, v1])
        if not any(heads[2][1]):
            heads[:] = cancelling_group(W, [v0, [2 * x for x in v0]])
    else:
        merge = kind in ("merged", "merged+cancel") and H >= 2
        cancel = kind == "cancel" and H >= 2 or kind == "merged+cancel" and H >= 4
        if merge:                        # heads 0 and 1 share W: their v add up
            share_W(heads, 0, 1)
            if not any(a + b for a, b in zip(heads[0][1], heads[1][1])):
                heads[1] = (heads[0][0], [2 * x for x in heads[1][1]])
        if cancel:                       # the last two heads share W and their v sum to 0
            heads[-2:] = cancelling_group(random_W(rng, d, den), [random_v(rng, d)])
    rng.shuffle(heads)
    return MultiHeadAttention(heads, d=d)


def canonical_model(model: MultiHeadAttention) -> MultiHeadAttention:
    """The model made of the canonical heads of ``model`` (same d)."""
    return MultiHeadAttention(list(model.canonical_heads()), d=model.d)


def random_query(rng: random.Random, d: int, max_length: int, R: int) -> list:
    """A random token sequence of length 1..max_length, entries in [-R, R].

    Tokens are drawn from a small pool so that repeated tokens (the case the
    oracle treats by multiplicity) occur."""
    n = rng.randint(1, max_length)
    pool = [tuple(rng.randint(-R, R) for _ in range(d)) for _ in range(rng.randint(1, n))]
    return [rng.choice(pool) for _ in range(n)]


def heads_json(heads) -> list:
    """Heads as JSON (exact rationals as ``"p/q"`` strings), for evidence."""
    return [h.to_json() for h in heads]


def model_json(model: MultiHeadAttention) -> dict:
    return model.to_json()


def split_head(rng: random.Random, model: MultiHeadAttention, index: int = 0) -> MultiHeadAttention:
    """Split head ``index``'s v into two random parts carried by two heads with the same W."""
    heads = list(model.heads)
    h = heads[index]
    part = tuple(mpq(rng.randint(-5, 5), rng.randint(1, 4)) for _ in h.v)
    rest = tuple(a - b for a, b in zip(h.v, part))
    heads[index] = Head(h.W, part)
    heads.insert(rng.randint(0, len(heads)), Head(h.W, rest))
    return MultiHeadAttention(heads, d=model.d)
