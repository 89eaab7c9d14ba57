// MathJax for the $...$ and $$...$$ of the pages (pymdownx.arithmatex, generic mode: it wraps
// them in \(...\) and \[...\] inside elements of class "arithmatex"). Typeset again after each
// instant navigation of mkdocs-material (document$).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};

document$.subscribe(() => {
  MathJax.startup.output.clearCache();
  MathJax.typesetClear();
  MathJax.texReset();
  MathJax.typesetPromise();
});
