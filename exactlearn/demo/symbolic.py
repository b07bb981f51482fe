"""``exactlearn demo --symbolic``: the learner over Q(T), T = e^(1/D), the exact ground truth.

Over the symbolic field every value is a rational function of T, so the walk-through can
show what the other fields only show specialised (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works,
and docs: howto/field-and-range.md#number-systems-fields):

1. f(q_k) of one configuration as an explicit function of k and T, from the model;
2. the samples f(q_0), ..., f(q_2H): elements of Q(T) returned by the black box;
3. the learner's Cauchy interpolant P(k)/Q(k), with coefficients in Q(T), and the
   check that it *is* the function of step 1 (sympy: their difference cancels to 0);
4. its poles p_h = -1/rho_h with rho_h = T^n (so e^T W_h x = n/D) and c_h;
5. the specialisations T -> 2 (rational field) and T -> omega (modular field) of a sample:
   the other exact fields are reductions of this one;
6. the certified heads, compared with the model's canonical heads and with the answer of
   the modular field on the same model.
"""

from __future__ import annotations

from exactlearn.api import learn
from exactlearn.demo.header import DEFAULT_MODEL, redraw_text, show_model
from exactlearn.oracle import Oracle


def closed_form(model, x, e, K):
    """f(q_k) = sum_h (k rho_h v_h.a + v_h.x) / (k rho_h + 1), rho_h = T^(D e^T W_h x), as a
    sympy expression in k and T (docs: explanation/algorithm.md#how-it-works)."""
    import sympy
    k = sympy.Symbol("k")
    T = sympy.Symbol("T")
    a = [p + q for p, q in zip(x, e)]
    expr = 0
    for h in model.heads:
        s = sum(e[r] * sum(h.W[r][c] * x[c] for c in range(model.d)) for r in range(model.d))
        rho = T ** K.exponent(s)
        va = sum(vi * ai for vi, ai in zip(h.v, a))
        vx = sum(vi * xi for vi, xi in zip(h.v, x))
        expr += (k * rho * sympy.Rational(str(va)) + sympy.Rational(str(vx))) / (k * rho + 1)
    return sympy.factor(sympy.cancel(sympy.together(expr)), k), k, T


def run_symbolic_demo(model=None, heads=None, seed=1, query_range=2, retries=10, out=print) -> int:
    import sympy
    from exactlearn.fields import Modular
    from exactlearn.fields.rational import Rational
    from exactlearn.fields.symbolic import Symbolic
    model = model or DEFAULT_MODEL
    H = heads or model.H
    oracle = Oracle(model, Symbolic())
    K = oracle.field
    show_model(model, f"symbolic Q(T), T = e^(1/D) with D = {K.D}: exp(s) = T^(D s), exact.", out)
    res = learn(oracle, d=model.d, heads=H, seed=seed, query_range=query_range, trace=True,
                retries=retries)
    if not res.certified or not res.trace:
        out(f"\nThe run failed: {res.error}")
        return 1
    if res.attempts > 1:
        out("\n0. " + redraw_text(res))
    first = res.trace[0]
    c = first["config"]
    expr, k, T = closed_form(model, c.x, c.e, K)
    out(f"\n1. Configuration (x_1, e_1): x = {list(map(str, c.x))}, e = {list(map(str, c.e))}, "
        f"a = {list(map(str, c.a))}; q_k = (a, ..., a [k copies], x).")
    out(f"   From the model: f(q_k) = {expr}")
    out(f"\n2. The black box's samples, elements of Q(T) (k = 0 .. {2 * H}):")
    samples = [first["y0"]] + first["values"]
    for i, y in enumerate(samples):
        out(f"   f(q_{i}) = {K.format(y)}")
    P = sum(K(p).as_expr() * k ** i for i, p in enumerate(first["P"]))
    Q = sum(K(q).as_expr() * k ** i for i, q in enumerate(first["Q"]))
    learned = sympy.factor(sympy.cancel(P / Q), k)
    same = sympy.cancel(learned - expr) == 0
    out("\n3. Cauchy interpolation over Q(T) (extended Euclid), Q(0) = 1:")
    out(f"   P(k)/Q(k) = {learned}")
    out(f"   equal to the function of step 1 as rational functions of k and T: {same}")
    out("\n4. Poles p_h = -1/rho_h and coefficients c_h = -v_h.e:")
    for rho, cc in first["poles"]:
        out(f"   rho = {K.format(rho)}  (e^T W x = {K.log(rho)}),  c = {K.format(cc)}")
    y = samples[1]
    R2 = Rational(via_modular=False, scale=K.D)
    Mp = Modular(scale=K.D)
    out(f"\n5. Specialisations of f(q_1) = {K.format(y)}:")
    out(f"   T -> 2 (the rational field, exp(s) = 2^(D s)): {K.specialize(y, R2)}")
    out(f"   T -> omega mod p (modular field, p = {Mp.p}): {K.specialize(y, Mp)}")
    canon = model.canonical_heads()
    mod = learn(Oracle(model, Modular()), d=model.d, heads=H, seed=seed, retries=retries)
    out(f"\n6. Certified heads ({res.certified_observations} observations reproduced exactly in Q(T)):")
    for n, h in enumerate(res.heads, 1):
        out(f"   head {n}: W = {[[str(x) for x in r] for r in h.W]}, v = {[str(x) for x in h.v]}")
    eq_canon = res.heads == canon
    eq_mod = mod.certified and mod.heads == res.heads
    out(f"   equal to the model's canonical heads: {eq_canon}; equal to the modular field's "
        f"answer: {eq_mod}.  Queries: {res.queries} (4Hd^2 - 2H + 1 = {res.plan_queries}).")
    return 0 if (same and eq_canon and eq_mod) else 1
