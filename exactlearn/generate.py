"""Random attention models with exact rational weights, and the structures they promise.

The command line (``exactlearn random-model``), the proofs-check campaigns
(:mod:`proofs_check.models`) and the test suite (``tests/strategies.py``) build
their random models from the pieces here.  Every piece draws from an *integer
source* ``randint(lo, hi)`` (inclusive, like :meth:`random.Random.randint`): a
seeded ``random.Random(seed).randint`` or a hypothesis draw.  Each caller keeps
its own draw sequence, so a seed gives the model it always gave.

* :func:`random_rational`, :func:`random_matrix`, :func:`random_vector` and
  :func:`random_heads`: entries p/q with p in [-num, num] and q in [1, den],
  drawn p first;
* :func:`share_W` (two heads with one W: the canonical form merges them) and
  :func:`cancelling_group` (heads with one W whose v sum to 0: the canonical
  form drops them);
* :func:`structure_holds`: whether a model really has the merged and dropped
  groups asked for (counted by :func:`exactlearn.model.structure`), so that a
  check of the canonical form never compares a model with itself;
* :func:`redraw`: draw until a model is accepted, at most ``tries`` times;
* :func:`random_model`: the generator of ``exactlearn random-model``.

The canonical form (arXiv:2608.03294; docs: explanation/algorithm.md#the-model-and-its-sign-convention)
groups heads with equal W, sums their v and drops groups whose
sum is 0.

>>> m = random_model(2, 3, seed=1, merge=True)
>>> m.H, len(m.canonical_heads())
(3, 2)
>>> structure_holds(m, merged=1), structure_holds(m, cancelled=1)
(True, False)
>>> len(random_model(2, 2, seed=1, cancel=True).canonical_heads())
0
"""

from __future__ import annotations

import random
from fractions import Fraction

from exactlearn.limits import check_model_size, check_outputs_size
from exactlearn.model import MultiHeadAttention, structure

#: draws before :func:`redraw` gives up (a structured draw is rejected mostly at d = 1,
#: where random W collide; at d >= 2 practically never)
MAX_DRAWS = 1000


def random_rational(randint, num: int, den: int) -> Fraction:
    """The Fraction p/q, p drawn from [-num, num] first, then q from [1, den]."""
    return Fraction(randint(-num, num), randint(1, den))


def random_matrix(randint, d: int, num: int, den: int) -> list:
    """A d x d matrix of :func:`random_rational` entries, row by row."""
    return [[random_rational(randint, num, den) for _ in range(d)] for _ in range(d)]


def random_vector(randint, d: int, num: int, den: int, *, nonzero: bool = False) -> list:
    """d :func:`random_rational` entries; with ``nonzero``, redrawn until one entry is not 0."""
    while True:
        v = [random_rational(randint, num, den) for _ in range(d)]
        if not nonzero or any(v):
            return v


def random_heads(randint, d: int, H: int, *, w: tuple = (3, 2), v: tuple = (3, 3),
                 nonzero_v: bool = False) -> list:
    """H raw heads ``[(W, v), ...]``, each W (entries ``w = (num, den)``) drawn before its
    v (entries ``v = (num, den)``; ``nonzero_v``: see :func:`random_vector`)."""
    return [(random_matrix(randint, d, *w), random_vector(randint, d, *v, nonzero=nonzero_v))
            for _ in range(H)]


def share_W(heads: list, src: int, dst: int) -> None:
    """Give head ``dst`` the W of head ``src`` (in place): the canonical form merges the two
    into one head with the sum of their v (or drops them when that sum is 0)."""
    heads[dst] = (heads[src][0], heads[dst][1])


def cancelling_group(W, vs) -> list:
    """Heads ``(W, v)`` for each v of ``vs`` and one more, ``(W, -sum(vs))``: their v sum to
    0, so the canonical form drops the group (unless another head shares W).

    >>> cancelling_group("W", [[1, 2], [3, 0]])
    [('W', [1, 2]), ('W', [3, 0]), ('W', [-4, -2])]
    """
    return [(W, list(v)) for v in vs] + [(W, [-sum(col) for col in zip(*vs)])]


def structure_holds(model: MultiHeadAttention, *, merged: int = 0, cancelled: int = 0,
                    exact: bool = False) -> bool:
    """Whether the raw heads of ``model`` hold at least ``merged`` merged W groups and
    ``cancelled`` dropped ones (:func:`exactlearn.model.structure`); with ``exact``,
    exactly these numbers and no head with v = 0."""
    s = structure(model.heads)
    if exact:
        return (s.merged, s.cancelled, s.zero) == (merged, cancelled, 0)
    return s.merged >= merged and s.cancelled >= cancelled


def redraw(draw, accept, *, tries: int = MAX_DRAWS, failure: str = "no draw was accepted"):
    """The first result of ``draw()`` that ``accept`` takes, over at most ``tries`` calls
    (each caller's first draw is the one it made before it checked); else ValueError(failure)."""
    for _ in range(tries):
        x = draw()
        if accept(x):
            return x
    raise ValueError(failure)


