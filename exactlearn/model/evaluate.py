"""Evaluating heads over a field, fast (docs: explanation/performance.md).

:class:`HeadEvaluator` evaluates f(X) over a field, with an integer path for the plan's
integer tokens, memoised partial fractions and the per-family averages the learner needs;
:class:`VectorEvaluator` does so for each output of a vector model.
"""

from __future__ import annotations

import flint

from exactlearn.errors import BadReduction
from exactlearn.fields.base import Field, lcm_of_denominators
from exactlearn.model.heads import Head, constant_of, distinct_tokens, exponent_entries  # noqa: F401 -- Head: doctests

class _NotInt(Exception):
    """A token of a query is not all Python ints: the integer path does not apply."""


class HeadEvaluator:
    """Evaluates raw or recovered heads through a field (docs: explanation/algorithm.md#the-model-and-its-sign-convention).

    Work is in the number of *distinct* tokens (multiplicities weight them) and
    each head's ``W_h x_n`` is computed once per final token.  For an exact
    field and integer tokens it takes an integer fast path: with D clearing
    every W denominator, ``D * (x_i - x_n)^T W_h x_n`` is an integer n and the
    weight is ``K.power(n) = T^n`` -- the same value as ``K.exp(s)``.
    """

    def __init__(self, heads, d: int, field: Field, constant=None, like=None):
        """``like``: an evaluator of the same heads, same D (an ``Oracle.over`` view's
        parent) whose field-independent parts are shared (docs/explanation/performance.md)."""
        self.d = d
        self.K = field
        P = field.param
        if constant is None:
            constant = constant_of(heads)
        #: the additive constant c in the field (docs: explanation/biases.md); None when 0
        self.constant = None if constant == 0 else field(constant)
        if like is not None and (like.K.param != P or like.K.D != field.D):
            like = None
        self.heads = like.heads if like is not None else [
            ([[P(a) for a in row] for row in h.W], [P(a) for a in h.v], [P(a) for a in h.u])
            for h in heads]
        self._biased = any(h.biased for h in heads)
        self._cache: dict = {}
        self._ints = None              # _integers(heads, D), shared with a like= evaluator
        self._int = None               # per head 1 / dv_h in the field (the integer path)
        self._int_mats = None          # ([D W_h as fmpz_mat], the v numerators), dvs, D u_h
        # F_p (python-flint fmpz_mod): an inversion costs several products, so the heads
        # are summed as one fraction; over Q the per-head fractions stay reduced
        self._one_fraction = getattr(field, "scalar_ctx", None) is not None
        if field.is_exact and P.is_exact:
            ints = _integers(heads, field.D) if like is None else like._ints
            if ints is not None:
                self._ints, (self._int_mats, dvs, self._u_ints) = ints, ints
                self._int = [self._inverse_dv(dv) for dv in dvs]

    def integer_weights(self):
        """``([D W_h as fmpz_mat], [D u_h])`` of the integer path (shared), or None."""
        return None if self._ints is None else (self._ints[0][0], self._ints[2])

    def _inverse_dv(self, dv):
        if self.K.is_zero(self.K(dv)):
            raise BadReduction(f"a v denominator ({dv}) vanishes in the {self.K.name} field: a "
                               f"bad reduction (use another prime)")
        return self.K.one / self.K(dv)

    def _final(self, final):
        got = self._cache.get(final)
        if got is None:
            P = self.K.param
            got = []
            for W, v, u in self.heads:
                wx = [sum((a * b for a, b in zip(row, final)), P.zero) for row in W]
                if self._biased:                                   # W x_n + u
                    wx = [a + b for a, b in zip(wx, u)]
                s_final = sum((a * b for a, b in zip(final, wx)), P.zero)
                got.append((wx, s_final, v))
            self._remember(final, got)
        return got

    def _final_int(self, final):
        """Per head ``(D W_h x_n, D x_n^T W_h x_n)`` for the final token, with the heads'
        ``D W_h x_n`` stacked as one python-flint ``fmpz_mat`` (cached per final token)."""
        key = ("int", final)
        got = self._cache.get(key)
        if got is None:
            if not all(type(a) is int for a in final):
                raise _NotInt
            col = flint.fmpz_mat(self.d, 1, list(final))
            wxs = [Wm * col for Wm in self._int_mats[0]]                    # D W_h x_n
            WX = flint.fmpz_mat([[wx[r, 0] for r in range(self.d)] for wx in wxs])
            if self._biased:                                                # D (W_h x_n + u_h)
                WX = WX + flint.fmpz_mat(self._u_ints)
            s_final = [int(x) for x in (WX * col).entries()]                # D x_n^T W_h x_n
            got = (WX, s_final)
            self._remember(key, got)
        return got

    def _remember(self, key, value):
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = value

    def _pairs(self, tokens):
        pairs, final = distinct_tokens(tokens)
        for t, _ in pairs:
            if len(t) != self.d:
                raise ValueError(f"token of length {len(t)} in a model with d={self.d}")
        return pairs, final

    def averages(self, tokens) -> list:
        """``[y_h(X)]``: each head's softmax average ``sum_i softmax_i(s_h) x_i`` of the tokens
        (field d-vectors), so that ``f(X) = sum_h v_h . y_h(X)`` (the Transformer's heads and
        the multi-modular confirmation use them).

        >>> from exactlearn.fields import QQ
        >>> HeadEvaluator([Head(((1,),), (1,))], 1, QQ.with_scale(1)).averages([(0,), (1,)])
        [[mpq(2,3)]]
        """
        K = self.K
        P = K.param
        pairs, final = self._pairs(tokens)
        if self._int:
            try:
                return self._averages_int(pairs, final)
            except _NotInt:                # a token that is not all ints: the general path
                pass
        pairs = [(tuple(P(a) for a in t), m) for t, m in pairs]
        out = []
        for wx, s_final, _ in self._final(tuple(P(a) for a in final)):
            num = [K.zero] * self.d
            den = K.zero
            for tok, mult in pairs:
                s = sum((a * b for a, b in zip(tok, wx)), P.zero) - s_final
                w = K.exp(s) * mult
                num = [n + w * K(a) for n, a in zip(num, tok)]
                den = den + w
            out.append([n / den for n in num])
        return out

    def _averages_int(self, pairs, final):
        """:meth:`averages` by the integer path: the weight of token x_i for head h is
        ``T^(D (x_i - x_n)^T W_h x_n)`` -- the integer ``D s`` that ``K.exp(s)`` raises T to,
        from the stacked ``D W_h x_n`` (one ``fmpz_mat`` product per token) -- so the same
        field elements as the general path."""
        K = self.K
        if not all(type(a) is int for t, _ in pairs for a in t):
            raise _NotInt
        WX, s_final = self._final_int(final)
        power = K.power
        m = len(self._int)
        num = [[K.zero] * self.d for _ in range(m)]
        den = [K.zero] * m
        for tok, mult in pairs:
            scores = (WX * flint.fmpz_mat(self.d, 1, list(tok))).entries()
            xs = [K(a) for a in tok]
            for h in range(m):
                w = power(int(scores[h]) - s_final[h]) * mult
                num[h] = [n + w * x for n, x in zip(num[h], xs)]
                den[h] = den[h] + w
        return [[n / den[h] for n in num[h]] for h in range(m)]

    def __call__(self, tokens):
        try:
            y = self._value(tokens)
            return y if self.constant is None else y + self.constant
        except ZeroDivisionError:
            raise BadReduction(f"a softmax denominator vanishes in the {self.K.name} field on a "
                               f"query of length {len(tokens)}: a bad reduction (use another or a "
                               f"larger prime)") from None

    def _value(self, tokens):
        K = self.K
        pairs, final = self._pairs(tokens)
        if self._int is not None:
            try:
                return self._call_int(pairs, final)
            except _NotInt:                # a token that is not all ints: the general path
                pass
        P = K.param
        pairs = [(tuple(P(a) for a in t), m) for t, m in pairs]
        total = K.zero
        for wx, s_final, v in self._final(tuple(P(a) for a in final)):
            num = K.zero
            den = K.zero
            for tok, mult in pairs:
                s = sum((a * b for a, b in zip(tok, wx)), P.zero) - s_final
                w = K.exp(s) * mult
                num = num + w * K(sum((a * b for a, b in zip(v, tok)), P.zero))
                den = den + w
            total = total + num / den
        return total

    def _call_int(self, pairs, final):
        """f(X) by the integer path: per head, ``num_h / den_h`` with
        ``num_h = sum_i m_i w_{h,i} v_h.x_i / dv_h`` and ``den_h = sum_i m_i w_{h,i}``
        (``w = T^n``), summed -- over F_p as one fraction (one inversion per query)."""
        K = self.K
        if not self._int:
            return K.zero
        fin = self._final_int(final)
        terms = [(self._token_terms(tok, final, fin), None if mult == 1 else K(mult))
                 for tok, mult in pairs]
        one_fraction = self._one_fraction
        N = K.zero
        Dn = K.one
        if one_fraction and len(terms) == 2 and terms[1][1] is None and pairs[1][0] == final:
            # the plan's queries (a^m, x), x once: in partial fractions in m,
            # f = sum_h A_h + sum_h eps_h / (m + z_h) (see _partial_fractions)
            a = pairs[0][0]
            SA, pf = self._partial_fractions(a, final, terms[0][0], terms[1][0])
            m = K.one if terms[0][1] is None else terms[0][1]
            for z, eps in pf:
                u = m + z
                N = N * u + eps * Dn
                Dn = Dn * u
            return SA + N / Dn
        for h in range(len(self._int)):
            num = K.zero
            den = K.zero
            for tt, mult in terms:
                w, wv, _ = tt[h]
                if mult is None:
                    num = num + wv
                    den = den + w
                else:
                    num = num + wv * mult
                    den = den + w * mult
            if one_fraction:
                N = N * den + num * Dn
                Dn = Dn * den
            else:                      # over Q: one reduced fraction per head, as before
                N = N + num / den
        return N / Dn if one_fraction else N

    def _partial_fractions(self, a, x, ta, tx):
        """For the two-token queries (a^m, x): with per head ``w`` (the weight of a),
        ``A = v.a / dv`` and ``B = v.x / dv``, ``(m w A + B) / (m w + 1) = A + eps / (m + z)``
        where ``z = 1 / w`` and ``eps = (B - A) / w``; returns ``(sum_h A_h, [(z_h, eps_h)])``
        (cached per (a, x))."""
        key = ("pf", a, x)
        got = self._cache.get(key)
        if got is None:
            K = self.K
            SA = K.zero
            pf = []
            for (w, _, A), (_, b, _) in zip(ta, tx):
                z = K.one / w
                SA = SA + A
                pf.append((z, (b - A) * z))
            got = (SA, pf)
            self._remember(key, got)
        return got

    def _token_terms(self, tok, final, fin):
        """Per head ``(w, w A, A)``, ``A = v_h.x_i / dv_h``, for one token x_i and final token x_n, with
        ``w = T^(D (x_i - x_n)^T W_h x_n)`` (cached per (token, final token); the dot
        products of all heads are two ``fmpz_mat`` products)."""
        key = (tok, final)
        got = self._cache.get(key)
        if got is None:
            if not all(type(a) is int for a in tok):
                raise _NotInt
            K = self.K
            power = K.power
            WX, s_final = fin
            col = flint.fmpz_mat(self.d, 1, list(tok))
            scores = (WX * col).entries()
            vdots = (self._int_mats[1] * col).entries()
            got = []
            for inv_dv, sc, sf, vd in zip(self._int, scores, s_final, vdots):
                w = power(int(sc) - sf)
                A = K(int(vd)) * inv_dv
                got.append((w, w * A, A))
            self._remember(key, got)
        return got

    def family(self, a, x):
        """Per head ``(w_h, A_h, B_h)`` with ``f(a^k, x) = sum_h (k w_h A_h + B_h) / (k w_h + 1)``
        for tokens ``a != x`` (integer path only; None otherwise): ``w_h = T^(D (a - x)^T W_h x)``,
        ``A_h = v_h.a`` and ``B_h = v_h.x`` in the field.  The certificate of a plan
        (:func:`exactlearn.pipeline.certify.certify_plan`) evaluates whole query families
        from it.

        >>> from exactlearn.fields import Modular
        >>> K = Modular(p=97, scale=1)
        >>> ev = HeadEvaluator([Head(((1,),), (3,))], 1, K)
        >>> (w, A, B), = ev.family((2,), (1,))
        >>> (2 * w * A + B) / (2 * w + 1) == ev([(2,), (2,), (1,)])
        True
        """
        a, x = tuple(a), tuple(x)
        if not self._int or a == x or len(a) != self.d or len(x) != self.d:
            return None
        try:
            fin = self._final_int(x)
            ta, tx = self._token_terms(a, x, fin), self._token_terms(x, x, fin)
        except _NotInt:
            return None
        return [(w, A, B) for (w, _, A), (_, B, _) in zip(ta, tx)]

    def families(self, pairs) -> list:
        """``[self.family(a, x) for a, x in pairs]``, batched: the pairs are grouped by final
        token x, and per group two ``fmpz_mat`` products give every head's exponent
        ``D (a - x)^T W_h x`` (the stacked ``D W_h x`` times the columns ``a - x``) and
        every ``v_h . a`` (the stacked v numerators times the columns a) -- the same
        integers :meth:`family` computes pair by pair, so the same ``(w_h, A_h, B_h)``.
        A pair :meth:`family` treats apart (a == x, a wrong length, a token not all
        ints) goes through :meth:`family`; an exception is raised as :meth:`family`
        would raise it (the certificate then goes pair by pair).

        >>> from exactlearn.fields import Modular
        >>> K = Modular(p=97, scale=1)
        >>> ev = HeadEvaluator([Head(((1, 2), (0, 1)), (3, 1)), Head(((0, 1), (1, 1)), (1, 5))], 2, K)
        >>> pairs = [((2, 1), (1, 1)), ((0, 3), (1, 1)), ((1, 1), (1, 1)), ((3, 0), (1, 2))]
        >>> ev.families(pairs) == [ev.family(a, x) for a, x in pairs]
        True
        """
        out: list = [None] * len(pairs)
        groups: dict = {}
        d = self.d
        for n, (a, x) in enumerate(pairs):
            a, x = tuple(a), tuple(x)
            if (not self._int or a == x or len(a) != d or len(x) != d
                    or not all(type(t) is int for t in a) or not all(type(t) is int for t in x)):
                out[n] = self.family(a, x)
            else:
                groups.setdefault(x, []).append((n, a))
        if not groups:
            return out
        K = self.K
        power = K.power
        inv_dvs = self._int
        for x, items in groups.items():
            WX, _ = self._final_int(x)                      # D W_h x, stacked (m x d)
            cols = len(items)
            diff = flint.fmpz_mat(d, cols, [a[r] - x[r] for r in range(d) for _, a in items])
            toks = flint.fmpz_mat(d, cols, [a[r] for r in range(d) for _, a in items])
            S = (WX * diff).entries()                       # S[h * cols + t] = D (a_t - x)^T W_h x
            VA = (self._int_mats[1] * toks).entries()       # v_h numerators . a_t
            VB = (self._int_mats[1] * flint.fmpz_mat(d, 1, list(x))).entries()
            Bs = [K(int(vb)) * inv for vb, inv in zip(VB, inv_dvs)]
            m = len(inv_dvs)
            for t, (n, _) in enumerate(items):
                out[n] = [(power(int(S[h * cols + t])), K(int(VA[h * cols + t])) * inv_dvs[h], Bs[h])
                          for h in range(m)]
        return out


