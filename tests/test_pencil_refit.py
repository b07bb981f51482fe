"""The pencil start's refit (exactlearn.strategies.real.stable_pencil; docs "The real field",
step 3b): ``v_h`` is the same at every final token, so a token whose own fit fails is fitted
again from the first resolved token's ``v_h`` (``_fit`` with ``v_ref``), and the tokens that
failed before one resolved are fitted again from their kept answers once one does, asking
nothing more.  The boxes are tests/float_layers.py's; the heads are compared with the box's
own weights, the queries with its own counter.
"""

from __future__ import annotations

import numpy as np
import pytest

from exactlearn.oracle import TokenAdapter
from exactlearn.strategies.real import stable_pencil
from exactlearn.strategies.real.stable_pencil import COPIES, MATCH_LIMIT, _match, _nearest, \
    _Token, pencil_heads

from float_layers import NumpyAttention


def run_pencil(d, H, seed):
    """``(heads, info, box, batches)`` of pencil_heads on the box of ``seed`` (x_norm 1,
    e_norm 0.5 as the stable plan asks), every batch kept."""
    box = NumpyAttention.from_seed(d, H, seed)
    adapter = TokenAdapter(box, "float64")
    batches = []

    def ask(qs):
        batches.append(len(qs))
        return [float(adapter(q)) for q in qs]
    heads, info = pencil_heads(ask, d, H, 1.0, 0.5)
    return heads, info, box, batches


def worst_error(heads, box):
    """The largest distance of a learned head (W_h, v_h) from its nearest true head."""
    return max(min(max(np.abs(W - box.W[g]).max(), np.abs(v - box.v[g]).max())
                   for g in range(len(box.W))) for W, v in heads)


def attempts(info):
    """The pencils asked that did not resolve their token: one note each."""
    return [k for k in info["dropped"] if " lattice at " in k or " random at " in k]


# Pinned: d=3, H=5, box seed 0 -- x2's and x3's own fits fail and both resolve from x1's v at
# the first scale: three tokens, three batches (687 queries), nothing dropped.  Without the
# refit x2 is dropped (its fit fails, then its heads do not match) and x4 is asked: 5 batches,
# 1,145 queries.
def test_a_failed_fit_is_refitted_from_the_first_tokens_v():
    heads, info, box, batches = run_pencil(3, 5, 0)
    assert info["refitted"] == 2, info
    assert info["used"] == info["final_tokens"] == 3, info
    assert info["dropped"] == {}, info
    assert len(batches) == 3
    assert worst_error(heads, box) <= 1e-7
    assert sum(batches) == box.calls                    # every query counted


# Pinned: d=4, H=8, box seed 3 -- x1's pencil is dropped (two heads' eigenvalues crowd and its
# fit fails); x2 resolves, and x1 is fitted again from x2's v out of x1's kept answers
# ("x1 again"), asking nothing for it: 4 batches, 2,104 queries.  Without the refit x5 is
# asked: 5 batches, 2,630 queries.
def test_tokens_that_failed_first_are_refitted_from_their_answers():
    heads, info, box, batches = run_pencil(4, 8, 3)
    assert "x1 again" in info["dropped"], info
    assert info["refitted"] >= 1, info
    assert info["used"] == info["final_tokens"] == 4, info
    resolved_by_a_pencil = info["used"] - sum(" again" in k for k in info["dropped"])
    assert len(batches) == len(attempts(info)) + resolved_by_a_pencil == 4   # none for x1 again
    assert worst_error(heads, box) <= 1e-7
    assert sum(batches) == box.calls
    n = 2 * 8 + stable_pencil.ALPHA_MARGIN
    assert all(b <= 1 + len(COPIES) * (5 * n * (n + 1) // 2) for b in batches)


def nearest(v_ref, v):
    return _nearest(v_ref, v)[0]


def test_nearest_assigns_each_head_once_closest_first():
    """``_nearest`` pairs each reference head with one head of ``v``, the closest pairs first
    (distances relative to the reference head's norm); a non-finite head is taken last."""
    v_ref = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert nearest(v_ref, np.array([[0.1, 0.99], [-1.0, 0.0]])) == [1, 0]
    # both nearest v's head 0 (0.78 and 0.64 away): reference head 1, the closer, takes it
    assert nearest(v_ref, np.array([[0.5, 0.6], [3.0, 3.0]])) == [1, 0]
    assert nearest(v_ref, np.array([[0.5, 0.6], [np.nan, 0.0]])) == [1, 0]
    # relative: 1.5 from (10, 0) is closer than 0.8 from (1, 0)
    assert nearest(np.array([[10.0, 0.0], [1.0, 0.0]]),
                    np.array([[0.0, 0.0], [11.5, 0.0]])) == [1, 0]
    assert nearest(v_ref[:1], np.array([[0.0, 1.0], [1.0, 0.1]])) == [1]
    order, C = _nearest(np.array([[2.0, 0.0]]), np.array([[0.0, 0.0], [2.0, 1.0]]))
    assert order == [1] and C.tolist() == [[1.0, 0.5]]


def make(v, Q=None):
    tok = _Token((0, 0))
    tok.v = np.array(v, dtype=float)
    tok.Q = np.arange(tok.v.size, dtype=float).reshape(tok.v.shape) if Q is None else Q
    return tok


def test_match_reorders_a_token_by_v_and_refuses_an_ambiguous_or_distant_one():
    """``_match`` puts a token's heads in the first token's order when each v lies within
    MATCH_LIMIT (relative) of exactly one; two heads nearest the same one, or one too far,
    leave the token out with a note."""
    ref = make([[1.0, 0.0], [0.0, 2.0]])
    swapped = make([[0.0, 2.0 + 1e-6], [1.0, 1e-6]], Q=np.array([[5.0, 6.0], [7.0, 8.0]]))
    used, tokens, notes = [ref], [ref, swapped], {}
    _match(swapped, used, tokens, notes)
    assert used == [ref, swapped] and notes == {}
    assert swapped.Q.tolist() == [[7.0, 8.0], [5.0, 6.0]]
    assert swapped.v[0].tolist() == [1.0, 1e-6]

    far = make([[1.0, 0.0], [0.0, 2.0 * (1 + 3 * MATCH_LIMIT)]])
    tokens.append(far)
    _match(far, used, tokens, notes)
    assert len(used) == 2 and list(notes) == ["x3 match"]
    assert "differ from x1's" in notes["x3 match"]

    close = make([[1.0, 0.0], [1.0 + 1e-4, 0.0]])          # two heads 1e-4 apart
    tok = make([[1.0 + 5e-5, 0.0], [5.0, 5.0]])            # both nearest its head 0
    used, notes = [close], {}
    _match(tok, used, [close, tok], notes)
    assert used == [close] and "x2 match" in notes       # ambiguous, though within MATCH_LIMIT


@pytest.mark.parametrize("case", [(3, 5, 0), (4, 8, 3)])
def test_without_the_refit_the_pinned_tokens_fail_first(monkeypatch, case):
    """The pins above test the refit: with ``_fit``'s second start removed (no ``v_ref``
    passed on) the same boxes need more pencils, and no head is refitted."""
    real = stable_pencil._fit
    monkeypatch.setattr(stable_pencil, "_fit", lambda *a: real(*a[:8]))
    _, info, box, batches = run_pencil(*case)
    assert info["refitted"] == 0
    assert len(batches) > info["used"]
    assert sum(batches) == box.calls
