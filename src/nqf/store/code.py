"""What identifies the code that computed a result: a hash of nqf's own source files.

A record is keyed by its config and by this identity, not by the package version, so a
changed line of the theory (or of training, or of an experiment's run) recomputes, and an
unchanged tree reuses its records whatever the version says. The hash is deliberately
blunt: any file of the package that can change a number, comments included.

Hashed: every ``*.py`` under the ``nqf`` package folder, by relative path and bytes, except
the presentation layers ``report/`` (the library's figures) and ``cli/`` (parsing and
printing), and the paper's figures and HTML page (``paper/<experiment>/figures.py``,
``paper/report_page.py``), which never change a stored number. The identity reads
``<package version>+code.<16 hex>``.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from nqf.core.version import __version__

# Folders of the package whose files never change a stored number.
PRESENTATION = ("report", "cli")
# ... and the paper's figures (one file in each experiment's folder) and its HTML page
PAPER_PRESENTATION = ("figures.py", "report_page.py")


def source_files(package_dir: Path) -> list[Path]:
    """The hashed files, sorted by their path relative to ``package_dir``."""
    files = []
    for path in package_dir.rglob("*.py"):
        rel = path.relative_to(package_dir)
        if rel.parts[0] in PRESENTATION or "__pycache__" in rel.parts:
            continue
        if rel.parts[0] == "paper" and rel.name in PAPER_PRESENTATION:
            continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(package_dir).as_posix())


def code_hash(package_dir: Path) -> str:
    """SHA-256 (hex) over (relative path, NUL, size, NUL, bytes) of each hashed file."""
    digest = hashlib.sha256()
    for path in source_files(package_dir):
        data = path.read_bytes()
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        digest.update(str(len(data)).encode() + b"\0" + data)
    return digest.hexdigest()


@functools.cache
def code_identity() -> str:
    """``<version>+code.<first 16 hex of code_hash>`` of the nqf that is running (once per process)."""
    package_dir = Path(__file__).resolve().parent.parent
    return f"{__version__}+code.{code_hash(package_dir)[:16]}"


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
