"""The symbolic field Q(T), T = e^(1/D): exact exp/log, roots over Q(T), parameters.

What every field does alike is tested once, in tests/test_fields_common.py."""

from __future__ import annotations

import pytest
import sympy
from gmpy2 import mpq
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sympy.polys.domains import QQ

from exactlearn.fields.base import ExactnessError, FieldError, NotExponential, NotSplit
from exactlearn.fields.rational import Rational
from exactlearn.fields.symbolic import Symbolic
from exactlearn.model import MultiHeadAttention

K = Symbolic(scale=6)
T = K.T


def poly_from_factors(factors):
    """Coefficients (constant first, in K) of prod(a + b k) for (a, b) in factors."""
    cs = [K.one]
    for a, b in factors:
        new = [K.zero] * (len(cs) + 1)
        for i, c in enumerate(cs):
            new[i] += c * a
            new[i + 1] += c * b
        cs = new
    return cs


# -- exp / log (log(exp(s)) == s, the homomorphism, the integer D*s: tests/test_fields_common.py)
@settings(max_examples=50, deadline=None)
@given(st.integers(-60, 60))
@example(0)
def test_exp_is_a_power_of_t(n):
    assert K.exp(mpq(n, 6)) == T ** n
    assert K.log(T ** n) == mpq(n, 6)


def test_exp_needs_integer_exponent():
    with pytest.raises(ExactnessError):
        Symbolic().exp("1/2")
    assert Symbolic().exp(3) == Symbolic().T ** 3


@pytest.mark.parametrize("a", [0, 2, "1/2", 2 * T, T / 3, T + 1, 1 / (T**2 + 1), T**2 - T, -T])
def test_log_refuses_non_monomials(a):
    with pytest.raises(NotExponential):
        K.log(a)


def test_log_accepts_exact_monomials_in_any_form():
    assert K.log(1) == 0
    assert K.log((2 * T**5) / (2 * T**2)) == mpq(1, 2)
    assert K.log((T + 1) * T**-3 / (T + 1)) == mpq(-1, 2)


# -- roots -------------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-12, 12), min_size=1, max_size=4, unique=True),
       st.sampled_from([1, mpq(-3, 7), T + 2, (T**2 + 1) / (5 * T - 1)]))
def test_roots_of_one_plus_k_t_n(ns, common):
    """Q(k) = prod(1 + k T^n) (the query family's denominator with rho = T^n; docs: explanation/algorithm.md#how-it-works),
    times a common factor."""
    cs = [c * common for c in poly_from_factors([(K.one, T**n) for n in ns])]
    got = K.roots(cs)
    assert len(got) == len(ns)
    assert sorted(K.log(-1 / r) for r in got) == sorted(mpq(n, 6) for n in ns)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 3), st.integers(1, 4)),
                min_size=1, max_size=3, unique_by=lambda t: t[:2]))
def test_roots_of_general_linear_factors(params):
    """Factors (c + T^e) + u k: distinct roots -(c + T^e)/u."""
    factors = [(c + T**e, K(u)) for c, e, u in params]
    roots = {-a / b for a, b in factors}
    if len(roots) < len(factors):          # two factors proportional: a double root
        with pytest.raises(NotSplit):
            K.roots(poly_from_factors(factors))
    else:
        got = K.roots(poly_from_factors(factors))
        assert len(got) == len(roots) and set(got) == roots


@pytest.mark.parametrize("coeffs", [
    [1, 0, 1],                 # k^2 + 1
    [-T, 0, 1],                # k^2 - T: T is not a square in Q(T)
    [1, 2 * T, T**2],          # (1 + kT)^2
    [1, 2, 1],                 # (1 + k)^2
    [0, 0, 1],                 # k^2
    [1 / T, (1 + T) / T, 2, T],            # (1/T)(1 + kT)(1 + k + k^2 T): disc 1 - 4T
])
def test_not_split(coeffs):
    with pytest.raises(NotSplit):
        K.roots(coeffs)


def test_roots_small_and_special_cases():
    assert K.roots([]) == [] and K.roots([0]) == [] and K.roots([T]) == []
    assert K.roots([T, 1 / T]) == [-T**2]
    assert set(K.roots([-T**2, 0, 1])) == {T, -T}          # k^2 - T^2 splits
    assert set(K.roots([0, 1, T, 0])) == {K.zero, -1 / T}
    assert K.roots([3, 1, 0, 0]) == [-3]


# -- parameters, embedding, identity ---------------------------------------------------------------
def test_to_param_and_param():
    assert K.param == Rational(scale=6)
    assert K.to_param(K("3/4") * 2) == mpq(3, 2) and K.to_param(0) == 0
    assert K.to_param((T + 1) / (2 * T + 2)) == mpq(1, 2)
    for bad in (T, 1 / T, T**2 - 1):
        with pytest.raises(FieldError, match="depends on T"):
            K.to_param(bad)


def test_embedding():
    assert K(sympy.sympify("(T**2 + 1)/(2*T)")) == (T**2 + 1) / (2 * T)
    assert K((T + 1).numer) == T + 1
    assert 3 - T == -(T - 3) and (T / 3) * 3 == T and 1 / (1 / T) == T
    other = QQ.frac_field(sympy.Symbol("x")).field.gens[0]
    for bad in (0.5, 1j, True, "T", "1/0", other, other.numer, sympy.Symbol("x") + 1, sympy.sqrt(2)):
        with pytest.raises(ValueError):
            K(bad)


def test_identity_and_scale():
    assert Symbolic(2) != Symbolic(3) and Symbolic(2) != Rational(scale=2)
    assert K.with_scale(4) == Symbolic(4) and Symbolic().D == 1
    assert K.describe() == {"field": "symbolic", "T": "e^(1/6)", "scale": 6}


def test_format():
    assert K.format(mpq(-3, 6)) == "-1/2" and K.format(K(5)) == "5"
    assert K.format((T**2 + 1) / T) == "(T**2 + 1)/T"


# -- the ground truth specialises to the other exact fields ---------------------------------------
@settings(max_examples=20, deadline=None)
@given(st.integers(-30, 30))
def test_specialize_commutes_with_exp(n):
    R = Rational(base=3, scale=6)
    assert K.specialize(K.exp(mpq(n, 6)), R) == R.exp(mpq(n, 6))


def test_specialize_errors():
    with pytest.raises(ValueError, match="scale"):
        K.specialize(T, Rational(scale=5))
    with pytest.raises(ZeroDivisionError):
        K.specialize(1 / (T - 2), Rational(scale=6))        # T -> 2 is a bad reduction


def test_model_over_q_of_t_specialises_to_the_rational_field():
    """f(X) computed in Q(T) then sent T -> 2 equals f(X) computed over Rational(base 2)."""
    m = MultiHeadAttention([([[1, "1/2"], [0, "-1/3"]], [1, -2]), ([["1/2", 0], [1, 1]], [3, "1/5"])])
    D = m.scale()
    S, R = Symbolic(scale=D), Rational(scale=D)
    x, e = [1, -1], [2, 1]
    a = [xi + ei for xi, ei in zip(x, e)]
    for k in range(4):
        X = [a] * k + [x]
        val = m.evaluate(X, S)
        assert S.specialize(val, R) == m.evaluate(X, R)
    # f(q_0) = V.x is a constant; f(q_k) for k >= 1 is not
    assert S.to_param(m.evaluate([x], S)) == mpq(1 + 2 + 3 - mpq(1, 5))
    with pytest.raises(FieldError):
        S.to_param(m.evaluate([a, x], S))
