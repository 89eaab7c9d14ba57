"""The checks of sample files and arrays before any data matrix is built: .npz files
(:func:`read_npz`), finite and bounded entries (``MAX_ABS_ENTRY``), samples-first shapes and
targets (:func:`checked_samples`)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture
from nqf.core.errors import NqfError
from nqf.theory.data_matrices.samples import check_loss

# Largest |entry| accepted in data (X, Y) and initial weights. The structure and the
# moments multiply up to four entries (x^4 in the fourth moments S of the moments route,
# y x^2 in C), and eigensolvers and norms square those: (1e30)^8 = 1e240, summed over
# far fewer than 1e60 terms, stays below float64's 1.8e308. Larger entries would
# overflow to inf inside LAPACK ("Eigenvalues did not converge") instead of a clear error.
MAX_ABS_ENTRY = 1e30


def check_finite(name: str, array: np.ndarray) -> None:
    """NqfError unless every entry of ``array`` is finite with |entry| <= MAX_ABS_ENTRY."""
    if array.dtype.kind not in "biuf":
        raise NqfError(f"{name} must hold real numbers, got dtype {array.dtype}")
    if array.dtype.kind == "b" or array.size == 0:
        return
    # in slices of samples: a mask of the whole array would cost 1/8 of it again
    flat = array.reshape(array.shape[0], -1) if array.ndim else array.reshape(1, 1)
    rows = max(1, (1 << 22) // max(1, flat.shape[1]))
    nonfinite = large = 0
    for i in range(0, flat.shape[0], rows):
        part = flat[i : i + rows]
        if part.dtype.kind == "f":
            finite = np.isfinite(part)
            nonfinite += int(part.size - np.count_nonzero(finite))
            large += int(np.count_nonzero(np.abs(np.where(finite, part, 0)) > MAX_ABS_ENTRY))
        else:  # integers: compare without converting (|int64| > 1e30 never happens, but uint64 is checked the same)
            large += int(np.count_nonzero(np.abs(part.astype(np.float64)) > MAX_ABS_ENTRY))
    if nonfinite:
        raise NqfError(f"{name} contains {nonfinite} non-finite value(s) (nan or inf)")
    if large:
        raise NqfError(
            f"{name} contains {large} value(s) of magnitude above {MAX_ABS_ENTRY:.0e} (the largest nqf accepts: "
            "products of four entries and their squares must stay finite in float64); rescale the data"
        )


def describe_file(path) -> str:
    """What a file that is not an .npz archive looks like, in a few words."""
    import os

    try:
        with open(path, "rb") as handle:
            head = handle.read(512)
    except OSError as err:
        return f"unreadable ({err.strerror})"
    if not head:
        return "an empty file"
    if head.startswith(b"\x93NUMPY"):
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
    size = os.path.getsize(path)
    return f"binary data ({size} bytes, starting with {head[:8]!r})"


def read_npz(path, names: tuple[str, ...], owner: str = "") -> dict[str, np.ndarray]:
    """Arrays ``names`` from the .npz file ``path``, each real, finite and bounded (MAX_ABS_ENTRY).

    NqfError with one line for every way the file can be bad: missing, a folder, empty,
    not an .npz archive (says what it is: .npy, text, pickle, ...), missing arrays,
    object/string/complex/structured arrays, non-finite or too large entries. Shapes are
    the caller's to check. ``owner`` prefixes the messages (e.g. "task npz: ").
    """
    import os
    import zipfile

    where = f"{owner}{path}"
    if not os.path.exists(path):
        raise NqfError(f"{where}: no such file (not found)")
    if os.path.isdir(path):
        raise NqfError(f"{where} is a folder, not an .npz file")
    if not os.path.isfile(path):
        raise NqfError(f"{where} is not a regular file")
    if not os.access(path, os.R_OK):
        raise NqfError(f"{where}: permission denied")
    if not zipfile.is_zipfile(path):
        raise NqfError(f"{where}: cannot read it as .npz: it is {describe_file(path)}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            if not hasattr(archive, "files"):  # defensive: np.load gave a single array
                raise NqfError(f"{where}: cannot read it as .npz: it is {describe_file(path)}")
            missing = [n for n in names if n not in archive.files]
            if missing:
                raise NqfError(
                    f"{where}: no array {' or '.join(missing)} (found: {', '.join(archive.files) or 'none'})"
                )
            arrays = {}
            for n in names:
                try:
                    arrays[n] = np.asarray(archive[n])
                except ValueError as err:
                    if "allow_pickle" in str(err) or "Object arrays" in str(err):
                        raise NqfError(f"{where}: array {n} holds Python objects (pickled), not numbers") from None
                    raise
    except NqfError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError, NotImplementedError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise NqfError(f"{where}: cannot read it as .npz ({reason})") from None
    for n, a in arrays.items():
        if a.dtype.kind not in "biuf":
            kind = {
                "c": "complex",
                "O": "Python objects",
                "U": "strings",
                "S": "bytes",
                "V": "records",
                "M": "dates",
                "m": "time spans",
            }.get(a.dtype.kind, "not real numbers")
            raise NqfError(f"{where}: array {n} must hold real numbers, got {kind} (dtype {a.dtype})")
        check_finite(f"{where}: array {n}", a)
    return arrays


def check_sample_arrays(where: str, X: np.ndarray, Y: np.ndarray) -> None:
    """NqfError unless X and Y both have samples first, at least one, and as many."""
    for n, a in (("X", X), ("Y", Y)):
        if a.ndim == 0:
            raise NqfError(f"{where}: {n} is a single number (shape ()); it needs one row per sample, shape (N, ...)")
        if a.shape[0] == 0:
            raise NqfError(f"{where}: {n} has no samples (shape {a.shape})")
    if X.shape[0] != Y.shape[0]:
        raise NqfError(f"{where}: X has {X.shape[0]} samples but Y has {Y.shape[0]}")


def _targets(Y, num_samples: int, outputs: int, loss: str, dtype) -> np.ndarray:
    """Targets as (N, K) floats; integer labels (N,) become one-hot rows."""
    Y = np.asarray(Y)
    if Y.ndim == 0 or Y.shape[0] != num_samples:
        raise NqfError(f"targets Y must have {num_samples} rows (one per input), got shape {Y.shape}")
    labels = Y.ndim == 1 and (np.issubdtype(Y.dtype, np.integer) or np.issubdtype(Y.dtype, np.bool_))
    if labels and (outputs > 1 or loss == "cross_entropy"):
        if Y.size and (Y.min() < 0 or Y.max() >= outputs):
            raise NqfError(f"integer labels must lie in [0, {outputs}), got values in [{Y.min()}, {Y.max()}]")
        return np.eye(outputs, dtype=dtype)[Y.astype(np.int64)]
    if Y.ndim == 1 and outputs == 1:
        Y = Y[:, None]
    if Y.ndim == 1 and Y.dtype.kind == "f":
        raise NqfError(
            f"targets Y of shape {Y.shape} would be class labels, but they are floats (dtype {Y.dtype}); "
            f"give integer labels in [0, {outputs}) or targets of shape (N={num_samples}, K={outputs})"
        )
    if Y.ndim != 2 or Y.shape[1] != outputs:
        raise NqfError(
            f"targets Y must have shape (N={num_samples}, K={outputs})"
            + (" or integer labels (N,)" if outputs > 1 else " or (N,)")
            + f", got {Y.shape}"
        )
    Y = np.asarray(Y, dtype=dtype)  # no copy when it already is
    check_finite("targets Y", Y)
    if loss == "cross_entropy":
        if np.any(Y < 0) or not np.allclose(Y.sum(axis=1), 1.0, rtol=0, atol=1e-6):
            raise NqfError(
                "cross-entropy targets must be one-hot rows (or probabilities summing to 1) or integer labels"
            )
    return Y


def checked_samples(
    arch: Architecture, X, Y, loss: str = "squared", dtype=None
) -> tuple[np.ndarray, np.ndarray, jnp.dtype]:
    """(X, targets (N, K), dtype) after every check of :func:`data_matrices`; X is not copied."""
    check_loss(loss)
    X = np.asarray(X)
    if dtype is None:
        dtype = X.dtype if np.issubdtype(X.dtype, np.floating) else jnp.result_type(float)
    dtype = jnp.dtype(dtype)
    if X.ndim < 1 or X.shape[0] < 1:
        shape = ", ".join(map(str, arch.input_shape))
        raise NqfError(f"inputs X must have shape (N, {shape}) with N >= 1, got {X.shape}")
    if X.shape[1:] != tuple(arch.input_shape):
        raise NqfError(
            f"{arch.name}: inputs X must have shape (N, {', '.join(map(str, arch.input_shape))}), got {X.shape}"
        )
    check_finite("inputs X", X)
    if loss == "cross_entropy" and arch.outputs < 2:
        raise NqfError(
            f"{arch.name}: cross-entropy needs at least 2 outputs (softmax over outputs), got {arch.outputs}"
        )
    targets = _targets(Y, X.shape[0], arch.outputs, loss, dtype)
    return X, targets, dtype