def add_biases(randint, heads: list, d: int, num: int, den: int, same=()) -> tuple:
    """Biased heads ``[(W, v, u), ...]`` and a constant c (docs: explanation/biases.md):
    u and c drawn after the heads (entries as :func:`random_rational`); heads that
    share their W by construction (``same``: pairs ``(src, dst)``) get one u, so that
    the canonical form merges them.  Returns ``(heads, c)``."""
    us = [random_vector(randint, d, num, den) for _ in heads]
    for src, dst in same:
        us[dst] = us[src]
    return [(W, v, u) for (W, v), u in zip(heads, us)], random_rational(randint, num, den)


def random_model(d: int, H: int, seed=None, merge: bool = False, cancel: bool = False,
                 entries: int = 3, den: int = 2, bias: bool = False,
                 outputs: int | None = None) -> MultiHeadAttention:
    """A random model with exact rational entries (``exactlearn random-model``; docs:
    reference/cli.md).

    Parameters
    ----------
    d : int
        The token dimension (each W is d x d, each v has d entries).
    H : int
        The number of raw heads drawn.
    seed : int, optional
        Seeds ``random.Random(seed)``; the same seed gives the same model.
    merge : bool, default False
        Heads 0 and 1 share W (one canonical head, their v summed); ignored when H < 2.
    cancel : bool, default False
        The last head is (W, -v) of head H - 2 (of head 0 when H = 2 and ``merge``): the
        pair cancels out of the canonical heads.  With both flags, H = 2 gives the
        cancelling pair only and H = 3 a merged group of three (v, u, -u); H >= 4 gives both.
        Ignored when H < 2.
    entries : int, default 3
        W entries are p/q with ``|p| <= entries`` (v entries too).
    den : int, default 2
        W entries have ``q <= den`` (v entries ``q <= 3``).
    bias : bool, default False
        Every head gets a random u and the model a random constant c, entries as W's
        (:func:`add_biases`; the merged and cancelling heads share their u); without it the
        draws are those of a bias-free model.
    outputs : int, optional
        m (docs: explanation/biases.md#vector-outputs): each head's v becomes an m x d
        matrix whose first row is the v drawn as above and whose other rows are drawn after
        the model (a cancelling head takes the negated rows of its partner), and the
        constant (with ``bias``) a vector whose first entry is the one drawn; without it the
        draws are those of a scalar model.

    Returns
    -------
    MultiHeadAttention
        The structure asked for is really there (:func:`structure_holds`): a draw whose
        merged pair has a zero v or sums to 0, or whose cancelling pair has v = 0 or shares
        its W with another head, is redrawn from the same generator.

    Raises
    ------
    ValueError
        When no draw in :data:`MAX_DRAWS` has the structure, or (before anything is drawn,
        a ``ModelError``) when the model or its outputs would be beyond
        :mod:`exactlearn.limits`.
    """
    check_model_size(d, H)
    if outputs is not None:
        check_outputs_size(d, H, outputs)
    rng = random.Random(seed)
    want_merge = merge and H >= 2 and not (cancel and H == 2)
    want_cancel = cancel and H >= 2 and not (merge and H == 3)

    def draw():
        heads = random_heads(rng.randint, d, H, w=(entries, den), v=(entries, 3))
        same = []
        if merge and H >= 2:
            share_W(heads, 0, 1)
            same.append((0, 1))
        if cancel and H >= 2:
            src = H - 2 if not (merge and H == 2) else 0
            heads[src], heads[-1] = cancelling_group(heads[src][0], [heads[src][1]])
            same.append((src, H - 1))
        c = None
        if bias:
            heads, c = add_biases(rng.randint, heads, d, entries, den, same)
        if outputs is not None:
            return _with_outputs(rng.randint, heads, d, c, bias, outputs, entries,
                                 cancel=same[-1] if cancel and H >= 2 else None)
        if bias:
            return MultiHeadAttention(heads, d=d, constant=c, bias=True)
        return MultiHeadAttention(heads, d=d)

    return redraw(draw, lambda m: structure_holds(m, merged=int(want_merge), cancelled=int(want_cancel)),
                  failure=f"no random model with d={d}, H={H} has the structure asked for")


def _with_outputs(randint, heads, d, c, bias, m, entries, cancel=None) -> MultiHeadAttention:
    """The heads of a scalar draw with v widened to m rows (:func:`random_model`)."""
    rows = [[list(h[1])] + [random_vector(randint, d, entries, 3) for _ in range(m - 1)]
            for h in heads]
    if cancel is not None:                   # the cancelling head: minus its partner's rows
        src, dst = cancel
        rows[dst] = [list(rows[dst][0])] + [[-x for x in r] for r in rows[src][1:]]
    out = [(h[0], V) + tuple(h[2:]) for h, V in zip(heads, rows)]
    const = None
    if bias:
        const = [c] + [random_rational(randint, entries, 3) for _ in range(m - 1)]
    return MultiHeadAttention(out, d=d, constant=const, bias=bias, outputs=m)
