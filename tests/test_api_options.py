"""The API you can hold in your head (issue 21, docs/reference/api.md#options): typed option
objects that mean the same as the flat keywords, one Strategy protocol, typed details,
and modules under the size cap."""

from __future__ import annotations

import ast
import json
import warnings
from fractions import Fraction
from pathlib import Path

import pytest

from exactlearn import (EfficientOptions, ExactLearnError, ModularOptions, MultiHeadAttention,
                        Oracle, RealOptions, learn)
from exactlearn.fields import Modular, Rational, Real
from exactlearn.floatbox import FloatAttention
from exactlearn.strategies import choose
from exactlearn.strategies.base import Strategy
from exactlearn.strategies.efficient import EfficientDetail
from exactlearn.strategies.modular import ModularDetail, ModularStrategy, PrimeRun
from exactlearn.strategies.real import RealDetail

MODEL = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
ROOT = Path(__file__).resolve().parent.parent


def _bytes(res) -> str:
    """The result's JSON without its wall times."""
    obj = res.to_json()
    obj.pop("learner_seconds")
    obj.pop("oracle_seconds")
    return json.dumps(obj)


def _max_error(heads, truth) -> Fraction:
    """The largest |entry difference| of W and v, the heads paired in canonical order."""
    assert len(heads) == len(truth)
    return max(abs(Fraction(str(a)) - Fraction(b))
               for h, t in zip(heads, truth)
               for a, b in [*zip((x for r in h.W for x in r), (x for r in t.W for x in r)),
                            *zip(h.v, t.v)])


# -- 1. options= means the same as the flat keywords (same JSON bytes) ---------------------------
@pytest.mark.parametrize("flat, options, field", [
    ({"max_height": 10, "max_primes": 3}, ModularOptions(max_height=10, max_primes=3), Modular()),
    ({"max_primes": 4}, ModularOptions(max_primes=4), Modular()),
    ({"plan": "efficient", "rank": 2}, EfficientOptions(rank=2), Rational()),
])
def test_exact_options_give_the_flat_keywords_json_bytes(flat, options, field):
    old = learn(Oracle(MODEL, field), d=2, heads=2, seed=3, **flat)
    rest = {k: v for k, v in flat.items() if k == "plan"}
    new = learn(Oracle(MODEL, field), d=2, heads=2, seed=3, options=options, **rest)
    assert old.certified and old.heads == MODEL.canonical_heads()     # the truth, independently
    assert _bytes(new) == _bytes(old)


def test_real_options_give_the_flat_keywords_json_bytes():
    """A small stable run (float64 box) and a paper run with snap, both within their bound of
    the model's canonical heads."""
    truth = MODEL.canonical_heads()
    box = FloatAttention(MODEL, "float64")
    common = dict(d=2, heads=2, field=Real(dps=30), tokens="float64", seed=2)
    old = learn(box, **common, noise=1e-13)
    new = learn(box, **common, options=RealOptions(noise=1e-13))
    assert old.certified and _max_error(old.heads, truth) <= Fraction(str(old.error_bound))
    assert _bytes(new) == _bytes(old)
    old = learn(Oracle(MODEL, Real(dps=30)), d=2, heads=2, seed=1, noise=1e-25, snap=True)
    new = learn(Oracle(MODEL, Real(dps=30)), d=2, heads=2, seed=1,
                options=RealOptions(noise=1e-25, snap=True))
    assert old.certified and _max_error(old.heads, truth) <= Fraction(str(old.error_bound))
    assert _bytes(new) == _bytes(old)


@pytest.mark.parametrize("kw, named", [
    ({"noise": 1e-9, "options": RealOptions(noise=1e-12)}, "noise is given twice"),
    ({"max_primes": 3, "options": (ModularOptions(max_primes=3),)}, "max_primes is given twice"),
    ({"options": (RealOptions(), RealOptions(snap=True))}, "two RealOptions"),
    ({"options": {"noise": 1}}, "options must be RealOptions, ModularOptions or EfficientOptions"),
])
def test_an_option_given_twice_or_of_the_wrong_kind_is_a_one_line_error(kw, named):
    field = Modular() if "max_primes" in kw else Real(dps=30)
    with pytest.raises(ValueError) as err:
        learn(Oracle(MODEL, field), d=2, heads=2, seed=1, **kw)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_an_option_object_for_another_field_is_refused_before_any_query():
    box = Oracle(MODEL, Rational())
    with pytest.raises(ValueError, match="RealOptions applies to the real field, not the rational"):
        learn(box, d=2, heads=2, seed=1, options=RealOptions(query_scale=2))
    with pytest.raises(ValueError, match="ModularOptions applies to the modular field"):
        learn(box, d=2, heads=2, seed=1, options=ModularOptions(max_primes=3))
    with pytest.raises(ValueError, match="rank= is a promise for the efficient plan"):
        learn(box, d=2, heads=2, seed=1, options=EfficientOptions(rank=1))
    assert box.queries == 0


