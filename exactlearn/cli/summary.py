"""The readable summary of a learning run that ``exactlearn learn`` prints without ``--json`` (docs: reference/cli.md).
"""

from __future__ import annotations


def _v_text(K, v) -> str:
    """A head's v for the summary: a vector, or the rows of a matrix (vector outputs)."""
    from exactlearn.model import is_matrix
    if is_matrix(v):
        return str([[K.format(x) for x in row] for row in v])
    return str([K.format(x) for x in v])


def _plan_counts(res) -> str:
    """The efficient plan's counts, with its fallbacks, for :func:`summary`."""
    out = f"plan {res.plan}: {res.plan_queries} planned, paper count {res.plan_detail['paper_queries']}"
    for fb in res.plan_fallbacks:
        out += f"; {fb['kind']} fallback +{fb['queries']}"
    return out


def _modular_lines(res) -> list:
    """The modular field's primes and what is certified (docs: explanation/multimodular.md)."""
    mm = res.multimodular
    runs = mm["primes"]
    per = ", ".join(f"{r['queries']} ({r['role']}{', refuted' if 'refuted' in r else ''})"
                    for r in runs)
    if "modulus" in mm:
        out = [f"certified modulo p = {mm['modulus']} only (the black box answers modulo one "
               f"prime): v as residues, W exact only if the box's exponents did not wrap; "
               f"not exact over Q"]
        if res.certified:
            for n, g in enumerate(mm["rational_guess"], 1):
                out.append(f"  head {n}: rational guess (NOT certified): v = {g}")
        return out
    if not res.certified:
        return [f"primes asked: queries per prime: {per}"]
    if mm.get("route") == "height bound":
        confirmed = any(r["role"] == "confirmation" for r in runs)
        return [f"exact over Q: residues of {mm['stable_after']} prime(s) combined, their product "
                f"above 2B^2 for the declared height bound B = {mm['max_height']}"
                + (", confirmed modulo an independent prime" if confirmed else "")
                + f"; queries per prime: {per}",
                f"probability of a false certification (a degenerate reduction of the plan"
                + (", or a wrong reconstruction surviving the confirmation" if confirmed else "")
                + f"): <= 2^{mm['log2_wrong_reconstruction_bound']}, if the bound holds"]
    return [f"exact over Q: residues of {mm['stable_after']} prime(s) combined, confirmed "
            f"modulo an independent prime; queries per prime: {per}",
            f"probability that a wrong reconstruction survives the confirmation: "
            f"<= 2^{mm['log2_wrong_reconstruction_bound']}"]


def _certificate_lines(res) -> list:
    """The efficient plan's certificate: unique, or by check configurations with their bound."""
    pd = res.plan_detail
    if not res.certified or not pd or not pd.get("certificate"):
        return []
    if pd["certificate"] == "unique":
        return ["efficient plan: unique certificate (no other model with at most "
                f"{res.heads_bound} head(s) reproduces the observations): miss bound 0"]
    return [f"efficient plan: certified by {pd['check_configs']} random check configuration(s); "
            f"probability that a wrong model passes them: <= 2^{pd['check_miss_bound_log2']}"]


def summary(res, model=None) -> str:
    """Readable summary of a learning run."""
    K = res.field.param
    lines = [f"status: {res.status}" + (f" ({res.error})" if res.error else "")
             + (" within tolerance (real field: not exact)" if res.certified and not res.field.is_exact
                else ""),
             f"field: {res.field.name}  d: {res.d}  head bound: {res.heads_bound}",
             f"queries: {res.queries} (" + (f"{'stable' if res.plan == 'stable' else 'paper'}"
                                            f"{' plan for biases' if res.bias else ''}"
                                            f"{' plan' if res.plan == 'stable' and not res.bias else ''} count "
                                            f"{res.plan_queries}" if res.plan_detail is None
                                            else _plan_counts(res))
             + (f"; verification {res.verify_queries}" if res.verify_queries else "")
             + (f"; earlier attempts {res.extra_queries}" if res.extra_queries else "")
             + f")  longest: {res.max_length}"
             + (f"  attempts: {res.attempts}" if res.attempts > 1 else "")]
    if res.multimodular is not None:
        lines.extend(_modular_lines(res))
    lines.extend(_certificate_lines(res))
    if res.certified:
        lines.append(f"canonical heads: {len(res.heads)}"
                     + ("  (v as residues modulo p: certified modulo p only)"
                        if not res.exact_over_Q and res.field.is_exact else ""))
        for n, h in enumerate(res.heads, 1):
            lines.append(f"  head {n}: W = {[[K.format(x) for x in r] for r in h.W]}")
            lines.append(f"          v = {_v_text(K, h.v)}")
            if res.bias:
                lines.append(f"          u = {[K.format(x) for x in h.u]}")
        if res.bias:
            c = res.constant
            lines.append(f"constant: c = {_v_text(K, c) if isinstance(c, tuple) else K.format(c)}")
        if model is not None and res.field.is_exact:
            same = res.heads == model.canonical_heads()
            lines.append(f"equal to the model's canonical heads: {same}")
    if res.real_detail is not None or res.snap is not None:
        from exactlearn.cli.real import summary_lines
        lines.extend(summary_lines(res, model))
    if res.verified is not None:
        lines.append(f"verification: {res.verify_queries} fresh queries, agreed: {res.verified}")
    lines.append(f"time: learner {res.learner_seconds:.3f} s, oracle {res.oracle_seconds:.3f} s")
    return "\n".join(lines)
