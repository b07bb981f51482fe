"""The modular field F_p (exactlearn.fields.modular; docs: howto/field-and-range.md#number-systems-fields).

Expected values come from independent code where one exists: sympy's
``discrete_log`` and ``primitive_root``, python-flint's ``discrete_log``, and
polynomials multiplied out here with plain field arithmetic.
"""

from __future__ import annotations

import copy
import json
import pickle
import random
from fractions import Fraction

import flint
import pytest
import sympy
from gmpy2 import mpq
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exactlearn.fields import (ConfirmationModular, FieldError, Modular, ModularImage, Rational,
                               ResidueModular)
from exactlearn.fields.base import ExactnessError, NotExponential, NotSplit
from exactlearn.fields.modular import (DEFAULT_P, BadReduction, DiscreteLog, ReconstructionError,
                                       crt_reconstruct, discrete_log, rational_reconstruct,
                                       reconstruction_bound)

from field_table import poly_from_roots

K = Modular()
HALF = (DEFAULT_P - 1) // 2

#: Primes with smooth p - 1, each exercising another path of the discrete log:
#: (p, omega or None, factorisation of p - 1).
PRIMES = [
    (97, None, {2: 5, 3: 1}),                              # tiny, full tables
    (3 * 2**30 + 1, None, {2: 30, 3: 1}),                  # c * 2^k, window does not divide k
    (15 * 2**27 + 1, 31, {2: 27, 3: 1, 5: 1}),             # three prime powers (BabyBear)
    (2**32 * 1000003 + 1, None, {2: 32, 1000003: 1}),      # digit by baby-step giant-step
    (DEFAULT_P, 3, {2: 120, 7: 1}),
]
FIELDS = [Modular(p, omega) for p, omega, _ in PRIMES]
SCALES = [1, 2, 6, 35]

