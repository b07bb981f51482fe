"""Small exact linear algebra over any field (Gauss–Jordan).

The solves of the paper's plan (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works:
``W_h = E^{-T} M_h X^{-1}``, ``v_h = -E^{-T} c_h``) and the rank factorisation
of the one-layer Transformer's neurons (docs: howto/transformer.md).
Matrices are lists of rows.  Uses ``+ - * /`` and ``K.is_zero`` only.

>>> from exactlearn.fields import QQ
>>> A = [[QQ(2), QQ(1)], [QQ(1), QQ(1)]]
>>> inverse(A, QQ)
[[mpq(1,1), mpq(-1,1)], [mpq(-1,1), mpq(2,1)]]
>>> matmul(A, inverse(A, QQ), QQ) == identity(2, QQ)
True
"""

from __future__ import annotations

from exactlearn.errors import SingularMatrix


def identity(n, K):
    return [[K.one if i == j else K.zero for j in range(n)] for i in range(n)]


def transpose(A):
    return [list(r) for r in zip(*A)]


def matmul(A, B, K):
    Bt = transpose(B)
    return [[_dot(r, c, K) for c in Bt] for r in A]


def matvec(A, x, K):
    return [_dot(r, x, K) for r in A]


def _dot(r, c, K):
    acc = K.zero
    for a, b in zip(r, c):
        acc = acc + a * b
    return acc


def inverse(A, K):
    """A^{-1}, or raise :class:`SingularMatrix`.

    Over a field on python-flint ``fmpz_mod`` (one with ``scalar_ctx``: F_p) the inverse
    is ``fmpz_mod_mat``'s, in C (the inverse is unique: the same matrix)."""
    n = len(A)
    ctx = getattr(K, "scalar_ctx", None)
    if ctx is not None and n:
        import flint
        M = flint.fmpz_mod_mat(n, n, [K(x) for row in A for x in row], ctx)
        if M.rank() < n:
            raise SingularMatrix("matrix is singular")
        Mi = M.inv()
        return [[Mi[i, j] for j in range(n)] for i in range(n)]
    M = [list(r) + [K.one if i == j else K.zero for j in range(n)] for i, r in enumerate(A)]
    for col in range(n):
        piv = next((r for r in range(col, n) if not K.is_zero(M[r][col])), None)
        if piv is None:
            raise SingularMatrix("matrix is singular")
        M[col], M[piv] = M[piv], M[col]
        inv = K.one / M[col][col]
        M[col] = [x * inv for x in M[col]]
        for r in range(n):
            if r != col and not K.is_zero(M[r][col]):
                f = M[r][col]
                M[r] = [a - f * b for a, b in zip(M[r], M[col])]
    return [row[n:] for row in M]


def is_invertible(A, K) -> bool:
    """Whether A is invertible over K.  Over Q (``K.is_rational``) by the rank of a
    python-flint ``fmpq_mat`` (the same decision as row reduction).

    >>> from exactlearn.fields import QQ
    >>> is_invertible([[QQ(1), QQ(2)], [QQ(2), QQ(4)]], QQ), is_invertible([[QQ(1), QQ(0)], [QQ(1), QQ(1)]], QQ)
    (False, True)
    """
    if getattr(K, "is_rational", False) and A:
        import flint
        n = len(A)
        M = flint.fmpq_mat(n, n, [flint.fmpq(int(x.numerator), int(x.denominator))
                                  for row in A for x in row])
        return M.rank() == n
    try:
        inverse(A, K)
        return True
    except SingularMatrix:
        return False


def rref(A, K):
    """The nonzero rows of the reduced row echelon form of ``A`` and their pivot columns.

    Gauss–Jordan with the first nonzero entry of each column as pivot; uses
    ``+ - * /``, ``K.one`` and ``K.is_zero`` only, so the rank decision is exact
    over an exact field.  ``len(rows)`` is the rank of ``A``, and with
    ``B = [[a[p] for p in pivots] for a in A]`` one has ``A = B R`` (a rank
    factorisation).  ``A`` is not modified.

    >>> from exactlearn.fields import QQ
    >>> A = [[QQ(2), QQ(4), QQ(0)], [QQ(1), QQ(2), QQ(1)], [QQ(3), QQ(6), QQ(1)]]
    >>> R, pivots = rref(A, QQ)
    >>> R, pivots
    ([[mpq(1,1), mpq(2,1), mpq(0,1)], [mpq(0,1), mpq(0,1), mpq(1,1)]], [0, 2])
    >>> B = [[a[p] for p in pivots] for a in A]
    >>> matmul(B, R, QQ) == A
    True
    >>> rref([], QQ)
    ([], [])
    """
    M = [list(r) for r in A]
    n = len(M[0]) if M else 0
    pivots, r = [], 0
    for col in range(n):
        piv = next((i for i in range(r, len(M)) if not K.is_zero(M[i][col])), None)
        if piv is None:
            continue
        M[r], M[piv] = M[piv], M[r]
        inv = K.one / M[r][col]
        M[r] = [a * inv for a in M[r]]
        for i in range(len(M)):
            if i != r and not K.is_zero(M[i][col]):
                f = M[i][col]
                M[i] = [a - f * b for a, b in zip(M[i], M[r])]
        pivots.append(col)
        r += 1
    return M[:r], pivots
