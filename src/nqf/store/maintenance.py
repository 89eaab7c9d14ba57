"""``nqf store ls`` and ``nqf store gc``: what a results store holds, and pruning what is stale.

A record is *current* when it was computed by the running code (its ``nqf_code`` equals
:func:`nqf.store.code.code_identity` of its experiment), *stale* when another code identity (or another
record format) computed it (this code never reads it again: its key differs), and
*damaged* when it fails the store's checks (unreadable, not JSON, edited, hashed to
another name).

``gc`` prunes only a folder nqf marked as its store (:data:`nqf.store.results.MARKER`; a
store of an older nqf is marked with ``adopt`` when ``runs/`` holds nothing but nqf's
files), and in it only files whose names nqf writes (:func:`nqf.store.results.nqf_file`):
damaged records, leftovers of interrupted writes and claims, and stale records only with
``other_code`` (another checkout may be running a sweep on the same store right now: its
finished records hold no claim, and its code is not this one). A key whose claim another
process holds right now is left alone. Anything else (foreign files, folders, symbolic
links, FIFOs, sockets, devices) is reported as a problem and never touched: nothing is
opened through a symbolic link, and nothing but a regular file is opened at all.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

from nqf.core.errors import NqfError
from nqf.store.results import (
    FORMAT,
    FORMAT_VERSION,
    MARKER,
    NOT_A_RECORD,
    UNREAD,
    ResultsStore,
    experiment_folders,
    file_kind,
    folder_entries,
    foreign_entries,
    nqf_file,
    read_marker,
    write_marker,
)

# what tells a file apart from its replacement or a rewrite (``_same``)
_IDENTITY = attrgetter("st_dev", "st_ino", "st_size", "st_mtime_ns", "st_mode")


@dataclass(frozen=True)
class StoreSummary:
    """Counts per experiment: ``{experiment: {"current": n, "stale": n, "damaged": n}}``,
    the stale records' code identities with their counts, and the bytes on disk.

    ``unmarked`` is empty for a marked store, else why it is not one (``"missing"`` when
    there is no marker): such a folder is only listed, ``gc`` refuses it.
    """

    root: Path
    code: str
    experiments: dict[str, dict[str, int]]
    stale_codes: dict[str, int]
    problems: tuple[str, ...]
    bytes_on_disk: int
    leftovers: int = 0
    unmarked: str = ""


@dataclass
class GcResult:
    removed: list[Path] = field(default_factory=list)
    kept_busy: list[Path] = field(default_factory=list)
    kept_other_code: list[Path] = field(default_factory=list)
    other_codes: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    adopted: bool = False


def find_store(path: str | os.PathLike) -> Path:
    """The store root at ``path``: a folder with the store marker or ``runs/`` in it, or a sweep's ``path/store``."""
    root = Path(path)
    for candidate in (root, root / "store"):
        if (candidate / MARKER).exists() or (candidate / "runs").is_dir():
            return candidate
    if not root.exists():
        raise NqfError(f"{root}: no such folder")
    raise NqfError(f"{root}: not a results store (no runs/ folder in it or in {root / 'store'})")


def _mode(name: str, dir_fd: int) -> int | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None


def _foreign(mode: int) -> str:
    """Why an entry of an experiment folder named as nqf names files is still not one of them ("" if it is)."""
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISLNK(mode):
        return "a symbolic link stands where nqf keeps a file (not followed)"
    if stat.S_ISDIR(mode):
        return "a folder stands where nqf keeps a file"
    return f"a {file_kind(mode)} stands where nqf keeps a file (not opened)"


def _judge(store: ResultsStore, folder_fd: int, path: Path, experiment: str, action: str) -> tuple[str, str]:
    """``(state, code)`` of one record file: state is current, stale, damaged (reported), gone, or
    foreign (JSON that is no nqf record: named as nqf names records, yet not nqf's; the caller
    reports it, as it reports foreign files, and ``gc`` leaves it alone)."""
    try:
        document = store._load(path, action, folder_fd)
    except FileNotFoundError:
        return "gone", ""
    if document is UNREAD:
        return "damaged", ""
    if isinstance(document, dict) and document.get("format") == FORMAT:
        version = document.get("format_version")
        if version != FORMAT_VERSION:  # written by an older or newer nqf: another code's record
            code = document.get("nqf_code") or document.get("nqf_version")
            return "stale", f"{code if isinstance(code, str) else 'unknown'} (record format {version!r})"
    message = store._header_problem(document, path, experiment)
    if message == NOT_A_RECORD:
        return "foreign", ""
    if message:
        store._problem(path, message, action)
        return "damaged", ""
    return ("current" if document["nqf_code"] == store.code_of(experiment) else "stale"), document["nqf_code"]


def summarise(path: str | os.PathLike) -> StoreSummary:
    """Read every record once and classify it (see the module docstring). Reads only: an
    unmarked folder is listed too (``unmarked`` says why it is not a store)."""
    root = find_store(path)
    _, unmarked = read_marker(root)
    store = ResultsStore(root)
    counts: dict[str, Counter] = {}
    stale: Counter = Counter()
    size = leftovers = 0

    def problem(where: Path, message: str) -> None:
        store._problem(where, message)

    for experiment, folder_fd in experiment_folders(root, problem):
        tally = counts.setdefault(experiment, Counter())
        for name, info in folder_entries(folder_fd):
            entry = root / "runs" / experiment / name
            size += info.st_size if stat.S_ISREG(info.st_mode) else 0
            known = nqf_file(name)
            if known is None:
                problem(entry, f"foreign {file_kind(info.st_mode)} in the store")
                continue
            why = _foreign(info.st_mode)
            if why:
                problem(entry, why)
                continue
            if known[0] != "record":
                leftovers += 1
                continue
            state, code = _judge(store, folder_fd, entry, experiment, "skipped")
            if state == "foreign":  # not nqf's: said once, counted nowhere (gc leaves it alone)
                problem(entry, NOT_A_RECORD)
                continue
            if state == "gone":
                continue
            tally[state] += 1
            if state == "stale":
                stale[code] += 1
    experiments = {name: {k: c[k] for k in ("current", "stale", "damaged")} for name, c in counts.items()}
    return StoreSummary(root, store.code, experiments, dict(stale), tuple(store.problems), size, leftovers, unmarked)


