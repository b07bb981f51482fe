"""The documentation holds to the code (docs/, README "Documentation").

The ``--help`` blocks of docs/reference/cli.md are the commands' own output; the key tables of
docs/reference/json.md list exactly the keys ``--json`` prints; the claims table of
docs/explanation/claims.md is the registry's; the how-to guides' code runs as written; the
README keeps its Quickstart of two commands and links only to pages that exist.  (The
notebooks run under ``--nbmake``; ``mkdocs build --strict`` in .ci/run checks the site's links.)
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from exactlearn.cli.main import main
from proofs_check.claim import discover
from proofs_check.cli import main as pc_main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

HELP_COMMANDS = {"exactlearn": (main, []), "exactlearn learn": (main, ["learn"]),
                 "exactlearn random-model": (main, ["random-model"]),
                 "exactlearn demo": (main, ["demo"]), "proofs-check": (pc_main, [])}


def help_text(name) -> str:
    fn, argv = HELP_COMMANDS[name]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        fn(argv + ["--help"])
    return buf.getvalue().rstrip() + "\n"


@pytest.mark.parametrize("name", list(HELP_COMMANDS))
def test_cli_reference_shows_the_current_help(name, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    text = (DOCS / "reference" / "cli.md").read_text()
    block = re.search(rf"<!-- help: {re.escape(name)} -->\n```text\n(.*?)```\n", text, re.S)
    assert block, f"no help block for {name}"
    assert block.group(1) == help_text(name), (
        f"docs/reference/cli.md: the help of {name!r} changed; refresh it with "
        f"`python -m tests.test_docs`")


def refresh_cli_reference() -> None:
    """Paste the current ``--help`` of every command into docs/reference/cli.md (after a CLI
    change: ``COLUMNS=100 python -m tests.test_docs``)."""
    path = DOCS / "reference" / "cli.md"
    text = path.read_text()
    for name in HELP_COMMANDS:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("COLUMNS", "100")
            new = help_text(name)
        text = re.sub(rf"(<!-- help: {re.escape(name)} -->\n```text\n)(.*?)(```\n)",
                      lambda m: m.group(1) + new + m.group(3), text, flags=re.S)
    path.write_text(text)


def _documented_keys(section: str) -> set:
    text = (DOCS / "reference" / "json.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for line in body.splitlines():
        if line.startswith("| `"):
            keys |= set(re.findall(r"`([a-z_A-Z]+)`", line.split("|")[1]))
    return keys


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("docs") / "m.json"
    assert main(["random-model", "--d", "2", "--heads", "2", "--seed", "4", "--out", str(path)]) == 0
    return str(path)


def _json(capsys, argv) -> dict:
    main(argv)
    return json.loads(capsys.readouterr().out)


def test_learn_json_keys_are_documented(model_file, capsys, tmp_path):
    base = ["learn", "--model", model_file, "--heads", "2", "--seed", "1", "--json"]
    seen = set()
    for extra in ([], ["--field", "modular"], ["--field", "real", "--dps", "40", "--noise", "1e-30"]):
        seen |= set(_json(capsys, base + extra))
    biased = str(tmp_path / "b.json")          # --bias adds "constant" (and each head's "u")
    assert main(["random-model", "--d", "2", "--heads", "2", "--seed", "4", "--bias", "--out", biased]) == 0
    seen |= set(_json(capsys, ["learn", "--model", biased, "--heads", "2", "--seed", "1", "--json", "--bias"]))
    vector = str(tmp_path / "v.json")          # an mha/3 file adds "outputs"
    assert main(["random-model", "--d", "2", "--heads", "2", "--seed", "4", "--outputs", "2", "--out", vector]) == 0
    seen |= set(_json(capsys, ["learn", "--model", vector, "--heads", "2", "--seed", "1", "--json"]))
    assert seen == _documented_keys("learn --json")


def test_transformer_json_keys_are_documented(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main(["random-model", "--transformer", "--d", "2", "--heads", "1", "--seed", "0",
                 "--out", str(path)]) == 0
    obj = _json(capsys, ["learn", "--model", str(path), "--heads", "1", "--seed", "0", "--json"])
    assert obj["status"] == "certified"
    assert set(obj) == _documented_keys("Transformer files")


def test_proofs_check_json_keys_are_documented(capsys):
    pc_main(["--tiny", "--only", "query-length", "--json", "--quiet"])
    obj = json.loads(capsys.readouterr().out)
    documented = _documented_keys("proofs-check --json")
    assert set(obj) <= documented and {"claims", "run", "executor", "seed", "level"} <= set(obj)
    assert set(obj["run"]) <= documented | set(re.findall(
        r"`([a-z_]+)`", (DOCS / "reference" / "json.md").read_text().split("| `run` |")[1].split("\n")[0]))


def test_claims_table_is_the_registry():
    text = (DOCS / "explanation" / "claims.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (.*) \|$", text, re.M))
    assert rows == {cid: c.statement for cid, c in discover().items()}


def _python_blocks(page) -> list:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)


def test_float_black_box_howto_runs(capsys):
    """The how-to's code, as written: the wrapped numpy layer is certified with its bound."""
    pytest.importorskip("numpy")
    ns: dict = {}
    exec("\n".join(_python_blocks("howto/float-black-box.md")), ns)
    res = ns["res"]
    assert res.certified, res.error
    assert res.error_bound < ns["K"]("1e-6")


