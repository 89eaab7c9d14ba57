"""``nqf store ls`` and ``nqf store gc``: what a results store holds, and pruning what is stale.

A record is *current* when it was computed by the running code (its ``nqf_code`` equals
:func:`nqf.store.code.code_identity`), *stale* when another code identity computed it (it
is never read again by this code: its key differs), and *damaged* when it fails the
store's checks (unreadable, edited, older format, foreign file). ``gc`` removes stale and
damaged files, and leftovers of interrupted writes and claims, but only those no live
process holds: a key whose claim another process holds right now is left alone.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from nqf.core.errors import NqfError
from nqf.store.results import ResultsStore


@dataclass(frozen=True)
class StoreSummary:
    """Counts per experiment: ``{experiment: {"current": n, "stale": n, "damaged": n}}``,
    the stale records' code identities with their counts, and the bytes on disk."""

    root: Path
    code: str
    experiments: dict[str, dict[str, int]]
    stale_codes: dict[str, int]
    problems: tuple[str, ...]
    bytes_on_disk: int
    leftovers: int = 0


@dataclass
class GcResult:
    removed: list[Path] = field(default_factory=list)
    kept_busy: list[Path] = field(default_factory=list)
    bytes_freed: int = 0


def find_store(path: str | os.PathLike) -> Path:
    """The store root at ``path``: a folder with ``runs/`` in it, or a sweep's ``path/store``."""
    root = Path(path)
    if (root / "runs").is_dir():
        return root
    if (root / "store" / "runs").is_dir():
        return root / "store"
    if not root.exists():
        raise NqfError(f"{root}: no such folder")
    raise NqfError(f"{root}: not a results store (no runs/ folder in it or in {root / 'store'})")


def _entries(root: Path):
    """(experiment, path) of every file under ``root/runs/<experiment>/``."""
    runs = root / "runs"
    for folder in sorted(runs.iterdir()):
        if folder.is_dir() and not folder.name.startswith("."):
            for path in sorted(folder.iterdir()):
                yield folder.name, path


def _leftover(path: Path) -> bool:
    return path.name.startswith(".") and path.name.endswith((".tmp", ".lock"))


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def summarise(path: str | os.PathLike) -> StoreSummary:
    """Read every record once and classify it (see the module docstring)."""
    root = find_store(path)
    store = ResultsStore(root)
    counts: dict[str, Counter] = {}
    stale: Counter = Counter()
    size = leftovers = 0
    for experiment, entry in _entries(root):
        size += _size(entry)
        if _leftover(entry):
            leftovers += 1
            continue
        tally = counts.setdefault(experiment, Counter())
        document = store._read(entry, experiment) if entry.suffix == ".json" else None
        if document is None:
            if entry.suffix != ".json":
                store._problem(entry, "foreign file in the store")
            tally["damaged"] += 1
        elif document["nqf_code"] == store.code:
            tally["current"] += 1
        else:
            tally["stale"] += 1
            stale[document["nqf_code"]] += 1
    experiments = {name: {k: c[k] for k in ("current", "stale", "damaged")} for name, c in counts.items()}
    return StoreSummary(root, store.code, experiments, dict(stale), tuple(store.problems), size, leftovers)


def collect_garbage(path: str | os.PathLike, dry_run: bool = False) -> GcResult:
    """Remove stale and damaged records and unheld leftovers; with ``dry_run`` only list them."""
    root = find_store(path)
    store = ResultsStore(root)
    result = GcResult()
    for experiment, entry in _entries(root):
        if _leftover(entry):
            key = entry.name[1:].split(".", 1)[0]
        else:
            document = store._read(entry, experiment) if entry.suffix == ".json" else None
            if document is not None and document["nqf_code"] == store.code:
                continue
            key = entry.stem
        claim = store.claim(experiment, key) if _is_key(key) else None
        if _is_key(key) and claim is None:  # another process is computing or writing this key now
            result.kept_busy.append(entry)
            continue
        try:
            size = _size(entry)
            if not dry_run:
                _remove(entry)
            result.removed.append(entry)
            result.bytes_freed += size
        finally:
            if claim is not None:
                claim.release()
    if not dry_run:
        for folder in (root / "runs").iterdir():
            if folder.is_dir() and not folder.name.startswith(".") and not any(folder.iterdir()):
                folder.rmdir()  # an experiment with nothing left
    return result


def _is_key(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
