"""mpmath contexts whose numbers pickle (docs: explanation/real-field.md).

Each :class:`~exactlearn.fields.real.Real` field, and each run's sensitivity arithmetic, works in
its own ``mpmath.MPContext`` (precision is the field's, never a global).  Such a context makes its
own ``mpf``/``mpc`` classes, which :mod:`pickle` cannot find by name, so a result over the real
field could not cross a process boundary (``multiprocessing``, a campaign's result files).
:func:`context` makes a context whose numbers pickle by value: the binary mantissa/exponent tuple
and the precision, read back in a context of that precision (one per precision in a process).
Values from contexts of equal precision mix freely in mpmath, so nothing else changes.

>>> import pickle
>>> ctx = context(dps=30)
>>> x = ctx.mpf(2) / 3
>>> y = pickle.loads(pickle.dumps(x))
>>> y == x, y.context.prec == ctx.prec, str(y)
(True, True, '0.666666666666666666666666666667')
>>> z = pickle.loads(pickle.dumps(ctx.mpc(1, x)))
>>> z == ctx.mpc(1, x)
True
"""

from __future__ import annotations

import mpmath

__all__ = ["context"]

_BY_PREC: dict = {}                    # prec -> the context unpickled numbers come back in


def context(dps: int | None = None, prec: int | None = None) -> mpmath.MPContext:
    """A new ``mpmath.MPContext`` (``dps`` digits or ``prec`` bits) whose numbers pickle."""
    ctx = mpmath.MPContext()
    if dps is not None:
        ctx.dps = dps
    if prec is not None:
        ctx.prec = prec
    ctx.mpf.__reduce_ex__ = _reduce_mpf
    ctx.mpc.__reduce_ex__ = _reduce_mpc
    return ctx


def _at(prec: int) -> mpmath.MPContext:
    ctx = _BY_PREC.get(prec)
    if ctx is None:
        ctx = _BY_PREC[prec] = context(prec=prec)
    return ctx


def _reduce_mpf(x, protocol=None):
    return _make_mpf, (x.context.prec, x._mpf_)


def _reduce_mpc(z, protocol=None):
    return _make_mpc, (z.context.prec, z._mpc_)


def _make_mpf(prec, value):
    return _at(prec).make_mpf(value)


def _make_mpc(prec, value):
    return _at(prec).make_mpc(value)
