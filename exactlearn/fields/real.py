"""The real field: true softmax ``e^s`` in mpmath at a chosen precision (SPEC §4, §6).

``Real(dps=50, tol=None, scale=None, *, sep=None)`` works in its **own** mpmath
context (``mpmath.MPContext()``) with ``dps`` significant digits; the global
``mpmath.mp`` is never read or changed.  Elements are that context's ``mpf``.
``exp(s)`` is the true ``e^s`` (``scale`` is accepted for the protocol but does
not change it) and ``log`` is the true natural logarithm.  The field is its own
parameter domain: ``K.param is K`` and ``to_param`` is the identity.

Tolerances: the zero-test contract
----------------------------------
Nothing here is exact, so every decision is a comparison with thresholds taken
from the field object -- never from globals:

* ``tol`` (default ``10^-(dps//2)``): a quantity at most ``tol * m`` is *zero*;
* ``sep`` (default ``sqrt(tol)``): a quantity above ``sep * m`` is *nonzero*;
* in between it is **undecided**.

The magnitude ``m`` makes decisions relative.  ``scale`` (default 1) is the size
of the terms a quantity was computed from: ``m = |scale|`` for ``is_zero(a)`` and
``log(a)``, and ``m = max(|scale|, |a|, |b|)`` for ``eq(a, b)``.  With the default,
``eq`` is ``|a - b| <= tol * max(1, |a|, |b|)``.  A caller that knows a tiny
quantity is accurate *relative to itself* passes its own size as ``scale``.

An undecided test is never answered: ``is_zero``/``eq`` raise :class:`Undecided`
(a :class:`~exactlearn.fields.base.FieldError`), ``log`` raises
:class:`~exactlearn.fields.base.NotExponential` and ``roots`` raises
:class:`~exactlearn.fields.base.NotSplit`, each saying "undecided".  The
tri-state answer itself is available as :meth:`Real.decide_zero` (True, False
or None).  Choose ``tol`` above the accumulated error of the computation (for a
noisy oracle, above the noise times its amplification) and ``sep`` below the
smallest genuine nonzero quantity; a band that is too narrow then cannot give a
wrong decision, only an explicit failure.

>>> K = Real(dps=30)
>>> K.describe()
{'field': 'real', 'dps': 30, 'tol': '1.0e-15', 'sep': '3.16228e-8', 'scale': 1}
>>> K.format(K.exp(1))
'2.71828182845904523536028747135'
>>> K.format(K.log(K.exp("1/3")))
'0.333333333333333333333333333333'
>>> K.eq(K("1/3"), K("0.3333333333333333333333333"))   # differs by 3e-26 < tol
True
>>> K.decide_zero(K("1e-10")) is None                  # between tol and sep
True
>>> [K.format(r) for r in K.roots([2, 3, 1])]          # (k + 1)(k + 2)
['-2.0', '-1.0']
"""

from __future__ import annotations

from gmpy2 import mpq, mpz
import mpmath
from mpmath.libmp import from_rational, round_nearest

from .base import Field, FieldError, NotExponential, NotSplit, as_mpq

__all__ = ["Real", "Undecided"]


class Undecided(FieldError):
    """A zero or equality test fell between ``tol`` and ``sep`` (see module doc)."""


def _is_mpf(x) -> bool:
    return hasattr(x, "_mpf_")