def _require_marker(root: Path, path: str | os.PathLike, adopt: bool, dry_run: bool) -> bool:
    """Refuse (NqfError) a folder that is not a marked nqf store; with ``adopt`` mark one
    whose ``runs/`` holds nothing but nqf's files. True when it was (or would be) adopted."""
    _, why = read_marker(root)
    if not why:
        return False
    if "format version" in why:
        raise NqfError(f"{root}: {why} (another nqf made this store: prune it with that nqf); nothing removed")
    if why != "missing":
        raise NqfError(
            f"{root}: {why}; nothing removed (gc prunes only a folder nqf marked as its store; "
            f"if this is an nqf store, remove {root / MARKER} and run `nqf store gc --adopt {path}`)"
        )
    if not adopt:
        raise NqfError(
            f"{root} is not marked as an nqf results store (no {MARKER}); nothing removed. If an older nqf "
            f"made it, `nqf store gc --adopt {path}` marks it (only when runs/ holds nothing but nqf's files)"
        )
    foreign = foreign_entries(root)
    if foreign:
        raise NqfError(
            f"{root} cannot be adopted as an nqf store: {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} "
            f"under runs/ that nqf does not write, first {foreign[0]}; nothing removed or marked"
        )
    if not dry_run:
        write_marker(root)
    return True


def _busy(name: str, folder_fd: int) -> bool:
    """Whether another process holds the claim whose lock file is ``name`` (changes nothing)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
    except FileNotFoundError:
        return False
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NqfError(f"{name}: a symbolic link stands where a claim's lock file goes") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NqfError(f"{name}: not a regular file where a claim's lock file goes")
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return True
        raise
    finally:
        os.close(fd)
    return False


def _same(name: str, folder_fd: int, before: os.stat_result) -> bool:
    """Whether ``name`` is still the very file ``before`` describes (not rewritten or replaced since)."""
    try:
        now = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return _IDENTITY(now) == _IDENTITY(before)


def collect_garbage(
    path: str | os.PathLike, dry_run: bool = False, other_code: bool = False, adopt: bool = False
) -> GcResult:
    """Remove damaged records, unheld leftovers and (with ``other_code``) stale records of a
    marked store; with ``dry_run`` only list them. ``adopt`` marks an unmarked store first
    when ``runs/`` holds nothing but nqf's files. Raises NqfError, removing nothing, for a
    folder that is not a marked store."""
    root = find_store(path)
    result = GcResult()
    result.adopted = _require_marker(root, path, adopt, dry_run)
    store = ResultsStore(root)
    action = "left alone"
    other: Counter = Counter()

    def problem(where: Path, message: str) -> None:
        store._problem(where, message, action)

    for experiment, folder_fd in experiment_folders(root, problem, prune=not dry_run):
        for name, info in folder_entries(folder_fd):
            entry = root / "runs" / experiment / name
            known = nqf_file(name)
            if known is None:
                problem(entry, f"foreign {file_kind(info.st_mode)} (not a name nqf writes)")
                continue
            why = _foreign(info.st_mode)
            if why:
                problem(entry, why)
                continue
            kind, key = known
            if kind == "record":
                state, code = _judge(store, folder_fd, entry, experiment, "a damaged record")
                if state == "foreign":  # JSON, but not nqf's: left alone, as every foreign file
                    problem(entry, NOT_A_RECORD)
                    continue
                if state in ("current", "gone"):
                    continue
                if state == "stale" and not other_code:
                    result.kept_other_code.append(entry)
                    other[code] += 1
                    continue
            _remove_unheld(store, experiment, key, kind, name, folder_fd, info, entry, dry_run, result)
    result.problems = store.problems + result.problems
    result.other_codes = dict(other)
    return result


def _remove_unheld(
    store: ResultsStore,
    experiment: str,
    key: str,
    kind: str,
    name: str,
    folder_fd: int,
    info: os.stat_result,
    entry: Path,
    dry_run: bool,
    result: GcResult,
) -> None:
    """Remove one nqf file unless another process holds its key's claim (then it is kept)."""
    lock_name = f".{key}.lock"
    try:
        if dry_run:
            busy = _busy(lock_name, folder_fd)
            claim = None
        else:
            claim = store.claim(experiment, key)
            busy = claim is None
    except (OSError, NqfError) as err:  # the lock file is a link, a FIFO, ...: the claim cannot be judged
        why = "its lock file is not a regular file" if isinstance(err, NqfError) else type(err).__name__
        result.problems.append(f"{entry.relative_to(store.root)}: its claim cannot be checked ({why}); left alone")
        return
    if busy:  # another process is computing or writing this key now
        result.kept_busy.append(entry)
        return
    try:
        if kind == "lock":  # held by us now: releasing the claim removes it
            if dry_run or _mode(name, folder_fd) is not None:
                result.removed.append(entry)
            return
        if not _same(name, folder_fd, info):  # rewritten meanwhile (by a process that held the claim)
            return
        if not dry_run:
            try:
                os.unlink(name, dir_fd=folder_fd)
            except FileNotFoundError:
                return
        result.removed.append(entry)
        result.bytes_freed += info.st_size
    finally:
        if claim is not None:
            claim.release()
