"""Small exact linear algebra over any field (Gauss–Jordan; SPEC §3's solves).

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
    """A^{-1}, or raise :class:`SingularMatrix`."""
    n = len(A)
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
    try:
        inverse(A, K)
        return True
    except SingularMatrix:
        return False
