// Typeset every formula of the site with the vendored KaTeX (javascripts/katex/NOTICE).
// pymdownx.arithmatex (generic: true) leaves each formula of a Markdown page as the TeX
// source in <span class="arithmatex">\(...\)</span> or <div class="arithmatex">\[...\]</div>;
// hooks/notebooks.py puts the formulas of the notebooks in the same form. Only those
// elements are typeset, so a "$" or "\(" elsewhere in a page stays text.
// document$ is mkdocs-material's page-load observable (it also fires on instant navigation).
document$.subscribe(function () {
  document.querySelectorAll(".arithmatex").forEach(function (el) {
    renderMathInElement(el, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    });
  });
});
