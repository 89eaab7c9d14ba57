"""The results store: one JSON file per finished run, keyed by a hash of everything that determines it.

Layout under the results directory ``root``::

    root/runs/<experiment>/<key>.json

``key`` is the SHA-256 of the canonical JSON (sorted keys, no whitespace) of
``{"experiment", "run", "config", "nqf_code"}``; the run's config holds its seed, and
``nqf_code`` is the code identity (:func:`nqf.store.code.code_identity`: a hash of nqf's
source files), so seed, config and any change to the code change the key. Each file is

    {"format": "nqf-run", "format_version": 3, "experiment", "run", "key",
     "nqf_code", "config", "record", "checksum"}

``checksum`` is ``"sha256:"`` + the SHA-256 of the canonical JSON of every other field,
so an edit anywhere in the file (the record body included: a number changed, a value
set to NaN, the record emptied) is detected on every read.

Writes are atomic: the file is written to a hidden temporary file in the same folder,
flushed and fsynced, given the permissions the umask allows (as ``open`` would), then
``os.replace``-d onto its name, so a reader sees either no file or a whole one, and a
crash leaves at most a stray ``.<key>.*.tmp`` that readers ignore. Reading never raises:
a file that is unreadable, not valid JSON, lacks the header, does not hash to its name,
fails its checksum or has an older format is *reported* (:attr:`ResultsStore.problems`,
one line each) and treated as absent, so the run is recomputed and the file overwritten.

The store marks itself: ``root/nqf-store.json`` (:data:`MARKER`), written atomically by
the first :meth:`ResultsStore.put` into a store whose ``runs/`` holds nothing but files nqf
writes (:func:`nqf_file`), so ``nqf store gc`` only ever prunes a folder nqf made; a folder
that merely has a ``runs/`` subfolder (a TensorBoard project, say) is never taken for one.
Records are read only from regular files, opened without following a symbolic link and
without blocking (a FIFO named like a record is reported, never waited on).

Processes sharing a store share the work through :meth:`ResultsStore.claim`: an
exclusive ``flock`` on ``runs/<experiment>/.<key>.lock`` held while a run is computed.
The kernel releases it when its holder dies, even by SIGKILL, so no claim goes stale.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nqf.core.errors import NqfError
from nqf.core.version import __version__
from nqf.store.code import code_identity

FORMAT = "nqf-run"
FORMAT_VERSION = 3
# a file named as a record whose contents are no nqf record (JSON without nqf's "format"): not
# nqf's, so ``nqf store gc`` leaves it alone (``nqf.store.maintenance``)
NOT_A_RECORD = "not an nqf run record (foreign file)"
_KEY = re.compile(r"^[0-9a-f]{64}$")
UNREAD = object()  # what ResultsStore._load gives for a file it could not read as JSON (and reported)
_CHECKSUM_PREFIX = "sha256:"

MARKER = "nqf-store.json"
MARKER_FORMAT = "nqf-store"
MARKER_FORMAT_VERSION = 1
EXPERIMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_NQF_FILES = (
    ("record", re.compile(r"^([0-9a-f]{64})\.json$")),
    ("temporary", re.compile(r"^\.([0-9a-f]{64})\.[A-Za-z0-9_.]+\.tmp$")),  # atomic_write_bytes: .<key>.json.*.tmp
    ("lock", re.compile(r"^\.([0-9a-f]{64})\.lock$")),
)
PROBE_PREFIX = ".nqf-probe-"  # the output-folder write probe (nqf_paper.plan), made and removed at once


def nqf_file(name: str) -> tuple[str, str] | None:
    """``(kind, key)`` when ``name`` is one nqf writes in ``runs/<experiment>/``: ``"record"``
    (``<key>.json``), ``"temporary"`` (``.<key>.*.tmp`` of an interrupted write) or ``"lock"``
    (``.<key>.lock`` of a claim); None for any other name."""
    for kind, pattern in _NQF_FILES:
        match = pattern.match(name)
        if match:
            return kind, match.group(1)
    return None


def file_kind(mode: int) -> str:
    """What an ``lstat`` mode is, in words (for problem lines)."""
    for test, word in (
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISDIR, "folder"),
        (stat.S_ISREG, "file"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return word
    return "special file"


class NotRegularFile(OSError):
    """Raised by :func:`read_regular` for a FIFO, socket or device: never read, never waited on."""

    def __init__(self, kind: str):
        super().__init__(errno.EINVAL, f"a {kind}, not a regular file")
        self.kind = kind


# the largest file read_regular reads (a record of a full run is a few MiB; JSON takes several
# times its size in memory once parsed)
MAX_READ_BYTES = 1 << 28


class FileTooLarge(OSError):
    """Raised by :func:`read_regular` for a file larger than its limit: never read into memory."""

    def __init__(self, size: int, limit: int):
        super().__init__(errno.EFBIG, f"{mib_text(size)}, more than the {mib_text(limit)} nqf reads")
        self.size = size


def mib_text(size: int) -> str:
    """``size`` bytes as MiB with one decimal: ``"1.5 MiB"``."""
    return f"{size / 2**20:.1f} MiB"


def read_regular(path: str | os.PathLike, dir_fd: int | None = None, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (relative to ``dir_fd`` if given).

    Opened with ``O_NOFOLLOW`` (a symbolic link raises ``OSError`` ELOOP) and ``O_NONBLOCK``
    (opening a FIFO does not wait for a writer); anything but a regular file raises
    :class:`NotRegularFile` (``IsADirectoryError`` for a folder), and a file of more than
    ``limit`` bytes :class:`FileTooLarge`, before a byte is read (reading stops at the limit
    should the file grow meanwhile).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(file_kind(info.st_mode))
        if info.st_size > limit:
            raise FileTooLarge(info.st_size, limit)
        chunks: list[bytes] = []
        done = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            done += len(chunk)
            if done > limit:
                raise FileTooLarge(done, limit)
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_marker(root: str | os.PathLike) -> tuple[dict | None, str]:
    """The store marker of ``root``: ``(document, "")`` when it is sound, ``(None, "missing")``
    when there is none, else ``(None, why it is not a marker)``."""
    path = Path(root) / MARKER
    try:
        data = read_regular(path, limit=1 << 20)  # a marker is under 100 bytes
    except FileNotFoundError:
        return None, "missing"
    except NotRegularFile as err:
        return None, f"{MARKER} is a {err.kind}, not a file"
    except FileTooLarge as err:
        return None, f"{MARKER} holds {err.strerror}"
    except IsADirectoryError:
        return None, f"{MARKER} is a folder, not a file"
    except OSError as err:
        if err.errno == errno.ELOOP:
            return None, f"{MARKER} is a symbolic link"
        return None, f"{MARKER} is unreadable ({type(err).__name__})"
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, f"{MARKER} is not valid JSON"
    if not isinstance(document, dict) or document.get("format") != MARKER_FORMAT:
        return None, f"{MARKER} is not an nqf store marker"
    if document.get("format_version") != MARKER_FORMAT_VERSION:
        return None, (
            f"{MARKER} has format version {document.get('format_version')!r}; this nqf knows {MARKER_FORMAT_VERSION}"
        )
    return document, ""


def write_marker(root: str | os.PathLike) -> None:
    """Mark ``root`` as an nqf results store (atomically)."""
    document = {"format": MARKER_FORMAT, "format_version": MARKER_FORMAT_VERSION, "created_by": package_version()}
    atomic_write_bytes(Path(root) / MARKER, (json.dumps(document, sort_keys=True, indent=1) + "\n").encode("utf-8"))


def foreign_entries(root: str | os.PathLike) -> list[str]:
    """Every entry under ``root/runs`` that nqf does not write (paths relative to ``root``, with
    their kind): anything but folders named like experiments holding regular files named as
    :func:`nqf_file` allows (:func:`experiment_folders`: symbolic links are never followed)."""
    root = Path(root)
    found: list[str] = []

    def foreign(path: Path, mode: int) -> None:
        found.append(f"{path.relative_to(root).as_posix()} (a {file_kind(mode)})")

    for experiment, folder_fd in experiment_folders(root, lambda path, _: foreign(path, path.lstat().st_mode)):
        for name, info in folder_entries(folder_fd):
            if not (stat.S_ISREG(info.st_mode) and nqf_file(name)):
                foreign(root / "runs" / experiment / name, info.st_mode)
    return found


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def experiment_folders(
    root: Path, problem: Callable[[Path, str], None], prune: bool = False
) -> Iterator[tuple[str, int]]:
    """``(name, descriptor)`` of each experiment folder under ``root/runs``, opened without
    following a symbolic link; everything else there is reported with ``problem``. With
    ``prune`` an experiment folder left empty is removed (``rmdir``: only when empty)."""
    runs = root / "runs"
    try:
        runs_fd = os.open(runs, _DIR_FLAGS)
    except FileNotFoundError:
        return
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            problem(runs, f"a {file_kind(runs.lstat().st_mode)}, not a folder (not followed)")
        else:
            problem(runs, f"cannot be opened ({type(err).__name__})")
        return
    try:
        for name, info in folder_entries(runs_fd):
            path, mode = runs / name, info.st_mode
            if name.startswith(PROBE_PREFIX) and stat.S_ISREG(mode):
                continue  # an output-folder write probe, removed by its maker at once
            if stat.S_ISLNK(mode):
                problem(path, "a symbolic link in the store (not followed)")
                continue
            if not stat.S_ISDIR(mode):
                problem(path, f"foreign {file_kind(mode)} in the store")
                continue
            if not EXPERIMENT_NAME.match(name):
                problem(path, "a folder not named like an experiment")
                continue
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=runs_fd)
            except FileNotFoundError:
                continue
            except OSError as err:
                problem(path, f"cannot be opened ({type(err).__name__})")
                continue
            try:
                yield name, fd
            finally:
                os.close(fd)
            if prune:
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=runs_fd)  # an experiment with nothing left
    finally:
        os.close(runs_fd)


def folder_entries(folder_fd: int) -> Iterator[tuple[str, os.stat_result]]:
    """``(name, lstat)`` of every entry of an open folder."""
    for name in sorted(os.listdir(folder_fd)):
        try:
            yield name, os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue


def _read_umask() -> int:
    """The process umask. It can only be read by setting it, so this is done once, at import,
    before nqf starts threads or workers (which would otherwise race on the brief zero mask)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_read_umask()


