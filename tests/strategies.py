"""Hypothesis strategies (and a seeded twin) for random attention models.

Every strategy is keyword-parameterised, in the style of hypothesis' own
``st.integers(min_value=..., max_value=...)``:

* :func:`rationals`          -- exact rationals p/q with |p| <= num, 1 <= q <= den;
* :func:`models`             -- random :class:`~exactlearn.model.MultiHeadAttention`
  with rational W (denominators up to ``w_den``) and v, optionally with
  ``merged`` heads (two heads share W, so canonical form sums their v) and
  ``cancelling`` heads (heads that share W and whose v sum to zero, so the
  group is dropped).  The promised structure is always there
  (:func:`has_structure`, filtered): a "merged" model really merges two nonzero
  v into a nonzero sum, a "cancelling" model really drops a group -- it is
  never already canonical;
* :func:`random_models`      -- the same family with entries from ``random.Random``
  (generic models; hypothesis' own draws favour zeros and repeats);
* :func:`any_models`         -- either of the two;
* :func:`nonzero_models`     -- :func:`any_models` filtered to a non-empty canonical form;
* :func:`bounded_models`     -- ``(model, H0)`` with a head bound ``H0 > H``;
* :func:`token_sequences`    -- queries: integer tokens drawn from a small pool,
  so that tokens repeat (the oracle groups repeated tokens);
* :func:`seeded_model`       -- the same family of models from ``random.Random``,
  for fixed seeded batches (the certified-rate measurement).

The models are built from the pieces of :mod:`exactlearn.generate` (entries,
shared W, cancelling groups, the structure check, the redraw loop), driven by
this module's own draws.

:func:`scaled` turns a ``ci``-profile example count into the count for the
loaded profile (see ``conftest.py``).
"""

from __future__ import annotations

import random
from fractions import Fraction

from hypothesis import settings
from hypothesis import strategies as st

from exactlearn import MultiHeadAttention
from exactlearn.generate import cancelling_group, random_heads, redraw, share_W, structure_holds

#: ``max_examples`` of the ``ci`` profile (conftest.py); :func:`scaled` is relative to it.
CI_MAX_EXAMPLES = 10

#: any seed the learner accepts
seeds = st.integers(min_value=0, max_value=2 ** 32 - 1)


