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
2. **Type, coefficients, lowest terms.**  For symbols A, rho_h, c_h:
   Q = prod(1 + k rho_h) (Q(0) = 1, degree H), P = Q (A + sum c_h/(1 + k rho_h))
   is a polynomial of degree <= H; rho_h P(p_h)/Q'(p_h) = c_h;
   and resultant(P, Q) = +-prod c_h prod rho_h prod_{g<h} (rho_g - rho_h)^2, so
   P/Q is in lowest terms -- exactly H poles -- iff every c_h != 0 and the
   rho_h are pairwise distinct.
3. **Poles from a black box** (:func:`box_poles_trial`).  Q(-1/rho_h) = 0 for the Q
   built above holds by construction, so it is not what is checked: a random
   model's black box (an :class:`~exactlearn.oracle.Oracle` over the rational field,
   wrapped in a counter of its own) is asked the 2H + 1 queries q_0 .. q_2H of one
   family, exactlearn's Cauchy interpolation (:func:`~exactlearn.pipeline.interpolate.cauchy_interpolate`)
   turns the answers into P/Q, and Q must have degree H and vanish at the poles
   -1/rho_h computed from the model's weights (rho_h = exp(e^T W_h x)); the poles
   and coefficients read off P/Q must be the weights' (rho_h, -v_h.e), and its limit V.a.
   A *control* asks a box whose W_1 is perturbed so that e^T W_1 x moves by one: its Q
   must not vanish at the model's poles (the check can fail).
