"""The store's key follows the code, not the package version; `nqf store ls|gc` see and prune the rest.

The code-hash test edits a copy of the package (one line of the theory) and reruns the real
CLI on it: every run is recomputed. An edit to the presentation layer (report/) recomputes
nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nqf
import nqf_paper
from nqf.store.code import code_hash, code_identity, source_files
from nqf.store.results import ResultsStore

pytestmark = pytest.mark.slow  # reruns the real command

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(nqf.__file__).resolve().parent
PAPER = Path(nqf_paper.__file__).resolve().parent


def _reproduce(package_parent: Path, out: Path) -> subprocess.CompletedProcess:
    code = (
        "import sys; from tests._toy_experiments import register; register(); "
        "from nqf.cli import main; main(sys.argv[1:])"
    )
    env = {**os.environ, "PYTHONPATH": f"{package_parent}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-c", code, "reproduce", "--only", "T1", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


def _copy_package(tmp_path: Path) -> Path:
    parent = tmp_path / "copy"
    shutil.copytree(PACKAGE, parent / "nqf", ignore=shutil.ignore_patterns("__pycache__"))
    return parent


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + line)


def test_a_changed_line_of_the_theory_recomputes_and_a_changed_figure_does_not(tmp_path):
    parent = _copy_package(tmp_path)
    out = tmp_path / "res"
    first = _reproduce(parent, out)
    assert "T1   toy sum: 3 runs (3 computed)" in first.stdout
    assert "T1   toy sum: 3 runs (3 stored)" in _reproduce(parent, out).stdout

    _append(parent / "nqf" / "report" / "style.py", "\n# a presentation change\n")
    assert "T1   toy sum: 3 runs (3 stored)" in _reproduce(parent, out).stdout

    # comments and docstrings never change a number: a comment and a docstring edited recompute nothing
    maps = parent / "nqf" / "theory" / "flow" / "maps.py"
    _append(maps, "\n# a comment on the theory\n")
    maps.write_text(maps.read_text().replace('"""', '"""An edited docstring. ', 1))
    assert "T1   toy sum: 3 runs (3 stored)" in _reproduce(parent, out).stdout

    _append(maps, "\n_A_CHANGED_LINE_OF_THE_THEORY = 1\n")
    assert "T1   toy sum: 3 runs (3 computed)" in _reproduce(parent, out).stdout

    listing = subprocess.run(
        [sys.executable, "-c", "from nqf.cli import main; main()", "store", "ls", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listing.returncode == 0, listing.stderr
    assert "T1                 3         3         0" in listing.stdout  # current, stale, damaged


def test_the_identity_hashes_path_and_bytes_of_the_computing_code_only(tmp_path):
    parent = _copy_package(tmp_path)
    copy = parent / "nqf"
    assert code_hash(copy) == code_hash(PACKAGE)
    # the paper's package, installed beside nqf, is part of the identity
    assert code_identity() == f"{nqf.__version__}+code.{code_hash(PACKAGE, PAPER)[:16]}"
    assert code_hash(PACKAGE, PAPER) != code_hash(PACKAGE)
    names = {p.relative_to(copy).parts[0] for p in source_files(copy)}
    assert {"theory", "training", "architectures", "core", "store"} <= names
    assert not names & {"report", "cli"}
    hashed = {p.relative_to(PAPER).as_posix() for p in source_files(PAPER)}
    assert "e1_staircase/__init__.py" in hashed and "e1_staircase/figures.py" not in hashed
    assert "report_page.py" not in hashed and "verdict.py" in hashed
    before = code_hash(copy)
    (copy / "theory" / "flow" / "maps.py").rename(copy / "theory" / "flow" / "maps2.py")  # same bytes, other path
    assert code_hash(copy) != before


def _nqf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "nqf"), *args], capture_output=True, text=True, timeout=120
    )


def test_store_ls_and_gc_through_the_command(tmp_path):
    root = tmp_path / "store"
    current = ResultsStore(root)
    current.put("E1", "a", {"x": 1}, {"y": 1.0})
    current.put("E1", "b", {"x": 2}, {"y": 2.0})
    old = ResultsStore(root, code="0.0.9+code.0000000000000000")
    old.put("E1", "a", {"x": 1}, {"y": 1.0})
    old.put("E2", "c", {"x": 1}, {"y": 1.0})
    (root / "runs" / "E1" / ("0" * 64 + ".json")).write_text("not json")
    (root / "runs" / "E1" / f".{'1' * 64}.12345.tmp").write_text("half a record")

    listing = _nqf("store", "ls", str(root))
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert "E1                 2         1         1" in lines
    assert "E2                 0         1         0" in lines
    assert "stale: 2 record(s) of code 0.0.9+code.0000000000000000" in lines
    assert any(line.startswith("problem: runs/E1/000") for line in lines)
    assert "leftovers: 1 temporary or lock file(s) of interrupted runs" in lines

    files_before = sorted(p for p in root.rglob("*") if p.is_file())
    dry = _nqf("store", "gc", "--dry-run", str(root))  # records of other code are kept without --other-code
    assert dry.returncode == 0 and "would remove 2 file(s)" in dry.stdout
    assert "kept 2 record(s) of other code (2 of 0.0.9+code.0000000000000000)" in dry.stdout
    dry = _nqf("store", "gc", "--dry-run", "--other-code", str(root))
    assert dry.returncode == 0 and "would remove 4 file(s)" in dry.stdout
    assert sorted(p for p in root.rglob("*") if p.is_file()) == files_before

    # A key another process is working on (its claim held) is left alone.
    busy = old.path("E2", old.key("E2", "c", {"x": 1}))
    with ResultsStore(root).claim("E2", busy.stem):
        held = _nqf("store", "gc", "--other-code", str(root))
    assert held.returncode == 0 and f"kept (in use by another process): {busy}" in held.stdout
    assert "removed 3 file(s)" in held.stdout
    done = _nqf("store", "gc", "--other-code", str(root))
    assert "removed 1 file(s)" in done.stdout

    assert current.get("E1", "a", {"x": 1}) == {"y": 1.0} and current.get("E1", "b", {"x": 2}) == {"y": 2.0}
    assert sorted(p.name for p in (root / "runs").iterdir()) == ["E1"]  # E2 emptied and removed
    again = _nqf("store", "ls", str(root))
    assert "E1                 2         0         0" in again.stdout and "stale:" not in again.stdout


def test_store_commands_refuse_what_is_not_a_store(tmp_path):
    for args in (("ls", str(tmp_path / "missing")), ("gc", str(tmp_path))):
        done = _nqf("store", *args)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
