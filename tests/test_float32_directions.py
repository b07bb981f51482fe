"""float32 layers with four heads: a direction, or a final token, whose every family crowds
(docs/explanation/real-field.md, "Coarse boxes"; docs/howto/float-black-box.md, "float32 layers").

Pinned at c2c376c: in a biased float32 torch MultiheadAttention with d = 4, H = 4 (seed 1) all
five basis families ``(x_i, e_4)`` failed (two heads' exponents crowd in each), so no labelled
family gave ``e_4``'s c-values, the supplementary families ``(x_i, e_4 - e_k)`` it asked were all
thrown away unlabelled, and the run failed ("the 16 configurations that could be labelled do
not determine every entry of W and u").  Every family at the final token x_5 along e_4 crowds
too, so ``e_4 - e_k`` alone cannot finish it.  Now a pair of families of ``e_4`` plus different
labelled directions gives ``e_4``'s c-values (``label_by_c_pair``), the supplement also asks
``(x_i, e_j + e_k)`` and ``(x_i + x_k, e_j)``, and the run is certified.

Truth is computed apart from the learner: c-values from the layer's own heads
(``true_heads``: its weights), the parameters likewise.
"""

from __future__ import annotations

import numpy as np
import pytest

from exactlearn.pipeline.match import WithinBounds
from exactlearn.strategies.real.labels import known_part, label_by_c, label_by_c_pair

#: c_h(e_1) and c_h(e_4) = -v_h.e of the four heads of that layer at its plan's directions
#: (from its true heads); the families' bounds below are of the size its better fits reached
C1 = [0.1987, 0.0287, 0.3793, 0.0040]
C4 = [-0.3457, 0.1871, 0.1696, -0.4755]


def _family(cs, order, bounds):
    return [(None, cs[h], None, b) for h, b in zip(order, bounds)]


def test_a_direction_without_a_labelled_family_gets_its_c_values_from_a_pair():
    rel = WithinBounds(10, 100)
    ref1 = [(None, c, None, 2e-5) for c in C1]                  # e_1: labelled
    # within (x_3, e_1 + e_4) and supplementary (x_2, e_4 - e_1), poles in the fits' order
    plus_order, minus_order = [2, 1, 0, 3], [3, 0, 2, 1]
    plus = _family([a + b for a, b in zip(C4, C1)], plus_order, [3e-5, 1e-5, 3e-5, 4e-6])
    minus = _family([a - b for a, b in zip(C4, C1)], minus_order, [2e-5, 6e-5, 1e-5, 5e-6])
    refs = {0: ref1}
    # no reference for e_4: c-values alone cannot label either family
    assert label_by_c(plus, [(0, 1), (3, 1)], refs, rel, equal_only=True) is None
    known_plus = known_part([(0, 1), (3, 1)], 3, refs)
    known_minus = known_part([(3, 1), (0, -1)], 3, refs)
    got = label_by_c_pair(plus, known_plus, minus, known_minus, rel, equal_only=True)
    assert got is not None
    perm_plus, perm_minus, own = got
    assert perm_plus == [plus_order.index(h) for h in range(4)]
    assert perm_minus == [minus_order.index(h) for h in range(4)]
    for h in range(4):                           # e_4's c-values, within their bounds
        assert abs(own[h][1] - C4[h]) <= own[h][3]
    # with them, a third family of e_4 labels by its c-values (e_4 - e_2 needs e_2's too)
    third = _family(C4, [1, 3, 0, 2], [1e-4] * 4)
    assert label_by_c(third, [(3, 1)], {0: ref1, 3: own}, rel, equal_only=True) == \
        [[1, 3, 0, 2].index(h) for h in range(4)]


def test_a_pair_that_cannot_decide_labels_nothing():
    rel = WithinBounds(10, 100)
    refs = {0: [(None, c, None, 2e-5) for c in C1]}
    plus = _family([a + b for a, b in zip(C4, C1)], range(4), [1e-4] * 4)
    known = known_part([(0, 1), (3, 1)], 3, refs)
    # two families of the same combination: every pole pairs with its own, nothing decided
    assert label_by_c_pair(plus, known, plus, known, rel, equal_only=True) is None
    # bounds of 1e-4 to 6e-4: head 1 pairs its own poles and, 0.0069 away (within 10 bounds),
    # those of heads 3 and 2 -- two partners, no label
    wide = _family([a - b for a, b in zip(C4, C1)], range(4), [2e-4, 6e-4, 1e-4, 5e-5])
    minus_known = known_part([(3, 1), (0, -1)], 3, refs)
    assert label_by_c_pair(plus, known, wide, minus_known, rel, equal_only=True) is None
    # a direction other than the blind one missing: no known part
    assert known_part([(1, 1), (3, 1)], 3, refs) is None


@pytest.mark.slow
def test_a_biased_float32_torch_layer_with_four_heads_and_a_crowded_direction_is_certified():
    torch = pytest.importorskip("torch")
    from exactlearn import learn
    from exactlearn.adapters import torch as ta
    from exactlearn.strategies.real.learn import max_parameter_error
    torch.manual_seed(1)
    m = torch.nn.MultiheadAttention(4, 4, bias=True, batch_first=True,
                                    dtype=torch.float32).eval()
    with torch.no_grad():               # torch initialises the biases to 0: draw them
        m.in_proj_bias.normal_(0.0, 0.5)
        m.out_proj.bias.normal_(0.0, 0.5)
    r = np.linspace(-1.0, 1.5, 4)
    res = learn(ta.black_box(m, readout=r), d=4, heads=4, field="real", tokens="float32",
                bias=True, noise="auto", seed=1, retries=0)
    assert res.status == "certified", res.error
    truth = ta.true_heads(m, readout=r).heads()
    err, _ = max_parameter_error(res.heads, truth, res.field)
    size = max(abs(float(x)) for h in truth for x in [*(a for row in h.W for a in row), *h.v, *h.u])
    assert err <= 1e-3 * size and err <= res.error_bound
    assert res.real_detail["supplementary_families"] > 0
