r"""Tasks: data sets with a known structure, each paired with the architecture it is made for.

A task is a frozen configuration. ``task.generate(key, dtype) -> (X, Y)`` draws the data
(X: (N, *input_shape), Y: (N, K)); ``key`` is an int seed or a JAX PRNG key. Data are
drawn with NumPy in float64 (so whitening is exact to rounding) and cast to ``dtype``
at the end; the same key always gives the same data. ``task.natural_architecture()``
gives the registry name and options of the architecture the task is built for, and
``task.architecture()`` builds it.

``task.spectrum()`` documents the growth coefficients of the theory's modes where they
are known: the positive eigenvalues c_k of the data matrix C = E[y A(x)] of the natural
architecture, in decreasing order (THEORY.md sections 2-3). Near M = 0, GD grows mode k's
occupation by (1 + 2 lr c_k)^2 per step. Tasks without a closed form return None.

Conventions: second moments are uncentred (E[x x^T], as the data matrices use them);
"whitened" means the *sample* second moment is exactly the identity, X^T X / N = I, so
the data matrices of the sample commute exactly and the population formulas hold for
the sample itself.

=============  =================================================  ======================
task           data                                               natural architecture
=============  =================================================  ======================
staircase      y = T x, T = U diag(s) V^T, s = (3, 2, 1, 0.5)      mlp (tanh)
powerlaw       y = T x, s_k = scale k^-alpha                      mlp (tanh)
quadratic      y = x^T Q x, Q = R diag(lambda) R^T                mlp-fixed (square)
fourier        stationary x with power spectrum P(f); y = x_0     conv1d, circular, per position
icl            in-context linear regression prompts               linear-attention
tokens         y = T xbar (+ a part uniform attention can't see)  attention
experts        y = T x                                            moe (softmax gate)
digits         scikit-learn's 8x8 digits, centred one-hot         mlp (tanh)
npz            the user's arrays X, Y from an .npz file           mlp when X is 2-D
=============  =================================================  ======================
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture
from nqf.core.errors import NqfError
from nqf.core.precision import resolve_dtype

# -- helpers ---------------------------------------------------------------------------


def _rng(key) -> np.random.Generator:
    """A NumPy generator from an int seed or a JAX PRNG key (typed or raw uint32)."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if key < 0:
            raise NqfError(f"seed must be >= 0, got {key}")
        return np.random.default_rng(int(key))
    try:
        arr = jnp.asarray(key)
        if jnp.issubdtype(arr.dtype, jax.dtypes.prng_key):
            arr = jax.random.key_data(arr)
        words = np.asarray(arr).astype(np.uint64).ravel().tolist()
    except (TypeError, ValueError):
        raise NqfError(f"key must be an int seed or a JAX PRNG key, got {type(key).__name__}") from None
    return np.random.default_rng(words)


def _orthogonal(rng: np.random.Generator, size: int) -> np.ndarray:
    """Haar-random orthogonal matrix (QR of a Gaussian matrix with the sign fix)."""
    q, r = np.linalg.qr(rng.standard_normal((size, size)))
    return q * np.sign(np.diag(r))


def _sym_power(S: np.ndarray, power: float) -> np.ndarray:
    """S^power for a symmetric positive definite S."""
    vals, vecs = np.linalg.eigh(S)
    return (vecs * vals**power) @ vecs.T


def _whiten_to(Z: np.ndarray, target: np.ndarray | None) -> np.ndarray:
    """Z (N, D) mapped linearly so that its sample second moment is exactly ``target`` (I when None)."""
    S = Z.T @ Z / Z.shape[0]
    X = Z @ _sym_power(S, -0.5)
    return X if target is None else X @ _sym_power(target, 0.5)


def _toeplitz_correlation(D: int, rho: float) -> np.ndarray:
    idx = np.arange(D)
    return rho ** np.abs(idx[:, None] - idx[None, :])


