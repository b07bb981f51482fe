"""Number systems for exact (and real) softmax: see :mod:`exactlearn.fields.base`.

``Rational`` and ``Modular`` load eagerly; ``Real`` (mpmath) and ``Symbolic``
(sympy) load on first use, which keeps the command line's start-up short.
"""

from exactlearn.fields.base import (ExactnessError, Field, FieldError, NotExponential, NotSplit, as_mpq,
                   format_rational)
from exactlearn.fields.modular import (BadReduction, ConfirmationModular, Modular, ReconstructionError,
                                      ResidueModular)
from exactlearn.fields.multimodular import ModularImage, analysis_fields
from exactlearn.fields.rational import QQ, Rational

__all__ = ["Field", "FieldError", "ExactnessError", "NotExponential", "NotSplit",
           "Rational", "QQ", "Modular", "ModularImage", "ResidueModular", "ConfirmationModular",
           "ReconstructionError", "BadReduction", "analysis_fields",
           "Real", "Symbolic", "as_mpq", "format_rational"]


def __getattr__(name):
    if name == "Real":
        from exactlearn.fields.real import Real
        return Real
    if name == "Symbolic":
        from exactlearn.fields.symbolic import Symbolic
        return Symbolic
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
