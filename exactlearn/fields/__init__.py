"""Number systems for exact (and real) softmax: see :mod:`exactlearn.fields.base`."""

from .base import (ExactnessError, Field, FieldError, NotExponential, NotSplit, as_mpq,
                   format_rational)
from .rational import QQ, Rational

__all__ = ["Field", "FieldError", "ExactnessError", "NotExponential", "NotSplit",
           "Rational", "QQ", "as_mpq", "format_rational"]

try:  # fields added by later modules register here
    from .modular import Modular  # noqa: F401
    __all__.append("Modular")
except ImportError:  # pragma: no cover - module not present yet
    pass
try:
    from .real import Real  # noqa: F401
    __all__.append("Real")
except ImportError:  # pragma: no cover
    pass
try:
    from .symbolic import Symbolic  # noqa: F401
    __all__.append("Symbolic")
except ImportError:  # pragma: no cover
    pass
