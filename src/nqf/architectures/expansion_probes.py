"""The numbers the expansion check reads (``nqf.architectures.expansion_verdict``): probe points,
the evaluations of the unit and of the routed layer near w = 0, and the remainder
ratios with their rounding floor and fitted order (definitions: that module's docstring).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture, network
from nqf.core.host_eval import host_or_compiled

EPS_FLOAT64 = (1e-1, 1e-2, 1e-3, 1e-4)
EPS_FLOAT32 = (1e-1, 3e-2, 1e-2, 3e-3)
_ROUNDING_FACTOR = 16.0
_MIN_ORDER = 0.5  # a fitted remainder order below this means the ratio does not fall


def _unit_directions(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Gaussian directions normalised to unit norm along the last axis."""
    w = rng.standard_normal(shape)
    return w / np.linalg.norm(w, axis=-1, keepdims=True)


def log_log_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def _remainder_order(eps: np.ndarray, ratios: np.ndarray, floor: np.ndarray) -> tuple[float, bool]:
    """Fitted order p of ratios ~ eps^p over the resolved points, and whether the ratio falls.

    Two or more resolved points: least-squares slope, falls when p >= 1/2. None: the
    ratio is at rounding level everywhere (p = inf, falls). One resolved point: no
    order can be fitted (p = nan); the ratio fell under rounding unless that point is
    the smallest eps (then it rose out of rounding as eps shrank: p is the slope from
    the previous floor, and it does not fall).
    """
    resolved = ratios > floor
    count = int(resolved.sum())
    if count == 0:
        return math.inf, True
    if count >= 2:
        order = log_log_slope(eps[resolved], ratios[resolved])
        return order, order >= _MIN_ORDER
    i = int(np.flatnonzero(resolved)[0])
    if i == len(eps) - 1:
        return log_log_slope(eps[i - 1 : i + 1], np.array([floor[i - 1], ratios[i]])), False
    return math.nan, True


@dataclass(frozen=True)
class Samples:
    """The probe points, drawn once per check (numpy arrays of the working dtype).

    Attributes:
        X: (N, *input_shape) inputs x_n ~ N(0, I).
        W: (N, d) unit directions w_n of the single unit.
        Ws: (N, d, n) unit-norm columns of a whole layer of n = router.units units (n = 1 without a router).
    """

    X: np.ndarray
    W: np.ndarray
    Ws: np.ndarray


def draw_samples(arch: Architecture, key: jax.Array, num_inputs: int, dtype) -> Samples:
    """The probe points of ``arch``, from numpy's generator seeded with the bits of ``key``.

    Drawing them with jax.random inside the compiled probe would compile threefry each time.
    """
    units = 1 if arch.router is None else arch.router.units
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    X = np.asarray(rng.standard_normal((num_inputs, *arch.input_shape)), dtype=dtype)
    W = np.asarray(_unit_directions(rng, (num_inputs, arch.dim)), dtype=dtype)
    Ws = np.ascontiguousarray(_unit_directions(rng, (num_inputs, units, arch.dim)).swapaxes(1, 2), dtype=dtype)
    return Samples(X, W, Ws)


@dataclass(frozen=True)
class UnitFunctions:
    """The effective unit g0 phi(w, x) of a flat w, (K,), and its quadratic part w^T A(x) w, (K,)."""

    effective_unit: Callable
    quadratic: Callable


def unit_functions(arch: Architecture, dtype) -> UnitFunctions:
    """The effective unit and its quadratic form, with the gate weight g0 evaluated once
    (evaluating the router inside every trace recompiles it)."""
    gate = arch.zero_gate_weight()

    def effective_unit(w, x):
        """g0 phi(w, x) for a flat w, (K,): Architecture.effective_unit with g0 hoisted."""
        return gate * jnp.reshape(arch.unit(arch.unravel(w), x), (arch.outputs,))

    def quadratic(w, x):
        # w^T A(x) w = (1/2) d^2/dt^2 g0 phi(t w, x) at t = 0 (the same A as structure_matrix)
        along = lambda t: effective_unit(t * w, x)  # noqa: E731
        return 0.5 * jax.jacfwd(jax.jacfwd(along))(jnp.zeros((), dtype))

    return UnitFunctions(effective_unit, quadratic)


@dataclass(frozen=True)
class UnitProbe:
    """The single unit at the probe points, float64 numpy arrays (N points, K outputs, E scales).

    Attributes:
        value0: (N, K) phi(0, x_n); grad_norm: (N, K) |grad_w phi(0, x_n)|;
        slope0: (N, K) grad_w phi(0, x_n) . w_n; quad: (N, K) w_n^T A(x_n) w_n;
        values: (E, N, K) phi(eps w_n, x_n) for every eps of the ladder.
    """

    value0: np.ndarray
    grad_norm: np.ndarray
    slope0: np.ndarray
    quad: np.ndarray
    values: np.ndarray


