"""What a user sees of the package before any computation: ``python -m nqf`` and the ``nqf``
console script answer ``--version`` and ``--help`` (exit 0, without loading JAX), and the
citation metadata parses and names the paper and the version that ``pyproject.toml`` gives.

The commands run as a user runs them, in a fresh interpreter. ``tests/test_cache.py`` checks
that ``nqf --help`` leaves JAX unloaded by calling ``nqf.cli.main`` inside ``python -c``; here
the command is the real ``python -m nqf``, and ``-X importtime`` lists every module it imports.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import nqf

pytestmark = pytest.mark.slow  # starts the console script

ROOT = Path(__file__).resolve().parents[1]
NQF = Path(sys.executable).parent / "nqf"
ARXIV = "2608.13335"


def _pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _run(*command: str | Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("command", [(sys.executable, "-m", "nqf"), (NQF,)], ids=["python -m nqf", "console script"])
def test_version_prints_the_installed_version(command):
    if command == (NQF,):
        assert NQF.exists(), f"console script {NQF} is missing: pip install -e . first"
    result = _run(*command, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"nqf {importlib.metadata.version('nqf')}\n"
    assert result.stderr == ""


def test_the_versions_agree():
    """The installed metadata, the package's fallback string and pyproject.toml say the same
    (an editable install made before a version bump would not: reinstall)."""
    assert importlib.metadata.version("nqf") == nqf.__version__ == _pyproject_version()


def _imported(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime -m nqf ARGS``; the result and the names of the modules it imported."""
    result = _run(sys.executable, "-X", "importtime", "-m", "nqf", *args)
    names = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    return result, names


@pytest.mark.parametrize("args", [("--help",), ("--version",)], ids=["--help", "--version"])
def test_python_m_nqf_does_not_import_jax(args):
    result, imported = _imported(*args)
    assert result.returncode == 0, result.stderr
    # the listing does see the run's own imports (so an empty check cannot pass)
    assert {"nqf", "nqf.cli", "typer"} <= imported, sorted(imported)
    loaded = sorted(name for name in imported if name.split(".")[0] in ("jax", "jaxlib", "numpy"))
    assert not loaded, loaded
    if args == ("--help",):
        assert "predict" in result.stdout and "--version" in result.stdout, result.stdout


def test_citation_cff_parses_and_names_the_paper():
    yaml = pytest.importorskip("yaml")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0"
    assert citation["type"] == "software"
    assert str(citation["version"]) == _pyproject_version()
    paper = citation["preferred-citation"]
    assert paper["type"] == "article"
    assert paper["title"].startswith("Neural Quadratic Forms")
    assert any(ARXIV in str(identifier["value"]) for identifier in paper["identifiers"])
