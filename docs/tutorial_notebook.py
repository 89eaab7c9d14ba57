"""docs/tutorial.ipynb is generated from docs/tutorial.md: the markdown is the one source.

    .venv/bin/python docs/tutorial_notebook.py           # rewrite docs/tutorial.ipynb
    .venv/bin/python docs/tutorial_notebook.py --check   # exit 1 if it differs from the conversion

jupytext turns the markdown into a notebook: ```python blocks become code cells, ```bash
blocks code cells with the ``%%bash`` cell magic, the text between them markdown cells.
The notebook has no outputs, cell ids numbered in order and only a kernelspec as metadata,
so the conversion is byte for byte reproducible: ``tests/test_tutorial.py`` checks that the
committed notebook equals it, then executes the notebook.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
MARKDOWN = DOCS / "tutorial.md"
NOTEBOOK = DOCS / "tutorial.ipynb"

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def notebook_text(markdown: str) -> str:
    """The notebook (ipynb JSON text) of the tutorial's markdown."""
    import jupytext

    notebook = jupytext.reads(markdown, fmt="md")
    notebook.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    for number, cell in enumerate(notebook.cells, 1):
        cell.id = f"cell-{number:02d}"  # jupytext draws random ids
        cell.metadata = {}
    text = jupytext.writes(notebook, fmt="ipynb")
    return text if text.endswith("\n") else text + "\n"


def main(argv: list[str]) -> int:
    expected = notebook_text(MARKDOWN.read_text(encoding="utf-8"))
    if argv == ["--check"]:
        if NOTEBOOK.exists() and NOTEBOOK.read_text(encoding="utf-8") == expected:
            return 0
        print(f"{NOTEBOOK} is not the conversion of {MARKDOWN}: run python {Path(__file__).as_posix()}")
        return 1
    if argv:
        print(__doc__)
        return 2
    NOTEBOOK.write_text(expected, encoding="utf-8")
    print(f"wrote {NOTEBOOK}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
