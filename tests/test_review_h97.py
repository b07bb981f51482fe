"""Pinned from helper-97's review of 8423ed9 (certify_plan forms a within family from its
basis families): the derivation must use only basis configurations that are (x_i, e_j)
themselves.  The test failed before its fix."""

from __future__ import annotations

import pytest

from exactlearn.errors import CertificateError
from exactlearn.fields import Modular
from exactlearn.model import Head, HeadEvaluator
from exactlearn.pipeline.certify import certify_plan
from exactlearn.pipeline.plan import Config, paper_plan


def test_within_family_is_not_derived_from_a_basis_configuration_off_the_plans_x_and_e():
    """A plan whose basis configuration (0, 1) is not (x_1, e_2): the within family
    (x_1, e_1 + e_2) formed from it is not the heads' family, and answers matching that
    wrong family (not the heads) were certified.  As at 60dd532, they are refused."""
    K = Modular()
    heads = [Head(((1, 2), (0, -1)), (3, 1))]
    X, E = [(1, 2), (3, -1)], [(1, 0), (0, 1)]
    plan = paper_plan(X, E, 1)
    n = next(m for m, c in enumerate(plan.configs) if (c.kind, c.i, c.j) == ("basis", 0, 1))
    plan.configs[n] = Config("basis", 0, 1, X[0], (2, 5))
    ev = HeadEvaluator(heads, 2, K)
    values = [[ev(c.tokens(k)) for k in (1, 2)] for c in plan.configs]
    w = next(m for m, c in enumerate(plan.configs) if (c.kind, c.i, c.j) == ("within", 0, 1))
    (w1, A1, B), = ev.family(plan.configs[0].summed(), X[0])
    (wj, Aj, _), = ev.family(plan.configs[n].summed(), X[0])
    values[w] = [(k * w1 * wj * (A1 + Aj - B) + B) / (k * w1 * wj + 1) for k in (1, 2)]
    assert values[w] != [ev(plan.configs[w].tokens(k)) for k in (1, 2)]
    with pytest.raises(CertificateError, match="do not reproduce the oracle"):
        certify_plan(heads, plan, ev(plan.configs[0].tokens(0)), values, K)
