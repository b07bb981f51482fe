"""The picture of ``exactlearn demo``: one query family, its rational function and its poles.

Along ``q_k = (a, ..., a [k copies], x)`` with ``a = x + e`` the black box answers

    f(q_k) = V.a + sum_h c_h / (1 + k rho_h),   rho_h = exp(e^T W_h x),  c_h = -v_h.e

(arXiv:2608.03294; docs, "The algorithm and its guarantees").  :func:`family_figure` draws,
for the first configuration of a traced run (``learn(..., trace=True)``):

- left: the 2H + 1 samples f(q_k), the interpolated P(k)/Q(k) on a symmetric-log k axis,
  and its poles p_h = -1/rho_h on the axis, one per canonical head;
- right: the heads separating: each head's term c_h / (1 + k rho_h) against k >= 0, the
  constant V.a, and their sum through the samples.

``exactlearn demo --plot FILE.png`` and the first tutorial notebook draw it.  It needs
matplotlib (the ``campaign`` or ``test`` extra); without it :class:`PlotUnavailable`.
"""

from __future__ import annotations

from exactlearn.errors import ModelError


class PlotUnavailable(ModelError):
    """matplotlib is not installed (bad input for ``demo --plot``: exit 2)."""


def pyplot():
    """``matplotlib.pyplot``, or :class:`PlotUnavailable` when matplotlib is missing."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'exactlearn[campaign]'") from None
    return plt


def _horner(cs, k):
    y = 0.0
    for c in reversed(cs):
        y = y * k + float(c)
    return y


def head_numbers(row, heads, field) -> list:
    """For each pole of a traced configuration, the number (1-based) of the canonical head
    it belongs to, found by recomputing rho = exp(e^T W x) from the learned heads exactly
    (so the picture numbers heads as the result lists them); None where no head matches."""
    c = row["config"]
    out = []
    for rho, _ in row["poles"]:
        n = None
        for idx, h in enumerate(heads, 1):
            s = sum(field(ei) * h.W[i][j] * field(xj) for i, ei in enumerate(c.e)
                    for j, xj in enumerate(c.x))
            if field.exp(s) == rho:
                n = idx
                break
        out.append(n)
    return out


def family_figure(row, V, heads=(), field=None, title=None):
    """A matplotlib Figure of one traced query family (see the module docstring).

    ``row`` is an entry of ``LearnResult.trace`` (keys ``config``, ``y0``, ``values``,
    ``P``, ``Q``, ``poles``), ``V`` the trace's ``V`` (the sum of the v_h), ``heads`` and
    ``field`` the result's canonical heads and field (to number the poles by head).
    """
    plt = pyplot()
    c = row["config"]
    ys = [float(y) for y in [row["y0"]] + list(row["values"])]
    ks = list(range(len(ys)))
    poles = [(float(rho), float(cc)) for rho, cc in row["poles"]]
    nums = head_numbers(row, heads, field) if heads and field is not None else [None] * len(poles)
    names = [f"head {n}" if n is not None else f"pole {i + 1}" for i, n in enumerate(nums)]
    order = sorted(range(len(poles)), key=lambda i: (nums[i] is None, nums[i] or 0, i))
    poles, names = [poles[i] for i in order], [names[i] for i in order]
    Va = sum(float(vi) * ai for vi, ai in zip(V, c.a))

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.6))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    # left: samples, P/Q and the poles on a symmetric-log k axis
    far = max([1.0 / r for r, _ in poles] + [1.0])
    lo, hi = -2.0 * far, len(ys) + 0.5
    import math
    grid = sorted({-(10 ** t) for t in [x / 60 for x in range(int(-180), int(60 * math.log10(-lo)) + 1)]}
                  | {x / 40 for x in range(0, int(40 * hi) + 1)})
    span = max(ys) - min(ys) or 1.0
    ylo, yhi = min(ys) - 1.5 * span, max(ys) + 1.5 * span
    seg_k, seg_y = [], []
    for k in grid:
        q = _horner(row["Q"], k)
        y = _horner(row["P"], k) / q if q != 0 else float("nan")
        if not ylo <= y <= yhi:
            y = float("nan")            # break the curve at the poles
        seg_k.append(k)
        seg_y.append(y)
    ax.plot(seg_k, seg_y, "-", color="0.35", lw=1.4, label="P(k)/Q(k), interpolated")
    ax.plot(ks, ys, "o", color="k", ms=6, zorder=5, label=f"samples f(q_k), k = 0..{len(ys) - 1}")
    for (rho, cc), name, col in zip(poles, names, colours):
        p = -1.0 / rho
        ax.axvline(p, color=col, ls="--", lw=1.1)
        ax.plot([p], [ylo], marker="^", color=col, ms=10, clip_on=False, zorder=6,
                label=f"{name}: pole -1/rho = {p:.4g}")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(lo, hi)
    ax.set_ylim(ylo, yhi)
    ax.set_xlabel("k (number of copies of a = x + e; symmetric-log scale)")
    ax.set_ylabel("f(q_k)")
    ax.set_title("The black box along one query family: P/Q and its poles")
    ax.legend(fontsize=8, loc="best")

    _heads_panel(bx, ks, ys, poles, names, colours, Va)     # right: the heads separating
    fig.suptitle(title or (f"Query family of configuration (x_1, e_1): x = {list(c.x)}, "
                           f"e = {list(c.e)}"), fontsize=11)
    fig.tight_layout()
    return fig


def _heads_panel(bx, ks, ys, poles, names, colours, Va):
    """The right panel of :func:`family_figure`: each head's term ``c/(1 + k rho)``, the limit
    V.a and their sum through the samples."""
    kk = [x / 20 for x in range(0, 20 * (len(ys) - 1) + 1)]
    total = [Va] * len(kk)
    for (rho, cc), name, col in zip(poles, names, colours):
        term = [cc / (1 + k * rho) for k in kk]
        total = [t + u for t, u in zip(total, term)]
        bx.plot(kk, term, "-", color=col, lw=1.6,
                label=f"{name}: c/(1 + k rho), c = {cc:.4g}, rho = {rho:.4g}")
    bx.axhline(Va, color="0.6", ls=":", lw=1.4, label=f"V.a = {Va:.4g} (the limit k -> inf)")
    bx.plot(kk, total, "-", color="k", lw=1.0, label="sum = f(q_k)")
    bx.plot(ks, ys, "o", color="k", ms=6, zorder=5)
    bx.set_xlabel("k")
    bx.set_ylabel("value")
    bx.set_title("The heads separating: one term per canonical head")
    bx.legend(fontsize=8, loc="best")


def save_family_figure(path, row, V, heads=(), field=None, title=None) -> str:
    """:func:`family_figure` written to ``path`` (PNG at 120 dpi, nothing cut at the edges)."""
    plt = pyplot()
    fig = family_figure(row, V, heads, field, title)
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as exc:
        raise ModelError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        plt.close(fig)
    return str(path)
