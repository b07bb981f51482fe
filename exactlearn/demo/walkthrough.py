"""``exactlearn demo``: a step-by-step walk-through of the learner (teaching).

It shows, on a small model over the rational field (exp = 2^(D s)):

1. the query family q_k = (a, ..., a, x) of one configuration (arXiv:2608.03294;
   docs: explanation/algorithm.md#how-it-works);
2. the sampled values f(q_k), k = 0..2H;
3. the interpolated rational function P(k)/Q(k);
4. its poles p_h = -1/rho_h and coefficients c_h;
5. how the matching configurations pair the heads by products rho * rho';
6. the solved heads W_h = E^{-T} M_h X^{-1}, v_h = -E^{-T} c_h;
7. the exact comparison with the model's canonical heads.
"""

from __future__ import annotations

from exactlearn.fields.rational import Rational
from exactlearn.api import learn
from exactlearn.demo.header import DEFAULT_MODEL, redraw_text, show_model
from exactlearn.demo.symbolic import run_symbolic_demo
from exactlearn.oracle import Oracle


def _poly(cs) -> str:
    terms = []
    for i, c in enumerate(cs):
        if c == 0:
            continue
        mono = "" if i == 0 else ("k" if i == 1 else f"k^{i}")
        terms.append(f"({c})" + (f"*{mono}" if mono else ""))
    return " + ".join(terms) if terms else "0"


def run_demo(model=None, heads=None, seed=1, query_range=4, retries=5, out=print,
             symbolic=False, plot=None) -> int:
    """Print the walk-through (steps 1-7 of the module docstring); with ``plot=FILE.png``
    also draw the first query family there (:mod:`exactlearn.demo.plot`).  Heads are
    numbered as the result lists its canonical heads, in every step.  Returns 0 when the
    heads are certified and equal to the model's canonical heads, else 1."""
    if symbolic:        # the same walk-through over Q(T): exactlearn.demo.symbolic
        return run_symbolic_demo(model, heads, seed, query_range, out=out)
    model = model or DEFAULT_MODEL
    H = heads or model.H
    # analyse over Q itself (not modulo p) so that every intermediate value is readable
    oracle = Oracle(model, Rational(via_modular=False))
    K = oracle.field
    show_model(model, f"rational, exp(s) = 2^(D*s) with D = {K.D} (softmax at base 2).", out)
    if plot is not None:
        from exactlearn.demo.plot import pyplot
        pyplot()                     # no matplotlib: refuse before any work
    res = learn(oracle, d=model.d, heads=H, seed=seed, query_range=query_range, trace=True,
                retries=retries)
    if res.attempts > 1:
        out("\n0. " + redraw_text(res))
    if not res.trace:
        out(f"\nThe draw failed: {res.error}")
        return 1
    rows = res.trace[:-1]
    first = rows[0]
    c = first["config"]
    out(f"\n1. Query family of configuration (x_1, e_1): x = {list(c.x)}, e = {list(c.e)}, a = x + e = {list(c.a)}.")
    out("   q_k = (a, ..., a [k copies], x); f(q_k) = V.a + sum_h c_h / (1 + k rho_h).")
    out(f"\n2. Samples (k = 0 .. {2 * H}):")
    for k, y in enumerate([first["y0"]] + first["values"]):
        out(f"   f(q_{k}) = {y}")
    out("\n3. Cauchy interpolation (extended Euclid) gives P(k)/Q(k), normalised Q(0) = 1:")
    out(f"   Q(k) = {_poly(first['Q'])}")
    out(f"   P(k) = {_poly(first['P'])}")
    out("\n4. Poles p_h = -1/rho_h and coefficients c_h = rho_h P(p_h)/Q'(p_h):")
    from exactlearn.demo.plot import head_numbers
    for n, (rho, cc) in zip(head_numbers(first, res.heads, K), first["poles"]):
        out(f"   head {n}: rho = {rho} (= 2^{K.log(rho) * K.D}, so e^T W x = {K.log(rho)}),  "
            f"c = {cc} (= -v.e)")
    out(f"\n5. Matching: {len(rows)} configurations in all.  Within a final-token group the")
    out("   configuration (x_i, e_1 + e_j) has rho = rho(x_i,e_1) * rho(x_i,e_j) and its c-values add;")
    out("   across groups (x_1 + x_i, e_j) has rho = rho(x_1,e_j) * rho(x_i,e_j) and equal c-values.")
    for r in rows:
        cf = r["config"]
        if cf.kind == "basis" and r["labelled"] is not None:
            nums = head_numbers({"config": cf, "poles": r["labelled"]}, res.heads, K)
            labs = ", ".join(f"head {n}: rho={rho}"
                             for n, (rho, _) in sorted(zip(nums, r["labelled"]),
                                                       key=lambda t: (t[0] is None, t[0] or 0)))
            out(f"   basis (x_{cf.i + 1}, e_{cf.j + 1}) labelled -> {labs}")
    out("\n6. Solve W_h = E^{-T} M_h X^{-1} with M_h[j][i] = log rho_h(x_i, e_j), and v_h = -E^{-T} c_h:")
    for n, h in enumerate(res.heads, 1):
        out(f"   head {n}: W = {[[str(x) for x in r] for r in h.W]}, v = {[str(x) for x in h.v]}")
    out(f"\n7. Certificate: {res.certified_observations} observed values reproduced exactly -> {res.status}.")
    same = res.heads == model.canonical_heads()
    out(f"   Equal to the model's canonical heads: {same}.  Queries: {res.queries} "
        f"(one plan = 4Hd^2 - 2H + 1 = {res.plan_queries}), longest: {res.max_length} (= 2H + 1).")
    if plot is not None:
        from exactlearn.demo.plot import save_family_figure
        save_family_figure(plot, first, res.trace[-1]["V"], res.heads, K)
        out(f"\nFigure of step 1-4 (samples, P/Q, poles, the heads' terms): {plot}")
    return 0 if res.certified and same else 1