def _cast(dtype, *arrays: np.ndarray) -> tuple[jax.Array, ...]:
    dt = resolve_dtype(dtype)
    return tuple(jnp.asarray(np.asarray(a, dtype=np.float64), dtype=dt) for a in arrays)


def _positive_int(task: str, option: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise NqfError(f"task {task}: option {option} must be a positive integer, got {value!r}")
    return int(value)


def _positive_values(task: str, option: str, values) -> tuple[float, ...]:
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise NqfError(f"task {task}: option {option} must be a list of numbers, got {values!r}") from None
    if not out or any(not math.isfinite(v) or v <= 0 for v in out):
        raise NqfError(f"task {task}: option {option} must be positive finite numbers, got {values!r}")
    return out


def _check_float(task: str, option: str, value, low: float = -math.inf, high: float = math.inf, open_: bool = False):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise NqfError(f"task {task}: option {option} must be a number, got {value!r}") from None
    ok = (low < v < high) if open_ else (low <= v <= high)
    if not math.isfinite(v) or not ok:
        bounds = f"({low}, {high})" if open_ else f"[{low}, {high}]"
        raise NqfError(f"task {task}: option {option} must lie in {bounds}, got {value!r}")


# -- the base class --------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """Base class: a frozen task configuration (subclasses add the options as fields)."""

    name: ClassVar[str] = ""

    def _draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def generate(self, key=0, dtype=None) -> tuple[jax.Array, jax.Array]:
        """Draw the data set: X (N, *input_shape), Y (N, K), both of ``dtype``."""
        dt = resolve_dtype(dtype)  # fail before drawing
        X, Y = self._draw(_rng(key))
        return _cast(dt, X, Y)

    def natural_architecture(self) -> tuple[str, dict[str, Any]]:
        """(registry name, options) of the architecture this task is made for."""
        raise NotImplementedError

    def architecture(self) -> Architecture:
        """The natural architecture, built from the registry."""
        from nqf.architectures import get_architecture

        name, options = self.natural_architecture()
        return get_architecture(name, **options)

    def spectrum(self, key=0) -> np.ndarray | None:
        """Positive eigenvalues c_k of C = E[y A(x)] for the natural architecture (decreasing), or None."""
        return None

    def options(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


# -- linear teachers: staircase, powerlaw, experts -------------------------------------


@dataclass(frozen=True)
class _LinearTeacher(Task):
    """y = T x with T = U diag(s) V^T (U: K x r, V: D x r Haar-random orthonormal columns).

    Inputs are Gaussian; with ``whiten`` the sample second moment is made exactly
    Sigma (Sigma = I unless ``correlation`` rho != 0, then Sigma_ij = rho^|i-j|). The
    teacher is drawn first from the key, then the inputs, so the teacher does not
    depend on the number of samples.
    """

    def _singular_values(self) -> np.ndarray:
        raise NotImplementedError

    def _dims(self) -> tuple[int, int, int, bool, float]:
        return self.inputs, self.outputs, self.samples, self.whiten, self.correlation

    def _check_linear(self):
        D, K, N, whiten, rho = self._dims()
        _positive_int(self.name, "inputs", D)
        _positive_int(self.name, "outputs", K)
        _positive_int(self.name, "samples", N)
        _check_float(self.name, "correlation", rho, -1.0, 1.0, open_=True)
        r = len(self._singular_values())
        if r > min(D, K):
            raise NqfError(f"task {self.name}: {r} singular values need inputs and outputs >= {r} (got {D}, {K})")
        if whiten and N < D:
            raise NqfError(f"task {self.name}: whitening needs samples >= inputs ({D}), got {N}")

    def input_covariance(self) -> np.ndarray:
        D, _, _, _, rho = self._dims()
        return _toeplitz_correlation(D, rho) if rho != 0 else np.eye(D)

    def teacher(self, key=0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(U (K, r), s (r,), V (D, r)) with T = U diag(s) V^T, float64 NumPy."""
        return self._teacher(_rng(key))

    def _teacher(self, rng):
        D, K, _, _, _ = self._dims()
        s = self._singular_values()
        r = len(s)
        U = _orthogonal(rng, K)[:, :r]
        V = _orthogonal(rng, D)[:, :r]
        return U, s, V

    def _draw(self, rng):
        D, K, N, whiten, rho = self._dims()
        U, s, V = self._teacher(rng)
        Z = rng.standard_normal((N, D))
        Sigma = self.input_covariance()
        if whiten:
            X = _whiten_to(Z, None if rho == 0 else Sigma)
        else:
            X = Z @ _sym_power(Sigma, 0.5)
        Y = X @ (V * s) @ U.T  # rows y_n = T x_n
        return X, Y

    def _slope(self) -> float:
        from nqf.architectures.activations import activation_derivatives

        return activation_derivatives(self.activation)[0]

    def _gate(self) -> float:
        return 1.0

    def spectrum(self, key=0) -> np.ndarray:
        """c_k = g0 sigma'(0)/2 times the singular values of E[y x^T] = T Sigma.

        For uncorrelated whitened inputs these are g0 sigma'(0) s_k / 2, exact for the
        sample; with correlated inputs they depend on the teacher (``key``) and C no
        longer shares its eigenbasis with K.
        """
        coeff = 0.5 * self._gate() * self._slope()
        if self._dims()[4] == 0:
            return coeff * np.sort(self._singular_values())[::-1]
        U, s, V = self.teacher(key)
        return coeff * np.linalg.svd((U * s) @ V.T @ self.input_covariance(), compute_uv=False)[: len(s)]

    def fixed_point_occupations(self) -> np.ndarray:
        """m_k* = 2 s_k / (g0 sigma'(0)): the occupation at which the quadratic model fits mode k.

        With q_k = (u_k, v_k)/sqrt 2 the model's map is g0 sigma'(0) sum_k m_k u_k v_k^T / 2.
        """
        return 2.0 * np.asarray(self._singular_values()) / (self._gate() * self._slope())

    def plateau_losses(self) -> np.ndarray | None:
        """L_j = (1/2) sum_{k>j} s_k^2 for j = 0..r: the loss with the first j modes learned.

        Exact for the sample when the inputs are whitened and uncorrelated; None otherwise.
        """
        D, K, N, whiten, rho = self._dims()
        if not whiten or rho != 0:
            return None
        s2 = np.asarray(self._singular_values()) ** 2
        return 0.5 * np.concatenate([np.cumsum(s2[::-1])[::-1], [0.0]])

    def _layout(self) -> tuple[int, int, int]:
        """(offset of the readout block a, offset of the input-weight block v, d)."""
        D, K = self.inputs, self.outputs
        return 0, K, K + D

    def mode_basis(self, key=0) -> np.ndarray:
        """The growing modes q_k = (u_k, v_k)/sqrt 2 in the natural architecture's W layout, (d, r)."""
        U, s, V = self.teacher(key)
        a0, v0, d = self._layout()
        K, D = self.outputs, self.inputs
        Q = np.zeros((d, len(s)))
        Q[a0 : a0 + K] = U / math.sqrt(2)
        Q[v0 : v0 + D] = V / math.sqrt(2)
        return Q


@dataclass(frozen=True)
class Staircase(_LinearTeacher):
    """Linear teacher with a few well-separated modes: y = U diag(s) V^T x.

    Defaults: K = 4 outputs, D = 8 inputs, s = (3, 2, 1, 0.5), N = 256 whitened samples
    (X^T X / N = I exactly). For the tanh perceptron (sigma'(0) = 1) the modes
    q_k = (u_k, v_k)/sqrt 2 have c_k = s_k / 2, fixed-point occupations m_k* = 2 s_k
    and plateau losses (1/2) sum_{j>k} s_j^2 (THEORY.md section 3, worked case).
    ``correlation`` rho != 0 gives inputs with second moment rho^|i-j| (exact when
    whitened), so C and K no longer share an eigenbasis.
    """

    name: ClassVar[str] = "staircase"
    inputs: int = 8
    outputs: int = 4
    singular_values: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 256
    whiten: bool = True
    correlation: float = 0.0
    activation: str = "tanh"

    def __post_init__(self):
        object.__setattr__(self, "singular_values", _positive_values(self.name, "singular_values", self.singular_values))
        self._check_linear()

    def _singular_values(self):
        return np.asarray(self.singular_values, dtype=np.float64)

    def natural_architecture(self):
        return "mlp", {"inputs": self.inputs, "outputs": self.outputs, "activation": self.activation}


@dataclass(frozen=True)
class PowerLaw(_LinearTeacher):
    """Linear teacher with many modes, s_k = scale * k^-alpha for k = 1..modes.

    For the tanh perceptron c_k = s_k / 2 ~ k^-alpha and K is diagonal (K_kk = 1/4), so
    the loss decays as a power law in the singular limit (THEORY.md section 4,
    gamma = 0: L - L_inf ~ (t/eps)^-(2 - 1/alpha)).
    """

    name: ClassVar[str] = "powerlaw"
    modes: int = 32
    alpha: float = 1.0
    scale: float = 1.0
    inputs: int = 32
    outputs: int = 32
    samples: int = 512
    whiten: bool = True
    correlation: float = 0.0
    activation: str = "tanh"

    def __post_init__(self):
        _positive_int(self.name, "modes", self.modes)
        _check_float(self.name, "alpha", self.alpha, 0.0, math.inf, open_=True)
        _check_float(self.name, "scale", self.scale, 0.0, math.inf, open_=True)
        self._check_linear()

    def _singular_values(self):
        return self.scale * np.arange(1, self.modes + 1, dtype=np.float64) ** (-self.alpha)

    def natural_architecture(self):
        return "mlp", {"inputs": self.inputs, "outputs": self.outputs, "activation": self.activation}


@dataclass(frozen=True)
class Experts(_LinearTeacher):
    """The staircase teacher y = U diag(s) V^T x, learned by a mixture of experts.

    Experts h = a sigma(v.x) as units with a softmax gate; the width must equal
    ``experts`` = E. At w = 0 the gate is uniform (g0 = 1/E), so the modes are the
    staircase's with c_k = sigma'(0) s_k / (2E) and m_k* = 2 E s_k / sigma'(0): E times
    slower escape than the plain perceptron. Mode vectors live on the [a, u, v] layout
    as (u_k, 0, v_k)/sqrt 2 (the gate block u is not excited at second order).
    """

    name: ClassVar[str] = "experts"
    inputs: int = 8
    outputs: int = 4
    experts: int = 4
    singular_values: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 256
    whiten: bool = True
    correlation: float = 0.0
    activation: str = "tanh"

    def __post_init__(self):
        object.__setattr__(self, "singular_values", _positive_values(self.name, "singular_values", self.singular_values))
        _positive_int(self.name, "experts", self.experts)
        self._check_linear()

    def _singular_values(self):
        return np.asarray(self.singular_values, dtype=np.float64)

    def _gate(self) -> float:
        return 1.0 / self.experts

    def _layout(self):
        # moe flattens [a (K), u (D), v (D)]
        K, D = self.outputs, self.inputs
        return 0, K + D, K + 2 * D

    def natural_architecture(self):
        return "moe", {
            "inputs": self.inputs,
            "outputs": self.outputs,
            "experts": self.experts,
            "activation": self.activation,
            "routing": "softmax",
        }


# -- quadratic teacher -----------------------------------------------------------------


@dataclass(frozen=True)
class Quadratic(Task):
    """Quadratic teacher y = x^T Q x, Q = R diag(lambda) R^T (R Haar-random), x ~ N(0, I_D).

    For fixed-readout units with sigma''(0) = 1 (``square``: z^2/2) A(x) = x x^T / 2 and
    the model is f = x^T M x / 2, fitted by M* = 2 Q. Population moments (Gaussian x,
    Isserlis): C = E[y A] = Q + Tr(Q)/2 I and K[P_j] = (2 P_j + I)/4, so in Q's
    eigenbasis c_k = lambda_k + Tr(Q)/2 (every direction, also those with lambda = 0,
    starts growing at rate Tr(Q)/2), K_kj = (2 delta_kj + 1)/4, m_k* = 2 lambda_k.
    The sample moments differ from these by O(1/sqrt N). y is not centred.
    """

    name: ClassVar[str] = "quadratic"
    inputs: int = 8
    eigenvalues: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 2048

    def __post_init__(self):
        object.__setattr__(self, "eigenvalues", _positive_values(self.name, "eigenvalues", self.eigenvalues))
        _positive_int(self.name, "inputs", self.inputs)
        _positive_int(self.name, "samples", self.samples)
        if len(self.eigenvalues) > self.inputs:
            raise NqfError(f"task {self.name}: {len(self.eigenvalues)} eigenvalues need inputs >= that, got {self.inputs}")

    def teacher(self, key=0) -> np.ndarray:
        """Q (D, D), float64 NumPy."""
        return self._teacher(_rng(key))

    def _teacher(self, rng):
        R = _orthogonal(rng, self.inputs)[:, : len(self.eigenvalues)]
        return (R * np.asarray(self.eigenvalues)) @ R.T

    def _draw(self, rng):
        Q = self._teacher(rng)
        X = rng.standard_normal((self.samples, self.inputs))
        Y = np.einsum("ni,ij,nj->n", X, Q, X)[:, None]
        return X, Y

    def spectrum(self, key=0) -> np.ndarray:
        """Population c_k = lambda_k + Tr(Q)/2 (lambda padded with zeros to D), decreasing."""
        lam = np.zeros(self.inputs)
        lam[: len(self.eigenvalues)] = self.eigenvalues
        return np.sort(lam + 0.5 * lam.sum())[::-1]

    def fixed_point_occupations(self) -> np.ndarray:
        """m_k* = 2 lambda_k on Q's eigenvectors (population)."""
        return 2.0 * np.asarray(self.eigenvalues)

    def natural_architecture(self):
        return "mlp-fixed", {"inputs": self.inputs, "activation": "square"}


# -- circular convolution --------------------------------------------------------------


@dataclass(frozen=True)
class Fourier(Task):
    """Translation-invariant signals for circular convolution with a per-position readout.

    x in R^L is Gaussian and stationary: its second moment is the circulant Sigma with
    eigenvalues P(f) = (1 + |f|)^-alpha, |f| = min(f, L - f) (cos/sin pairs share P).
    With ``exact`` the sample second moment is made exactly Sigma. The target is
    y = x_0, so E[y x_m] = Sigma_m0 and the coupling of conv1d (kernel = L, circular,
    readout per position) is the circular Hankel matrix C_{pj} = sigma'(0)/2 Sigma_{(p+j) mod L, 0}
    whose singular values are sigma'(0) P(f) / 2: the modes are the Fourier
    frequencies, with c_f = sigma'(0) P(f) / 2 (THEORY.md section 1, convolution).
    """

    name: ClassVar[str] = "fourier"
    length: int = 16
    alpha: float = 1.0
    samples: int = 1024
    exact: bool = True
    activation: str = "tanh"

    def __post_init__(self):
        _positive_int(self.name, "length", self.length)
        _positive_int(self.name, "samples", self.samples)
        _check_float(self.name, "alpha", self.alpha, 0.0, math.inf)
        if self.exact and self.samples < self.length:
            raise NqfError(f"task {self.name}: exact covariance needs samples >= length ({self.length})")

    def power_spectrum(self) -> np.ndarray:
        """P(f) for f = 0..L-1 (frequency order)."""
        f = np.arange(self.length)
        return (1.0 + np.minimum(f, self.length - f)) ** (-self.alpha)

    def covariance(self) -> np.ndarray:
        """The circulant Sigma_ij = c((i - j) mod L), c = inverse DFT of P."""
        c = np.real(np.fft.ifft(self.power_spectrum()))
        idx = np.arange(self.length)
        return c[(idx[:, None] - idx[None, :]) % self.length]

    def _draw(self, rng):
        Z = rng.standard_normal((self.samples, self.length))
        Sigma = self.covariance()
        X = _whiten_to(Z, Sigma) if self.exact else Z @ _sym_power(Sigma, 0.5)
        return X, X[:, :1].copy()

    def spectrum(self, key=0) -> np.ndarray:
        from nqf.architectures.activations import activation_derivatives

        slope = activation_derivatives(self.activation)[0]
        return np.sort(0.5 * slope * self.power_spectrum())[::-1]

    def natural_architecture(self):
        return "conv1d", {
            "length": self.length,
            "kernel": self.length,
            "padding": "circular",
            "readout": "position",
            "outputs": 1,
            "activation": self.activation,
        }


# -- in-context regression -------------------------------------------------------------


@dataclass(frozen=True)
class ICL(Task):
    """In-context linear regression prompts for linear attention.

    Per prompt: a task w ~ N(0, Lambda) (Lambda diagonal), inputs x_i, x_q ~ N(0, I_D),
    labels y_i = w . x_i + noise * eps_i. The prompt is (N+1, D+1): rows z_i = (x_i, y_i)
    for the ``context`` pairs, then the query row (x_q, 0); the target is w . x_q
    (+ noise). Defaults follow THEORY.md: D = 4, Lambda = (4, 3, 2, 1)/10, N = 31.

    Population data matrix for linear-attention (merged W_KQ, w_OV): E[y_q B] is
    nonzero only where w_OV picks the label row and W_KQ maps x to x (entries
    Lambda_bc, singular value ||Lambda||_F), and where w_OV picks input row a and W_KQ
    maps the label column to x_q (entries Lambda_ac, singular values lambda_k). So
    c = (||Lambda||_F / 2, lambda_1/2, ..., lambda_D/2). The largest mode (w_OV on the
    label row, W_KQ = Lambda on the input block) carries the in-context map
    f = (1/N) sum_i y_i x_i^T Lambda x_q. Sample values differ by O(1/sqrt(prompts)).
    """

    name: ClassVar[str] = "icl"
    dim: int = 4
    context: int = 31
    prompts: int = 20000
    task_variances: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)
    noise: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "task_variances", _positive_values(self.name, "task_variances", self.task_variances))
        _positive_int(self.name, "dim", self.dim)
        _positive_int(self.name, "context", self.context)
        _positive_int(self.name, "prompts", self.prompts)
        _check_float(self.name, "noise", self.noise, 0.0, math.inf)
        if len(self.task_variances) != self.dim:
            raise NqfError(f"task {self.name}: task_variances needs {self.dim} entries (dim), got {len(self.task_variances)}")

    def _draw(self, rng):
        P, N, D = self.prompts, self.context, self.dim
        w = rng.standard_normal((P, D)) * np.sqrt(np.asarray(self.task_variances))
        x = rng.standard_normal((P, N + 1, D))
        y = np.einsum("pnd,pd->pn", x, w) + self.noise * rng.standard_normal((P, N + 1))
        prompts = np.concatenate([x, y[..., None]], axis=-1)
        prompts[:, N, D] = 0.0  # the query's label is hidden
        return prompts, y[:, N : N + 1]

    def spectrum(self, key=0) -> np.ndarray:
        lam = np.asarray(self.task_variances)
        return np.sort(0.5 * np.concatenate([[np.linalg.norm(lam)], lam]))[::-1]

    def natural_architecture(self):
        return "linear-attention", {"dim": self.dim, "context": self.context}


# -- softmax attention -----------------------------------------------------------------


@dataclass(frozen=True)
class Tokens(Task):
    """Token sequences for softmax attention: y = T (xbar + q r), r = x_last - xbar decorrelated from xbar.

    x_t ~ N(0, I_D) i.i.d. tokens (T of them); the whole stack is transformed linearly
    so that the mean token xbar has sample second moment exactly I. The teacher
    T = U diag(s) V^T is the staircase's. At w = 0 attention is uniform and the head is
    a perceptron on xbar (THEORY.md section 1), so the leading-order modes are the
    staircase's: c_k = s_k / 2, each repeated value_dim times (one copy per value
    channel). The second part (``query_weight`` q, default 0) depends on the last
    token beyond the mean; it is made exactly uncorrelated with xbar in the sample, so
    the quadratic form cannot see it: it stays in the loss (a plateau of
    (1/2) mean |q T r|^2) until the scores (fourth order in the weights) learn to
    attend to the query.
    """

    name: ClassVar[str] = "tokens"
    tokens: int = 8
    dim: int = 8
    outputs: int = 4
    singular_values: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 256
    query_weight: float = 0.0
    key_dim: int = 4
    value_dim: int = 4

    def __post_init__(self):
        object.__setattr__(self, "singular_values", _positive_values(self.name, "singular_values", self.singular_values))
        for opt in ("tokens", "dim", "outputs", "samples", "key_dim", "value_dim"):
            _positive_int(self.name, opt, getattr(self, opt))
        _check_float(self.name, "query_weight", self.query_weight)
        r = len(self.singular_values)
        if r > min(self.dim, self.outputs):
            raise NqfError(f"task {self.name}: {r} singular values need dim and outputs >= {r}")
        if self.samples < self.dim:
            raise NqfError(f"task {self.name}: whitening the mean token needs samples >= dim ({self.dim})")

    def teacher(self, key=0):
        """(U (K, r), s (r,), V (D, r)) with T = U diag(s) V^T."""
        return self._teacher(_rng(key))

    def _teacher(self, rng):
        s = np.asarray(self.singular_values)
        return _orthogonal(rng, self.outputs)[:, : len(s)], s, _orthogonal(rng, self.dim)[:, : len(s)]

    def _draw(self, rng):
        U, s, V = self._teacher(rng)
        Xt = rng.standard_normal((self.samples, self.tokens, self.dim))
        xbar = Xt.mean(axis=1)
        Xt = Xt @ _sym_power(xbar.T @ xbar / self.samples, -0.5)
        xbar = Xt.mean(axis=1)
        r = Xt[:, -1] - xbar
        r = r - xbar @ np.linalg.solve(xbar.T @ xbar, xbar.T @ r)  # exactly uncorrelated with xbar
        teacher = V @ np.diag(s) @ U.T  # x -> T x as a right-multiplication
        return Xt, (xbar + self.query_weight * r) @ teacher

    def spectrum(self, key=0) -> np.ndarray:
        return np.repeat(0.5 * np.sort(self.singular_values)[::-1], self.value_dim)

    def natural_architecture(self):
        return "attention", {
            "tokens": self.tokens,
            "dim": self.dim,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "outputs": self.outputs,
            "readout": "last",
        }


# -- real data -------------------------------------------------------------------------


@dataclass(frozen=True)
class Digits(Task):
    """scikit-learn's bundled 8x8 digits (1797 x 64, no download), 10 one-hot targets.

    Preprocessing: pixels / 16 (to [0, 1]); with ``standardize`` each pixel is then
    centred and scaled to unit variance over the samples used (pixels that are constant
    are set to 0); one-hot targets, with ``center_targets`` minus 1/10 so each row sums
    to 0 (the bias-free layer cannot fit a constant). ``samples`` < 1797 takes a
    random subset (from the key); no closed-form spectrum.
    """

    name: ClassVar[str] = "digits"
    samples: int | None = None
    standardize: bool = True
    center_targets: bool = True

    def __post_init__(self):
        if self.samples is not None:
            _positive_int(self.name, "samples", self.samples)
            if self.samples > 1797:
                raise NqfError(f"task {self.name}: the digits data set has 1797 samples, asked for {self.samples}")

    def _draw(self, rng):
        from sklearn.datasets import load_digits

        data = load_digits()
        X = np.asarray(data.data, dtype=np.float64) / 16.0
        labels = np.asarray(data.target)
        if self.samples is not None and self.samples < len(labels):
            pick = np.sort(rng.choice(len(labels), self.samples, replace=False))
            X, labels = X[pick], labels[pick]
        if self.standardize:
            std = X.std(axis=0)
            X = np.where(std > 0, (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0), 0.0)
        Y = np.eye(10)[labels]
        if self.center_targets:
            Y = Y - 0.1
        return X, Y

    def natural_architecture(self):
        return "mlp", {"inputs": 64, "outputs": 10, "activation": "tanh"}


@dataclass(frozen=True)
class Npz(Task):
    """The user's own data: arrays ``X`` (N, *input_shape) and ``Y`` (N,) or (N, K) in an .npz file.

    Samples come first in both. Missing file or keys, mismatched sample counts,
    non-numeric or non-finite values raise NqfError. The key is not used.
    """

    name: ClassVar[str] = "npz"
    path: str = ""

    def __post_init__(self):
        if not isinstance(self.path, (str, os.PathLike)) or not str(self.path):
            raise NqfError("task npz: option path (the .npz file with arrays X and Y) is required")

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        """X, Y as float64 NumPy arrays (Y always 2-D), validated (``nqf.theory.data_matrices.read_npz``).

        Entries must be real (integers, booleans or floats), finite and at most
        ``MAX_ABS_ENTRY`` (1e30) in magnitude; the messages name the file and the array.
        """
        from nqf.theory.data_matrices import check_sample_arrays, read_npz

        path = str(self.path)
        arrays = read_npz(path, ("X", "Y"), owner="task npz: ")
        X, Y = arrays["X"], arrays["Y"]
        where = f"task npz: {path}"
        check_sample_arrays(where, X, Y)
        X, Y = X.astype(np.float64), Y.astype(np.float64)
        if Y.ndim == 1:
            Y = Y[:, None]
        if X.ndim < 2:
            raise NqfError(f"{where}: X must be (N, *input_shape), got shape {X.shape}")
        if Y.ndim != 2:
            raise NqfError(f"{where}: Y must be (N,) or (N, K), got shape {Y.shape}")
        if min(X.shape[1:]) == 0 or Y.shape[1] == 0:
            raise NqfError(f"{where}: X {X.shape} and Y {Y.shape} must have at least one number per sample")
        return X, Y

    def _draw(self, rng):
        return self.load()

    def natural_architecture(self):
        X, Y = self.load()
        if X.ndim != 2:
            raise NqfError(f"task npz: no natural architecture for inputs of shape {X.shape[1:]}; choose one")
        return "mlp", {"inputs": X.shape[1], "outputs": Y.shape[1], "activation": "tanh"}


# -- registry --------------------------------------------------------------------------

TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (Staircase, PowerLaw, Quadratic, Fourier, ICL, Tokens, Experts, Digits, Npz)
}


def _task_class(name: str) -> type[Task]:
    try:
        return TASKS[name]
    except KeyError:
        raise NqfError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}") from None


def task_options(name: str) -> dict[str, Any]:
    """The options of a task with their defaults."""
    return {f.name: f.default for f in dataclasses.fields(_task_class(name))}


def get_task(name: str, **options: Any) -> Task:
    """Build a task by name; unknown options raise NqfError. Lists become tuples (hashable configs)."""
    cls = _task_class(name)
    known = task_options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise NqfError(f"task {name!r} has no option {', '.join(unknown)}; its options are {', '.join(known)}")
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    return cls(**options)