#: Cheap properties: 60 examples, or the active profile's budget when larger
#: (HYPOTHESIS_PROFILE=thorough, see conftest.py); other settings follow the profile.
fast = settings(max_examples=max(60, settings().max_examples), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


# -- construction, identity --------------------------------------------------------

@pytest.mark.parametrize("p, omega, factors", PRIMES)
def test_prime_table(p, omega, factors):
    F = Modular(p, omega)
    assert F.factors == factors == sympy.factorint(p - 1)
    assert sympy.is_primitive_root(F.omega, p)
    if omega is None:
        assert F.omega == sympy.primitive_root(p)       # the least one


def test_default_field():
    assert K.p == 7 * 2**120 + 1 and K.omega == 3
    assert K == Modular(omega=3) == Modular(DEFAULT_P, 3, None)
    assert repr(K) == "Modular(p=7*2**120+1, omega=3, scale=None)"
    assert eval(repr(Modular(scale=6)), {"Modular": Modular}) == Modular(scale=6)
    assert K.max_exponent == HALF and K.order == DEFAULT_P - 1


def test_equality_and_hash():
    a, b = Modular(scale=2), K.with_scale(2)
    assert a == b and hash(a) == hash(b) and len({a, b, K}) == 2
    assert a != K and K != Modular(97) and Modular(97) != Modular(97, 10)
    assert K != Rational() and Modular(97, scale=3) == Modular(97, 5, 3)
    assert b.scale == 2 and b.D == 2 and K.D == 1


def test_pickle_and_copy():
    F = Modular(97, scale=6)
    for G in (pickle.loads(pickle.dumps(F)), copy.deepcopy(F), copy.copy(F)):
        assert G == F and G.exp(mpq(5, 6)) == F.exp(mpq(5, 6)) == 5**5 % 97


#: The F_p fields with their pinned reprs: identity, repr, pickling and with_scale all
#: derive from one per-class spec (``Field._identity``), and the class is part of the identity.
IDENTITY = [
    (Modular(scale=6), "Modular(p=7*2**120+1, omega=3, scale=6)"),
    (ResidueModular(p=97), "ResidueModular(p=97, omega=5, scale=None)"),
    (ConfirmationModular(2**127 - 1, omega=5, scale=2),
     "ConfirmationModular(p=170141183460469231731687303715884105727, omega=5, scale=2)"),
    (ModularImage(base=3, scale=2), "ModularImage(base=3, p=7*2**120+1, scale=2)"),
]


@pytest.mark.parametrize("F, text", IDENTITY, ids=[type(F).__name__ for F, _ in IDENTITY])
def test_identity_of_every_modular_field(F, text):
    assert repr(F) == text
    for G in (pickle.loads(pickle.dumps(F)), copy.deepcopy(F), F.with_scale(F.scale)):
        assert type(G) is type(F) and G == F and hash(G) == hash(F) and repr(G) == text
        assert G.exp(mpq(4, F.D)) == F.exp(mpq(4, F.D))
    H = F.with_scale(35)
    assert type(H) is type(F) and H != F and H.D == 35 and repr(H) == text.replace(
        f"scale={F.scale})", "scale=35)")
    others = [G for G, _ in IDENTITY if G is not F]
    assert all(F != G.with_scale(F.scale) for G in others)


def test_describe_is_json():
    d = Modular(scale=6).describe()
    assert d == {"field": "modular", "p": str(DEFAULT_P), "omega": 3, "scale": 6}
    assert json.loads(json.dumps(d)) == d


@pytest.mark.parametrize("p, omega, match", [
    (100, None, "prime"), (2, None, "prime"), (1, None, "prime"), (-7, None, "prime"),
    (2**127 - 1, None, "not smooth"),                      # largest factor of p-1 ~ 2^36
    (DEFAULT_P, 2, "primitive root"),                      # 2 is a square mod p (p = 1 mod 8)
    (DEFAULT_P, 1, "primitive root"), (DEFAULT_P, DEFAULT_P, "primitive root"),
    (97, 4, "primitive root"),
    (97.0, None, "integer"), (True, None, "integer"), (97, 5.0, "omega"),
])
def test_bad_prime_or_omega(p, omega, match):
    with pytest.raises(ValueError, match=match):
        Modular(p, omega)


# -- elements ------------------------------------------------------------------------

def test_embedding():
    assert K("3/7") * 7 == 3 and K(mpq(3, 7)) == K(Fraction(3, 7)) == K("6/14") == K("3/7")
    assert K("0.5") * 2 == 1 and K(-1) + 1 == 0 and K(DEFAULT_P + 5) == 5
    assert K.zero == 0 and K.one == 1 and K.is_zero(K(DEFAULT_P)) and not K.is_zero(K.one)
    assert K.eq(K(2) / 3, K("2/3")) and not K.eq(K(2), K(3))


@pytest.mark.parametrize("bad, exc", [
    (1.5, ValueError), (True, ValueError), ("nan", ValueError), ("1/0", ValueError),
    (object(), ValueError), (flint.fmpz_mod_ctx(97)(3), ValueError),
])
def test_embedding_rejects(bad, exc):
    with pytest.raises(exc):
        K(bad)


@pytest.mark.parametrize("q", [mpq(1, 97), "5/194", Fraction(-3, 97**2)])
def test_bad_reduction(q):
    F = Modular(97)
    with pytest.raises(BadReduction, match="divisible by p = 97"):
        F(q)
    assert issubclass(BadReduction, FieldError)


# -- exp / log -----------------------------------------------------------------------

@fast
@given(n=st.integers(-HALF + 1, HALF), D=st.sampled_from(SCALES))
@example(n=HALF, D=1)
@example(n=-HALF + 1, D=1)
@example(n=HALF, D=35)
@example(n=-HALF + 1, D=6)
@example(n=0, D=2)
@example(n=1, D=1)
@example(n=-1, D=1)
@example(n=HALF - 1, D=2)
def test_exp_log_round_trip(n, D):
    F = K.with_scale(D)
    s = mpq(n, D)
    a = F.exp(s)
    assert a == F(F.omega) ** (n % (DEFAULT_P - 1))
    assert F.log(a) == s


@fast
@given(n=st.integers(-2**200, 2**200))
def test_log_is_symmetric_lift(n):
    a = K(3) ** (n % (DEFAULT_P - 1))
    m = n % (DEFAULT_P - 1)
    want = m if m <= HALF else m - (DEFAULT_P - 1)
    assert K.log(a) == want and -HALF < want <= HALF


@fast
@given(s=st.integers(-2**100, 2**100), t=st.integers(-2**100, 2**100))
def test_exp_is_a_homomorphism(s, t):
    F = K.with_scale(6)
    assert F.exp(mpq(s + t, 6)) == F.exp(mpq(s, 6)) * F.exp(mpq(t, 6))


@pytest.mark.parametrize("F", FIELDS, ids=lambda F: str(F.p))
def test_log_non_default_primes(F):
    rng = random.Random(F.p)
    half = (F.p - 1) // 2
    for _ in range(40):
        n = rng.randint(-half + 1, half)
        D = rng.choice(SCALES)
        G = F.with_scale(D)
        assert G.log(G.exp(mpq(n, D))) == mpq(n, D)
    for _ in range(5):                                      # independent: sympy
        a = rng.randrange(1, F.p)
        m = sympy.ntheory.discrete_log(F.p, a, F.omega)
        assert F.log(F(a)) == (m if m <= half else m - (F.p - 1))
    assert F.log(F.exp(mpq(half))) == half and F.log(F.exp(mpq(-half + 1))) == -half + 1


def test_discrete_log_against_flint():
    rng = random.Random(3)
    dl = DiscreteLog(DEFAULT_P, 3, {2: 120, 7: 1})
    g = K(3)
    for _ in range(20):
        a = K(rng.randrange(1, DEFAULT_P))
        assert dl(int(a)) == g.discrete_log(a)


@pytest.mark.parametrize("table_bits", [1, 3, 7, 12])
def test_discrete_log_any_window(table_bits):
    rng = random.Random(table_bits)
    dl = DiscreteLog(DEFAULT_P, 3, {2: 120, 7: 1}, table_bits=table_bits)
    for _ in range(20):
        x = rng.randrange(DEFAULT_P - 1)
        assert dl(pow(3, x, DEFAULT_P)) == x


def test_exp_errors():
    F = K.with_scale(6)
    with pytest.raises(ExactnessError, match="outside"):
        K.exp(mpq(HALF + 1))
    with pytest.raises(ExactnessError, match="outside"):
        K.exp(mpq(-HALF))                               # the range is (-(p-1)/2, (p-1)/2]
    with pytest.raises(ExactnessError, match="outside"):
        F.exp(mpq(HALF, 6) + 1)


def test_log_errors():
    with pytest.raises(NotExponential):
        K.log(K.zero)
    with pytest.raises(NotExponential):
        K.log(DEFAULT_P)
    a = K.exp(mpq(2**70))
    assert K.log(a, max_exponent=2**70) == 2**70
    with pytest.raises(NotExponential, match="bound"):
        K.log(a, max_exponent=2**70 - 1)


# -- roots ---------------------------------------------------------------------------

expand = poly_from_roots        # tests/field_table.py


@settings(max_examples=max(40, settings().max_examples), deadline=None)
@given(data=st.data(), F=st.sampled_from(FIELDS))
def test_roots_of_distinct_linear_factors(data, F):
    deg = data.draw(st.integers(1, 12 if F.p > 1000 else 6), label="degree")
    rs = data.draw(st.lists(st.integers(0, F.p - 1), min_size=deg, max_size=deg, unique=True))
    lead = data.draw(st.integers(1, F.p - 1), label="lead")
    pad = data.draw(st.integers(0, 2), label="leading zeros")
    cs = expand(F, rs, lead) + [F.zero] * pad
    got = F.roots(cs)
    assert [int(r) for r in got] == sorted(rs)
    assert all(sum(c * r**i for i, c in enumerate(cs)) == 0 for r in got)


def test_roots_degree_zero():
    assert K.roots([]) == [] and K.roots([K(5)]) == [] and K.roots([K(0), K(0)]) == []
    assert K.roots([5, 0, 0]) == []
    assert K.roots(["1/2", 1]) == [K("-1/2")]


@pytest.mark.parametrize("F", FIELDS, ids=lambda F: str(F.p))
def test_not_split_repeated_root(F):
    rng = random.Random(F.p)
    r = rng.randrange(F.p)
    s = (r + rng.randrange(1, F.p)) % F.p
    for roots in ([r, r], [r, s, r], [s, r, r, r]):
        with pytest.raises(NotSplit, match="repeated root"):
            F.roots(expand(F, roots, 3))


@pytest.mark.parametrize("F", FIELDS, ids=lambda F: str(F.p))
def test_not_split_irreducible_quadratic(F):
    # omega is a primitive root, hence a non-square: k^2 - omega is irreducible
    quad = [-F(F.omega), F.zero, F.one]
    with pytest.raises(NotSplit, match="irreducible"):
        F.roots(quad)
    lin = expand(F, [1, 2])
    prod = [sum((quad[i] * lin[j] for i in range(3) for j in range(3) if i + j == k), F.zero)
            for k in range(5)]
    with pytest.raises(NotSplit, match="only 2 roots"):
        F.roots(prod)


# -- back to rationals ---------------------------------------------------------------

B = reconstruction_bound(DEFAULT_P)


def test_bound_value():
    assert B == int(sympy.integer_nthroot(DEFAULT_P // 2, 2)[0]) // 2**16
    assert K.height_bound == B and 2**44 < B < 2**45
    assert K.param == Rational(scale=None) and Modular(scale=5).param.scale == 5
    assert K.format(mpq(-6, 4)) == "-3/2"


@fast
@given(num=st.integers(-B, B), den=st.integers(1, B))
@example(num=B, den=B - 1)
@example(num=-B, den=1)
@example(num=0, den=1)
@example(num=1, den=B)
def test_reconstruction_round_trip(num, den):
    q = mpq(num, den)
    assert K.to_param(K(q)) == q
    assert rational_reconstruct(int(K(q)), DEFAULT_P) == q


N = int(sympy.integer_nthroot((DEFAULT_P - 1) // 2, 2)[0])   # uniqueness bound


def height(q):
    return max(abs(q.numerator), q.denominator)


@fast
@given(q=st.builds(mpq, st.integers(-N, N), st.integers(1, N)).filter(lambda q: height(q) > B))
@example(q=mpq(B + 1))
@example(q=mpq(-(B + 1)))
@example(q=mpq(1, B + 1))
@example(q=mpq(N, N - 1))
def test_reconstruction_detects_height_above_bound(q):
    # below N a congruent rational is unique, so one with B < height <= N must
    # be refused, whatever its structure
    with pytest.raises(ReconstructionError, match="height bound exceeded"):
        K.to_param(K(q))


@st.composite
def tall_rationals(draw):
    """Random rationals of height > N; random (seeded) rather than structured,
    since a structured one can collide with a small rational (see below)."""
    rng = random.Random(draw(st.integers(0, 2**64)))
    nb, db = draw(st.integers(62, 200)), draw(st.integers(0, 100))
    q = mpq(rng.choice([1, -1]) * (rng.getrandbits(nb) | 1 << (nb - 1)),
            rng.getrandbits(db) | 1 << db)
    return 1 / q if draw(st.booleans()) else q


@fast
@given(q=tall_rationals().filter(lambda q: height(q) > N))
def test_reconstruction_detects_large_height(q):
    with pytest.raises(ReconstructionError, match="height bound exceeded"):
        K.to_param(K(q))


def test_structured_collision_is_caught_by_a_second_prime():
    # 1/(2^78 - 1) is congruent, modulo 7*2^120 + 1, to a rational of height
    # 7*2^42 + 1 < B: such a value reconstructs wrongly from one prime, and a
    # second prime exposes it
    q = mpq(1, 2**78 - 1)
    wrong = K.to_param(K(q))
    assert wrong == mpq(-7 * 2**42, 7 * 2**42 + 1) != q
    F = Modular(15 * 2**27 + 1)
    assert F(wrong) != F(q)
    G = Modular(2**32 * 1000003 + 1)
    assert crt_reconstruct([K(q), F(q), G(q)], [K.p, F.p, G.p]) == q


@fast
@given(seed=st.integers(0, 2**64))
def test_random_residues_raise(seed):
    # a uniformly random residue is the image of a rational within the bound
    # with probability ~1.4e-10 (see reconstruction_bound); the seed makes it
    # random rather than one of hypothesis's boundary values (such as (p-1)/2 = -1/2)
    r = random.Random(seed).randrange(DEFAULT_P)
    with pytest.raises(ReconstructionError):
        K.to_param(K(r))


def test_random_residues_raise_many():
    rng = random.Random(11)
    for _ in range(2000):
        with pytest.raises(ReconstructionError):
            rational_reconstruct(rng.randrange(DEFAULT_P), DEFAULT_P)


def test_rational_reconstruct_bounds():
    m = 2**61 - 1
    a = 5 * pow(-12, -1, m) % m
    assert rational_reconstruct(a, m, bound=12) == mpq(-5, 12)
    with pytest.raises(ReconstructionError):
        rational_reconstruct(a, m, bound=11)
    with pytest.raises(ValueError, match="bound"):
        rational_reconstruct(a, m, bound=2**31)
    with pytest.raises(ValueError):
        rational_reconstruct(1, 1)


def test_crt_reconstruct_recovers_what_one_prime_cannot():
    primes = [DEFAULT_P, 3 * 2**30 + 1, 15 * 2**27 + 1, 2**32 * 1000003 + 1, 2**127 - 1]
    q = mpq(-(3**50 + 7), 2**60 + 33)                     # height ~ 2^80 > B
    with pytest.raises(ReconstructionError):
        Modular().to_param(Modular()(q))
    fields = [Modular(p) for p in primes[:4]]
    assert crt_reconstruct([F(q) for F in fields[:4]], primes[:4]) == q
    assert crt_reconstruct([int(F(q)) for F in fields[:4]], primes[:4]) == q
    assert crt_reconstruct([q.numerator * pow(q.denominator, -1, primes[4]) % primes[4],
                            int(fields[0](q))], [primes[4], primes[0]]) == q
    with pytest.raises(ReconstructionError):               # two small primes are not enough
        crt_reconstruct([F(q) for F in fields[1:3]], primes[1:3])


def test_crt_reconstruct_errors():
    with pytest.raises(ValueError):
        crt_reconstruct([1, 2], [97])
    with pytest.raises(ValueError):
        crt_reconstruct([], [])
    with pytest.raises(ValueError, match="coprime"):
        crt_reconstruct([1, 2], [97, 97])


def test_a_checked_log_fills_the_power_cache_with_the_same_element():
    """Performance (docs/explanation/performance.md): Modular.log keeps omega^n = a for
    power(n) only when the log tested omega^n == a (symmetric_checked); power(n) then returns
    the element it would compute."""
    K = Modular()
    rng = random.Random(5)
    for n in [rng.randrange(-2 ** 70, 2 ** 70) for _ in range(50)] + [1, -1, 2 ** 100]:
        a = K._omega_el ** n if n >= 0 else K._omega_inv ** -n
        assert K.log(a) == mpq(n, K.D)
        got, checked = discrete_log(K.p, K.omega).symmetric_checked(int(a), K.omega)
        assert got == n and checked
        assert K.power(n) == a and Modular().power(n) == a
    dl = DiscreteLog(97, 5, {2: 5, 3: 1})
    assert dl.symmetric_checked(pow(5, 3, 97), 5) == (3, False)      # lifted, unchecked
    K97 = Modular(p=97)
    K97.log(K97(pow(int(K97.omega), 3, 97)))                       # any entry is omega^n
    assert K97._exp_cache == {} or all(K97._omega_el ** n == v for n, v in K97._exp_cache.items())