def probe_unit(fns: UnitFunctions, samples: Samples, eps: tuple[float, ...], dtype) -> UnitProbe:
    """Evaluate the unit, its gradient and its quadratic form at w = 0 and along the eps ladder: one
    call, interpreted in numpy when small (``nqf.core.host_eval``), else one compiled program."""
    effective_unit, quadratic = fns.effective_unit, fns.quadratic

    def probe(w, x):
        zero = jnp.zeros_like(w)
        value0 = effective_unit(zero, x)  # (K,)
        grad0 = jax.jacrev(effective_unit)(zero, x)  # (K, d)
        values = jax.vmap(lambda e: effective_unit(e * w, x))(jnp.asarray(eps, dtype))  # (E, K)
        return value0, jnp.linalg.norm(grad0, axis=-1), grad0 @ w, quadratic(w, x), values

    outs, _ = host_or_compiled(jax.vmap(probe), samples.W, samples.X)
    value0, grad_norm, slope0, quad, values = (np.asarray(a, dtype=np.float64) for a in outs)
    return UnitProbe(value0, grad_norm, slope0, quad, values.transpose(1, 0, 2))  # values: (E, N, K)


def probe_layer(
    arch: Architecture, fns: UnitFunctions, samples: Samples, eps: tuple[float, ...], dtype
) -> tuple[np.ndarray, np.ndarray]:
    """The full routed layer f(x; eps W) and its quadratic model Tr[W W^T A(x)] at the probe points
    (in numpy when small, as :func:`probe_unit`).

    Returns (quad_layer (N, K), values (E, N, K)), float64.
    """
    quadratic = fns.quadratic

    def layer_probe(Wn, x):
        quad_layer = jnp.sum(jax.vmap(quadratic, in_axes=(1, None))(Wn, x), axis=0)  # Tr[W W^T A]
        layer = jax.vmap(lambda s: network(arch, s * Wn, x))(jnp.asarray(eps, dtype))  # (E, K)
        return quad_layer, layer

    outs, _ = host_or_compiled(jax.vmap(layer_probe), samples.Ws, samples.X)
    lquad, lvalues = (np.asarray(a, dtype=np.float64) for a in outs)
    return lquad, lvalues.transpose(1, 0, 2)


@dataclass(frozen=True)
class Ladder:
    """The eps ladder and the rounding model of the remainder ratios.

    Attributes:
        eps: the scales, decreasing; e: the same as an array.
        u: the machine epsilon of the dtype.
        noise: (E,) max(1, max |phi(eps w, x)|) of the unit: O(1) intermediates round too.
    """

    eps: tuple[float, ...]
    e: np.ndarray
    u: float
    noise: np.ndarray

    @classmethod
    def of(cls, eps: tuple[float, ...], dtype, values: np.ndarray) -> Ladder:
        """The ladder of ``eps`` in ``dtype``; ``values``: (E, N, K) the unit's phi(eps w, x)."""
        u = float(jnp.finfo(dtype).eps)
        return cls(eps, np.asarray(eps), u, np.maximum(1.0, np.max(np.abs(values), axis=(1, 2))))

    def ratios(self, remainder: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
        """max |remainder| / (eps^2 scale) per eps, and its rounding floor."""
        e = self.e
        ratios = np.max(np.abs(remainder), axis=(1, 2)) / (e**2 * scale)
        return ratios, _ROUNDING_FACTOR * self.u * self.noise / (e**2 * scale)

    def scale(self, quadratic_part: np.ndarray, remainder_at_largest: np.ndarray) -> float:
        """S: the larger of max |quadratic part| and max |remainder at the largest eps| / eps_0^2."""
        return max(
            float(np.max(np.abs(quadratic_part))), float(np.max(np.abs(remainder_at_largest))) / self.eps[0] ** 2
        )

    def remainder(self, values: np.ndarray, quad: np.ndarray) -> np.ndarray:
        """(E, N, K) phi(eps w, x) - eps^2 w^T A(x) w: the remainder of docs/theory.md."""
        return values - self.e[:, None, None] ** 2 * quad[None]

    def order(self, ratios: np.ndarray, floor: np.ndarray) -> tuple[float, bool]:
        """The fitted order of ``ratios`` over the ladder and whether they fall (:func:`_remainder_order`)."""
        return _remainder_order(self.e, ratios, floor)
