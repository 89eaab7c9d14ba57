r"""Data matrices: everything the flow of M = W W^T needs from a data set.

With the quadratic model f_c(x) = <M, A_c(x)> and a per-sample loss l(f, y), the
training dynamics close on M through (THEORY.md section 2)

    G(M) = E[ sum_c l'_c(f(x), y) A_c(x) ]                    (d, d), symmetric
    C    = E[ sum_c y_c A_c(x) ]                               (d, d)
    K[M] = E[ sum_c A_c(x) <A_c(x), M> ]                       (d, d), linear in M

where E is the sample mean. For the squared loss l = (1/2) sum_c (f_c - y_c)^2,
l' = f - y and G(M) = K[M] - C. For the cross-entropy loss (softmax over the K
outputs) l = logsumexp(f) - sum_c y_c f_c and l' = softmax(f) - y.

In a basis Q = [q_1 ... q_m] (d, m) the mode quantities are

    c_k  = q_k^T C q_k = E[ sum_c y_c q_k^T A_c q_k ]                 (mode_growth)
    K_kj = E[ sum_c (q_k^T A_c q_k)(q_j^T A_c q_j) ] = <P_k, K[P_j]>  (mode_interactions)

with P_k = q_k q_k^T. Everything is computed from the structured representation of
A (``forms``, ``contract``, ``quad``); an N x d x d stack is never built when the
architecture has a closed form.

:class:`PopulationDataMatrices` gives the same quantities in closed form for the
``mlp`` architecture with Gaussian inputs x ~ N(0, Sigma) and a linear teacher y = T x.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.activations import activation_derivatives
from nqf.architectures.architecture import Architecture, structure
from nqf.core.errors import NqfError
from nqf.architectures.structure import Structure

LOSSES = ("squared", "cross_entropy")


def _check_loss(loss: str) -> str:
    if loss not in LOSSES:
        raise NqfError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")
    return loss


def _per_sample_loss(loss: str, F: jax.Array, Y: jax.Array) -> jax.Array:
    """l(f_n, y_n) for every sample; F, Y: (N, K). Returns (N,)."""
    if loss == "squared":
        return 0.5 * jnp.sum((F - Y) ** 2, axis=1)
    return jax.nn.logsumexp(F, axis=1) - jnp.sum(Y * F, axis=1)


def _loss_derivative(loss: str, F: jax.Array, Y: jax.Array) -> jax.Array:
    """dl/df_c for every sample; F, Y: (N, K). Returns (N, K)."""
    if loss == "squared":
        return F - Y
    return jax.nn.softmax(F, axis=1) - Y


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class DataMatrices:
    """The data set seen by the M-flow: structured A(x_n) and targets y_n.

    Build with :func:`data_matrices`. Attributes:
        structure: :class:`~nqf.BlockFactors` or :class:`~nqf.DenseStructure` for N samples.
        targets: (N, K) targets (one-hot or class probabilities for cross-entropy).
        loss_type: ``squared`` or ``cross_entropy``.

    All methods take a symmetric M (d, d). A JAX pytree, so it can be passed into jit.
    """

    structure: Structure
    targets: jax.Array
    loss_type: str = field(metadata=dict(static=True))

    @property
    def dim(self) -> int:
        """d, the size of M."""
        return self.structure.dim

    @property
    def outputs_count(self) -> int:
        """K, the number of outputs."""
        return self.targets.shape[1]

    @property
    def num_samples(self) -> int:
        return self.targets.shape[0]

    @property
    def dtype(self):
        return self.targets.dtype

    def subset(self, indices: jax.Array) -> DataMatrices:
        """The samples ``indices`` (B,) only: a minibatch. Works under jit with traced indices."""
        picked = jax.tree_util.tree_map(lambda leaf: leaf[indices], self.structure)
        return DataMatrices(picked, self.targets[indices], self.loss_type)

    def _select(self, indices: jax.Array | None) -> DataMatrices:
        return self if indices is None else self.subset(indices)

    def outputs(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        """f_c(x_n) = <M, A_c(x_n)>, (N, K) (or (B, K) for a minibatch ``indices``)."""
        return self._select(indices).structure.forms(M)

    def loss(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        """L(M) = mean_n l(f(x_n), y_n): squared (1/2) mean_n sum_c (f - y)^2, or mean cross-entropy."""
        data = self._select(indices)
        F = data.structure.forms(M)
        return jnp.mean(_per_sample_loss(self.loss_type, F, data.targets))

    def loss_and_gradient(self, M: jax.Array, indices: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """(L(M), G(M)) sharing one evaluation of the outputs."""
        data = self._select(indices)
        F = data.structure.forms(M)
        value = jnp.mean(_per_sample_loss(self.loss_type, F, data.targets))
        return value, data.structure.contract(_loss_derivative(self.loss_type, F, data.targets))

    def gradient_matrix(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        """G(M) = E[sum_c l'_c(f, y) A_c(x)], (d, d); grad_W L = 2 G W. Minibatch mean with ``indices``."""
        data = self._select(indices)
        F = data.structure.forms(M)
        return data.structure.contract(_loss_derivative(self.loss_type, F, data.targets))

    @property
    def C(self) -> jax.Array:
        """C = E[sum_c y_c A_c(x)], (d, d). For squared loss G(M) = K[M] - C."""
        return self.structure.contract(self.targets)

    def K_apply(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        """K[M] = E[sum_c A_c(x) <A_c(x), M>], (d, d)."""
        s = self._select(indices).structure
        return s.contract(s.forms(M))

    def mode_interactions(self, Q: jax.Array) -> jax.Array:
        """K_kj = E[sum_c (q_k^T A_c q_k)(q_j^T A_c q_j)] for the columns of Q (d, m); returns (m, m)."""
        Q = _check_basis(Q, self.dim)
        P = self.structure.quad(Q)  # (N, K, m)
        return jnp.einsum("nck,ncj->kj", P, P) / P.shape[0]

    def mode_growth(self, Q: jax.Array) -> jax.Array:
        """c_k = q_k^T C q_k = E[sum_c y_c q_k^T A_c q_k] for the columns of Q (d, m); returns (m,)."""
        Q = _check_basis(Q, self.dim)
        P = self.structure.quad(Q)
        return jnp.einsum("nc,nck->k", self.targets, P) / P.shape[0]


def _check_basis(Q, d: int) -> jax.Array:
    Q = jnp.asarray(Q)
    if Q.ndim == 1:
        Q = Q[:, None]
    if Q.ndim != 2 or Q.shape[0] != d:
        raise NqfError(f"the basis Q must have shape (d={d}, m), got {tuple(Q.shape)}")
    return Q


# Largest |entry| accepted in data (X, Y) and initial weights. The structure and the
# moments multiply up to four entries (x^4 in the fourth moments S of the moments route,
# y x^2 in C), and eigensolvers and norms square those: (1e30)^8 = 1e240, summed over
# far fewer than 1e60 terms, stays below float64's 1.8e308. Larger entries would
# overflow to inf inside LAPACK ("Eigenvalues did not converge") instead of a clear error.
MAX_ABS_ENTRY = 1e30


def _finite(name: str, array: np.ndarray) -> None:
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
            kind = {"c": "complex", "O": "Python objects", "U": "strings", "S": "bytes", "V": "records",
                    "M": "dates", "m": "time spans"}.get(a.dtype.kind, "not real numbers")
            raise NqfError(f"{where}: array {n} must hold real numbers, got {kind} (dtype {a.dtype})")
        _finite(f"{where}: array {n}", a)
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
    _finite("targets Y", Y)
    if loss == "cross_entropy":
        if np.any(Y < 0) or not np.allclose(Y.sum(axis=1), 1.0, rtol=0, atol=1e-6):
            raise NqfError(
                "cross-entropy targets must be one-hot rows (or probabilities summing to 1) or integer labels"
            )
    return Y


def data_matrices(
    arch: Architecture, X, Y, loss: str = "squared", method: str = "auto", dtype=None
) -> DataMatrices:
    """DataMatrices of the samples X: (N, *input_shape) with targets Y.

    Y: (N, K) real targets, or (N,) when K = 1, or integer class labels (N,) (one-hot
    encoded; required form for cross-entropy together with one-hot/probability rows).
    loss: ``squared`` or ``cross_entropy`` (softmax over the K outputs; needs K >= 2).
    method: how A is represented, see :func:`nqf.structure` (closed form when known).
    dtype: floating dtype of the computation (default: X's if floating, else JAX's default float).
    """
    X, targets, dtype = checked_samples(arch, X, Y, loss, dtype)
    return DataMatrices(structure(arch, jnp.asarray(X, dtype=dtype), method=method), jnp.asarray(targets), loss)


def checked_samples(arch: Architecture, X, Y, loss: str = "squared", dtype=None) -> tuple[np.ndarray, np.ndarray, jnp.dtype]:
    """(X, targets (N, K), dtype) after every check of :func:`data_matrices`; X is not copied."""
    _check_loss(loss)
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
    _finite("inputs X", X)
    if loss == "cross_entropy" and arch.outputs < 2:
        raise NqfError(
            f"{arch.name}: cross-entropy needs at least 2 outputs (softmax over outputs), got {arch.outputs}"
        )
    targets = _targets(Y, X.shape[0], arch.outputs, loss, dtype)
    return X, targets, dtype


def flow_data(
    arch: Architecture, X, Y, loss: str = "squared", route: str = "auto", minibatches: bool = False, dtype=None
):
    """The data matrices the M-flow runs on, by the cheaper route, and the route chosen.

    Returns (DataMatrices or MomentDataMatrices, RouteChoice); see ``nqf.theory.moments.choose_route``.
    The moments route reads the samples in chunks and never holds all their structure matrices.
    """
    from nqf.theory.moments import choose_route, moment_data_matrices

    X, targets, dtype = checked_samples(arch, X, Y, loss, dtype)
    choice = choose_route(arch, X.shape[0], loss, route=route, minibatches=minibatches, dtype=dtype)
    if choice.route == "moments":
        return moment_data_matrices(arch, X, targets, dtype), choice
    if choice.chunk is not None:
        from nqf.theory.chunked import chunked_data_matrices

        return chunked_data_matrices(arch, X, targets, loss, dtype, choice.chunk), choice
    return DataMatrices(structure(arch, jnp.asarray(X, dtype=dtype)), jnp.asarray(targets), loss), choice


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class PopulationDataMatrices:
    r"""Exact population data matrices for ``mlp``: x ~ N(0, Sigma), y = T x, squared loss.

    With w = (a, v) (a: K readout, v: D input weights), s = sigma'(0) and
    A_c(x) = (s/2) [[0, e_c x^T], [x e_c^T, 0]], the model output is f = s M_av x with
    M_av the (a, v) block of M (K x D). Taking expectations over x:

        C    = (s/2)   [[0, T Sigma],    [Sigma T^T,    0]]
        K[M] = (s^2/2) [[0, M_av Sigma], [Sigma M_av^T, 0]]
        G(M) = K[M] - C = (s/2) [[0, E Sigma], [Sigma E^T, 0]],   E = s M_av - T
        L(M) = (1/2) Tr[E Sigma E^T]                     (exact, no constant dropped)
        q^T A_c q = s a_c (v . x)  =>  K_kj = s^2 (a_k . a_j)(v_k^T Sigma v_j),
                                        c_k  = s a_k^T T Sigma v_k.

    Same interface as :class:`DataMatrices` except for the per-sample methods
    (``outputs``, minibatches), which have no population counterpart.
    """

    covariance: jax.Array  # Sigma, (D, D)
    teacher: jax.Array  # T, (K, D)
    slope: float = field(metadata=dict(static=True))  # s = sigma'(0)
    loss_type: str = field(default="squared", metadata=dict(static=True))

    @property
    def outputs_count(self) -> int:
        return self.teacher.shape[0]

    @property
    def dim(self) -> int:
        return self.teacher.shape[0] + self.teacher.shape[1]

    @property
    def dtype(self):
        return self.teacher.dtype

    def _av(self, M: jax.Array) -> jax.Array:
        k = self.outputs_count
        return M[:k, k:]

    def _sym_block(self, B: jax.Array) -> jax.Array:
        """[[0, B], [B^T, 0]] for B (K, D)."""
        k, dd = B.shape
        top = jnp.concatenate([jnp.zeros((k, k), B.dtype), B], axis=1)
        bottom = jnp.concatenate([B.T, jnp.zeros((dd, dd), B.dtype)], axis=1)
        return jnp.concatenate([top, bottom], axis=0)

    @property
    def C(self) -> jax.Array:
        return 0.5 * self.slope * self._sym_block(self.teacher @ self.covariance)

    def K_apply(self, M: jax.Array) -> jax.Array:
        return 0.5 * self.slope**2 * self._sym_block(self._av(M) @ self.covariance)

    def _error(self, M: jax.Array) -> jax.Array:
        return self.slope * self._av(M) - self.teacher

    def gradient_matrix(self, M: jax.Array) -> jax.Array:
        return 0.5 * self.slope * self._sym_block(self._error(M) @ self.covariance)

    def loss(self, M: jax.Array) -> jax.Array:
        E = self._error(M)
        return 0.5 * jnp.trace(E @ self.covariance @ E.T)

    def loss_and_gradient(self, M: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.loss(M), self.gradient_matrix(M)

    def mode_interactions(self, Q: jax.Array) -> jax.Array:
        Q = _check_basis(Q, self.dim)
        k = self.outputs_count
        a, v = Q[:k], Q[k:]
        return self.slope**2 * (a.T @ a) * (v.T @ self.covariance @ v)

    def mode_growth(self, Q: jax.Array) -> jax.Array:
        Q = _check_basis(Q, self.dim)
        k = self.outputs_count
        a, v = Q[:k], Q[k:]
        return self.slope * jnp.sum(a * (self.teacher @ self.covariance @ v), axis=0)


def population_data_matrices(arch: Architecture, covariance, teacher, dtype=None) -> PopulationDataMatrices:
    """Population data matrices of ``mlp`` for x ~ N(0, covariance) and y = teacher @ x.

    covariance: (D, D) symmetric positive semidefinite; teacher: (K, D), D = inputs, K = outputs.
    """
    if arch.name != "mlp" or arch.router is not None:
        raise NqfError(
            f"the Gaussian-teacher closed form is derived for the 'mlp' architecture only, got {arch.name!r}"
        )
    k, dd = arch.outputs, arch.input_shape[0]
    if [b.name for b in arch.blocks] != ["a", "v"] or arch.block("a").shape != (k,):
        raise NqfError("mlp: expected parameter blocks [a (K), v (D)] in that order")
    Sigma, T = np.asarray(covariance), np.asarray(teacher)
    if Sigma.shape != (dd, dd):
        raise NqfError(f"covariance must have shape (D={dd}, D={dd}), got {Sigma.shape}")
    if T.shape != (k, dd):
        raise NqfError(f"teacher must have shape (K={k}, D={dd}), got {T.shape}")
    _finite("covariance", Sigma)
    _finite("teacher", T)
    scale = max(float(np.abs(Sigma).max()), 1e-300)
    if not np.allclose(Sigma, Sigma.T, rtol=0, atol=1e-10 * scale):
        raise NqfError("covariance must be symmetric")
    if np.linalg.eigvalsh(Sigma).min() < -1e-10 * scale:
        raise NqfError("covariance must be positive semidefinite")
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    slope, _ = activation_derivatives(arch.option("activation"))
    return PopulationDataMatrices(jnp.asarray(Sigma, dtype), jnp.asarray(T, dtype), float(slope))


AnyDataMatrices = DataMatrices | PopulationDataMatrices
