"""The files a user gives nqf, read so that a bad one is one NqfError line and never a crash.

Arrays (``.npz`` archives: :func:`read_npz`; single ``.npy`` arrays: :func:`read_npy`) are
the one way nqf reads a user's arrays (``nqf predict --data``/``--init``, ``--overlay`` curves,
the npz task's file, checked by :func:`check_npz` before it is loaded). Before any data is
read, every array's header is read and checked against the file:

- the header's shape times the dtype's size must fit in the bytes that follow it (the file's
  size for ``.npy``, the zip member's declared uncompressed size for ``.npz``): a header that
  claims 16e9 rows in a 300-byte file is refused, not allocated;
- a zip member may not declare more than its compression can produce from its compressed
  size (deflate: about 1032 to 1; stored: exactly its size), the mark of a zip bomb, nor more
  than ``MAX_TRAILING_BYTES`` beyond its array (numpy writes none); reading stops at the
  declared end whatever the compressed stream would still give, and the member's checksum is
  checked there, so a declared size is never trusted alone;
- the arrays together must fit in half of the memory available now (``nqf.core.memory``);
- object arrays (pickles) and other non-numbers are refused from the header: nothing is
  unpickled, ever.

The data are then read into a buffer of exactly the header's size. Values (finite, bounded)
are the caller's to check. TOML files (sweep specs, ``nqf reproduce --config``) are read by
:func:`read_toml`, which refuses nesting deeper than ``MAX_NESTING`` in one line (the
parser's own recursion would raise RecursionError). JAX-free.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import stat
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from nqf.core.arguments import DTYPE_KINDS
from nqf.core.errors import NqfError
from nqf.core.memory import available_bytes, size_text

NPY_MAGIC = b"\x93NUMPY"
# numpy's own cap on an .npy header (numpy.lib.format's max_header_size), and the bytes before it
MAX_HEADER_BYTES = 10000
_HEAD_BYTES = MAX_HEADER_BYTES + 16
# deflate turns a 258-byte match into at least 2 bits: at most ~1032 bytes out per byte in
DEFLATE_MAX_RATIO = 1032
_READ_CHUNK = 1 << 24  # bytes read at a time
# numpy writes an array member with nothing after its data; a little slack for other writers
MAX_TRAILING_BYTES = 1 << 16
# what reading a damaged archive raises (zlib.error: a corrupt deflate stream; RuntimeError: an
# encrypted member)
_ZIP_ERRORS = (
    OSError,
    zipfile.BadZipFile,
    EOFError,
    ValueError,
    KeyError,
    NotImplementedError,
    RuntimeError,
    zlib.error,
)
# tables and arrays inside each other: real specs and configs need 3
MAX_NESTING = 32
# the largest TOML file read (real specs and configs are a few KiB)
MAX_TOML_BYTES = 1 << 24


@dataclass(frozen=True)
class ArrayHeader:
    """What an .npy header says (``shape``, ``dtype``, ``fortran_order``), how many bytes it
    takes (``offset``: the data start there) and how many bytes follow it (``held``)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    offset: int
    held: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def describe_file(path: str | os.PathLike) -> str:
    """What a file that is not an .npz archive looks like, in a few words."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(512)
    except OSError as err:
        return f"unreadable ({err.strerror})"
    if not head:
        return "an empty file"
    if head.startswith(NPY_MAGIC):
        return "a single NumPy array (.npy), not an .npz archive; save with numpy.savez(path, X=..., Y=...)"
    if head.startswith(b"PK"):
        return "a zip archive that NumPy cannot read as .npz"
    if head[:1] == b"\x80":
        return "a Python pickle, which nqf does not load"
    if head.startswith(b"\x89HDF"):
        return "an HDF5 file, not an .npz archive"
    try:
        head.decode("utf-8")
        text = True
    except UnicodeDecodeError as err:
        text = err.start > 500  # a character cut at the end of the sample
    if text and b"\x00" not in head:
        return "a text file, not an .npz archive (save arrays with numpy.savez(path, X=..., Y=...))"
    return f"binary data ({os.path.getsize(path)} bytes, starting with {head[:8]!r})"


def _check_readable_file(path: str | os.PathLike, where: str, kind: str) -> None:
    if not os.path.exists(path):
        raise NqfError(f"{where}: no such file (not found)")
    if os.path.isdir(path):
        raise NqfError(f"{where} is a folder, not an {kind} file")
    if not os.path.isfile(path):
        raise NqfError(f"{where} is not a regular file")
    if not os.access(path, os.R_OK):
        raise NqfError(f"{where}: permission denied")


def _reason(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    return text or type(err).__name__


def _parse_header(head: bytes, held_after: int, where: str) -> ArrayHeader:
    """The header at the start of ``head`` (the first bytes of an array); ``held_after``: the
    bytes of the whole array file or member. NqfError when it is not an .npy header."""
    if not head.startswith(NPY_MAGIC):
        raise NqfError(f"{where} is not a NumPy array (.npy): it does not start with numpy's header")
    stream = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(stream, MAX_HEADER_BYTES)
        elif version == (2, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(stream, MAX_HEADER_BYTES)
        else:  # 3.0 only adds utf-8 field names, i.e. records, which nqf does not take
            raise NqfError(f"{where}: .npy format version {version[0]}.{version[1]} is not read (1.0 and 2.0 are)")
    except NqfError:
        raise
    except (ValueError, EOFError, SyntaxError, TypeError) as err:
        raise NqfError(f"{where}: its .npy header cannot be read ({_reason(err)})") from None
    if any(size < 0 for size in shape):
        raise NqfError(f"{where}: its .npy header has a negative size in shape {shape} (a damaged file)")
    offset = stream.tell()
    return ArrayHeader(tuple(shape), np.dtype(dtype), bool(fortran_order), offset, held_after - offset)


def _check_header(header: ArrayHeader, where: str) -> None:
    """Numbers only (nothing pickled), and no more bytes claimed than the file holds."""
    dtype = header.dtype
    if dtype.hasobject:
        raise NqfError(f"{where} holds Python objects (pickled), not numbers")
    if dtype.kind not in "biuf":
        kind = DTYPE_KINDS.get(dtype.kind, "something else")
        raise NqfError(f"{where} holds {kind} (dtype {dtype}), not real numbers")
    if header.nbytes > header.held:
        raise NqfError(
            f"{where}: its header claims shape {header.shape} of {dtype} ({size_text(header.nbytes)}), but only "
            f"{size_text(max(header.held, 0))} follow it (a damaged or forged file)"
        )


def _check_memory(where: str, headers: dict[str, ArrayHeader]) -> None:
    """The arrays together in half of the memory available now."""
    needed = sum(h.nbytes for h in headers.values())
    available = available_bytes()
    if needed > available / 2:
        shapes = ", ".join(f"{name} {h.shape} {h.dtype}" for name, h in headers.items())
        raise NqfError(
            f"{where}: the arrays ({shapes}) need {size_text(needed)} of memory, more than half of the "
            f"{size_text(available)} available"
        )


def _read_data(stream: IO[bytes], header: ArrayHeader, where: str) -> np.ndarray:
    """The array after its header in ``stream`` (positioned at the data): exactly ``nbytes``
    are read, in chunks, whatever the stream could still give."""
    raw = np.empty(header.nbytes, dtype=np.uint8)
    view = raw.data
    done = 0
    while done < header.nbytes:
        got = stream.readinto(view[done : done + _READ_CHUNK])  # type: ignore[attr-defined]
        if not got:
            raise NqfError(
                f"{where}: the data end after {done} of the {header.nbytes} bytes its header promises (a damaged file)"
            )
        done += got
    flat = raw.view(header.dtype)
    if header.fortran_order:
        return flat.reshape(header.shape[::-1]).transpose()
    return flat.reshape(header.shape)


# -- .npz archives ---------------------------------------------------------------------------


def _member_names(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """Array name -> its member (``X.npy`` is array ``X``, as numpy.load names them)."""
    return {(i.filename[:-4] if i.filename.endswith(".npy") else i.filename): i for i in archive.infolist()}


def _check_declared_size(info: zipfile.ZipInfo, where: str) -> None:
    """A member that declares more than its compressed bytes can expand to: a zip bomb, or damage."""
    if info.compress_type == zipfile.ZIP_STORED:
        limit = info.compress_size
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        limit = info.compress_size * DEFLATE_MAX_RATIO + 1024
    else:  # bzip2, lzma: no tight bound; the header, the memory check and the bounded read still apply
        return
    if info.file_size > limit:
        raise NqfError(
            f"{where}: the archive declares {size_text(info.file_size)} uncompressed from "
            f"{size_text(info.compress_size)} compressed, more than its compression can produce (a zip bomb or "
            "a damaged file)"
        )


def _npz_headers(archive: zipfile.ZipFile, names: tuple[str, ...], where: str) -> dict[str, ArrayHeader]:
    members = _member_names(archive)
    missing = [n for n in names if n not in members]
    if missing:
        raise NqfError(f"{where}: no array {' or '.join(missing)} (found: {', '.join(members) or 'none'})")
    headers = {}
    for name in names:
        info = members[name]
        label = f"{where}: array {name}"
        _check_declared_size(info, label)
        with archive.open(info) as member:
            head = member.read(min(info.file_size, _HEAD_BYTES))
        header = _parse_header(head, info.file_size, label)
        _check_header(header, label)
        if header.held - header.nbytes > MAX_TRAILING_BYTES:  # read to its end below, for its checksum
            raise NqfError(
                f"{label}: the archive declares {size_text(header.held)} after its header, far more than its "
                f"shape {header.shape} of {header.dtype} needs ({size_text(header.nbytes)}): a zip bomb or a "
                "damaged file"
            )
        headers[name] = header
    return headers


@contextlib.contextmanager
def _checked_npz(
    path: str | os.PathLike, names: tuple[str, ...], where: str
) -> Iterator[tuple[zipfile.ZipFile, dict[str, ArrayHeader]]]:
    """The open archive ``path`` and the checked headers of its arrays ``names``; whatever reading
    it raises, here or in the ``with`` block, becomes one NqfError line."""
    _check_readable_file(path, where, ".npz")
    if not zipfile.is_zipfile(path):
        raise NqfError(f"{where}: cannot read it as .npz: it is {describe_file(path)}")
    try:
        with zipfile.ZipFile(path) as archive:
            headers = _npz_headers(archive, names, where)
            _check_memory(where, headers)
            yield archive, headers
    except NqfError:
        raise
    except _ZIP_ERRORS as err:
        raise NqfError(f"{where}: cannot read it as .npz ({_reason(err)})") from None


def check_npz(path: str | os.PathLike, names: tuple[str, ...], owner: str = "") -> dict[str, ArrayHeader]:
    """The headers of arrays ``names`` in the .npz file ``path``, every check of the module
    docstring made (kind of file, missing arrays, dtypes, sizes against the file and against
    memory) and no data read. NqfError, one line; ``owner`` prefixes the messages."""
    with _checked_npz(path, names, f"{owner}{path}") as (_, headers):
        return headers


def read_npz(path: str | os.PathLike, names: tuple[str, ...], owner: str = "") -> dict[str, np.ndarray]:
    """Arrays ``names`` from the .npz file ``path``, after :func:`check_npz`'s checks: real
    numbers (booleans, integers, floats) of the sizes their headers declare. NqfError, one line."""
    where = f"{owner}{path}"
    arrays = {}
    with _checked_npz(path, names, where) as (archive, headers):
        members = _member_names(archive)
        for name, header in headers.items():
            with archive.open(members[name]) as member:
                member.read(header.offset)
                arrays[name] = _read_data(member, header, f"{where}: array {name}")
                # to the declared end (a few bytes at most): zipfile then checks the checksum,
                # and never reads past that end whatever the compressed stream would still give
                member.read(header.held - header.nbytes + 1)
    return arrays


# -- single .npy arrays ----------------------------------------------------------------------


def read_npy(path: str | os.PathLike, where: str | None = None) -> np.ndarray:
    """The array in the .npy file ``path``, after the checks of the module docstring (its
    header against the file's size and the memory; real numbers, nothing unpickled).
    NqfError, one line, prefixed with ``where`` (default: the path)."""
    where = str(path) if where is None else where
    _check_readable_file(path, where, ".npy")
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            header = _parse_header(handle.read(_HEAD_BYTES), size, where)
            _check_header(header, where)
            _check_memory(where, {"the array": header})
            handle.seek(header.offset)
            return _read_data(handle, header, where)
    except NqfError:
        raise
    except (OSError, ValueError, EOFError) as err:
        raise NqfError(f"{where}: cannot read it as .npy ({_reason(err)})") from None


# -- TOML ------------------------------------------------------------------------------------


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """How deeply tables and arrays nest in ``value`` (a scalar: 0), counted without recursion
    and only up to ``limit + 1``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def read_toml(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """The TOML file ``path`` as a dict; NqfError (one line naming ``what``, e.g. "config file
    'a.toml'") when it is missing, a folder, unreadable, not UTF-8, not TOML, or nested deeper
    than ``MAX_NESTING`` tables and arrays inside each other; also when it is not a regular
    file (a FIFO would block the read forever) or larger than ``MAX_TOML_BYTES``."""
    import tomllib

    try:
        # O_NONBLOCK: opening a FIFO does not wait for a writer; it is then refused by its mode
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError
            if not stat.S_ISREG(info.st_mode):
                raise NqfError(f"{what} is not a regular file (a FIFO, socket or device), not a TOML file")
            if info.st_size > MAX_TOML_BYTES:
                raise NqfError(
                    f"{what} holds {size_text(info.st_size)}, more than the {size_text(MAX_TOML_BYTES)} a TOML "
                    "spec or config may take"
                )
            text = handle.read(MAX_TOML_BYTES + 1).decode("utf-8")
    except FileNotFoundError:
        raise NqfError(f"{what} does not exist") from None
    except IsADirectoryError:
        raise NqfError(f"{what} is a folder, not a TOML file") from None
    except UnicodeDecodeError:
        raise NqfError(f"{what} is not UTF-8 text (TOML)") from None
    except OSError as err:
        raise NqfError(f"{what} cannot be read: {err.strerror or type(err).__name__}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise NqfError(f"{what} is not valid TOML: {err}") from None
    except RecursionError:  # the parser recurses once per nested array or inline table
        raise NqfError(f"{what} nests arrays or tables more than {MAX_NESTING} levels deep") from None
    if nesting_depth(data) > MAX_NESTING:
        raise NqfError(f"{what} nests arrays or tables more than {MAX_NESTING} levels deep")
    return data
