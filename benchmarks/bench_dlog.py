"""Discrete log and root finding in the modular field (README, "Number systems (fields)").

Prints microseconds per discrete log for the default prime p = 7*2**120 + 1:
exactlearn's windowed Pohlig--Hellman (``Modular.log``, and the raw
``DiscreteLog`` without the symmetric lift), python-flint's built-in
``fmpz_mod.discrete_log`` and ``sympy.ntheory.discrete_log``; then the cost of
``exp``, ``to_param`` and ``roots`` at degree 8 and 16.  Every timed result is
checked against the known answer.

    python benchmarks/bench_dlog.py [--n 2000] [--sympy-n 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import flint  # noqa: E402
import sympy.ntheory  # noqa: E402
from gmpy2 import mpq, mpz  # noqa: E402

from exactlearn.fields.modular import TABLE_BITS, DiscreteLog, Modular  # noqa: E402


def best_us(fn, items, repeat=3):
    """Best-of-``repeat`` microseconds per item of ``fn`` over ``items``."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for it in items:
            fn(it)
        best = min(best, (time.perf_counter() - t0) / len(items))
    return best * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="logs per fast method")
    ap.add_argument("--sympy-n", type=int, default=50, help="logs for sympy (slow)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)

    K = Modular()
    p, half = K.p, K.max_exponent
    print(f"field {K!r}, p - 1 factors {K.factors}, table bits {TABLE_BITS}")

    t0 = time.perf_counter()
    dl = DiscreteLog(p, K.omega, K.factors)
    print(f"  DiscreteLog tables built in {(time.perf_counter() - t0) * 1e3:.1f} ms")
    K.log(K(2))                                    # build the shared tables once

    ns = [rng.randint(-half + 1, half) for _ in range(args.n)]
    els = [K.exp(mpq(n)) for n in ns]
    assert all(K.log(a) == n for a, n in zip(els, ns)), "Modular.log is wrong"
    raw = [mpz(int(a)) for a in els]
    assert all(dl(a) == n % (p - 1) for a, n in zip(raw, ns)), "DiscreteLog is wrong"
    g = K(K.omega)
    assert all(g.discrete_log(a) == n % (p - 1) for a, n in zip(els[:50], ns[:50]))
    sub = list(zip(raw, ns))[: args.sympy_n]
    assert all(sympy.ntheory.discrete_log(p, int(a), K.omega) == n % (p - 1) for a, n in sub[:5])

    ours = best_us(K.log, els)
    ours_raw = best_us(dl, raw)
    fl = best_us(g.discrete_log, els)
    sy = best_us(lambda a: sympy.ntheory.discrete_log(p, int(a), K.omega), [a for a, _ in sub], 1)
    print("discrete log, microseconds per log (random exponents in the symmetric range):")
    print(f"  exactlearn Modular.log (windowed PH, gmpy2)   {ours:9.1f}")
    print(f"  exactlearn DiscreteLog (no lift, no mpq)      {ours_raw:9.1f}")
    print(f"  python-flint fmpz_mod.discrete_log            {fl:9.1f}")
    print(f"  sympy.ntheory.discrete_log                    {sy:9.1f}   "
          f"({sy / ours:.0f}x Modular.log)")

    small = [rng.randint(-2**64, 2**64) for _ in range(args.n)]
    K2 = Modular()                                  # fresh exp cache
    print(f"exp, 64-bit exponents (uncached)                {best_us(K2.exp, small, 1):9.1f} us")
    print(f"exp, same exponents again (cached)              {best_us(K2.exp, small, 1):9.1f} us")
    qs = [mpq(rng.randint(-2**40, 2**40), rng.randint(1, 2**40)) for _ in range(args.n)]
    els_q = [K(q) for q in qs]
    assert [K.to_param(a) for a in els_q] == qs
    print(f"to_param (rational reconstruction), 40-bit     {best_us(K.to_param, els_q):9.1f} us")

    C = flint.fmpz_mod_ctx(p)
    P = flint.fmpz_mod_poly_ctx(p)
    for deg in (8, 16):
        cases = []
        for _ in range(20):
            rs = [C(rng.randrange(p)) for _ in range(deg)]
            f = P([1])
            for r in rs:
                f *= P([-r, 1])
            cases.append((f.coeffs(), sorted(int(r) for r in rs)))
        assert all([int(r) for r in K.roots(cs)] == want for cs, want in cases)
        ms = best_us(lambda c: K.roots(c[0]), cases) / 1e3
        print(f"roots, degree {deg:2d}, splitting into distinct factors  {ms:6.2f} ms")


if __name__ == "__main__":
    main()
