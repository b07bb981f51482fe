"""The built documentation site, as a reader's browser gets it (docs: explanation/tests.md).

One ``mkdocs build --strict`` of the real ``mkdocs.yml`` into a temporary folder (the notebooks
executed, as in .ci/run; about 40 s from a fresh clone, about 10 s once mkdocs-jupyter's cache in
``.cache/`` holds them), then the pages' HTML is read:

- every formula reaches the browser as TeX inside an ``arithmatex`` element, which the vendored
  KaTeX typesets (docs/javascripts/katex-init.js): no raw ``$$``, ``\\(`` or ``\\[`` is left in
  any page's text, and each notebook's display formulas are all there;
- every script and stylesheet a page loads is a file of the site (the site works offline, and a
  ``<script src="">``, the MathJax loader that nothing filled in, fails);
- every image has an alt text of its own (nbconvert's placeholder for notebook figures is
  replaced from each cell's ``metadata.alt`` by hooks/notebooks.py);
- the Python API page shows a parameter table for ``learn`` and the fields of ``LearnResult``,
  with no raw Sphinx roles (``:mod:``, ``:class:``, ...).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# text a browser shows as it is: not code, not a script, not a formula left for KaTeX
_SKIP_TAGS = {"script", "style", "code", "pre", "textarea", "noscript"}
_RAW_MATH = ("$$", "\\(", "\\)", "\\[", "\\]")


class _Page(HTMLParser):
    """The visible text outside code and formulas, the scripts, stylesheets and formulas."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.scripts: list[str | None] = []     # src of each <script>, None for inline ones
        self.styles: list[str] = []             # href of each <link rel="stylesheet">
        self.formulas: list[str] = []           # the TeX of each arithmatex element
        self.alts: list[str | None] = []        # the alt text of each <img>
        self._skip: list = []                   # [tag, nesting, is_formula] while inside one

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts.append(a.get("src"))
        if tag == "img":
            self.alts.append(a.get("alt"))
        if tag == "link" and "stylesheet" in (a.get("rel") or "").split():
            self.styles.append(a.get("href") or "")
        if self._skip:
            if tag == self._skip[0]:
                self._skip[1] += 1
            return
        formula = "arithmatex" in (a.get("class") or "").split()
        if tag in _SKIP_TAGS or formula:
            self._skip = [tag, 1, formula]
            if formula:
                self.formulas.append("")

    def handle_endtag(self, tag):
        if self._skip and tag == self._skip[0]:
            self._skip[1] -= 1
            if self._skip[1] == 0:
                self._skip = []

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)
        elif self._skip[2]:
            self.formulas[-1] += data


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                          "--site-dir", str(out)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return out


def _pages(site: Path) -> list[Path]:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20, pages
    return pages


def test_no_raw_formula_in_any_page_text(site):
    bad = {}
    for path in _pages(site):
        text = "".join(_parse(path).text)
        found = [raw for raw in _RAW_MATH if raw in text]
        if found:
            i = min(text.index(raw) for raw in found)
            bad[str(path.relative_to(site))] = text[max(0, i - 60):i + 60]
    assert not bad, f"raw TeX in page text (not typeset): {bad}"


def _display_formulas(notebook: Path) -> int:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return sum("".join(c["source"]).count("$$") // 2 for c in cells if c["cell_type"] == "markdown")


def test_every_notebook_formula_reaches_katex(site):
    total = 0
    for nb in sorted((ROOT / "docs" / "tutorials").glob("*.ipynb")):
        page = _parse(site / "tutorials" / nb.stem / "index.html")
        display = [f for f in page.formulas if f.startswith("\\[") and f.endswith("\\]")]
        assert len(display) == _display_formulas(nb), nb.name
        total += len(display)
    assert total >= 1
    first = _parse(site / "tutorials" / "01-reading-heads" / "index.html").formulas
    assert any("\\mathrm{softmax}_i" in f for f in first)


def test_every_script_and_stylesheet_is_a_file_of_the_site(site):
    for path in _pages(site):
        page = _parse(path)
        assert "" not in page.scripts, f"{path.relative_to(site)}: a <script src=\"\">"
        for url in [s for s in page.scripts if s is not None] + page.styles:
            assert url and not urlparse(url).scheme and not url.startswith("//"), (
                f"{path.relative_to(site)} loads {url!r} from outside the site")
            local = urlparse(url).path          # 404.html links from the site's root
            target = site / local.lstrip("/") if local.startswith("/") else path.parent / local
            assert target.resolve().is_file(), (
                f"{path.relative_to(site)}: {url} is not in the site")
        srcs = [Path(urlparse(s).path).name for s in page.scripts if s]
        assert {"katex.min.js", "auto-render.min.js", "katex-init.js"} <= set(srcs), path
    css = (site / "javascripts" / "katex" / "katex.min.css").read_text()
    fonts = re.findall(r"url\((fonts/[^)]+)\)", css)
    assert fonts and all((site / "javascripts" / "katex" / f).is_file() for f in fonts)


def test_every_image_has_an_alt_text(site):
    placeholder = "No description has been provided for this image"     # nbconvert's
    bad, images = [], 0
    for path in _pages(site):
        for alt in _parse(path).alts:
            images += 1
            if not (alt or "").strip() or alt == placeholder:
                bad.append(f"{path.relative_to(site)}: {alt!r}")
    for alt in re.findall(r"!\[([^\]]*)\]\(", (ROOT / "README.md").read_text()):
        images += 1                 # the README is not a page of the site
        if not alt.strip():
            bad.append(f"README.md: {alt!r}")
    assert not bad, bad
    assert images >= 11          # the README's figure, the docs' two and the notebooks' nine


def _api_section(site: Path, name: str) -> str:
    """The HTML of one object's documentation on the Python API page."""
    html = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    start = html.index(f'id="{name}"')
    nxt = html.find('<div class="doc doc-object doc-', start + 1)
    return html[start:nxt if nxt > 0 else len(html)]


def _table_rows(section: str, title: str) -> list[str]:
    """The names in the first column of the section's table headed ``title``."""
    i = section.index(f"<span class=\"doc-section-title\">{title}</span>")
    table = section[i:section.index("</table>", i)]
    cells = re.findall(r"<tr[^>]*>\s*<td>(.*?)</td>", table, re.S)
    return [re.sub(r"<[^>]+>|\s", "", cell) for cell in cells]


def test_api_page_has_a_parameter_table_for_learn(site):
    rows = _table_rows(_api_section(site, "exactlearn.api.learn"), "Parameters:")
    import inspect

    from exactlearn.api import learn
    named = [n for n, p in inspect.signature(learn).parameters.items()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert [r for r in rows if not r.startswith("*")] == named


def test_api_page_lists_the_fields_of_learn_result(site):
    import dataclasses

    from exactlearn.api import LearnResult
    rows = _table_rows(_api_section(site, "exactlearn.api.LearnResult"), "Attributes:")
    assert set(rows) >= {f.name for f in dataclasses.fields(LearnResult)}


def test_api_page_shows_no_raw_sphinx_roles(site):
    text = "".join(_parse(site / "reference" / "api" / "index.html").text)
    roles = re.findall(r":(?:mod|class|func|meth|attr|data|exc|obj|ref):", text)
    assert not roles, f"{len(roles)} raw roles on the API page"
