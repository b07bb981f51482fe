"""What every field does the same way, written once over the field table (tests/field_table.py).

Embedding exact rationals, identity (equality, hash, pickling, ``with_scale``), and, in the
exact fields, ``exp``/``log`` as exact inverses and ``exp`` as a homomorphism, refusing a
score that ``D`` does not make an integer.  What is particular to one field (the modular
field's symmetric range, the real field's tolerances, Q(T)'s roots) stays in its own
``tests/test_field_<name>.py`` (docs/explanation/tests.md).
"""

from __future__ import annotations

import copy
import json
import pickle
from fractions import Fraction

import pytest
from gmpy2 import mpq
from hypothesis import given, settings
from hypothesis import strategies as st

from exactlearn.fields.base import ExactnessError

from field_table import EXACT_FIELDS, FIELDS, over

SCALES = [1, 2, 6, 35]


@over(FIELDS)
def test_embedding_reads_rationals_exactly(F):
    K = F(6)
    assert K(3) == 3 and K(-2) + 2 == K.zero and K.one == 1
    assert K(mpq(1, 4)) == K("0.25") == K("1/4") == K("2/8") == K(Fraction(1, 4))
    assert K("-3/7") * 7 == -3
    x = K(5)
    assert K(x) == x


@over(FIELDS)
def test_identity_hash_pickle_and_scale(F):
    K = F(6)
    assert K == F(6) and hash(K) == hash(F(6))
    for G in (pickle.loads(pickle.dumps(K)), copy.deepcopy(K), copy.copy(K), K.with_scale(6)):
        assert type(G) is type(K) and G == K and hash(G) == hash(K) and G.D == 6
    other = K.with_scale(35)
    assert type(other) is type(K) and other != K and other.D == 35 == other.scale
    assert len({K, F(6), other}) == 2
    assert json.loads(json.dumps(K.describe())) == K.describe() and K.describe()["scale"] == 6


@over(EXACT_FIELDS)
@settings(max_examples=30, deadline=None)
@given(n=st.integers(-60, 60), D=st.sampled_from(SCALES))
def test_exp_and_log_are_exact_inverses(F, n, D):
    K = F(D)
    s = mpq(n, D)
    assert K.log(K.exp(s)) == s


@over(EXACT_FIELDS)
@settings(max_examples=30, deadline=None)
@given(m=st.integers(-40, 40), n=st.integers(-40, 40))
def test_exp_is_a_homomorphism(F, m, n):
    K = F(6)
    s, t = mpq(m, 3), mpq(n, 2)
    assert K.exp(s) * K.exp(t) == K.exp(s + t)
    assert K.exp(0) == K.one


@over(EXACT_FIELDS)
@pytest.mark.parametrize("s", [mpq(1, 4), mpq(-5, 12), mpq(1, 7)])
def test_exp_refuses_a_score_the_scale_does_not_make_an_integer(F, s):
    with pytest.raises(ExactnessError, match="not an integer"):
        F(6).exp(s)