def scaled(n: int) -> int:
    """``n`` under the ``ci`` profile, proportionally more under a bigger profile."""
    return max(1, n * settings().max_examples // CI_MAX_EXAMPLES)


def rationals(num: int = 3, den: int = 2):
    """Fractions p/q, |p| <= num, 1 <= q <= den (not necessarily in lowest terms)."""
    return st.builds(Fraction, st.integers(-num, num), st.integers(1, den))


# ---------------------------------------------------------------------------------
def min_heads_for(merged: bool, cancelling: bool) -> int:
    """Fewest heads a model with these options has (merged pair + cancelling group)."""
    return max(1, 2 * merged + 2 * cancelling)


def build_model(randint, d: int, H: int, *, merged: bool = False, cancelling: bool = False,
                w_num: int = 3, w_den: int = 2, v_num: int = 3, v_den: int = 3):
    """A model from an integer source ``randint(lo, hi)`` (hypothesis draw or random.Random).

    ``merged``: two heads get the same W (needs H >= 2).  ``cancelling``: a group
    of two or three heads (as H allows) gets one W and v's that sum to zero (needs
    H >= 2, and H >= 4 together with ``merged``: the groups are disjoint).  The
    heads are then shuffled, so the special heads are anywhere.
    """
    if H < min_heads_for(merged, cancelling):
        raise ValueError(f"merged={merged}, cancelling={cancelling} need H >= "
                         f"{min_heads_for(merged, cancelling)}, got {H}")

    heads = random_heads(randint, d, H, w=(w_num, w_den), v=(v_num, v_den))
    first = 2 if merged else 0              # heads 0, 1: the merged pair
    if cancelling:                          # the last 2 or 3 heads: one W, v summing to 0
        size = 2 if H - first == 2 else randint(2, 3)
        heads[H - size:] = cancelling_group(heads[H - size][0], [v for _, v in heads[H - size:-1]])
    if merged:
        share_W(heads, 1, 0)
    for i in range(H - 1, 0, -1):            # Fisher-Yates with the same source
        j = randint(0, i)
        heads[i], heads[j] = heads[j], heads[i]
    return MultiHeadAttention(heads, d=d)


def has_structure(model, merged: bool = False, cancelling: bool = False) -> bool:
    """Whether the structure asked of :func:`build_model` is really there.

    A raw draw can lose it: a v of the merged pair may be 0 or the pair's v may
    sum to 0 (nothing merged), the cancelling group may share its W with another
    head (nothing dropped), or a v of the group may be 0.  Then a check of the
    canonical form would not exercise the merge or the cancellation it is meant for."""
    return structure_holds(model, merged=int(merged), cancelled=int(cancelling))


def models(*, merged: bool = False, cancelling: bool = False, **kw):
    """Random models; ``d``/``heads`` fix the sizes, otherwise drawn from the ranges
    (keywords of :func:`_models`).

    The head count is at least :func:`min_heads_for` the options; ``merged`` and
    ``cancelling`` models are filtered to those that really have the structure
    (:func:`has_structure`; up to one hypothesis draw in five is rejected)."""
    strategy = _models(merged=merged, cancelling=cancelling, **kw)
    if merged or cancelling:
        strategy = strategy.filter(lambda m: has_structure(m, merged, cancelling))
    return strategy


@st.composite
def _models(draw, *, d: int | None = None, heads: int | None = None, min_d: int = 1, max_d: int = 3,
            min_heads: int = 1, max_heads: int = 3, merged: bool = False, cancelling: bool = False,
            w_num: int = 3, w_den: int = 2, v_num: int = 3, v_den: int = 3):
    """One raw :func:`build_model` draw from hypothesis' integers."""
    if d is None:
        d = draw(st.integers(min_d, max_d))
    if heads is None:
        lo = max(min_heads, min_heads_for(merged, cancelling))
        heads = draw(st.integers(lo, max(lo, max_heads)))

    def randint(lo, hi):
        return draw(st.integers(lo, hi))

    return build_model(randint, d, heads, merged=merged, cancelling=cancelling,
                       w_num=w_num, w_den=w_den, v_num=v_num, v_den=v_den)


@st.composite
def random_models(draw, *, d: int | None = None, heads: int | None = None, min_d: int = 1,
                  max_d: int = 3, min_heads: int = 1, max_heads: int = 3, **build_kw):
    """Like :func:`models`, but the entries come from ``random.Random(seed)`` with a
    drawn seed: realistic, generic models (hypothesis' own draws favour zeros and
    repeats, i.e. merged and vanishing heads), at the price of coarse shrinking."""
    merged, cancelling = build_kw.get("merged", False), build_kw.get("cancelling", False)
    if d is None:
        d = draw(st.integers(min_d, max_d))
    if heads is None:
        lo = max(min_heads, min_heads_for(merged, cancelling))
        heads = draw(st.integers(lo, max(lo, max_heads)))
    return seeded_model(draw(seeds), d, heads, **build_kw)


def any_models(**kw):
    """:func:`models` or :func:`random_models`, half and half."""
    return st.one_of(models(**kw), random_models(**kw))


def nonzero_models(**kw):
    """:func:`any_models` whose canonical form has at least one head (filtered)."""
    return any_models(**kw).filter(lambda m: len(m.canonical_heads()) > 0)


@st.composite
def bounded_models(draw, *, min_extra: int = 1, max_extra: int = 2, **model_kw):
    """``(model, H0)`` with ``model.H < H0 <= model.H + max_extra`` (model from :func:`any_models`)."""
    model = draw(any_models(**model_kw))
    return model, model.H + draw(st.integers(min_extra, max_extra))


@st.composite
def token_sequences(draw, d: int, *, min_len: int = 1, max_len: int = 7, entries: int = 4,
                    pool: int = 3):
    """A query: ``min_len..max_len`` integer tokens in [-entries, entries]^d, drawn
    from a pool of at most ``pool`` distinct tokens so that repeats are common."""
    token = st.tuples(*[st.integers(-entries, entries)] * d)
    tokens = draw(st.lists(token, min_size=1, max_size=pool, unique=True))
    idx = draw(st.lists(st.integers(0, len(tokens) - 1), min_size=min_len, max_size=max_len))
    return [tokens[i] for i in idx]


def seeded_model(seed, d: int, H: int, **kw):
    """:func:`build_model` driven by ``random.Random(seed)`` (fixed batches).

    A ``merged`` or ``cancelling`` draw without its structure (:func:`has_structure`)
    is redrawn from the same ``Random``; the first draw is the one earlier versions
    returned, so seeds that always had the structure give the same model."""
    rng = random.Random(seed)
    merged, cancelling = kw.get("merged", False), kw.get("cancelling", False)
    return redraw(lambda: build_model(rng.randint, d, H, **kw),
                  lambda model: has_structure(model, merged, cancelling), tries=1000,
                  failure=f"seed {seed}: no model with merged={merged}, cancelling={cancelling} in 1000 draws")


@st.composite
def biased_models(draw, **kw):
    """A model of :func:`any_models` with biases (docs: explanation/biases.md): every
    group of heads with one W gets one drawn u (so its merges and cancellations stay),
    and the model a drawn constant c."""
    model = draw(any_models(**kw))
    us: dict = {}
    heads = []
    for h in model.heads:
        if h.W not in us:
            us[h.W] = [draw(rationals()) for _ in range(model.d)]
        heads.append((h.W, h.v, us[h.W]))
    return MultiHeadAttention(heads, d=model.d, constant=draw(rationals()), bias=True)
