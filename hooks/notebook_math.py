"""mkdocs hook: the notebooks' formulas in the form of the Markdown pages' (docs: explanation/tests.md).

mkdocs-jupyter renders a notebook's Markdown cells with nbconvert, which leaves ``$$...$$`` and
``$...$`` as raw text and loads MathJax 2 from ``custom_mathjax_url`` (empty unless set: a
``<script src="">``).  The site typesets with the vendored KaTeX instead
(docs/javascripts/katex/NOTICE), and KaTeX reads what ``pymdownx.arithmatex`` (``generic: true``)
writes: ``<span class="arithmatex">\\(...\\)</span>``.  This hook, run on every page's HTML
(``on_page_content``), rewrites each notebook formula into that form and drops the MathJax 2
loader, outside ``<code>`` and ``<pre>``.  ``tests/test_site.py`` checks the built site: no raw
``$$``, ``\\(`` or ``\\[`` in any page's text and no script with an empty ``src``.
"""

from __future__ import annotations

import re

_LOADER = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->\n?", re.S)
_CELL = re.compile(r'(<div class="[^"]*\bjp-RenderedMarkdown\b[^"]*"[^>]*>)(.*?)(</div>)', re.S)
_CODE = re.compile(r"(<(code|pre)\b.*?</\2>)", re.S)
_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE = re.compile(r"(?<![\\$])\$(?=\S)([^$]+?)(?<=\S)\$(?!\$)")


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


def on_page_content(html: str, page, config, files) -> str:
    if not str(page.file.src_uri).endswith(".ipynb"):
        return html
    html = _LOADER.sub("", html)
    return _CELL.sub(lambda m: m.group(1) + _math(m.group(2)) + m.group(3), html)