"""

from __future__ import annotations

import time

import sympy as sp

from ..claim import ClaimResult, claim, verdict
from ..models import random_model, trial_rng
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
    coeff_ok = all(sp.simplify(rho[h] * P.as_expr().subs(k, -1 / rho[h])
                               / dQ.as_expr().subs(k, -1 / rho[h]) - c[h]) == 0 for h in range(H))
    res = sp.factor(sp.resultant(P.as_expr(), Q.as_expr(), k))
    expected = sp.prod(c) * sp.prod(rho) * sp.prod([(rho[g] - rho[h]) ** 2
                                                     for g in range(H) for h in range(g + 1, H)])
    ratio = sp.cancel(res / expected)
    return {"H": H, "deg_P": P.degree(), "deg_Q": Q.degree(), "Q(0)": str(Q.eval(0)),
            "type_ok": P.degree() <= H and Q.degree() == H and Q.eval(0) == 1,
            "coefficients_ok": coeff_ok,
            "resultant": str(res), "resultant_ok": ratio in (1, -1)}


def box_poles_trial(args) -> dict:
    """``args = (seed, H, index, variant)``: the poles of one query family, read off a black
    box's answers by exactlearn's interpolation, against the poles computed from the
    model's weights (module docstring, step 3).

    ``variant`` "paper" asks the model's own black box; "control" asks a box whose W_1 is
    perturbed (e^T W_1 x moved by one), judged against the *unperturbed* model's poles:
    ``poles_ok`` must then be False.  ``answered`` is the box's own count of its answers
    (2H + 1)."""
    from exactlearn import MultiHeadAttention, Oracle
    from exactlearn.algebra import polys
    from exactlearn.errors import ExactLearnError
    from exactlearn.fields import Rational
    from exactlearn.pipeline.interpolate import cauchy_interpolate, poles

    seed, H, index, variant = args
    rng = trial_rng(seed, ID, 1000 * H + index)
    d = 2
    model = random_model(rng, d, H, "plain")               # integer W: exp(s) = 2^s
    heads = model.heads
    for _ in range(1000):            # a family whose rho_h are distinct and c_h nonzero
        x = [rng.randint(-2, 2) for _ in range(d)]
        e = [rng.randint(-2, 2) for _ in range(d)]
        ss = [sum(e[r] * h.W[r][c] * x[c] for r in range(d) for c in range(d)) for h in heads]
        cs = [-sum(v * b for v, b in zip(h.v, e)) for h in heads]
        if any(x) and any(e) and len(set(ss)) == H and all(cs):
            break
    else:
        return {"H": H, "variant": variant, "drawn": False}
    K = Rational(scale=1)
    asked_model = model
    if variant == "control":         # W_1 + E_ij with e_i x_j = +-1 .. +-4: e^T W_1 x moves
        i, j = next((i, j) for i in range(d) for j in range(d) if e[i] * x[j])
        W1 = [list(row) for row in heads[0].W]
        W1[i][j] += 1
        asked_model = MultiHeadAttention([(W1, heads[0].v)] + [(h.W, h.v) for h in heads[1:]])
    oracle = Oracle(asked_model, K)
    answered = 0

    def box(tokens):                 # the black box, counting its own answers
        nonlocal answered
        y = oracle(tokens)
        answered += 1
        return y

    a = tuple(p + q for p, q in zip(x, e))
    ys = [box([a] * k + [tuple(x)]) for k in range(2 * H + 1)]
    rhos = [K.exp(s) for s in ss]                           # from the weights
    truth = sorted(zip(rhos, [K(c) for c in cs]))
    row = {"H": H, "variant": variant, "drawn": True, "x": x, "e": e, "answered": answered,
           "exponents": [int(s) for s in ss]}
    try:
        rf = cauchy_interpolate([K(k) for k in range(2 * H + 1)], ys, H, K)
        read = sorted(poles(rf, K))
        Va = sum(sum(v * b for v, b in zip(h.v, a)) for h in heads)
        row.update(
            deg_Q=rf.n_poles,
            poles_ok=rf.n_poles == H and all(K.is_zero(polys.evaluate(rf.Q, -K.one / r, K))
                                             for r in rhos),
            coefficients_ok=read == truth, limit_ok=rf.limit(K) == K(Va))
    except ExactLearnError as exc:   # the answers are not of type (H, H): no such poles
        row.update(deg_Q=None, poles_ok=False, coefficients_ok=False, limit_ok=False,
                   interpolation=f"{exc.kind}: {exc}"[:120])
    return row


def form_summary(ids, poles, box_rows=None) -> tuple:
    proofs = [r for r in ids if r["variant"] == "paper"]
    controls = [r for r in ids if r["variant"] != "paper"]
    failed = [r for r in proofs if not r["zero"]]
    weak = [r for r in controls if r["zero"]]
    box_rows = list(box_rows or [])
    drawn = [r for r in box_rows if r.get("drawn")]
    box_paper = [r for r in drawn if r["variant"] == "paper"]
    box_controls = [r for r in drawn if r["variant"] == "control"]
    box_bad = [r for r in box_paper if not (r["poles_ok"] and r["coefficients_ok"]
                                             and r["limit_ok"] and r["answered"] == 2 * r["H"] + 1)]
    box_weak = [r for r in box_controls if r["poles_ok"]]
    by_H = {}
    for r in box_paper:
        by_H.setdefault(r["H"], []).append(r["poles_ok"])
    for r in poles:                  # the poles, per H, as the black boxes gave them
        r["poles_ok"] = all(by_H[r["H"]]) if by_H.get(r["H"]) else None
    bad_poles = [r for r in poles if not (r["type_ok"] and r["coefficients_ok"] and r["resultant_ok"])]
    evidence = {
        "identity_proved": [f"H={r['H']} d={r['d']}" for r in proofs if r["zero"]],
        "identity_failed": [f"H={r['H']} d={r['d']}" for r in failed],
        "controls_nonzero": [f"{r['variant']} H={r['H']} d={r['d']}" for r in controls if not r["zero"]],
        "controls_zero": [f"{r['variant']} H={r['H']} d={r['d']}" for r in weak],
        "type_poles_coefficients": [{k: r[k] for k in ("H", "deg_P", "deg_Q", "type_ok", "poles_ok",
                                                       "coefficients_ok", "resultant_ok")} for r in poles],
        "resultant_H2": next((r["resultant"] for r in poles if r["H"] == 2), None),
        "method": "sympy.cancel after exp(u+w) = exp(u)exp(w); exp atoms as independent generators",
        "black_box_poles": {
            "families": len(box_paper), "poles_match": sum(1 for r in box_paper if r["poles_ok"]),
            "coefficients_match": sum(1 for r in box_paper if r["coefficients_ok"]),
            "controls": len(box_controls),
            "controls_caught": sum(1 for r in box_controls if not r["poles_ok"]),
            "mismatches": [{k: r.get(k) for k in ("H", "x", "e", "exponents", "deg_Q", "poles_ok",
                                                  "coefficients_ok", "limit_ok", "answered",
                                                  "interpolation")} for r in box_bad[:3]],
            "method": "2H+1 answers of a black box, exactlearn's Cauchy interpolation, Q at "
                      "-1/rho_h with rho_h = exp(e^T W_h x) from the weights"},
    }
    problem = ("a deliberately wrong control also reduced to 0" if weak
               else "a perturbed black box's Q also vanished at the model's poles" if box_weak
               else "nothing checked" if not proofs or not controls or not poles
               or not box_paper or not box_controls else None)
    return verdict(evidence, refuted=bool(failed or bad_poles or box_bad), problems=problem)


@claim(ID, "f(q_k) = V.a + sum_h c_h/(1 + k rho_h), rho_h = exp(e^T W_h x), c_h = -v_h.e: "
           "type (H,H), poles -1/rho_h, coefficients rho_h P(p_h)/Q'(p_h) (symbolic proof; the poles "
           "also read off a black box's answers by interpolation).", order=60)
def check(ctx):
    lv = level(ctx)
    grid = {"tiny": [(1, 1), (1, 2), (2, 2), (3, 1)],
            "quick": [(H, d) for H in (1, 2, 3) for d in (1, 2)],
            "full": [(H, d) for H in (1, 2, 3, 4) for d in (1, 2, 3)]}[lv]
    # controls (must NOT reduce to 0); the transposed convention needs d >= 2
    controls = [(1, 2, "transposed"), (2, 2, "transposed"), (1, 1, "sign"), (3, 2, "sign")]
    ids = ctx.map(identity_trial, [(H, d, "paper") for H, d in grid] + controls)
    Hs = sorted({H for H, _ in grid})
    poles = ctx.map(poles_trial, Hs)
    reps = {"tiny": 2, "quick": 4, "full": 12}[lv]
    box_rows = ctx.map(box_poles_trial, [(ctx.seed, H, n, "paper") for H in Hs for n in range(reps)]
                       + [(ctx.seed, H, reps, "control") for H in Hs])
    status, evidence = form_summary(ids, poles, box_rows)
    return ClaimResult(status, evidence)
