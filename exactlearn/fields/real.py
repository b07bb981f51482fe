"""The real field: true softmax ``e^s`` in mpmath at a chosen precision (SPEC §4, §6).

``Real(dps=50, tol=None, scale=None, *, sep=None, noise=None)`` works in its **own** mpmath
context (``mpmath.MPContext()``) with ``dps`` significant digits; the global
``mpmath.mp`` is never read or changed.  Elements are that context's ``mpf``.
``exp(s)`` is the true ``e^s`` (``scale`` is accepted for the protocol but does
not change it) and ``log`` is the true natural logarithm.  The field is its own
parameter domain: ``K.param is K`` and ``to_param`` is the identity.
``roots`` uses an Aberth iteration with a relative stopping test, and
``rational_interpolate`` replaces the Euclidean Cauchy interpolation of
:mod:`exactlearn.pipeline.interpolate` by a Loewner-matrix (barycentric) one whose pole
count is decided against the sample noise (see both docstrings).

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
(a :class:`~exactlearn.errors.FieldError`), ``log`` raises
:class:`~exactlearn.errors.NotExponential` and ``roots`` raises
:class:`~exactlearn.errors.NotSplit`, each saying "undecided".  The
tri-state answer itself is available as :meth:`Real.decide_zero` (True, False
or None).  Choose ``tol`` above the accumulated error of the computation (for a
noisy oracle, above the noise times its amplification) and ``sep`` below the
smallest genuine nonzero quantity; a band that is too narrow then cannot give a
wrong decision, only an explicit failure.

Raw samples versus derived values
---------------------------------
``noise`` (default ``10^-(dps - dps//10)``) is the relative accuracy of the raw
samples (the black box's outputs, relative to the largest of them): about
``10^-dps`` for an exact oracle evaluated at this precision, ``eta / max|y|`` for
one perturbed by ``eta``.  Only :meth:`Real.rational_interpolate` uses it, to
count poles: the Loewner singular values of 12 heads sampled at k = 0..24
legitimately reach 1e-56 of the largest, far below ``tol`` (1e-50 at dps 100)
but far above the sample noise (1e-90), so that decision cannot use ``tol``.
Derived values (poles, residues, recovered heads) carry the sample error times
the conditioning; ``tol`` must cover *that*.

>>> K = Real(dps=30)
>>> K.describe()
{'field': 'real', 'dps': 30, 'tol': '1.0e-15', 'sep': '3.16228e-8', 'noise': '1.0e-27', 'scale': 1}
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

from exactlearn.fields.base import Field, FieldError, NotExponential, NotSplit, as_mpq
from exactlearn.algebra.rationals import mpf_to_mpq
from exactlearn.errors import Undecided

__all__ = ["Real", "Undecided"]


def _is_mpf(x) -> bool:
    return hasattr(x, "_mpf_")


class Real(Field):
    """The reals at ``dps`` digits, with true ``exp``/``log`` and the tolerances above."""

    name = "real"
    is_exact = False
    is_ordered = True

    def __init__(self, dps: int = 50, tol=None, scale: int | None = None, *, sep=None,
                 noise=None):
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
        self.noise = (ctx.mpf(10) ** (-(dps - dps // 10)) if noise is None
                      else self._threshold(noise, "noise"))

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
        return ("Real", self.dps, mpf_to_mpq(self.tol), mpf_to_mpq(self.sep), mpf_to_mpq(self.noise), self.scale)

    def __repr__(self):
        return (f"Real(dps={self.dps}, tol={self.ctx.nstr(self.tol, 6)!r}, "
                f"scale={self.scale}, sep={self.ctx.nstr(self.sep, 6)!r}, "
                f"noise={self.ctx.nstr(self.noise, 6)!r})")

    def __reduce__(self):
        return (_rebuild, (self.dps, mpf_to_mpq(self.tol), self.scale, mpf_to_mpq(self.sep),
                           mpf_to_mpq(self.noise)))

    def with_scale(self, scale):
        return Real(self.dps, self.tol, scale, sep=self.sep, noise=self.noise)

    def with_tolerance(self, tol, sep=None, noise=None) -> "Real":
        """The same field with other thresholds (``sep`` defaults to ``sqrt(tol)``,
        ``noise`` to this field's)."""
        return Real(self.dps, tol, self.scale, sep=sep,
                    noise=self.noise if noise is None else noise)

    def describe(self):
        nstr = self.ctx.nstr
        return {"field": self.name, "dps": self.dps, "tol": nstr(self.tol, 6),
                "sep": nstr(self.sep, 6), "noise": nstr(self.noise, 6), "scale": self.D}

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

    def sign(self, z, scale=None):
        """0 when ``|z| <= tol * scale`` (the field's own tolerance), None in the undecided
        band, else the sign of z."""
        zero = self.decide_zero(z, scale)
        if zero is True:
            return 0
        if zero is None:
            return None
        return 1 if z > 0 else -1

    def relu(self, z):
        """max(z, 0), with |z| <= tol counted as 0 (error <= tol)."""
        return z if z > self.tol else self.zero

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

    # -- rational interpolation (hook of exactlearn.pipeline.interpolate.cauchy_interpolate) ----------
    def rational_interpolate(self, ks, ys, H):
        """Minimal ``P/Q`` with ``deg P, deg Q <= H`` through the ``2H+1`` points, in
        barycentric (Loewner) form; returns (P, Q) coefficient lists with ``Q(0) = 1``.

        The extended Euclidean algorithm of SPEC §2 needs degree decisions on remainders
        whose coefficients span many orders of magnitude; with ``is_zero`` against a
        fixed scale it raises :class:`Undecided` or miscounts poles from H = 3 on.  Over
        the reals it is replaced by the equivalent linear algebra, and every decision
        compares a quantity with the error that the *sample* noise propagates into it
        (``noise``, module doc): zero if at most that bound ``b``, nonzero if above
        ``b * noise^(-1/10)`` (a factor 1e9 at dps 100) for singular values -- the pole
        count -- and above ``1000 b`` (or that factor if smaller) for the derived weights
        and coefficients, whose bounds are first-order perturbation bounds;
        :class:`Undecided` in between.
        With 12 heads at dps 100 the smallest genuine Loewner singular values sit
        1e40 above their noise bound, so the factor is no obstacle; a genuine zero
        sits at or below the bound.

        1. *Number of poles m.*  With the points sorted, support points ``S`` (even
           positions) and test points (odd), the Loewner matrix
           ``L[i][j] = (y_i - y_j) / (k_i - k_j)`` has rank m.  Sample errors move its
           singular values by at most ``zeta = 2 n noise max|y| / min|k_i - k_j|``
           (``n = 2H+1``); m counts those above the bound.
        2. *Weights.*  On ``m + 1`` spread support points the Loewner matrix has a
           one-dimensional null space: its smallest singular value must be zero and
           the unit null vector ``w`` is then accurate to ``werr = zeta / sigma_m``.
           ``r(k) = sum_j w_j y_j / (k - s_j) / sum_j w_j / (k - s_j)``; each ``w_j``
           must be nonzero (else that sample is unattainable).
        3. *Monomials.*  ``Q = sum_j w_j prod_{i != j} (k - s_i)``, ``P`` likewise with
           ``w_j y_j``.  ``deg Q = m`` (a pole at infinity is not attention) and
           ``Q(0) != 0`` are required; ``P``'s top coefficient is dropped when zero.

        Runs at ``20 + 4n`` extra bits (mpmath ``svd_r``).  Failures raise
        :class:`~exactlearn.errors.InterpolationError` or :class:`Undecided`.
        """
        from exactlearn.errors import InterpolationError
        ctx = self.ctx
        n = 2 * H + 1
        if len(ks) != n or len(ys) != n:
            raise ValueError(f"need 2H+1 = {n} samples, got {len(ks)} points and {len(ys)} values")
        order = sorted(range(n), key=lambda i: self(ks[i]))
        ks = [self(ks[i]) for i in order]
        ys = [self(ys[i]) for i in order]
        ymax = max(abs(y) for y in ys)
        if ymax == 0:
            return [], [self.one]
        gap = min((b - a for a, b in zip(ks, ks[1:])), default=self.one)
        if gap == 0:
            raise ValueError("rational interpolation needs distinct points")
        with ctx.extraprec(20 + 4 * n):
            zeta = 2 * n * self.noise * ymax / min(gap, 1)
            sv_margin = self.noise ** ctx.mpf(-0.1)
            derived_margin = min(sv_margin, ctx.mpf(1000))

            def decide(x, bound, what, margin=derived_margin):
                """True (zero) / False (nonzero); Undecided in the band."""
                if x <= bound:
                    return True
                if x > bound * margin:
                    return False
                raise Undecided(f"rational interpolation: {what} is {ctx.nstr(x, 3)}, within "
                                f"a factor {ctx.nstr(margin, 3)} above its sample-noise bound "
                                f"{ctx.nstr(bound, 3)} (noise={ctx.nstr(self.noise, 3)}, "
                                f"dps={self.dps})")

            def svd(rows, cols):
                return ctx.svd_r(_loewner(ctx, ks, ys, rows, cols), full_matrices=True)

            if n > 1:
                _, sv, _ = svd([i for i in range(n) if i % 2], list(range(0, n, 2)))
                sv = sorted((abs(x) for x in sv), reverse=True)
            else:
                sv = []
            m = sum(1 for i, x in enumerate(sv)
                    if not decide(x, zeta, f"Loewner singular value {i + 1}", sv_margin))
            if m == 0:
                for y in ys:
                    if not decide(abs(y - ys[0]), 2 * self.noise * ymax, "a sample difference"):
                        raise InterpolationError("samples are not those of a rational function "
                                                 f"of type ({H},{H}) (constant fit fails)")
                return [+ys[0]], [self.one]
            sup = sorted({int(ctx.nint(ctx.mpf(j * (n - 1)) / m)) for j in range(m + 1)})
            _, S, V = svd([i for i in range(n) if i not in sup], sup)
            S = sorted((abs(x) for x in S), reverse=True)
            if len(S) == m + 1 and not decide(S[m], zeta, f"the residual of the {m}-pole fit",
                                              sv_margin):
                raise InterpolationError(f"samples are not those of a rational function with "
                                         f"{m} poles (type ({H},{H}))")
            werr = zeta / S[m - 1]
            w = [V[m, j] for j in range(m + 1)]
            for j, x in enumerate(w):
                if decide(abs(x), werr, f"the weight at k = {ctx.nstr(ks[sup[j]], 5)}"):
                    raise InterpolationError(f"samples are not those of a rational function of "
                                             f"type ({H},{H}) (unattainable point at "
                                             f"k = {ctx.nstr(ks[sup[j]], 5)})")
            Q = [ctx.zero] * (m + 1)
            P = [ctx.zero] * (m + 1)
            at0 = ctx.zero                          # sum_j |prod_{i != j} (0 - s_i)|
            for j in range(m + 1):
                basis = [ctx.one]                   # prod_{i != j} (k - s_i), lowest first
                for i in sup:
                    if i != sup[j]:
                        basis = [(basis[t - 1] if t else 0) - (basis[t] * ks[i] if t < len(basis) else 0)
                                 for t in range(len(basis) + 1)]
                at0 += abs(basis[0])
                for t, b in enumerate(basis):
                    Q[t] += w[j] * b
                    P[t] += w[j] * ys[sup[j]] * b
            if decide(abs(Q[m]), werr * (m + 1), "the leading coefficient of Q"):
                raise InterpolationError("deg Q < number of poles: a pole at infinity, not attention")
            if decide(abs(Q[0]), werr * at0, "Q(0)"):
                raise InterpolationError("Q(0) = 0: a pole at k = 0 cannot come from attention")
            drop = decide(abs(P[m]), werr * sum(abs(ys[i]) for i in sup),
                          "the leading coefficient of P")
            P = [x / Q[0] for x in P]
            Q = [x / Q[0] for x in Q]
            if drop:
                P.pop()
        return [+x for x in P], [+x for x in Q]

    # -- parameters ---------------------------------------------------------------------
    @property
    def param(self):
        return self

    def to_param(self, a):
        return self(a)

    def format(self, a) -> str:
        """Decimal string with ``dps`` significant digits."""
        return self.ctx.nstr(self(a), self.dps)


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


def _loewner(ctx, ks, ys, rows, cols):
    """The Loewner matrix ``(y_i - y_j) / (k_i - k_j)``, i in rows, j in cols."""
    return ctx.matrix([[(ys[i] - ys[j]) / (ks[i] - ks[j]) for j in cols] for i in rows])


def _rebuild(dps, tol, scale, sep, noise):
    return Real(dps, tol, scale, sep=sep, noise=noise)