class Real(Field):
    """The reals at ``dps`` digits, with true ``exp``/``log`` and the tolerances above."""

    name = "real"
    is_exact = False

    def __init__(self, dps: int = 50, tol=None, scale: int | None = None, *, sep=None):
        super().__init__(scale)
        if isinstance(dps, bool) or not isinstance(dps, int) or dps < 4:
            raise ValueError(f"dps must be an integer >= 4, got {dps!r}")
        self.dps = dps
        self.ctx = ctx = mpmath.MPContext()
        ctx.dps = dps
        tol = ctx.mpf(10) ** (-(dps // 2)) if tol is None else self._threshold(tol, "tol")
        sep = ctx.sqrt(tol) if sep is None else self._threshold(sep, "sep")
        if not tol <= sep:
            raise ValueError(f"need tol <= sep, got tol={ctx.nstr(tol, 6)}, sep={ctx.nstr(sep, 6)}")
        self.tol = tol
        self.sep = sep

    def _threshold(self, t, what):
        try:
            t = self(t)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
        if not 0 < t < 1:
            raise ValueError(f"{what} must lie in (0, 1), got {self.ctx.nstr(t, 6)}")
        return t

    # -- identity -------------------------------------------------------------------
    def _key(self):
        return ("Real", self.dps, _exact(self.tol), _exact(self.sep), self.scale)

    def __repr__(self):
        return (f"Real(dps={self.dps}, tol={self.ctx.nstr(self.tol, 6)!r}, "
                f"scale={self.scale}, sep={self.ctx.nstr(self.sep, 6)!r})")

    def __reduce__(self):
        return (_rebuild, (self.dps, _exact(self.tol), self.scale, _exact(self.sep)))

    def with_scale(self, scale):
        return Real(self.dps, self.tol, scale, sep=self.sep)

    def with_tolerance(self, tol, sep=None) -> "Real":
        """The same field with other thresholds (``sep`` defaults to ``sqrt(tol)``)."""
        return Real(self.dps, tol, self.scale, sep=sep)

    def describe(self):
        nstr = self.ctx.nstr
        return {"field": self.name, "dps": self.dps, "tol": nstr(self.tol, 6),
                "sep": nstr(self.sep, 6), "scale": self.D}

    @property
    def prec(self) -> int:
        """Working precision in bits."""
        return self.ctx.prec

    # -- elements -----------------------------------------------------------------------
    def __call__(self, x):
        """Embed int, mpz, mpq, Fraction, ``"p/q"`` or decimal string (read exactly,
        rounded once), or an mpf of any precision (rounded to this one).

        Floats and complex numbers are refused: pass ``Fraction(x)`` for the exact
        binary value of a float, or ``str(x)`` for its shortest decimal.
        """
        ctx = self.ctx
        if _is_mpf(x):
            v = ctx.mpf(x)
            if not ctx.isfinite(v):
                raise ValueError(f"not a finite real number: {x!r}")
            return v
        if isinstance(x, (float, complex)) or hasattr(x, "_mpc_"):
            raise ValueError(f"refusing {type(x).__name__} {x!r}: pass an exact rational "
                             f"(Fraction(x) or str(x)) or an mpf")
        q = as_mpq(x)
        return ctx.make_mpf(from_rational(int(q.numerator), int(q.denominator), ctx.prec,
                                          round_nearest))

    @property
    def zero(self):
        return self.ctx.mpf(0)

    @property
    def one(self):
        return self.ctx.mpf(1)

    def _mag(self, scale, *xs):
        """``max(|scale|, |x| for x in xs)`` as an mpf; ``scale`` defaults to 1."""
        m = self.one if scale is None else abs(self(scale))
        if m == 0:
            raise ValueError("scale must be nonzero (it is the magnitude decisions are relative to)")
        for x in xs:
            ax = abs(self(x))
            if ax > m:
                m = ax
        return m

    def _decide(self, size, m):
        """True (zero), False (nonzero) or None (undecided) for ``|.| = size`` at magnitude m."""
        if size <= self.tol * m:
            return True
        if size > self.sep * m:
            return False
        return None

    def decide_zero(self, a, scale=None):
        """Tri-state zero test: True if ``|a| <= tol*m``, False if ``|a| > sep*m``,
        None in between; ``m = |scale|``, default 1."""
        return self._decide(abs(self(a)), self._mag(scale))

    def decide_eq(self, a, b, scale=None):
        """Tri-state equality: ``|a - b|`` decided at ``m = max(|scale|, |a|, |b|)``, scale default 1."""
        a, b = self(a), self(b)
        return self._decide(abs(a - b), self._mag(scale, a, b))

    def is_zero(self, a, scale=None) -> bool:
        """``|a| <= tol * |scale|`` (scale default 1); raises :class:`Undecided` in the band."""
        r = self.decide_zero(a, scale)
        if r is None:
            raise Undecided(f"zero test undecided: |a| = {self.ctx.nstr(abs(self(a)), 5)} lies "
                            f"between tol and sep relative to {self.ctx.nstr(self._mag(scale), 5)} "
                            f"({self._band()})")
        return r

    def eq(self, a, b, scale=None) -> bool:
        """``|a - b| <= tol * max(|scale|, |a|, |b|)`` (scale default 1); raises
        :class:`Undecided` in the band."""
        r = self.decide_eq(a, b, scale)
        if r is None:
            raise Undecided(f"equality undecided: |a - b| = {self.ctx.nstr(abs(self(a) - self(b)), 5)} "
                            f"relative to {self.ctx.nstr(self._mag(scale, a, b), 5)} ({self._band()})")
        return r

    def _band(self):
        nstr = self.ctx.nstr
        return f"tol={nstr(self.tol, 3)}, sep={nstr(self.sep, 3)} at dps={self.dps}"

    # -- exp / log ----------------------------------------------------------------------
    def exp(self, s):
        """The true ``e^s`` for an exact rational or mpf score ``s`` (``scale`` plays no part).

        An exact ``s`` is read at extra precision, so the only error is the final rounding.
        """
        ctx = self.ctx
        if _is_mpf(s):
            return ctx.exp(self(s))
        q = as_mpq(s)
        extra = 20 + max(0, int(mpz(abs(q.numerator) // q.denominator).bit_length()))
        with ctx.extraprec(extra):
            x = ctx.make_mpf(from_rational(int(q.numerator), int(q.denominator), ctx.prec,
                                           round_nearest))
            y = ctx.exp(x)
        return +y

    def log(self, a, scale=None):
        """The natural log of ``a``, which must be decided positive: ``a > sep * |scale|``
        (scale default 1; pass ``scale=a`` when ``a`` is known to relative accuracy).

        Zero, negative or undecided ``a`` raise :class:`NotExponential`.
        """
        a = self(a)
        m = self._mag(scale)
        if a <= 0 or self._decide(a, m) is not False:
            state = {True: "zero within tolerance", None: "undecided"}.get(
                self._decide(abs(a), m), "negative")
            raise NotExponential(f"log of {self.ctx.nstr(a, 6)}: not decided positive "
                                 f"({state}; {self._band()})")
        return self.ctx.log(a)

    # -- polynomials --------------------------------------------------------------------
    def roots(self, coeffs):
        """The roots of ``sum(coeffs[i] * k**i)``, sorted, when all are real and distinct.

        The degree is that of the coefficients as given (only exact zeros are dropped):
        whether a small leading coefficient is noise is for the caller to decide, since
        a genuine one just means a large root.  The roots come from an Aberth-Ehrlich iteration at ``30 + 4*deg``
        extra bits, started on Newton-polygon circles and stopped on a *relative*
        correction.  (``ctx.polyroots`` is not used: its stopping test is absolute,
        ``|correction| < eps``, which cannot be met by a root of size ``>> 1``, so it
        fails on e.g. degree 12 with roots spread over 1e-1 .. 1e7.)  With ``R`` the
        geometric mean of the root sizes, decisions are invariant under
        ``k -> lambda k``: a root is real if ``|Im r| <= tol * max(R, |r|)`` and two roots
        are distinct if ``|r - r'| > sep * max(R, |r|, |r'|)``.  Anything else --
        complex, multiple, undecided, or no convergence -- raises :class:`NotSplit`.
        """
        ctx = self.ctx
        cs = [self(c) for c in coeffs]
        big = max((abs(c) for c in cs), default=ctx.mpf(0))
        if big == 0:
            return []
        cs = [c / big for c in cs]
        while cs[-1] == 0:
            cs.pop()
        deg = len(cs) - 1
        if deg <= 0:
            return []
        if deg == 1:
            return [-cs[0] / cs[1]]
        lo = next(i for i, c in enumerate(cs) if c != 0)         # k^lo divides exactly
        if lo >= 2:
            raise NotSplit(f"k = 0 is a root of multiplicity {lo}")
        with ctx.extraprec(30 + 4 * deg):
            rts = _aberth(ctx, cs[lo:], maxsteps=80 + 10 * deg)
            if rts is None:
                raise NotSplit(f"root iteration did not converge at degree {deg}: roots "
                               f"(nearly) multiple or badly conditioned ({self._band()})")
            rts = rts + [ctx.mpc(0)] * lo
            R = _root_size(ctx, cs)
        out = []
        for r in rts:
            m = max(R, abs(r))
            im = self._decide(abs(r.imag), m)
            if im is not True:
                what = "undecided" if im is None else "non-real"
                raise NotSplit(f"{what} root {ctx.nstr(r, 8)} ({self._band()})")
            out.append(+r.real)
        out.sort()
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            same = self._decide(abs(b - a), max(R, abs(a), abs(b)))
            if same is not False:
                what = "undecided" if same is None else "a multiple"
                raise NotSplit(f"{what} root near {ctx.nstr(a, 8)}: neighbours {ctx.nstr(a, 8)} "
                               f"and {ctx.nstr(b, 8)} ({self._band()})")
        return out

    # -- parameters ---------------------------------------------------------------------
    @property
    def param(self):
        return self

    def to_param(self, a):
        return self(a)

    def format(self, a) -> str:
        """Decimal string with ``dps`` significant digits."""
        return self.ctx.nstr(self(a), self.dps)


def _exact(x) -> mpq:
    """The exact dyadic value of an mpf as an mpq."""
    man, exp = int(x.man), int(x.exp)
    return mpq(man * 2 ** exp) if exp >= 0 else mpq(man, 2 ** -exp)


def _root_size(ctx, cs):
    """Geometric mean of the root sizes, ``|c_lo / c_n|^(1/(n - lo))`` (1 if all roots are 0)."""
    n = len(cs) - 1
    lo = next(i for i, c in enumerate(cs) if c != 0)
    if lo == n:
        return ctx.mpf(1)
    return abs(cs[lo] / cs[n]) ** (ctx.mpf(1) / (n - lo))


def _initial_roots(ctx, cs):
    """Starting points for Aberth: circles whose radii are read off the Newton polygon
    (upper convex hull of ``(i, log|c_i|)``), as in Bini's MPSolve."""
    n = len(cs) - 1
    pts = [(i, ctx.log(abs(c))) for i, c in enumerate(cs) if c != 0]
    hull = []
    for p in pts:
        while len(hull) >= 2:
            (i0, y0), (i1, y1) = hull[-2], hull[-1]
            if (y1 - y0) * (p[0] - i0) <= (p[1] - y0) * (i1 - i0):
                hull.pop()
            else:
                break
        hull.append(p)
    zs = []
    for (i0, y0), (i1, y1) in zip(hull, hull[1:]):
        m = i1 - i0
        r = ctx.exp((y0 - y1) / m)
        for j in range(m):
            zs.append(r * ctx.expjpi(ctx.mpf(2 * j) / m + ctx.mpf(len(zs) + 1) / (n + 1) + 0.1))
    return zs


def _aberth(ctx, cs, maxsteps):
    """All roots of ``sum(cs[i] k^i)`` (``cs[0] != 0``, degree >= 1) by the Aberth-Ehrlich
    iteration at the current precision; None if it does not settle in ``maxsteps`` sweeps.

    A root is frozen once it is as good as the precision allows: either its correction
    is relatively tiny, ``|w| <= 2^(8-prec) |z|``, or ``|p(z)|`` is within the rounding
    error of Horner's rule, ``|p(z)| <= 4 n 2^-prec sum |c_i| |z|^i`` (MPSolve's test:
    then z is an exact root of a polynomial within that relative distance).  Its error
    is then ``2^-prec`` times its condition number, which the caller's extra bits absorb.
    """
    n = len(cs) - 1
    zs = _initial_roots(ctx, cs)
    eps = ctx.ldexp(1, 8 - ctx.prec)
    horner_eps = ctx.ldexp(4 * n, -ctx.prec)
    abs_cs = [abs(c) for c in cs]
    frozen = [False] * n
    for _ in range(maxsteps):
        for i in range(n):
            if frozen[i]:
                continue
            z = zs[i]
            p, dp, bound, az = cs[n], ctx.mpc(0), abs_cs[n], abs(z)
            for c, ac in zip(reversed(cs[:n]), reversed(abs_cs[:n])):
                dp = dp * z + p
                p = p * z + c
                bound = bound * az + ac
            if abs(p) <= horner_eps * bound:
                frozen[i] = True
                continue
            s = ctx.mpc(0)
            for j in range(n):
                if j != i and z != zs[j]:
                    s += 1 / (z - zs[j])
            if dp == 0:
                w = p * eps                      # nudge off a critical point
            else:
                N = p / dp
                w = N / (1 - N * s)
            zs[i] = z - w
            if abs(w) <= eps * abs(zs[i]):
                frozen[i] = True
        if all(frozen):
            return zs
    return None


def _rebuild(dps, tol, scale, sep):
    return Real(dps, tol, scale, sep=sep)