def _torch_jax_howto(sections):
    text = (DOCS / "howto" / "torch-jax-layer.md").read_text()
    parts = re.split(r"^## ", text, flags=re.M)
    code = [b for part in parts if part[:2] in sections
            for b in re.findall(r"```python\n(.*?)```", part, re.S)]
    ns: dict = {}
    exec("\n".join(code), ns)
    return ns


def _runs_as_shown(capsys, sections, prefix, pattern):
    """Run the how-to's ``sections`` as written: ``<prefix>res`` certified with ``<prefix>err``
    within its bound, and the line the last section shows (``pattern``, searched in that
    section only) the one printed."""
    pytest.importorskip("torch")
    ns = _torch_jax_howto(sections)
    res, err = ns[prefix + "res"], ns[prefix + "err"]
    assert res.certified and err <= res.error_bound
    text = (DOCS / "howto" / "torch-jax-layer.md").read_text()
    part = text.split("\n## " + sections[-1])[1].split("\n## ")[0]
    assert re.search(pattern, part).group(1) in capsys.readouterr().out
    return ns


def test_torch_jax_howto_torch_part_runs(capsys):
    """The how-to's PyTorch code: its printed count the one shown."""
    _runs_as_shown(capsys, ["1."], "", r"# (certified \d+) error")


def test_torch_jax_howto_vector_part_runs(capsys):
    """The how-to's vector-output code: its printed line the one shown."""
    _runs_as_shown(capsys, ["1.", "3."], "v", r"# (certified \d+ 4) error")


def test_torch_jax_howto_biases_part_runs(capsys):
    """The how-to's biased PyTorch layer, against the layer's own true_heads (u and c)."""
    _runs_as_shown(capsys, ["4."], "b", r"# (certified \d+ c = \S+)")


def test_torch_jax_howto_float32_part_runs(capsys):
    """The how-to's float32 layer with biases, its whole output and eta measured, against the
    layer's own true_heads: relative error below 1e-3, eta's queries counted in queries."""
    ns = _runs_as_shown(capsys, ["1.", "5."], "f", r"# (certified \d+ \d+) error")
    res = ns["fres"]
    assert float(ns["ferr"]) < 1e-3
    assert res.noise_estimated is not None and 0 < res.noise_queries < res.queries


@pytest.mark.slow                    # the flax part jit-compiles about 15 shapes
def test_torch_jax_howto_runs(capsys):
    pytest.importorskip("torch")
    pytest.importorskip("flax")
    ns = _torch_jax_howto(["1.", "2."])
    assert ns["fres"].certified and ns["ferr"] <= ns["fres"].error_bound
    text = (DOCS / "howto" / "torch-jax-layer.md").read_text()
    part = text.split("\n## 2.")[1].split("\n## ")[0]   # the flax parts' printed counts
    printed = capsys.readouterr().out
    shown = re.findall(r"# (certified \d+) error", part)
    assert len(shown) == 2 and all(s in printed for s in shown), (shown, printed)  # linen, nnx
    assert ns["nres"].certified and ns["nerr"] <= ns["nres"].error_bound


def test_transformer_howto_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    text = (DOCS / "howto" / "transformer.md").read_text()
    make = re.search(r"```bash\n(exactlearn random-model --transformer [^\n]*)\n```", text).group(1)
    assert main(make.split()[1:]) == 0
    ns: dict = {}
    exec("\n".join(_python_blocks("howto/transformer.md")), ns)
    printed = capsys.readouterr().out
    expected = re.search(r"# (certified \d+ \d+ \d+)", text).group(1)
    assert expected in printed
    assert (tmp_path / "learned.json").exists()


def test_readme_keeps_two_quickstart_commands_and_links_to_pages_that_exist():
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", quick, re.S).group(1)
    assert len(block.strip().splitlines()) == 2
    assert block.strip().splitlines()[1].endswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\npython -m pytest\n" in ci and "mkdocs build --strict" in ci
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).exists(), link


