"""What identifies the code that computed a result: a hash of the source files that compute it.

A record is keyed by its config and by this identity, not by the package version, so a
changed line of the theory (or of training, or of an experiment's run) recomputes, and an
unchanged tree reuses its records whatever the version says. The hash is deliberately
blunt: any file that can change a number, comments included.

Hashed: every ``*.py`` under the ``nqf`` package folder, by relative path and bytes, except
the presentation layers ``report/`` (the library's figures) and ``cli/`` (parsing and
printing); and, when the paper's package ``nqf_paper`` (this repository's reproduction, a
user of nqf) is installed beside it, its files too, except its figures and HTML page
(``<experiment>/figures.py``, ``report_page.py``), which never change a stored number. The
identity reads ``<package version>+code.<16 hex>``. (One identity for every record, not one
per experiment: an experiment's runs call into most of the library, so a per-experiment list
of the files it depends on would have to be kept by hand or traced.)
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from pathlib import Path

from nqf.core.version import __version__

# Folders of the nqf package whose files never change a stored number.
PRESENTATION = ("report", "cli")
# The paper's package, hashed with nqf when installed, and its files that never change a stored
# number: its figures (one file in each experiment's folder) and its HTML page
PAPER_PACKAGE = "nqf_paper"
PAPER_PRESENTATION = ("figures.py", "report_page.py")


def source_files(package_dir: Path) -> list[Path]:
    """The hashed files of one package folder (``nqf`` or the paper's), sorted by their path
    relative to ``package_dir``."""
    paper = package_dir.name == PAPER_PACKAGE
    files = []
    for path in package_dir.rglob("*.py"):
        rel = path.relative_to(package_dir)
        if "__pycache__" in rel.parts or (paper and rel.name in PAPER_PRESENTATION):
            continue
        if not paper and rel.parts[0] in PRESENTATION:
            continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(package_dir).as_posix())


def code_hash(*package_dirs: Path) -> str:
    """SHA-256 (hex) over (relative path, NUL, size, NUL, bytes) of each hashed file of each
    package folder in turn (the paper's paths prefixed by its name)."""
    digest = hashlib.sha256()
    for package_dir in package_dirs:
        prefix = f"{PAPER_PACKAGE}/" if package_dir.name == PAPER_PACKAGE else ""
        for path in source_files(package_dir):
            data = path.read_bytes()
            digest.update((prefix + path.relative_to(package_dir).as_posix()).encode() + b"\0")
            digest.update(str(len(data)).encode() + b"\0" + data)
    return digest.hexdigest()


def package_dirs() -> tuple[Path, ...]:
    """The folders the identity hashes: nqf's, and the paper's package where it is installed
    (found without importing it)."""
    found = importlib.util.find_spec(PAPER_PACKAGE)
    paper = () if found is None or found.origin is None else (Path(found.origin).resolve().parent,)
    return (Path(__file__).resolve().parent.parent, *paper)


@functools.cache
def code_identity() -> str:
    """``<version>+code.<first 16 hex of code_hash>`` of the code that is running (once per process)."""
    return f"{__version__}+code.{code_hash(*package_dirs())[:16]}"


def check_same_code(driver_code: str) -> None:
    """Refuse to compute in a worker whose nqf differs from the driver's.

    Records are keyed by the driver's code identity; a worker on other code (another
    checkout on a cluster node, or files edited while a run was going) would store its
    numbers under a key that claims they came from the driver's code.
    """
    from nqf.core.errors import NqfError

    mine = code_identity()
    if mine != driver_code:
        raise NqfError(
            f"this worker runs nqf {mine} but the driver runs {driver_code}: every worker needs the same nqf "
            "source (install the same checkout everywhere, and do not edit it while a run is going)"
        )