# -- 2. one Strategy protocol; the plan chosen in one place -------------------------------------
def test_every_strategy_implements_the_protocol_and_choose_picks_it():
    from exactlearn.strategies import bias, efficient, paper, real
    for module in (paper, bias, efficient, real):
        assert isinstance(module, Strategy), module.__name__
        assert isinstance(module.ASKS_PLAN, bool) and isinstance(module.EXACT, bool)
    assert choose("paper", Rational()) is paper and choose("paper", Rational(), bias=True) is bias
    assert choose("efficient", Modular()) is efficient and choose("stable", Real()) is real
    with pytest.raises(ValueError, match="stable plan"):
        choose("stable", Rational())
    wrapped = ModularStrategy(paper, Oracle(MODEL, Modular()), 2, None)
    assert isinstance(wrapped, Strategy) and wrapped.ASKS_PLAN is True
    assert paper.plan_count("paper", 2, 2) == 4 * 2 * 4 - 4 + 1
    # over the real field the paper's nodes in the one pipeline: every family fitted on its own,
    # so the 2d - 2 single tokens (x) the paper computes from V are asked too
    assert real.plan_count("paper", 2, 2) == 4 * 2 * 4 - 4 + 1 + 2


# -- 3. typed details; the failure's type --------------------------------------------------------
def test_each_strategy_has_its_typed_detail():
    assert learn(Oracle(MODEL, Rational()), d=2, heads=2, seed=1).detail is None
    eff = learn(Oracle(MODEL, Rational()), d=2, heads=2, seed=1, plan="efficient")
    assert isinstance(eff.detail, EfficientDetail) and eff.plan_detail == eff.detail.plan_detail
    mod = learn(Oracle(MODEL, Modular()), d=2, heads=2, seed=1, plan="efficient")
    assert mod.heads == MODEL.canonical_heads()
    assert isinstance(mod.detail, ModularDetail) and isinstance(mod.detail.inner, EfficientDetail)
    assert mod.detail.report is mod.multimodular and mod.detail.exact_over_Q is True
    assert mod.plan_fallbacks == list(mod.detail.inner.fallbacks)
    primes = mod.detail.primes
    assert [p.role for p in primes] == ["analysis", "confirmation"]
    assert all(isinstance(p, PrimeRun) and isinstance(p.p, int) for p in primes)
    assert [str(p.p) for p in primes] == [r["p"] for r in mod.to_json()["multimodular"]["primes"]]
    assert sum(p.queries for p in primes) == mod.queries


def test_the_real_detail_holds_numbers_and_the_json_is_formatted_from_them():
    box = FloatAttention(MODEL, "float64")
    res = learn(box, d=2, heads=2, field=Real(dps=30), tokens="float64", seed=2, noise=1e-13)
    det = res.detail
    assert res.certified and isinstance(det, RealDetail) and det.plan == "stable"
    assert not isinstance(det.error_bound, str) and det.error_bound == max(det.head_error_bounds)
    assert res.real_detail is det.report and res.to_json()["real_detail"] == det.report
    assert det.report["head_error_bounds"] == [f"{float(b):.3g}" for b in det.head_error_bounds]
    assert float(det.eta) == 1e-13 and det.report["eta"] == f"{float(det.eta):.6g}"
    truth = MODEL.canonical_heads()
    for h, t, b in zip(res.heads, truth, det.head_error_bounds):    # each head within its bound
        assert _max_error([h], [t]) <= Fraction(str(b))
    with pytest.warns(DeprecationWarning, match="RealDetail.report"):
        assert det.detail is det.report


def test_a_failure_is_typed_on_the_modular_field_too():
    res = learn(Oracle(MODEL, Modular()), d=2, heads=1, seed=1)      # two heads, bound 1
    assert res.status == "failed" and res.heads == ()
    assert isinstance(res.failure, ExactLearnError)
    assert res.error.startswith(f"{res.failure.kind}: ")
    assert isinstance(res.detail, ModularDetail) and res.detail.report == res.multimodular
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert res.exact_over_Q is False


# -- 4. the 400-line cap for the API's modules ---------------------------------------------------
_CAPPED = ("exactlearn/api", "exactlearn/model", "exactlearn/oracle", "exactlearn/cli")


@pytest.mark.parametrize("folder", _CAPPED)
def test_the_api_modules_are_under_400_lines_and_their_functions_under_60(folder):
    """Docstrings excepted for functions: ``learn``'s parameter table is its documentation."""
    base = ROOT / folder
    modules = sorted(base.glob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    assert modules and all(m.is_file() for m in modules)
    for path in modules:
        text = path.read_text()
        assert len(text.splitlines()) <= 400, f"{path.name}: {len(text.splitlines())} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef):
                first = node.body[0]
                doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                start = first.end_lineno + 1 if doc else node.lineno
                assert node.end_lineno - start + 1 <= 60, f"{path.name}: {node.name}"


def test_every_module_of_the_package_is_at_most_400_lines():
    """Issue 21: no module in exactlearn/ over 400 lines."""
    over = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "exactlearn").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > 400}
    assert not over, over


def test_every_function_of_the_package_is_at_most_60_lines():
    """Issue 21: no function in exactlearn/ over 60 lines after its docstring (the measure of
    the API's test above; nested functions count on their own and inside their parent)."""
    over = []
    for path in sorted((ROOT / "exactlearn").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = node.body[0]
                doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                start = first.end_lineno + 1 if doc else node.lineno
                if node.end_lineno - start + 1 > 60:
                    over.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert not over, over
