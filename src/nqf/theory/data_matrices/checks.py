"""The checks of sample files and arrays before any data matrix is built: .npz files
(:func:`read_npz`), finite and bounded entries (``MAX_ABS_ENTRY``), samples-first shapes and
targets (:func:`checked_samples`)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture
from nqf.core.arguments import real_array
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
            if float(np.finfo(part.dtype).max) <= MAX_ABS_ENTRY:  # float16: no finite entry is too large, and
                continue  # comparing with MAX_ABS_ENTRY would cast it to inf (an overflow warning)
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


def read_npz(path, names: tuple[str, ...], owner: str = "") -> dict[str, np.ndarray]:
    """Arrays ``names`` from the .npz file ``path``, each real, finite and bounded (MAX_ABS_ENTRY).

    Read by ``nqf.core.input_files.read_npz`` (headers checked against the file's size and the
    memory before anything is loaded, nothing unpickled), then checked for non-finite or too
    large entries. NqfError with one line for every way the file can be bad. Shapes are the
    caller's to check. ``owner`` prefixes the messages (e.g. "task npz: ").
    """
    from nqf.core.input_files import read_npz as read_arrays

    arrays = read_arrays(path, names, owner)
    for n, a in arrays.items():
        check_finite(f"{owner}{path}: array {n}", a)
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


def _one_float_per_sample(Y: np.ndarray, num_samples: int, outputs: int, loss: str) -> str:
    """The refusal of float targets of shape (N,) for ``outputs`` > 1 outputs (or cross-entropy):
    the shapes that are taken, and how to get each from Y."""
    got = f"targets Y of shape {Y.shape} (dtype {Y.dtype}) hold one float per sample"
    labels = f"integer class labels in [0, {outputs}) (Y.astype(int))"
    if loss == "cross_entropy":
        return (
            f"{got}, but cross-entropy over the architecture's {outputs} outputs needs {labels} or rows of "
            f"probabilities, shape (N={num_samples}, K={outputs})"
        )
    return (
        f"{got}, but the architecture has {outputs} outputs: for one output give it outputs=1 (--outputs 1), "
        f"which takes Y as (N,) or Y[:, None] of shape (N, 1); for {outputs} outputs Y must have shape "
        f"(N={num_samples}, K={outputs}); for classes give {labels}"
    )


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
        raise NqfError(_one_float_per_sample(Y, num_samples, outputs, loss))
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
    # ragged lists and complex numbers refused here: a cast to float would drop an imaginary part silently
    X, Y = real_array("inputs X", X), real_array("targets Y", Y)
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
