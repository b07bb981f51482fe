"""The uniqueness claim of lean sampling, checked by exhaustion over small prime fields
(docs/explanation/efficient-plan.md, "2H − 2 samples, H ≥ 3: the count and its proof").

:func:`~exactlearn.strategies.efficient.known_c.poles_known_c` returns poles only when they
are the *only* list of H nonzero poles -- distinct or not -- whose family
Σ_h c_h / (1 + k ρ_h), with the labelled c-values, takes the given values at
k = 1..2H − 2.  The efficient plan's unique certificate rests on that claim.  Over F_p with
small p every candidate list can be tried, so the claim is checked here against an
independent enumeration (plain integer arithmetic modulo p, not the field class), not
against the learner itself; and the two-head case, where 2H − 2 = H samples leave two
pole lists (why the plan keeps 2H − 1 samples there), is enumerated too.
"""

from __future__ import annotations

import itertools
import random

import pytest

from exactlearn.fields import Modular
from exactlearn.strategies.efficient.known_c import pole_sets, poles_known_c


def _terms(p: int, cs: list, n: int) -> list:
    """terms[h][r] = [c_h / (1 + k r) mod p for k = 1..n], or None where 1 + k r = 0."""
    out = []
    for c in cs:
        row = [None]
        for r in range(1, p):
            ks = []
            for k in range(1, n + 1):
                den = (1 + k * r) % p
                if den == 0:
                    ks = None
                    break
                ks.append(c * pow(den, -1, p) % p)
            row.append(ks)
        out.append(row)
    return out


def _all_pole_lists(p: int, cs: list, gs: list) -> list:
    """Every list of len(cs) nonzero residues (distinct or not) whose family takes ``gs``."""
    n = len(gs)
    terms = _terms(p, cs, n)
    found = []
    for rho in itertools.product(range(1, p), repeat=len(cs)):
        rows = [terms[h][r] for h, r in enumerate(rho)]
        if any(row is None for row in rows):
            continue
        if all(sum(row[k] for row in rows) % p == gs[k] for k in range(n)):
            found.append(list(rho))
    return found


@pytest.mark.parametrize("p, H, trials, every", [(11, 3, 200, True), (13, 3, 150, True), (19, 4, 60, False)])
def test_poles_known_c_answer_is_the_only_pole_list_by_exhaustion(p, H, trials, every):
    """Whenever poles_known_c answers, the enumeration finds that list and no other.  With
    ``every``, each draw is enumerated: draws with two or more lists through the samples do
    occur over these fields (so the claim is put to the test), and poles_known_c answers
    none of them."""
    K = Modular(p=p)
    rng = random.Random(p * 10 + H)
    n = 2 * H - 2
    answered = ambiguous = 0
    for _ in range(trials):
        cs = rng.sample(range(1, p), H)                     # labelled, distinct, nonzero
        rho = [rng.randrange(1, p) for _ in range(H)]
        terms = _terms(p, cs, n)
        rows = [terms[h][r] for h, r in enumerate(rho)]
        if any(row is None for row in rows):
            continue                                        # a pole at a sample point: no values
        gs = [sum(row[k] for row in rows) % p for k in range(n)]
        got = poles_known_c([K(g) for g in gs], [K(c) for c in cs], K)
        if got is None and not every:
            continue
        lists = _all_pole_lists(p, cs, gs)
        assert rho in lists
        ambiguous += len(lists) > 1
        if got is None:
            continue                                        # not decided: the plan asks more
        answered += 1
        assert [int(r) for r in got] == rho
        assert lists == [rho]
    assert answered >= 3                                    # the claim was exercised
    assert ambiguous >= 1 or not every                      # ... against real alternatives


def test_two_heads_two_samples_leave_two_pole_lists_and_any_answer_is_the_only_one():
    """For H = 2 (2H − 2 = H samples) the enumeration finds two labelled lists of distinct
    poles through the samples for some draws -- why the plan keeps 2H − 1 samples there --
    and pole_sets finds exactly those; where poles_known_c does answer (when the second list
    is not there: a degree drop of the resultants), its answer is the only list."""
    p, H = 31, 2
    K = Modular(p=p)
    rng = random.Random(7)
    two = answered = 0
    for _ in range(300):
        cs = rng.sample(range(1, p), H)
        rho = rng.sample(range(1, p), H)
        terms = _terms(p, cs, H)
        rows = [terms[h][r] for h, r in enumerate(rho)]
        if any(row is None for row in rows):
            continue
        gs = [sum(row[k] for row in rows) % p for k in range(H)]
        Kg, Kc = [K(g) for g in gs], [K(c) for c in cs]
        lists = _all_pole_lists(p, cs, gs)
        distinct = [r for r in lists if len(set(r)) == H]
        assert rho in distinct
        got = poles_known_c(Kg, Kc, K)
        if got is not None:
            answered += 1
            assert [int(r) for r in got] == rho and lists == [rho]
        sets = sorted([int(x) for x in s] for s in pole_sets(Kg, Kc, K))
        if len(sets) == 2:
            assert sets == sorted(distinct)
            two += 1
    assert two >= 10                                        # the ambiguity is the rule at H = 2
