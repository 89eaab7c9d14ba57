"""The documentation's sources agree with each other and with the package (quick, no build).

`make docs` builds the site with --strict (CI runs it); these checks need no mkdocs:
the committed notebook is the conversion of the tutorial's markdown (one source, no
outputs in git), every public name of ``nqf`` has its entry in the API reference, and
every page of the navigation is a file of docs/ (or the generated CLI page).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import nqf

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _converter():
    spec = importlib.util.spec_from_file_location("tutorial_notebook", DOCS / "tutorial_notebook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_notebook_is_the_conversion_of_the_markdown():
    converter = _converter()
    expected = converter.notebook_text(converter.MARKDOWN.read_text(encoding="utf-8"))
    assert converter.NOTEBOOK.read_text(encoding="utf-8") == expected, (
        "docs/tutorial.ipynb is not the conversion of docs/tutorial.md (edit the markdown, then run "
        "`.venv/bin/python docs/tutorial_notebook.py`)"
    )


def test_notebook_has_every_block_as_a_code_cell_and_no_outputs():
    markdown = (DOCS / "tutorial.md").read_text(encoding="utf-8")
    fences = re.findall(r"^```(\w*)$", markdown, re.M)
    languages = fences[::2]  # the opening fences (each block opens and closes)
    assert set(languages) == {"python", "bash"}, f"blocks the notebook would not run: {set(languages)}"
    notebook = json.loads((DOCS / "tutorial.ipynb").read_text(encoding="utf-8"))
    code = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert len(code) == len(languages) >= 8
    assert [src.startswith("%%bash\n") for src in code] == [lang == "bash" for lang in languages]
    assert all(not cell.get("outputs") and cell.get("execution_count") is None for cell in notebook["cells"])


def test_every_public_name_is_in_the_api_reference():
    documented = set()
    for page in (DOCS / "api").glob("*.md"):
        documented.update(re.findall(r"^::: nqf\.(\w+)$", page.read_text(encoding="utf-8"), re.M))
    assert sorted(set(nqf.__all__) - documented) == [], "public names without an entry in docs/api/*.md"
    assert sorted(documented - set(nqf.__all__)) == [], "entries in docs/api/*.md that nqf does not export"


def test_navigation_pages_exist():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:") :]
    pages = re.findall(r":\s+([\w/.-]+\.md)\s*$", nav, re.M)
    assert "theory.md" in pages and "tutorial.md" in pages and "cli.md" in pages
    generated = {"cli.md"}  # docs/hooks/cli_reference.py writes it at build time
    assert [p for p in pages if p not in generated and not (DOCS / p).is_file()] == []


def test_dir_of_nqf_is_the_public_api():
    """``dir(nqf)`` lists the public names (and dunders), not what ``nqf/__init__.py`` imports for
    itself (issue 21: it showed Any, TYPE_CHECKING, annotations, importlib)."""
    import nqf

    names = dir(nqf)
    assert set(nqf.__all__) <= set(names) and len(nqf.__all__) <= 60  # the top level stays small
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib", "lazy_exports"} & set(names)
    assert {name for name in names if not name.startswith("__")} == set(nqf.__all__)


def _documented_paths() -> set[str]:
    found = set()
    for page in (DOCS / "api").glob("*.md"):
        found.update(re.findall(r"^::: (nqf\.[\w.]+)$", page.read_text(encoding="utf-8"), re.M))
    return found


def test_every_documented_path_resolves():
    import importlib

    for path in _documented_paths():
        module, _, name = path.rpartition(".")
        assert hasattr(importlib.import_module(module), name), path
