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
from exactlearn.model import MultiHeadAttention
from exactlearn.oracle import Oracle

DEFAULT_MODEL = MultiHeadAttention([
    ([[1, 0], [0, -1]], [1, 2]),
    ([[0, 1], [1, 0]], ["-1/2", 1]),
])


def show_model(model, field_text, out) -> None:
    """The demo's header: the model, its convention, and the field."""
    out(f"Model: d = {model.d}, {model.H} raw heads; score x_i^T W_h x_n (key left, query right).")
    out(f"Field: {field_text}")
    for n, h in enumerate(model.heads, 1):
        out(f"  raw head {n}: W = {[[str(x) for x in r] for r in h.W]}, v = {[str(x) for x in h.v]}")


def _poly(cs) -> str:
    terms = []
    for i, c in enumerate(cs):
        if c == 0:
            continue
        mono = "" if i == 0 else ("k" if i == 1 else f"k^{i}")
        terms.append(f"({c})" + (f"*{mono}" if mono else ""))
    return " + ".join(terms) if terms else "0"


def redraw_text(res) -> str:
    """What happened to the draws before the final one: degenerate draws (detected, their
    queries spent) and draws refused before any query (too large for the field).

    >>> from types import SimpleNamespace as NS
    >>> print(redraw_text(NS(attempt_log=[{"outcome": "refused"}, {"outcome": "failed"},
    ...                                   {"outcome": "certified"}], extra_queries=29)))
    ... # doctest: +NORMALIZE_WHITESPACE
    Of the first 2 random draws, 1 was refused before any query: its exponents exceed what
    the field realises (the range is too large for it; not a degenerate draw); 1 was
    degenerate and detected as such (e.g. two heads' rho coincide or some v_h.e = 0 at a
    small range).  The learner redrew, spending 29 extra queries.
    """
    earlier = res.attempt_log[:-1]
    refused = sum(1 for a in earlier if a["outcome"] == "refused")
    degenerate = len(earlier) - refused
    parts = []
    if refused:
        parts.append(f"{refused} {'was' if refused == 1 else 'were'} refused before any query: "
                     f"{'its' if refused == 1 else 'their'} exponents exceed what the field "
                     f"realises (the range is too large for it; not a degenerate draw)")
    if degenerate:
        parts.append(f"{degenerate} {'was' if degenerate == 1 else 'were'} degenerate and "
                     f"detected as such (e.g. two heads' rho coincide or some v_h.e = 0 at a "
                     f"small range)")
    n = len(earlier)
    return (f"Of the first {n} random draw{'s' if n > 1 else ''}, " + "; ".join(parts)
            + f".  The learner redrew, spending {res.extra_queries} extra queries.")


def run_demo(model=None, heads=None, seed=1, query_range=4, retries=5, out=print,
             symbolic=False, plot=None) -> int:
    """Print the walk-through (steps 1-7 of the module docstring); with ``plot=FILE.png``
    also draw the first query family there (:mod:`exactlearn.demo.plot`).  Heads are
    numbered as the result lists its canonical heads, in every step.  Returns 0 when the
    heads are certified and equal to the model's canonical heads, else 1."""
    if symbolic:        # the same walk-through over Q(T): exactlearn.demo.symbolic
        from exactlearn.demo.symbolic import run_symbolic_demo
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
