"""One table of the fields, as galois and python-flint keep theirs.

A property that does not depend on the field is written once and parametrized over
:data:`FIELDS` (or :data:`EXACT_FIELDS`); what is particular to one field stays in
``tests/test_field_<name>.py``.  Each row builds its field for a scale ``D`` and says
how the learner is run in it: the query ranges that keep it fast (the symbolic field's
values grow with the range) and the models it is given (docs/explanation/tests.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
from hypothesis import strategies as st

from exactlearn.fields import Field, Modular, ModularImage, Rational
from exactlearn.fields.real import Real
from exactlearn.fields.symbolic import Symbolic

from strategies import any_models


@dataclass(frozen=True)
class FieldCase:
    name: str
    make: Callable[[int | None], Field]     #: the field at scale D (None: chosen by the model)
    exact: bool                              #: values compare with ==, exp/log are exact
    ranges: tuple = (2, 30)                  #: query ranges for the learner in this field
    models: object = None                    #: hypothesis strategy of models for the learner

    def __call__(self, scale=None) -> Field:
        return self.make(scale)


#: models for the learner over most fields: d <= 3 with H <= 2, merged and cancelling heads
MODELS = st.one_of(any_models(max_d=3, max_heads=2), any_models(max_d=2, merged=True),
                   any_models(max_d=2, cancelling=True))
#: over Q(T) the degrees in T grow with the entries: small integer W, range 2
TINY = st.one_of(any_models(max_d=2, max_heads=2, w_num=1, w_den=1, v_num=2, v_den=2),
                 any_models(max_d=2, heads=2, merged=True, w_num=1, w_den=1),
                 any_models(d=1, heads=2, cancelling=True, w_num=2, w_den=2))

FIELDS = [
    FieldCase("rational", lambda D: Rational(scale=D), True, models=MODELS),
    FieldCase("rational over Q", lambda D: Rational(scale=D, via_modular=False), True),
    FieldCase("modular", lambda D: Modular(scale=D), True, models=MODELS),
    FieldCase("modular image", lambda D: ModularImage(scale=D), True),
    FieldCase("symbolic", lambda D: Symbolic(scale=D), True, ranges=(2,), models=TINY),
    FieldCase("real", lambda D: Real(dps=50, scale=D), False),
]
EXACT_FIELDS = [F for F in FIELDS if F.exact]
#: the other exact fields a black box is asked in: the learner's answer must be the rational
#: field's (tests/test_differential.py)
LEARNER_FIELDS = [F for F in EXACT_FIELDS if F.models is not None and F.name != "rational"]
#: the exact fields a user asks learn() in: the round trip holds in each (tests/test_roundtrip.py)
USER_FIELDS = [F for F in EXACT_FIELDS if F.models is not None]


def over(cases):
    """``pytest.mark.parametrize`` over some rows of the table, named by the field."""
    return pytest.mark.parametrize("F", cases, ids=[F.name for F in cases])


def poly_from_roots(F, roots, lead=1):
    """Coefficients (constant first) of ``lead * prod(k - r)`` over the field ``F``, by
    schoolbook products (a truth apart from the fields' own polynomial code)."""
    cs = [F(lead)]
    for r in roots:
        r = F(r)
        new = [F.zero] * (len(cs) + 1)
        for i, c in enumerate(cs):
            new[i + 1] += c
            new[i] -= c * r
        cs = new
    return cs