def _integers(heads, D):
    """The integer path's field-independent parts at scale D: ``(([D W_h as fmpz_mat], the
    rows dv_h v_h), [dv_h], [D u_h])``, dv_h the lcm of v_h's denominators; None if not integral."""
    if not all((x * D).denominator == 1 for h in heads for x in exponent_entries(h)):
        return None
    mats, vns, dvs = [], [], []
    for h in heads:
        mats.append(flint.fmpz_mat([[int((x * D).numerator) for x in row] for row in h.W]))
        dv = lcm_of_denominators(h.v)
        vns.append([int((x * dv).numerator) for x in h.v])
        dvs.append(dv)
    return (mats, flint.fmpz_mat(vns) if vns else None), dvs, \
        [[int((x * D).numerator) for x in h.u] for h in heads]


class VectorEvaluator:
    """Evaluates heads with matrix v (vector outputs, docs: explanation/biases.md#vector-outputs):
    one :class:`HeadEvaluator` per output on its heads' row j and constant entry j, so each
    output takes the scalar paths (the integer path included).  ``ev(tokens)`` is the list of
    the m outputs.

    >>> from exactlearn.fields import QQ
    >>> ev = VectorEvaluator([Head(((0,),), ((1,), (2,)))], 1, QQ.with_scale(1), (3, 0))
    >>> ev([(1,), (3,)])
    [mpq(5,1), mpq(4,1)]
    """

    def __init__(self, heads, d: int, field: Field, constant=None):
        heads = list(heads)
        m = len(constant) if constant is not None else heads[0].outputs
        self.outputs = m
        self.d = d
        self.K = field
        self.rows = [HeadEvaluator([h.row(j) for h in heads], d, field,
                                   0 if constant is None else constant[j]) for j in range(m)]

    def __call__(self, tokens) -> list:
        return [ev(tokens) for ev in self.rows]


def evaluator(heads, d: int, field: Field, constant=None, outputs: int | None = None, like=None):
    """A :class:`HeadEvaluator` (``like``: see there), or a :class:`VectorEvaluator` for
    ``outputs`` m."""
    if outputs is None:
        return HeadEvaluator(heads, d, field, constant,
                             like=like if isinstance(like, HeadEvaluator) else None)
    if constant is None or not isinstance(constant, (tuple, list)):
        constant = tuple(0 for _ in range(outputs))
    return VectorEvaluator(heads, d, field, constant)