def package_version() -> str:
    """The nqf version (informational in each record; the key uses the code identity instead)."""
    return __version__


def to_jsonable(value: Any, where: str = "value") -> Any:
    """``value`` as plain JSON data: dicts with str keys, lists, str, bool, int, float, None.

    numpy / JAX arrays become nested lists, numpy scalars Python numbers, tuples lists and
    dataclasses dicts. Anything else raises NqfError naming ``where``.
    """
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise NqfError(f"{where} has a non-string key {k!r}; JSON records need string keys")
            out[k] = to_jsonable(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, where)
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "__array__"):  # numpy and JAX arrays
        array = np.asarray(value)
        if array.dtype.kind in "biuf":
            return array.tolist()
    raise NqfError(f"{where} of type {type(value).__name__} cannot be stored as JSON")


def _canonical(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    except ValueError:
        raise NqfError("a run config must not contain NaN or infinity") from None


def checksum(document: Mapping[str, Any]) -> str:
    """``"sha256:<hex>"`` of the canonical JSON of ``document`` without its ``checksum`` field.

    NaN and infinities are allowed (records may hold them) and serialise as JSON's usual
    ``NaN`` / ``Infinity`` tokens; Python floats round-trip exactly, so a document read
    back hashes as it was written.
    """
    body = {name: value for name, value in document.items() if name != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True, ensure_ascii=True)
    return _CHECKSUM_PREFIX + hashlib.sha256(text.encode("ascii")).hexdigest()


def run_key(experiment: str, run: str, config: Mapping[str, Any], code: str) -> str:
    """SHA-256 (hex) of the canonical JSON of {experiment, run, config, nqf_code}."""
    payload = {"experiment": experiment, "run": run, "config": to_jsonable(config, "run config"), "nqf_code": code}
    return hashlib.sha256(_canonical(payload).encode("ascii")).hexdigest()


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not EXPERIMENT_NAME.fullmatch(name):
        raise NqfError(f"{kind} name {name!r} must be letters, digits, '_', '.', '-' (not starting with '.')")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, rename.

    The file gets mode ``0o666 & ~umask``, as a plain ``open`` would give it (``mkstemp``
    alone makes it 0600).
    """
    path = Path(path)
    for attempt in range(5):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            break
        except FileNotFoundError:  # the folder was removed meanwhile (`nqf store gc` prunes empty ones)
            if attempt == 4:
                raise
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), _FILE_MODE)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable; not every filesystem allows fsync on a folder
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class Claim:
    """An exclusive ``flock`` on one run's lock file, held while the run is computed.

    Taken with :meth:`ResultsStore.claim`; released by :meth:`release` (or by leaving the
    ``with`` block, or by the holder's death). The holder removes the lock file before
    releasing it, so the store keeps no lock files behind, except those of killed holders,
    which are harmless: the next claimant locks and then removes them (and for a run that
    was stored before its holder died, :meth:`ResultsStore.clear_stale_claim`).
    """

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self._fd)  # closing the only descriptor releases the flock
        self._fd = None

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock(path: Path, wait: bool) -> Claim | None:
    """Lock ``path`` (created if absent); None if another process holds it and ``wait`` is false.

    A holder unlinks the file before releasing it, so a lock taken on a descriptor whose
    file is no longer at ``path`` guards nothing: then the file is opened afresh.
    """
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:  # never through a symbolic link: a lock file is created only in the store itself
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, _FILE_MODE)
        except FileNotFoundError:  # the folder was removed meanwhile (`nqf store gc` prunes empty ones)
            continue
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise NqfError(f"{path}: a symbolic link stands where a claim's lock file goes") from None
            raise
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise NqfError(f"{path}: a {file_kind(mode)} stands where a claim's lock file goes")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        except BaseException:
            os.close(fd)
            raise
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        held = os.fstat(fd)
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            return Claim(path, fd)
        os.close(fd)


class ResultsStore:
    """Finished runs under ``root``; see the module docstring for layout and guarantees.

    ``problems`` collects one line per corrupt or foreign file met while reading
    (each file once); readers skip such files, they never raise. Each line ends with
    ``skipped``, or with ``to be recomputed`` for a file met by :meth:`get` when
    ``recompute`` is true (the caller computes absent runs afresh, as ``reproduce`` does; a
    recompute that then fails is reported by the caller as a failed run).
    """

    def __init__(self, root: str | os.PathLike, code: str | None = None, recompute: bool = False):
        self.root = Path(root)
        self.code = code_identity() if code is None else code
        self.recompute = recompute
        self._problems: dict[str, str] = {}
        self._marked = False

    @property
    def version(self) -> str:
        """The code identity records are keyed by (what reports and manifests print as the version)."""
        return self.code

    @property
    def problems(self) -> list[str]:
        return list(self._problems.values())

    def _problem(self, path: Path, message: str, action: str = "skipped") -> None:
        rel = path.relative_to(self.root) if path.is_relative_to(self.root) else path
        self._problems.setdefault(str(rel), f"{rel}: {message}; {action}")

    def code_of(self, experiment: str) -> str:
        """The code identity ``experiment``'s records are keyed by: its own
        (``code_identity(experiment)``: nqf's files, the paper's shared modules and its folder)
        when this store runs on this process's code, else the store's ``code`` (given)."""
        return code_identity(experiment) if self.code == code_identity() else self.code

    def key(self, experiment: str, run: str, config: Mapping[str, Any]) -> str:
        """The run's key under this store's code identity for ``experiment`` (:meth:`code_of`)."""
        return run_key(experiment, run, config, self.code_of(experiment))

    def path(self, experiment: str, key: str) -> Path:
        _check_name("experiment", experiment)
        if not _KEY.match(key):
            raise NqfError(f"not a run key: {key!r}")
        return self.root / "runs" / experiment / f"{key}.json"

    def claim(self, experiment: str, key: str, wait: bool = False) -> Claim | None:
        """Claim the run ``key`` for computing it: a held :class:`Claim`, or None when another
        process holds it (only with ``wait=False``; ``wait=True`` blocks until it is free).

        Whoever holds the claim should look in the store again before computing: the
        previous holder may have stored the run in the meantime.
        """
        path = self.path(experiment, key)
        return _lock(path.with_name(f".{key}.lock"), wait)

    def clear_stale_claim(self, experiment: str, key: str) -> bool:
        """Remove the lock file a killed holder left on ``key`` (it died after storing the run,
        before releasing its claim); True if one was removed. A claim held now is left alone.

        Such a file is harmless but would otherwise stay for good: a stored run is never
        claimed again, so no next claimant removes it.
        """
        if not self.path(experiment, key).with_name(f".{key}.lock").exists():
            return False
        try:
            claim = self.claim(experiment, key)
        except (OSError, NqfError):  # a read-only store, or not a regular file: leave it to `nqf store gc`
            return False
        if claim is None:
            return False
        claim.release()
        return True

    def put(self, experiment: str, run: str, config: Mapping[str, Any], record: Mapping[str, Any]) -> dict:
        """Store a finished run atomically; returns the record as it will be read back."""
        _check_name("experiment", experiment)
        _check_name("run", run)
        if not isinstance(record, Mapping):
            raise NqfError(f"run {experiment}/{run} returned {type(record).__name__}; a record must be a dict")
        config = to_jsonable(config, f"config of {experiment}/{run}")
        code = self.code_of(experiment)
        key = run_key(experiment, run, config, code)
        document = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "experiment": experiment,
            "run": run,
            "key": key,
            "nqf_code": code,
            "nqf_version": package_version(),
            "config": config,
            "record": to_jsonable(record, f"record of {experiment}/{run}"),
        }
        document["checksum"] = checksum(document)
        text = json.dumps(document, sort_keys=True, indent=1, allow_nan=True)
        path = self.path(experiment, key)
        if path.is_dir() and not path.is_symlink():  # a folder where the record goes (damage): a file cannot replace it
            shutil.rmtree(path)
        atomic_write_bytes(path, text.encode("utf-8"))
        self._mark()
        # Hand back exactly what a later `get` returns, so fresh and resumed runs summarise alike.
        return json.loads(text)["record"]

    def _mark(self) -> None:
        """Write the store marker if it is missing and ``runs/`` holds nothing but nqf's files
        (a store of an older nqf is adopted; a folder mixed with foreign files stays unmarked,
        so ``nqf store gc`` will not prune it). Checked once per instance."""
        if self._marked:
            return
        if (self.root / MARKER).exists() or (self.root / MARKER).is_symlink():
            self._marked = True  # whatever is there (even a bad marker) is left for `nqf store gc` to judge
            return
        try:
            if not foreign_entries(self.root):
                write_marker(self.root)
        except OSError:
            pass  # the record is stored; an unmarked store is only refused by `nqf store gc` (until --adopt)
        self._marked = True

    def get(self, experiment: str, run: str, config: Mapping[str, Any]) -> dict | None:
        """The stored record of this run, or None when absent, corrupt or foreign (then reported)."""
        key = self.key(experiment, run, config)
        path = self.path(experiment, key)
        action = "to be recomputed" if self.recompute else "skipped"
        document = self._read(path, experiment, action)
        if document is None:
            return None
        if document["run"] != run:
            self._problem(path, f"holds run {document['run']!r}, expected {run!r}", action)
            return None
        return document["record"]

    def _load(self, path: Path, action: str, dir_fd: int | None = None) -> Any:
        """The JSON in one run file (``path.name`` in the open folder ``dir_fd`` if given), or
        :data:`UNREAD` with a problem line ending in ``action``; FileNotFoundError when there is none."""
        try:
            return json.loads(read_regular(path if dir_fd is None else path.name, dir_fd=dir_fd).decode("utf-8"))
        except FileNotFoundError:
            raise
        except IsADirectoryError:
            message = "a folder stands where the record should be"
        except NotRegularFile as err:
            message = f"a {err.kind} stands where the record should be (not read)"
        except FileTooLarge as err:
            message = f"{err.strerror} (not read)"
        except json.JSONDecodeError as err:
            message = f"not valid JSON ({err.msg} at line {err.lineno})"
        except (OSError, UnicodeDecodeError) as err:
            if getattr(err, "errno", None) == errno.ELOOP:
                message = "a symbolic link stands where the record should be (not followed)"
            else:
                message = f"unreadable ({type(err).__name__})"
        self._problem(path, message, action)
        return UNREAD

    def _read(self, path: Path, experiment: str, action: str = "skipped") -> dict | None:
        """Read and validate one run file; None (and a problem line ending in ``action``) unless it is sound."""
        try:
            document = self._load(path, action)
        except FileNotFoundError:
            return None
        if document is UNREAD:
            return None
        message = self._header_problem(document, path, experiment)
        if message:
            self._problem(path, message, action)
            return None
        return document

    @staticmethod
    def _header_problem(document: Any, path: Path, experiment: str) -> str:
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            return NOT_A_RECORD
        if document.get("format_version") != FORMAT_VERSION:
            return f"record format version {document.get('format_version')!r} (stale), this nqf reads {FORMAT_VERSION}"
        fields = {
            "experiment": str,
            "run": str,
            "key": str,
            "nqf_code": str,
            "nqf_version": str,
            "config": dict,
            "record": dict,
            "checksum": str,
        }
        for name, kind in fields.items():
            if not isinstance(document.get(name), kind):
                return f"header field {name!r} missing or not a {kind.__name__}"
        if document["experiment"] != experiment:
            return f"holds experiment {document['experiment']!r} in the folder of {experiment!r}"
        if document["key"] != path.stem:
            return "header key does not match the file name"
        try:
            expected = run_key(experiment, document["run"], document["config"], document["nqf_code"])
        except NqfError as err:
            return f"config cannot be hashed ({err})"
        if expected != path.stem:
            return "header does not hash to the file name (edited or corrupt)"
        if document["checksum"] != checksum(document):
            return "checksum does not match the contents (edited or corrupt)"
        return ""

    def scan(self) -> Iterator[dict]:
        """Every sound record in the store (documents with header); reports everything else.

        Leftover temporary files of interrupted writes (hidden ``.*.tmp``) and lock files
        (hidden ``.*.lock``) are ignored.
        """
        runs = self.root / "runs"
        if not runs.is_dir():
            return
        for entry in sorted(runs.iterdir()):
            if entry.name.startswith("."):
                continue
            if entry.is_symlink():
                self._problem(entry, "a symbolic link in the store (not followed)")
                continue
            if not entry.is_dir():
                self._problem(entry, "foreign file in the store")
                continue
            for path in sorted(entry.iterdir()):
                if path.name.startswith(".") and path.name.endswith((".tmp", ".lock")):
                    continue
                if not (path.suffix == ".json" and _KEY.match(path.stem)):
                    self._problem(path, "foreign file in the store")
                    continue
                document = self._read(path, entry.name)
                if document is not None:
                    yield document
