"""docs/tutorial.ipynb is executed, so the tutorial cannot rot.

docs/tutorial.md is the one source of the tutorial; docs/tutorial.ipynb is its jupytext
conversion (docs/tutorial_notebook.py), and tests/test_docs.py checks that the committed
notebook is exactly that conversion (outputs stripped). Here the notebook is run as a
reader would run it: nbclient executes its cells in order in one ipykernel of this venv,
in a fresh folder (files written by one cell are read by the next), with this venv's
``nqf`` first on PATH. Its ``%%bash`` cells run with ``set -euo pipefail``, so a failing
command fails its cell even inside a pipe. A cell that fails fails the test with the
cell's source and traceback; the figures and tables the tutorial says it writes must
exist and be non-empty. The whole module is `slow` (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # executes the tutorial

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = ROOT / "docs" / "tutorial.md"
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"
BASH = "%%bash\n"


def strict_bash(notebook) -> None:
    """Make every %%bash cell stop at the first failing command, pipes included."""
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.source.startswith(BASH):
            cell.source = BASH + "set -euo pipefail\n" + cell.source[len(BASH) :]


@pytest.mark.timeout(900)
def test_tutorial_runs(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    strict_bash(notebook)
    # A kernelspec of this venv's Python under the name the notebook asks for (python3), found
    # first through JUPYTER_PATH: whatever kernels the machine has installed are not used.
    jupyter = tmp_path / "jupyter"
    spec = jupyter / "kernels" / notebook.metadata.kernelspec.name
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "nqf", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))  # no user profile or startup files
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # the kernel's debugger: no frozen-modules note
    work = tmp_path / "work"
    work.mkdir()

    client = NotebookClient(notebook, timeout=600, kernel_name=notebook.metadata.kernelspec.name)
    client.execute(cwd=str(work))  # raises CellExecutionError, with the cell and its traceback

    outputs = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in outputs), "a code cell was not executed"
    for name in re.findall(r"`([\w.-]+\.(?:png|csv|json))`", MARKDOWN.read_text(encoding="utf-8")):
        matches = list(work.rglob(name))
        assert matches and all(p.stat().st_size > 0 for p in matches), f"the tutorial's {name} was not written"
