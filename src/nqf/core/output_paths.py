"""Where nqf writes: checks of an output file's or folder's path before any compute, each a
one-line NqfError naming the option (``--plot``, ``--csv``, ``--out``, ``--store``), and
:func:`shown_path` for a path in an error line. Used by the command line and the sweeps; nothing
is created on disk by a check (:func:`check_output_path`). JAX-free.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from nqf.core.errors import NqfError


def check_output_path(option: str, path: Path) -> Path:
    """NqfError unless ``path`` can be written as a file; creates nothing that stays.

    The folder must exist and be writable, and ``path`` must not be a folder (or a file
    that cannot be replaced). ``os.access`` answers for the permission bits; as root it
    says yes to everything but a read-only mount, so root also probes the folder with an
    empty temporary file, removed at once (pseudo file systems such as /proc refuse it).
    A name the OS cannot take (too long, a NUL byte) is one line too.
    """
    return one_line_path_errors(option, Path(path), _check_output_path)


def one_line_path_errors(option: str, path: Path, check) -> Path:
    """``check(option, path)``, with what the OS says of an impossible name (ENAMETOOLONG from
    stat, "embedded null byte") as one NqfError line naming ``option``."""
    try:
        return check(option, path)
    except NqfError:
        raise
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise NqfError(f"{option} {shown_path(path)}: {reason}") from None


def shown_path(path: str | os.PathLike, limit: int = 120) -> str:
    """``path`` for an error line: whole when short, else its start and end around an ellipsis."""
    text = os.fspath(path)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]} ({len(text)} characters)"


def _check_output_path(option: str, path: Path) -> Path:
    if len(path.name.encode()) > _name_max(path.parent):
        raise NqfError(f"{option} {shown_path(path)}: the file name is longer than the file system allows")
    if path.is_dir():
        raise NqfError(f"{option} {path} is a folder; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise NqfError(f"{option} {path}: folder {parent} does not exist")
    if not parent.is_dir():
        raise NqfError(f"{option} {path}: {parent} is not a folder")
    if path.exists() and not path.is_file():
        raise NqfError(f"{option} {path} exists and is not a regular file")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise NqfError(f"{option} {path}: cannot write in folder {parent} (permission denied)")
    try:
        if os.statvfs(parent).f_flag & os.ST_RDONLY:
            raise NqfError(f"{option} {path}: folder {parent} is on a read-only file system")
    except OSError:
        pass
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        try:
            fd, probe = tempfile.mkstemp(dir=parent, prefix=".nqf-probe-", suffix=path.suffix)
        except OSError as err:
            raise NqfError(f"{option} {path}: cannot write in folder {parent} ({err.strerror})") from None
        os.close(fd)
        os.unlink(probe)
    return path


def check_output_folder_path(option: str, path: Path) -> Path:
    """NqfError unless ``path`` is a writable folder, or can be made one; creates nothing that
    stays (as root, which ``os.access`` answers yes for, a temporary folder is made in the
    nearest existing folder and removed at once: pseudo file systems such as /proc refuse it)."""
    return one_line_path_errors(option, Path(path), _check_output_folder_path)


def _check_output_folder_path(option: str, path: Path) -> Path:
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe != path and not probe.is_dir():
        raise NqfError(f"{option} {shown_path(path)}: {shown_path(probe)} is not a folder")
    if path.exists() and not path.is_dir():
        raise NqfError(f"{option} {shown_path(path)} exists and is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise NqfError(f"{option} {shown_path(path)}: cannot write in {shown_path(probe)} (permission denied)")
    longest = _name_max(probe)
    for part in path.parts:
        if len(part.encode()) > longest:
            raise NqfError(f"{option} {shown_path(path)}: a folder name is longer than the file system allows")
    try:
        if os.statvfs(probe).f_flag & os.ST_RDONLY:
            raise NqfError(f"{option} {shown_path(path)}: {shown_path(probe)} is on a read-only file system")
    except OSError:
        pass
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        try:
            os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".nqf-probe-"))
        except OSError as err:
            raise NqfError(
                f"{option} {shown_path(path)}: cannot be written ({err.strerror} in {shown_path(probe)})"
            ) from None
    return path


def _name_max(folder: Path) -> int:
    """The longest file name the file system under ``folder`` takes (255 where it cannot say)."""
    probe = folder if str(folder) else Path(".")
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return os.pathconf(probe, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255
