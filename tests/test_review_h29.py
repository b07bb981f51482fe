"""Hostile-review regressions (h29) for the API redesign and ``noise="auto"`` with vector
outputs (docs: reference/cli.md#limits, explanation/biases.md#vector-outputs)."""

from __future__ import annotations

import pytest

from exactlearn import learn


class NeverAsked:
    """A box that counts its calls independently of the learner and answers none."""

    def __init__(self):
        self.calls = 0

    def __call__(self, tokens):
        self.calls += 1
        raise AssertionError("the box was asked before the sizes were checked")


def test_noise_auto_with_huge_outputs_is_refused_before_any_query():
    """d = 1, H = 64, m = 65536, float32 tokens: the measurement keeps 5,616 queries of
    65,536 answers each (23.6 GB at 64 bytes a value, past MAX_PLAN_BYTES) although the plan
    itself fits; it is a one-line ValueError before the box is asked."""
    from exactlearn.limits import MAX_PLAN_BYTES, PLAN_BYTES_PER_QUERY
    from exactlearn.strategies.real.eta import DRAWS, PERMUTATIONS, SCALES, shape_lengths
    H, m = 64, 65536
    queries = len(SCALES) * DRAWS * (1 + PERMUTATIONS + 2) * len(shape_lengths(H))
    assert queries * m * PLAN_BYTES_PER_QUERY > MAX_PLAN_BYTES      # independent arithmetic
    box = NeverAsked()
    with pytest.raises(ValueError, match=r"noise measurement: \d+ bytes.*MAX_PLAN_BYTES") as ei:
        learn(box, d=1, heads=H, field="real", tokens="float32", noise="auto", outputs=m)
    assert "\n" not in str(ei.value)
    assert box.calls == 0


def test_noise_auto_with_outputs_within_the_limits_is_not_refused():
    """The same measurement with few outputs fits: the box is asked (and here fails)."""
    box = NeverAsked()
    res = None
    try:
        res = learn(box, d=1, heads=64, field="real", tokens="float32", noise="auto", outputs=2)
    except AssertionError:
        pass
    assert box.calls >= 1, res


# Each module's names as c2c376c's flat modules let a user import them (project names only;
# the standard library's and third-party modules' names they imported are left out).
OLD_NAMES = {
    "exactlearn.api": [
        "BadBlackBox", "ClusterError", "DEFAULT_RANGES", "ExactLearnError", "ExactnessError",
        "HeightExceeded", "LearnResult", "MAX_RETRIES", "MAX_VERIFY_QUERIES", "Oracle", "Options",
        "PLANS", "Progress", "Recorder", "TokenAdapter", "VerificationFailed", "count_problem",
        "current", "default_retries", "field_named", "head_bound", "learn", "learn_modular",
        "paper_count", "readable_int", "resolve_field", "strategy_for", "using"],
    "exactlearn.model": [
        "BadReduction", "ExactnessError", "FORMAT", "Field", "Head", "HeadEvaluator", "HeadSet",
        "ModelError", "MultiHeadAttention", "VectorEvaluator", "as_mpq", "canonicalize",
        "check_format", "check_model_size", "check_outputs_size", "distinct_tokens", "dump_json",
        "evaluator", "exact_matrix", "exact_vector", "format_rational", "is_matrix",
        "lcm_of_denominators", "load_json", "structure"],
    "exactlearn.oracle": [
        "BadBlackBox", "CountingOracle", "DegenerateDraw", "ExactnessError", "Field",
        "FieldError", "HeadEvaluator", "ModelError", "MultiHeadAttention", "OneLayerTransformer",
        "Oracle", "OutputsView", "Recorder", "TokenAdapter", "TransformerEvaluator",
        "TransformerOracle", "box_name", "checked_batch", "evaluator", "readable_int",
        "require_ordered", "resolve_field"],
}


@pytest.mark.parametrize("module", sorted(OLD_NAMES))
def test_the_old_modules_names_still_import(module):
    """api, model and oracle became packages: every project name their flat modules let a
    user import on c2c376c still imports, as the same object as its home module's."""
    import importlib
    import exactlearn.errors as errors
    mod = importlib.import_module(module)
    missing = [n for n in OLD_NAMES[module] if not hasattr(mod, n)]
    assert not missing, f"{module} lost {missing}"
    for name in ("ExactnessError", "BadBlackBox", "ModelError"):
        if name in OLD_NAMES[module]:
            assert getattr(mod, name) is getattr(errors, name)


def test_star_import_of_transformer_model():
    """transformer_model's __all__ named TransformerOracle, which lives in exactlearn.oracle:
    ``from exactlearn.transformer_model import *`` raised AttributeError (also on c2c376c)."""
    namespace: dict = {}
    exec("from exactlearn.transformer_model import *", namespace)
    assert "OneLayerTransformer" in namespace and "random_transformer" in namespace


def test_the_efficient_plans_detail_over_the_modular_field_still_reads():
    """Before ModularStrategy, ``res.detail`` of the efficient plan over the modular field was
    its EfficientDetail; its fields still read (deprecated) through ModularDetail, and the
    detail still pickles (Dask ships results)."""
    import pickle
    from exactlearn import MultiHeadAttention, Oracle
    from exactlearn.fields import Modular
    model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
    res = learn(Oracle(model, Modular()), d=2, heads=2, seed=1, plan="efficient")
    assert res.certified and res.heads == model.canonical_heads()
    with pytest.warns(DeprecationWarning, match="ModularDetail.plan_detail is deprecated"):
        assert res.detail.plan_detail == res.efficient_detail.plan_detail
    with pytest.warns(DeprecationWarning):
        assert list(res.detail.fallbacks) == res.plan_fallbacks
    with pytest.raises(AttributeError):
        res.detail.no_such_field
    again = pickle.loads(pickle.dumps(res))
    assert again.detail == res.detail and again.to_json() == res.to_json()


@pytest.mark.slow                    # ~13 s: a failed run (its scale probe) and a redrawn one
def test_a_plan_run_on_one_output_says_which_when_it_fails():
    """noise='auto' with outputs=m runs the plan on one output drawn at random (the relative
    bound): when that output does not see every head the plan itself fails, and the failure
    names the output and retries= (docs: explanation/biases.md#vector-outputs says it does);
    with retries= the run is certified within its bound of the layer's own heads."""
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    from exactlearn.strategies.real.learn import max_parameter_error
    torch.manual_seed(0)
    layer = torch.nn.MultiheadAttention(4, 2, bias=False, batch_first=True,
                                        dtype=torch.float64).eval()
    with torch.no_grad():
        layer.out_proj.weight[0, 2:] = 0.0           # output 1 reads head 1 only
    res = learn(ta.black_box(layer), d=4, heads=2, field="real", tokens="float64",
                noise="auto", outputs=4, seed=1)
    assert not res.certified
    assert "the plan ran on output 1 of 4 alone" in res.error and "retries=" in res.error
    res = learn(ta.black_box(layer), d=4, heads=2, field="real", tokens="float64",
                noise="auto", outputs=4, seed=1, retries=2)
    assert res.certified, res.error
    err, _ = max_parameter_error(res.heads, ta.true_heads(layer).heads(), res.field)
    assert err <= res.error_bound
