"""Claim ``rational-function-form``: along q_k = (a^k, x), a = x + e (arXiv:2608.03294;
docs: explanation/algorithm.md#how-it-works),

    f(q_k) = V.a + sum_h c_h / (1 + k rho_h),   rho_h = exp(e^T W_h x),  c_h = -v_h.e,

a rational function of k of type (H, H) with poles -1/rho_h and coefficients
c_h = rho_h P(p_h) / Q'(p_h).  This is a *symbolic proof* with sympy, for
symbolic W_h, v_h, x, e (every entry its own symbol), symbolic k and exp kept
as exp:

1. **Identity.**  f(q_k) is built from the model's definition: k copies of a
   and one x, scores x_i^T W_h x_n (key left, query right), softmax weights
   exp(score), value v_h.x_i.  The difference with the right-hand side is
   rewritten with exp(u + w) = exp(u) exp(w) only (every exponent expanded into
   monomials, each exp(monomial) an independent generator) and reduced with
   ``sympy.cancel``, which decides whether a rational function is zero.  The
   claim needs 0 for every (H, d) of the grid.  Two *controls* must come out
   nonzero, showing the check can fail: the transposed score convention
   (rho = exp(x^T W e), d = 2; at d = 1 the two conventions agree) and the
   opposite sign of c_h.
2. **Type, poles, coefficients.**  For symbols A, rho_h, c_h:
   Q = prod(1 + k rho_h) (Q(0) = 1, degree H), P = Q (A + sum c_h/(1 + k rho_h))
   is a polynomial of degree <= H; Q(-1/rho_h) = 0; rho_h P(p_h)/Q'(p_h) = c_h;
   and resultant(P, Q) = +-prod c_h prod rho_h prod_{g<h} (rho_g - rho_h)^2, so
   P/Q is in lowest terms -- exactly H poles -- iff every c_h != 0 and the
   rho_h are pairwise distinct.
"""

from __future__ import annotations

import time

import sympy as sp

from ..claim import ClaimResult, claim, verdict
from ._learning import level

ID = "rational-function-form"


def _split_exp(expr):
    """exp(sum of monomials) -> product of exp(monomial): the only exp law used."""
    return expr.replace(sp.exp, lambda arg: sp.Mul(*[sp.exp(t) for t in sp.Add.make_args(sp.expand(arg))]))


def is_zero_rational(expr) -> bool:
    """Decide expr == 0 for a rational function of symbols and exp atoms."""
    return sp.cancel(sp.together(_split_exp(expr))) == 0


def query_family_value(H: int, d: int, variant: str = "paper"):
    """(f(q_k), right-hand side) with all parameters symbolic.

    ``variant``: "paper" (the module docstring's identity), or a deliberately wrong control:
    "transposed" (rho = exp(x^T W e)) or "sign" (c_h = +v_h.e)."""
    k = sp.Symbol("k")
    x = sp.Matrix(sp.symbols(f"x1:{d + 1}"))
    e = sp.Matrix(sp.symbols(f"e1:{d + 1}"))
    a = x + e
    f = sp.Integer(0)
    rhs = sp.Integer(0)
    V = sp.zeros(d, 1)
    for h in range(H):
        W = sp.Matrix(d, d, sp.symbols(f"w{h + 1}_1:{d + 1}(1:{d + 1})"))
        v = sp.Matrix(sp.symbols(f"v{h + 1}_1:{d + 1}"))
        # the model on the multiset {a (k times), x} with final token x:
        # scores s_i = x_i^T W x, softmax weights exp(s_i), values v.x_i
        s_a, s_x = (a.T * W * x)[0], (x.T * W * x)[0]
        f += (k * sp.exp(s_a) * (v.T * a)[0] + sp.exp(s_x) * (v.T * x)[0]) / \
             (k * sp.exp(s_a) + sp.exp(s_x))
        rho = sp.exp((x.T * W * e)[0]) if variant == "transposed" else sp.exp((e.T * W * x)[0])
        c = (v.T * e)[0] if variant == "sign" else -(v.T * e)[0]
        rhs += c / (1 + k * rho)
        V += v
    rhs += (V.T * a)[0]
    return f, rhs


def identity_trial(args) -> dict:
    """``args = (H, d, variant)``: is f(q_k) - rhs zero?  (True is expected for
    "paper", False for the controls)."""
    H, d, variant = args
    t0 = time.perf_counter()
    f, rhs = query_family_value(H, d, variant)
    return {"H": H, "d": d, "variant": variant, "zero": is_zero_rational(f - rhs),
            "seconds": round(time.perf_counter() - t0, 3)}


