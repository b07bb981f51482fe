"""mkdocs hook: the notebooks' formulas and figures as the Markdown pages' (docs: explanation/tests.md).

mkdocs-jupyter renders a notebook's Markdown cells with nbconvert, which leaves ``$$...$$`` and
``$...$`` as raw text, loads MathJax 2 from ``custom_mathjax_url`` (empty unless set: a
``<script src="">``) and gives every output figure the alt text "No description has been
provided for this image".  This hook, run on each notebook page's HTML (``on_page_content``):

- rewrites each formula of a Markdown cell, outside ``<code>`` and ``<pre>``, into the form
  ``pymdownx.arithmatex`` (``generic: true``) writes for the Markdown pages,
  ``<span class="arithmatex">\\(...\\)</span>``, which the vendored KaTeX typesets
  (docs/javascripts/katex/NOTICE, docs/javascripts/katex-init.js), and drops the MathJax 2
  loader;
- gives the figures of a code cell the alt texts listed in that cell's metadata
  (``"alt": ["...", ...]``, one per figure, in order).  A cell whose figure count differs from
  its list keeps the placeholder.

``tests/test_site.py`` checks the built site: no raw ``$$``, ``\\(`` or ``\\[`` in any page's
text, no script with an empty ``src``, no image without a real alt text.
"""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path

_LOADER = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->\n?", re.S)
_CELL = re.compile(r'(<div class="[^"]*\bjp-RenderedMarkdown\b[^"]*"[^>]*>)(.*?)(</div>)', re.S)
_CODE = re.compile(r"(<(code|pre)\b.*?</\2>)", re.S)
_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE = re.compile(r"(?<![\\$])\$(?=\S)([^$]+?)(?<=\S)\$(?!\$)")
#: nbconvert's alt text for an output image that has none
PLACEHOLDER_ALT = 'alt="No description has been provided for this image"'


def _math(text: str) -> str:
    """Wrap the ``$$``/``$`` formulas of one Markdown cell's HTML, leaving code alone."""
    parts = _CODE.split(text)
    out = []
    for i in range(0, len(parts), 3):       # split: text, code element, tag name, text, ...
        plain = _DISPLAY.sub(r'<span class="arithmatex">\\[\1\\]</span>', parts[i])
        out.append(_INLINE.sub(r'<span class="arithmatex">\\(\1\\)</span>', plain))
        if i + 1 < len(parts):
            out.append(parts[i + 1])
    return "".join(out)


def _alt_texts(page_html: str, notebook: Path) -> str:
    """Put each code cell's ``metadata.alt`` on its figures, in order."""
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        alts = cell.get("metadata", {}).get("alt")
        start = page_html.find(f'id="cell-id={cell.get("id")}"')
        if not alts or start < 0:
            continue
        end = page_html.find('id="cell-id=', start + 1)
        end = len(page_html) if end < 0 else end
        part = page_html[start:end]
        if part.count(PLACEHOLDER_ALT) != len(alts):
            continue
        for alt in alts:
            part = part.replace(PLACEHOLDER_ALT, f'alt="{html_lib.escape(alt, quote=True)}"', 1)
        page_html = page_html[:start] + part + page_html[end:]
    return page_html


def on_page_content(html: str, page, config, files) -> str:
    if not str(page.file.src_uri).endswith(".ipynb"):
        return html
    html = _LOADER.sub("", html)
    html = _CELL.sub(lambda m: m.group(1) + _math(m.group(2)) + m.group(3), html)
    return _alt_texts(html, Path(page.file.abs_src_path))