def test_test_counts_live_only_in_the_readme():
    """The counts and times of the test suite are kept in one place, the README's Quickstart
    paragraph (docs: explanation/tests.md#the-quickstart-measured); no docs page repeats them."""
    stale = [(p.relative_to(ROOT), m) for p in sorted(DOCS.rglob("*.md"))
             for m in re.findall(r"\b\d+ passed\b", p.read_text())]
    stale += re.findall(r"\b\d+ tests\b", (DOCS / "explanation" / "tests.md").read_text())
    assert not stale, stale
    quick = (ROOT / "README.md").read_text().split("## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"\b\d+ tests\b", quick) and ".ci/run" in quick


# -- docstrings and comments cite docs pages that exist ----------------------------------------

_CITE = re.compile(r"docs: ([\w./-]+\.md)(?:#([\w-]+))?")
_README_CITE = re.compile(r"README(?:,|'s table \()?\s+\"([^\"]+)\"")


def _anchors(page: Path) -> set:
    """The ids mkdocs gives the page's headings (the toc extension's default slugify)."""
    from markdown.extensions.toc import slugify
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slugify(re.sub(r"[`*]", "", h), "-") for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_docstrings_cite_docs_pages_that_exist():
    """Every ``docs: PAGE[#anchor]`` citation in exactlearn/, proofs_check/, hooks/ and tests/
    names a page of docs/ (and a heading of it), and every README section cited by its quoted
    title is a heading of the README."""
    readme = {h.strip() for h in re.findall(r"^#{2,3} (.+)$", (ROOT / "README.md").read_text(), re.M)}
    cited, bad = 0, []
    for path in sorted(p for d in ("exactlearn", "proofs_check", "hooks", "tests")
                       for p in (ROOT / d).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        for page, anchor in _CITE.findall(text):
            cited += 1
            if not (DOCS / page).is_file():
                bad.append(f"{where}: docs: {page} does not exist")
            elif anchor and anchor not in _anchors(DOCS / page):
                bad.append(f"{where}: docs: {page} has no heading #{anchor}")
        for section in _README_CITE.findall(text):
            if " ".join(section.split()) not in readme:
                bad.append(f'{where}: README has no section "{section}"')
    assert not bad, "\n".join(bad)
    assert cited > 50


def test_the_fast_profile_is_documented_and_the_quickstart_still_runs_everything():
    """``-m "not slow"`` is the developer's fast profile (docs: explanation/tests.md); the
    Quickstart's ``python -m pytest`` selects no marker, so it runs the slow tests too."""
    import tomllib
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    opts = conf["addopts"].split()
    assert "--strict-markers" in opts and "-m" not in opts
    assert any(m.startswith("slow:") for m in conf["markers"])
    quick = (ROOT / "README.md").read_text().split("## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    assert "not slow" not in quick
    for page in ("README.md", "docs/explanation/tests.md"):
        assert 'python -m pytest -m "not slow"' in (ROOT / page).read_text(), page


if __name__ == "__main__":
    refresh_cli_reference()


PARAMETER_TABLES = ["exactlearn.api:learn", "exactlearn.generate:random_model",
                    "exactlearn.adapters.torch:black_box", "exactlearn.adapters.torch:true_heads",
                    "exactlearn.adapters.flax:black_box", "exactlearn.adapters.flax:true_heads",
                    "exactlearn.strategies.real.eta:estimate_noise",
                    "exactlearn.strategies.transformer.learn:learn_transformer",
                    "exactlearn.model:MultiHeadAttention", "exactlearn.oracle:Oracle",
                    "exactlearn.transformer_model:random_transformer",
                    "exactlearn.transformer_model:OneLayerTransformer"]


@pytest.mark.parametrize("target", PARAMETER_TABLES)
def test_public_callables_document_every_parameter(target):
    """The API reference renders a parameter table from a numpy-style ``Parameters`` section
    (review helper-78: only ``learn`` had one); every parameter of the signature is named
    in it (``a, b : int`` names two)."""
    import inspect
    from importlib import import_module
    module, name = target.split(":")
    obj = getattr(import_module(module), name)
    doc = inspect.getdoc(obj) or ""
    assert "\nParameters\n----------\n" in doc, target
    section = re.split(r"\n(?:Returns|Raises|Examples)\n-+\n", doc.split(
        "\nParameters\n----------\n", 1)[1])[0]
    named = set()
    for line in section.splitlines():
        if line and not line.startswith(" "):
            named.update(n.strip() for n in line.split(":")[0].split(","))
    sig = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    wanted = {p for p in sig.parameters if p != "self"}
    assert wanted <= named, (target, sorted(wanted - named))