def poles_trial(H: int) -> dict:
    """Type (H, H), poles -1/rho_h, coefficients rho_h P(p_h)/Q'(p_h), and lowest terms."""
    k, A = sp.symbols("k A")
    rho = sp.symbols(f"rho1:{H + 1}", positive=True)
    c = sp.symbols(f"c1:{H + 1}")
    F = A + sum(c[h] / (1 + k * rho[h]) for h in range(H))
    Q = sp.Poly(sp.prod([1 + k * r for r in rho]), k)
    P_expr = sp.cancel(F * Q.as_expr())
    P = sp.Poly(P_expr, k)                       # raises if F*Q is not a polynomial in k
    dQ = Q.diff(k)
    poles_ok = all(sp.simplify(Q.as_expr().subs(k, -1 / r)) == 0 for r in rho)
    coeff_ok = all(sp.simplify(rho[h] * P.as_expr().subs(k, -1 / rho[h])
                               / dQ.as_expr().subs(k, -1 / rho[h]) - c[h]) == 0 for h in range(H))
    res = sp.factor(sp.resultant(P.as_expr(), Q.as_expr(), k))
    expected = sp.prod(c) * sp.prod(rho) * sp.prod([(rho[g] - rho[h]) ** 2
                                                     for g in range(H) for h in range(g + 1, H)])
    ratio = sp.cancel(res / expected)
    return {"H": H, "deg_P": P.degree(), "deg_Q": Q.degree(), "Q(0)": str(Q.eval(0)),
            "type_ok": P.degree() <= H and Q.degree() == H and Q.eval(0) == 1,
            "poles_ok": poles_ok, "coefficients_ok": coeff_ok,
            "resultant": str(res), "resultant_ok": ratio in (1, -1)}


def form_summary(ids, poles) -> tuple:
    proofs = [r for r in ids if r["variant"] == "paper"]
    controls = [r for r in ids if r["variant"] != "paper"]
    failed = [r for r in proofs if not r["zero"]]
    weak = [r for r in controls if r["zero"]]
    bad_poles = [r for r in poles if not (r["type_ok"] and r["poles_ok"] and r["coefficients_ok"]
                                          and r["resultant_ok"])]
    evidence = {
        "identity_proved": [f"H={r['H']} d={r['d']}" for r in proofs if r["zero"]],
        "identity_failed": [f"H={r['H']} d={r['d']}" for r in failed],
        "controls_nonzero": [f"{r['variant']} H={r['H']} d={r['d']}" for r in controls if not r["zero"]],
        "controls_zero": [f"{r['variant']} H={r['H']} d={r['d']}" for r in weak],
        "type_poles_coefficients": [{k: r[k] for k in ("H", "deg_P", "deg_Q", "type_ok", "poles_ok",
                                                       "coefficients_ok", "resultant_ok")} for r in poles],
        "resultant_H2": next((r["resultant"] for r in poles if r["H"] == 2), None),
        "method": "sympy.cancel after exp(u+w) = exp(u)exp(w); exp atoms as independent generators",
    }
    problem = ("a deliberately wrong control also reduced to 0" if weak
               else "nothing checked" if not proofs or not controls or not poles else None)
    return verdict(evidence, refuted=bool(failed or bad_poles), problems=problem)


@claim(ID, "f(q_k) = V.a + sum_h c_h/(1 + k rho_h), rho_h = exp(e^T W_h x), c_h = -v_h.e: "
           "type (H,H), poles -1/rho_h, coefficients rho_h P(p_h)/Q'(p_h) (symbolic proof).", order=60)
def check(ctx):
    lv = level(ctx)
    grid = {"tiny": [(1, 1), (1, 2), (2, 2), (3, 1)],
            "quick": [(H, d) for H in (1, 2, 3) for d in (1, 2)],
            "full": [(H, d) for H in (1, 2, 3, 4) for d in (1, 2, 3)]}[lv]
    # controls (must NOT reduce to 0); the transposed convention needs d >= 2
    controls = [(1, 2, "transposed"), (2, 2, "transposed"), (1, 1, "sign"), (3, 2, "sign")]
    ids = ctx.map(identity_trial, [(H, d, "paper") for H, d in grid] + controls)
    poles = ctx.map(poles_trial, sorted({H for H, _ in grid}))
    status, evidence = form_summary(ids, poles)
    return ClaimResult(status, evidence)
