"""The real field: true softmax ``e^s`` in mpmath at a chosen precision.

docs: howto/field-and-range.md#number-systems-fields and docs: explanation/real-field.md;
the approximate oracles of arXiv:2608.03294.

``Real(dps=50, tol=None, scale=None, *, sep=None, noise=None)`` works in its **own** mpmath
context (``mpmath.MPContext()``) with ``dps`` significant digits; the global
``mpmath.mp`` is never read or changed.  Elements are that context's ``mpf``.
``exp(s)`` is the true ``e^s`` (``scale`` is accepted for the protocol but does
not change it) and ``log`` is the true natural logarithm.  The field is its own
parameter domain: ``K.param is K`` and ``to_param`` is the identity.
``roots`` uses an Aberth iteration with a relative stopping test
(:mod:`exactlearn.algebra.aberth`), and ``rational_interpolate`` replaces the Euclidean
Cauchy interpolation of :mod:`exactlearn.pipeline.interpolate` by a Loewner-matrix
(barycentric) one whose pole count is decided against the sample noise
(:mod:`exactlearn.algebra.loewner`; see both docstrings).

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

import math

from gmpy2 import mpq, mpz
from mpmath.libmp import from_float, from_rational, round_nearest

from exactlearn.algebra.aberth import aberth, root_size
from exactlearn.algebra.contexts import context
from exactlearn.algebra.loewner import loewner_interpolate
from exactlearn.algebra.rationals import mpf_to_mpq
from exactlearn.errors import Undecided
from exactlearn.limits import check_dps
from exactlearn.fields.base import Field, FieldError, NotExponential, NotSplit, as_mpq

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
        check_dps(dps, "dps")              # before any mpmath context is built
        self.dps = dps
        self.ctx = ctx = context(dps=dps)   # its numbers pickle (algebra/contexts.py)
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

    def from_output(self, y):
        """A black box's answer: what :meth:`__call__` embeds, and also a binary float --
        a Python ``float``, a numpy floating scalar or 0-d array, or anything with
        ``.item()`` (a torch or JAX scalar) -- read as its exact binary value (a float
        box's output *is* that value; its error is the declared noise).

        >>> import numpy as np
        >>> K = Real(dps=20)
        >>> K.format(K.from_output(np.float32(0.1))), K.format(K.from_output(0.5))
        ('0.10000000149011611938', '0.5')
        """
        if not isinstance(y, float) and not _is_mpf(y) and hasattr(y, "item") and callable(y.item):
            try:
                y = y.item()
            except (TypeError, ValueError) as exc:
                raise ValueError(f"not a scalar: {exc}") from None
        if isinstance(y, float):        # numpy's float64 too: rounded once, as from Fraction(y)
            if not math.isfinite(y):
                raise ValueError(f"not a finite real number: {y!r}")
            return self.ctx.make_mpf(from_float(float(y), self.ctx.prec, round_nearest))
        return self(y)

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
        a genuine one just means a large root.  The roots come from an Aberth-Ehrlich
        iteration at ``30 + 4*deg`` extra bits, started on Newton-polygon circles and
        stopped on a *relative* correction (:func:`exactlearn.algebra.aberth.aberth`,
        where the module doc says why not ``ctx.polyroots``).  With ``R`` the
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
            rts = aberth(ctx, cs[lo:], maxsteps=80 + 10 * deg)
            if rts is None:
                raise NotSplit(f"root iteration did not converge at degree {deg}: roots "
                               f"(nearly) multiple or badly conditioned ({self._band()})")
            rts = rts + [ctx.mpc(0)] * lo
            R = root_size(ctx, cs)
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

        The extended Euclidean algorithm of
        :func:`~exactlearn.pipeline.interpolate.cauchy_interpolate` needs degree decisions
        on remainders whose coefficients span many orders of magnitude; with ``is_zero``
        against a fixed scale it raises :class:`Undecided` or miscounts poles from H = 3
        on.  Over the reals it is replaced by the equivalent linear algebra,
        :func:`exactlearn.algebra.loewner.loewner_interpolate` (its docstring has the
        algorithm and the decision rule), run in this field's context with every decision
        against the error that the *sample* noise (``noise``, module doc) propagates.
        Failures raise :class:`~exactlearn.errors.InterpolationError` or
        :class:`Undecided`.
        """
        n = 2 * H + 1
        if len(ks) != n or len(ys) != n:
            raise ValueError(f"need 2H+1 = {n} samples, got {len(ks)} points and {len(ys)} values")
        order = sorted(range(n), key=lambda i: self(ks[i]))
        return loewner_interpolate(self.ctx, [self(ks[i]) for i in order],
                                   [self(ys[i]) for i in order], H, self.noise)

    # -- parameters ---------------------------------------------------------------------
    @property
    def param(self):
        return self

    def to_param(self, a):
        return self(a)

    def format(self, a) -> str:
        """Decimal string with ``dps`` significant digits."""
        return self.ctx.nstr(self(a), self.dps)


def _rebuild(dps, tol, scale, sep, noise):
    return Real(dps, tol, scale, sep=sep, noise=noise)
