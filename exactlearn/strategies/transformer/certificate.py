"""The certificate of a recovered one-layer Transformer: old observations and fresh queries.

arXiv:2608.03294 claims the one-layer Transformer up to functional equivalence
"under additional conditions"; a learner that relies on its own conditions
(:data:`.result.CONDITIONS`) must check equivalence on fresh queries,
including queries that cross ReLU boundaries (docs: howto/transformer.md).

6. **Certificate** (:func:`fresh_certificate`).  The returned model must
   reproduce every observed output exactly (real field: within its tolerance)
   *and* N fresh queries: random ones of length 1..6 with integer tokens in
   [-5, 5] and, for every recovered neuron, 10 queries whose final token lies
   exactly on its hyperplane or just across it, with random other tokens (the
   attention then decides the sign of that neuron; over exact fields the point
   comes from :func:`hyperplane_point`, which misses the hyperplane in most
   draws: see its known defect).  Otherwise the run fails.  The fresh queries are asked through the
   same recorder as the learning ones, so ``queries`` and ``max_length`` cover
   every call the black box answered (``learning_queries`` +
   ``certificate_queries``; the random ones alone reach length 6).
"""

from __future__ import annotations

from gmpy2 import mpq

from exactlearn.errors import DegenerateDraw, FieldError
from exactlearn.strategies.transformer.path import primitive
from exactlearn.transformer_model import TransformerEvaluator


def hyperplane_point(beta, rng) -> tuple:
    """A small nonzero primitive integer point z with beta . z = 0 (beta exact rational,
    nonzero): a random integer combination of the vectors ``n_j e_i - n_i e_j`` spanning
    the hyperplane (n the primitive integer direction of beta).

    The certificate's boundary queries put the final token there, on neuron j's ReLU
    boundary.  (Before this fix the coefficients were drawn afresh for every coordinate,
    so z lay on the hyperplane only by chance.)

    >>> import random
    >>> from gmpy2 import mpq
    >>> beta = (mpq(3, 2), mpq(-1), mpq(5))
    >>> rng = random.Random(0)
    >>> all(sum(b * z for b, z in zip(beta, hyperplane_point(beta, rng))) == 0 for _ in range(20))
    True
    """
    n = primitive(beta)
    d = len(n)
    basis = [tuple((n[j] if k == i else -n[i] if k == j else 0) for k in range(d))
             for i in range(d) for j in range(i + 1, d)]
    basis = [b for b in basis if any(b)]
    for _ in range(50):
        cs = [rng.randint(-2, 2) for _ in basis]
        z = [sum(c * b[k] for c, b in zip(cs, basis)) for k in range(d)]
        if any(z):
            return primitive(z)
    return primitive(basis[0])


def reproduces(model, observations, K):
    """None if the model reproduces every (tokens, value), else the first failing tokens."""
    ev = TransformerEvaluator(model, K)
    for tokens, y in observations:
        if not K.eq(ev(tokens), y):
            return tokens
    return None


def fresh_certificate(model, rec, K, rng, n_random):
    """Observed outputs, then fresh random and ReLU-boundary queries (module doc, step 6).

    The fresh queries go through ``rec``, so they are counted (and timed) with
    the learning ones.  Returns ``(ok, why, asked, kinds)``: ``asked`` the fresh
    queries actually asked, in order (a prefix of the drawn ones when one
    disagrees), ``kinds`` how many of them are random / boundary queries.
    """
    ev = TransformerEvaluator(model, K)
    if reproduces(model, rec.observations, K) is not None:
        return False, "an observed output is not reproduced", [], {"random": 0, "boundary": 0}
    d = model.d
    exact = K.is_exact
    R = 5

    def tok(lo=-R, hi=R):
        t = tuple(rng.randint(lo, hi) for _ in range(d))
        return t if exact else tuple(mpq(a, 4) for a in t)

    queries = [[tok() for _ in range(rng.randint(1, 6))] for _ in range(n_random)]
    wmax = max((abs(a) for W, _ in model.heads for row in W for a in row), default=mpq(0))
    for b in model.B:                          # each recovered neuron's hyperplane
        gam = [sum((O[k][c] * b[k] for _, O in model.heads for k in range(model.m)), mpq(0))
               for c in range(d)]
        if not any(gam):
            continue
        if exact:
            z = hyperplane_point(gam, rng)
            zmax = max(abs(a) for a in z) + 1
        else:                                  # real: a point of size ~1 on the hyperplane
            g = [K(a) for a in gam]
            z = [K.zero] * d
            for i in range(d):
                for j in range(i + 1, d):
                    c = K(rng.choice((-2, -1, 1, 2)))
                    z[i], z[j] = z[i] + c * g[j], z[j] - c * g[i]
            big = max(abs(a) for a in z)
            z = tuple(a / big for a in z)
        for _ in range(3):
            v = tok(-1, 1)
            queries += [[z], [tuple(a + e for a, e in zip(z, v))], [tuple(a - e for a, e in zip(z, v))]]
        if exact and K.D * wmax * d * d * zmax * (zmax + R) > 100_000:
            continue                           # scores too large for exact 2^s: single tokens only
        for _ in range(7):
            final = z if rng.random() < 0.6 else tuple(a + e for a, e in zip(z, tok(-1, 1)))
            queries.append([tok() for _ in range(rng.randint(1, 5))] + [final])

    def asked(n):                              # the first n fresh queries, by kind
        return queries[:n], {"random": min(n, n_random), "boundary": max(0, n - n_random)}

    for n, q in enumerate(queries):
        try:
            y = rec(q)
        except FieldError as exc:                # not answered
            return (False, f"a fresh query could not be answered: {exc}", *asked(n))
        except DegenerateDraw as exc:            # answered, with a value outside K
            return (False, str(exc), *asked(n + 1))
        if not K.eq(ev(q), y):
            return (False, f"a fresh query of length {len(q)} disagrees with the recovered model",
                    *asked(n + 1))
    return (True, None, *asked(len(queries)))
