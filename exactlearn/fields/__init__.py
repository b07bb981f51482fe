"""Number systems for exact (and real) softmax: see :mod:`exactlearn.fields.base`."""

from .base import (ExactnessError, Field, FieldError, NotExponential, NotSplit, as_mpq,
                   format_rational)
from .rational import QQ, Rational

__all__ = ["Field", "FieldError", "ExactnessError", "NotExponential", "NotSplit",
           "Rational", "QQ", "as_mpq", "format_rational"]

from .modular import BadReduction, Modular, ReconstructionError  # noqa: E402

__all__ += ["Modular", "ReconstructionError", "BadReduction"]

try:  # fields added by later modules register here
    from .real import Real  # noqa: F401
    __all__.append("Real")
except ImportError:  # pragma: no cover
    pass
try:
    from .symbolic import Symbolic  # noqa: F401
    __all__.append("Symbolic")
except ImportError:  # pragma: no cover
    pass
