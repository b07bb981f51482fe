"""The plans hold one tuple per within direction e_1 + e_j, shared by every final token
(933bef8: one tuple per configuration took about 3 GB for the efficient rank-32 plan at
d = 384), with the same values as adding the columns configuration by configuration."""

from __future__ import annotations

import random

import pytest

from exactlearn.pipeline.plan import draw_paper_plan
from exactlearn.strategies.efficient import draw_plan


@pytest.mark.parametrize("draw", [
    lambda rng: draw_paper_plan(6, 2, rng, 50),
    lambda rng: draw_plan(6, 2, rng, 50),
    lambda rng: draw_plan(7, 2, rng, 2 ** 20, None, 2),
])
def test_within_directions_are_shared_and_equal_to_the_sums(draw):
    plan = draw(random.Random(3))
    within = [c for c in plan.configs if c.kind == "within"]
    assert within
    for c in within:
        assert c.e == tuple(a + b for a, b in zip(plan.E[0], plan.E[c.j]))
    assert len({id(c.e) for c in within}) <= plan.d - 1
