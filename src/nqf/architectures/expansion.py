r"""Does the quadratic-form expansion hold for a unit? A numerical check (docs/theory.md section 1).

The theory needs, for every input x,

    phi(0, x) = 0,   grad_w phi(0, x) = 0,   phi(eps w, x) = eps^2 w^T A(x) w + O(eps^3),

with A(x) = (1/2) Hessian_w phi(0, x) not identically zero. ``expansion_check`` tests
this on random inputs x_n (shape ``arch.input_shape``) and random unit directions w_n
(|w_n| = 1), using the effective unit g0 phi (g0 the gate weight at W = 0). The
remainder ratio

    rho(eps) = max_{n,c} |phi_c(eps w_n, x_n) - eps^2 w_n^T A_c(x_n) w_n| / (eps^2 S),
    S = max( max_{n,c} |w_n^T A_c(x_n) w_n|,  max_{n,c} |phi_c(eps_0 w_n, x_n)| / eps_0^2 ),

is measured over a ladder of eps and its log-log slope fitted (the remainder order:
1 for a cubic remainder, 2 for a quartic one). Verdicts, tested in this order:

- not finite at w = 0 (reported as not smooth): phi(0, x), its gradient, A(x) or phi(eps w, x)
  is NaN or infinite at a probe point (log |w|, 1/w, sqrt|w|): there is no expansion to test;
- not smooth at w = 0: the autodiff Taylor polynomial phi(0) + eps grad.w + eps^2 w^T A w
  does not describe phi (its remainder ratio does not fall): relu, abs (where autodiff
  returns one-sided derivatives), hard top-k routing;
- linear term present: phi(0, x) != 0 or grad_w phi(0, x) != 0 (above sqrt(u) S); rho
  then grows like 1/eps (or 1/eps^2): softplus, sigmoid;
- quadratic form vanishes: A(x) = 0 to rounding (max |w^T A w| <= sqrt(u) S) while phi
  is not; the leading order is fitted from phi itself (cubic for a (v.x)^2 with
  trainable a);
- applies: rho -> 0 like eps or faster (slope >= 1/2), or rho is at rounding level
  for every eps (the unit is exactly quadratic; order reported as inf).

For an architecture with a ``router`` (a gate across units) the full layer
f(x; eps W) with n = router.units random unit-norm columns is also compared with the
quadratic model eps^2 Tr[W W^T A(x)]: top-k routing is only visible across units.

Rounding: everything is computed in JAX's default float dtype (float64 when enabled).
The absolute rounding error of phi(eps w) can be as large as the unit's O(1)
intermediates (1 - cos z cancels), so ratios below

    rounding_floor(eps) = 16 u max(1, max |phi(eps w, x)|) / (eps^2 S)

(u the machine epsilon of the dtype) count as unresolved and are left out of the fit;
a ratio that falls under the floor counts as falling. In float32 the default ladder
stops at eps = 3e-3 and the order is often not resolved (nan); the verdicts still hold.

The gate of ``predict``, ``compare`` and ``nqf structure`` is :func:`theory_gate` (the verdict
kept in-process and on disk: :func:`cached_expansion_check`); :func:`require_expansion` and
:func:`raise_unless_applies` raise with a one-line message naming the architecture.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, overload

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture, arch_key, network, stable_key
from nqf.core.errors import NqfError, TheoryDoesNotApply
from nqf.core.host_eval import host_or_compiled
from nqf.core.precision import jax_option
from nqf.core.programs import LruCache

# -- the report ------------------------------------------------------------------------------------
APPLIES = "applies"
NOT_SMOOTH = "not smooth"
LINEAR_TERM = "linear term"
VANISHING_FORM = "vanishing form"


@dataclass(frozen=True)
class ExpansionReport:
    """Outcome of :func:`expansion_check`.

    Attributes:
        architecture: the architecture's name.
        applies: whether the quadratic-form theory applies.
        kind: ``applies``, ``not smooth``, ``linear term`` or ``vanishing form``.
        reason: one human-readable line explaining the verdict.
        remainder_order: fitted log-log slope p of rho(eps) ~ eps^p over the resolved eps
            (1: cubic remainder, 2: quartic; ~0: not smooth; negative: a lower-order term).
            ``inf`` when rho is at rounding level for every eps (exactly quadratic); ``nan``
            when only one eps is resolved (float32).
        value_at_zero: max_{n,c} |phi_c(0, x_n)|.
        gradient_at_zero: max_{n,c} |grad_w phi_c(0, x_n)| (Euclidean norm).
        quadratic_scale: S, the normalisation of the ratios (see module docstring).
        leading_order: fitted slope of max |phi(eps w, x)| against eps (2 when the
            quadratic form leads).
        eps: the eps ladder.
        ratios: rho(eps) for the single unit.
        rounding_floor: the ratio below which rho is not resolved, per eps.
        layer_ratios: rho(eps) for the full layer (routed architectures only, else ()).
        layer_order: fitted order of layer_ratios (nan without a router).
        dtype: the float dtype the check ran in.
    """

    architecture: str
    applies: bool
    kind: str
    reason: str
    remainder_order: float
    value_at_zero: float
    gradient_at_zero: float
    quadratic_scale: float
    leading_order: float
    eps: tuple[float, ...]
    ratios: tuple[float, ...]
    rounding_floor: tuple[float, ...]
    layer_ratios: tuple[float, ...] = ()
    layer_order: float = math.nan
    dtype: str = "float64"

    @property
    def exactly_quadratic(self) -> bool:
        """Whether the unit is its quadratic form to rounding at every scale the check probed: it
        applies and every remainder ratio rho(eps) (the layer's too, with a router), the largest
        eps included, is within EXACT_ULPS units in the last place of its dtype (bilinear units:
        linear mlp, merged linear attention, the square activation; 4e-16 in float64). Not
        ``remainder_order == inf``: a float32 check puts softmax attention's 2e-3 under its
        rounding floor too."""
        roundoff = _UNIT_ROUNDOFF.get(self.dtype)
        ratios = self.ratios + self.layer_ratios
        return self.applies and roundoff is not None and bool(ratios) and max(ratios) <= EXACT_ULPS * roundoff


# a remainder ratio within this many units in the last place is rounding: the unit is exactly quadratic
EXACT_ULPS = 64
_UNIT_ROUNDOFF = {"float64": 2.0**-52, "float32": 2.0**-23}


def format_order(order: float) -> str:
    """A fitted order as the reasons print it (two decimals, no -0.00)."""
    return f"{order + 0.0:.2f}".replace("-0.00", "0.00")


def format_eps(eps: float) -> str:
    """A weight scale as the reasons print it (1e-4, not 1e-04)."""
    return f"{eps:.0e}".replace("e-0", "e-")


@overload
def report_json(report: ExpansionReport) -> dict: ...
@overload
def report_json(report: None) -> None: ...
def report_json(report: ExpansionReport | None) -> dict | None:
    """The verdict as printed in ``predict``/``compare`` JSON: applies, kind, reason, remainder_order
    (null when not finite), dtype. ``nqf structure`` prints it too, with the probes added."""
    if report is None:
        return None
    order = report.remainder_order
    return {
        "applies": bool(report.applies),
        "kind": report.kind,
        "reason": report.reason,
        "remainder_order": float(order) if math.isfinite(order) else None,
        "dtype": report.dtype,
    }


# -- the probes ------------------------------------------------------------------------------------
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
    def of(cls, eps: tuple[float, ...], dtype, phi_size: np.ndarray) -> Ladder:
        """The ladder of ``eps`` in ``dtype``; ``phi_size``: (E,) the unit's max |phi(eps w, x)|."""
        return cls(eps, np.asarray(eps), float(jnp.finfo(dtype).eps), np.maximum(1.0, phi_size))

    @property
    def span(self) -> str:
        """``eps = first ... last``, as the reasons print it."""
        return f"eps = {format_eps(self.eps[0])} ... {format_eps(self.eps[-1])}"

    def scale(self, quadratic_part: np.ndarray, remainder_at_largest: np.ndarray) -> float:
        """S: the larger of max |quadratic part| and max |remainder at the largest eps| / eps_0^2."""
        return max(
            float(np.max(np.abs(quadratic_part))), float(np.max(np.abs(remainder_at_largest))) / self.eps[0] ** 2
        )

    def remainder(self, values: np.ndarray, quad: np.ndarray) -> np.ndarray:
        """(E, N, K) phi(eps w, x) - eps^2 w^T A(x) w: the remainder of docs/theory.md."""
        return values - self.e[:, None, None] ** 2 * quad[None]

    def fit(self, remainder: np.ndarray, scale: float) -> Fit:
        """The ratio max |remainder| / (eps^2 scale) per eps, its rounding floor and its fitted order."""
        size = self.e**2 * scale
        ratios = np.max(np.abs(remainder), axis=(1, 2)) / size
        floor = _ROUNDING_FACTOR * self.u * self.noise / size
        return Fit(ratios, floor, *_remainder_order(self.e, ratios, floor))


class Fit(NamedTuple):
    """A remainder ratio rho(eps) over the ladder, its rounding floor, its order p and whether it falls."""

    ratios: np.ndarray
    floor: np.ndarray
    order: float
    falls: bool

    def does_not_fall(self, subject: str, ladder: Ladder, fields: dict[str, Any]) -> ExpansionReport:
        """The ``not smooth`` report of a ratio that does not fall; ``subject`` names the ratio."""
        return ExpansionReport(
            applies=False,
            kind=NOT_SMOOTH,
            reason=(
                f"not smooth at w = 0: {subject} does not fall "
                f"({_ladder_text(self.ratios)} at {ladder.span}, order {format_order(self.order)})"
            ),
            **fields,
        )


# -- the verdicts ----------------------------------------------------------------------------------
def _ladder_text(ratios) -> str:
    return ", ".join(f"{v:.3g}" for v in ratios)


@dataclass(frozen=True)
class Evidence:
    """What the verdicts read.

    Attributes:
        unit: the unit's probe; ladder: the eps ladder and its rounding model; scale: S.
        plain: (E, N, K) the remainder phi(eps w) - eps^2 w^T A w; fit: its ratio rho(eps).
        fields: the ExpansionReport fields every verdict shares.
    """

    unit: UnitProbe
    ladder: Ladder
    scale: float
    plain: np.ndarray
    fit: Fit
    fields: dict[str, Any]

    @property
    def limit(self) -> float:
        """sqrt(u) S: below it phi(0, x), grad_w phi(0, x) and w^T A(x) w count as zero."""
        return math.sqrt(self.ladder.u) * self.scale


def _evidence(unit: UnitProbe, ladder: Ladder, scale: float, fields: dict[str, Any]) -> Evidence:
    """Fit the remainder ratio of the unit (S > 0) and collect what the verdicts read."""
    plain = ladder.remainder(unit.values, unit.quad)  # docs/theory.md's ratio (phi(eps w) - eps^2 w^T A w) / eps^2
    fit = ladder.fit(plain, scale)
    fields = {
        **fields,
        "remainder_order": fit.order,
        "ratios": tuple(map(float, fit.ratios)),
        "rounding_floor": tuple(map(float, fit.floor)),
    }
    return Evidence(unit, ladder, scale, plain, fit, fields)


def _nothing_to_reduce(fields: dict[str, Any]) -> ExpansionReport:
    """The verdict when phi vanishes at every tested point (S = 0)."""
    eps = fields["eps"]
    return ExpansionReport(
        applies=False,
        kind=VANISHING_FORM,
        reason="phi(eps w, x) vanishes at every tested point: there is no quadratic form to reduce to",
        remainder_order=math.nan,
        ratios=tuple(0.0 for _ in eps),
        rounding_floor=tuple(math.inf for _ in eps),
        **fields,
    )


def finiteness_verdict(unit: UnitProbe, fields: dict[str, Any]) -> ExpansionReport | None:
    """0. The expansion is about w = 0, so the unit must be finite there and near it: phi(0, x),
    grad_w phi(0, x), w^T A(x) w and phi(eps w, x) at every probe point. A ``not smooth`` report
    naming the first that is not (a log or a division by the weights, sqrt|w|), else None: the
    ratios of the later verdicts compare NaN, which no verdict would catch. ``fields``: the
    report's fields known at w = 0."""
    probes = (
        ("phi(0, x)", unit.value0),
        ("|grad_w phi(0, x)|", unit.grad_norm),
        ("w^T A(x) w (A the Hessian at w = 0)", unit.quad),
        ("phi(eps w, x)", unit.values),
    )
    bad = next(((what, values) for what, values in probes if not np.all(np.isfinite(values))), None)
    if bad is None:
        return None
    what, values = bad
    nans = tuple(math.nan for _ in fields["eps"])
    return ExpansionReport(
        applies=False,
        kind=NOT_SMOOTH,
        reason=(
            f"not finite at w = 0: {what} = {float(values[~np.isfinite(values)][0])} at a probe input "
            "(standard normal x); the theory expands the unit about w = 0"
        ),
        remainder_order=math.nan,
        quadratic_scale=math.nan,
        leading_order=math.nan,
        ratios=nans,
        rounding_floor=nans,
        **fields,
    )


def smoothness_verdict(ev: Evidence) -> ExpansionReport | None:
    """1. Smooth at w = 0: the second-order Taylor polynomial from autodiff must describe phi,
    whatever its value and gradient at 0 (relu, abs: autodiff returns one-sided numbers).
    A ``not smooth`` report when its remainder ratio does not fall, else None."""
    unit, ladder = ev.unit, ev.ladder
    taylor = ev.plain - unit.value0[None] - ladder.e[:, None, None] * unit.slope0[None]
    taylor_scale = ladder.scale(unit.quad, taylor[0])
    if not taylor_scale > 0.0:  # nothing beyond the Taylor polynomial to judge (or no number)
        return None
    fit = ladder.fit(taylor, taylor_scale)
    return None if fit.falls else fit.does_not_fall("the Taylor remainder ratio", ladder, ev.fields)


def linear_term_verdict(ev: Evidence) -> ExpansionReport | None:
    """2. No term below second order, seen directly at w = 0: a ``linear term`` report when
    phi(0, x) or grad_w phi(0, x) exceeds sqrt(u) S, else None."""
    value, gradient = ev.fields["value_at_zero"], ev.fields["gradient_at_zero"]
    if value > ev.limit:
        what = f"phi(0, x) = {value:.3g} != 0"
    elif gradient > ev.limit:
        what = f"|grad_w phi(0, x)| = {gradient:.3g} != 0"
    else:
        return None
    return ExpansionReport(
        applies=False,
        kind=LINEAR_TERM,
        reason=(
            f"linear term present: {what}; the remainder ratio grows like eps^{format_order(ev.fit.order)} "
            f"({_ladder_text(ev.fit.ratios)} at {ev.ladder.span})"
        ),
        **ev.fields,
    )


def quadratic_form_verdict(ev: Evidence) -> ExpansionReport | None:
    """3. A smooth unit without linear term must have the quadratic form at all: a ``vanishing
    form`` report naming the leading order (cubic, quartic, eps^p) when A(x) = 0 to rounding;
    a ``not smooth`` report when the remainder ratio does not fall (a guard); else None."""
    if float(np.max(np.abs(ev.unit.quad))) <= ev.limit:
        leading = ev.fields["leading_order"]
        if math.isnan(leading):
            named = "above quadratic"
        else:
            named = {3: "cubic", 4: "quartic"}.get(round(leading), f"eps^{leading:.2f}")
        return ExpansionReport(
            applies=False,
            kind=VANISHING_FORM,
            reason=f"quadratic form vanishes; leading order is {named} (A(x) = 0 to rounding, phi ~ eps^{leading:.3g})",
            **ev.fields,
        )
    if not ev.fit.falls:  # cannot happen for a smooth unit without linear term; kept as a guard
        return ev.fit.does_not_fall("the remainder ratio", ev.ladder, ev.fields)
    return None


def gate_verdict(
    arch: Architecture, fns: UnitFunctions, samples: Samples, ev: Evidence, dtype
) -> tuple[dict[str, Any], ExpansionReport | None]:
    """4. A gate across units (mixture of experts, top-k routing) is only visible in the full layer.

    Returns (fields, report): ``ev.fields`` with the layer's ratios and order added (unchanged
    without a router), and a ``not smooth`` report when the layer's remainder ratio does not fall, else None.
    """
    if arch.router is None:
        return ev.fields, None
    ladder = ev.ladder
    lquad, lvalues = probe_layer(arch, fns, samples, ladder.eps, dtype)
    fit = ladder.fit(ladder.remainder(lvalues, lquad), ladder.scale(lquad, lvalues[0]))
    fields = {**ev.fields, "layer_ratios": tuple(map(float, fit.ratios)), "layer_order": fit.order}
    if fit.falls:
        return fields, None
    subject = f"the gate across the {arch.router.units} units is not smooth; the layer's remainder ratio"
    return fields, fit.does_not_fall(subject, ladder, fields)


def applies_verdict(ev: Evidence, fields: dict[str, Any]) -> ExpansionReport:
    """The verdict when every check passed: the quadratic form holds, with how the ratio falls."""
    order = ev.fit.order
    if math.isinf(order):
        falls_text = "is at rounding level for every eps (exact)"
    elif math.isnan(order):
        falls_text = (
            f"falls under rounding below eps = {format_eps(ev.ladder.eps[0])} (order not resolved in {fields['dtype']})"
        )
    else:
        falls_text = f"falls like eps^{format_order(order)}"
    return ExpansionReport(
        applies=True, kind=APPLIES, reason=f"the quadratic form holds: the remainder ratio {falls_text}", **fields
    )


def _check_ladder(eps: tuple[float, ...] | None, num_inputs: int, dtype) -> tuple[float, ...]:
    """The eps ladder to use (the dtype's default when None); NqfError for bad arguments."""
    if num_inputs < 1:
        raise NqfError(f"expansion check: num_inputs must be >= 1, got {num_inputs}")
    if eps is None:
        eps = EPS_FLOAT64 if dtype == jnp.float64 else EPS_FLOAT32
    eps = tuple(float(e) for e in eps)
    if len(eps) < 2 or any(e <= 0 for e in eps) or any(a <= b for a, b in zip(eps, eps[1:], strict=False)):
        raise NqfError(f"expansion check: eps must be at least two positive, decreasing scales, got {eps}")
    return eps


def expansion_check(
    arch: Architecture,
    key: jax.Array | None = None,
    num_inputs: int = 8,
    eps: tuple[float, ...] | None = None,
) -> ExpansionReport:
    """Test numerically whether phi(w, x) = w^T A(x) w + O(|w|^3) near w = 0.

    Args:
        arch: any :class:`Architecture` (built-in or a user's unit function).
        key: JAX PRNG key (default ``key(0)``); its bits seed the numpy generator that
            draws the inputs x_n ~ N(0, I) and unit directions w_n (drawing them with
            jax.random would compile threefry on every call).
        num_inputs: number of (x_n, w_n) pairs.
        eps: decreasing ladder of weight scales; default (1e-1, 1e-2, 1e-3, 1e-4) in float64
            and (1e-1, 3e-2, 1e-2, 3e-3) in float32 (rounding hides smaller scales there).

    Returns:
        An :class:`ExpansionReport`; see the module docstring for the verdicts, tested in order:
        :func:`finiteness_verdict`, :func:`smoothness_verdict`, :func:`linear_term_verdict`,
        :func:`quadratic_form_verdict`, :func:`gate_verdict`, else :func:`applies_verdict`.
    """
    dtype = jnp.result_type(float)
    eps = _check_ladder(eps, num_inputs, dtype)
    key = jax.random.key(0) if key is None else key
    samples = draw_samples(arch, key, num_inputs, dtype)
    fns = unit_functions(arch, dtype)
    unit = probe_unit(fns, samples, eps, dtype)
    fields: dict[str, Any] = dict(
        architecture=arch.name,
        value_at_zero=float(np.max(np.abs(unit.value0))),
        gradient_at_zero=float(np.max(unit.grad_norm)),
        eps=eps,
        dtype=str(np.dtype(dtype)),
    )
    report = finiteness_verdict(unit, fields)
    if report is not None:
        return report
    phi_size = np.max(np.abs(unit.values), axis=(1, 2))  # (E,)
    ladder = Ladder.of(eps, dtype, phi_size)
    scale = ladder.scale(unit.quad, unit.values[0])
    fields["quadratic_scale"] = scale
    fields["leading_order"] = log_log_slope(ladder.e, phi_size) if np.all(phi_size > 0) else math.nan
    if scale == 0.0:
        return _nothing_to_reduce(fields)
    ev = _evidence(unit, ladder, scale, fields)
    for verdict in (smoothness_verdict, linear_term_verdict, quadratic_form_verdict):
        report = verdict(ev)
        if report is not None:
            return report
    fields, report = gate_verdict(arch, fns, samples, ev, dtype)
    return report if report is not None else applies_verdict(ev, fields)


# -- the gate --------------------------------------------------------------------------------------
def require_expansion(arch: Architecture, **kwargs) -> ExpansionReport:
    """Run :func:`expansion_check` and raise :class:`TheoryDoesNotApply` when it fails.

    The message is one line: the architecture and the report's reason.
    """
    report = expansion_check(arch, **kwargs)
    raise_unless_applies(arch, report)
    return report


def raise_unless_applies(arch: Architecture, report: ExpansionReport) -> None:
    """Raise :class:`TheoryDoesNotApply` with the one-line message when ``report`` says no."""
    if not report.applies:
        raise TheoryDoesNotApply(f"{label(arch)}: the quadratic-form theory does not apply: {report.reason}")


def label(arch: Architecture) -> str:
    """``name (option=value, ...)``, how messages name an architecture."""
    options = ", ".join(f"{k}={v}" for k, v in arch.options)
    return f"{arch.name} ({options})" if options else arch.name


GATE_SEED = 0  # key(GATE_SEED) seeds the gate's draws: its verdicts are deterministic
_GATE_FORMAT = 3  # bump when expansion_check's verdicts change within one nqf version (3: not finite at w = 0)
_GATE_MEMORY = LruCache(128)
_VERDICT_DIR = "nqf-expansion"  # a subdirectory of the compilation cache (JAX keeps only *-cache files there)


def _verdict_folder() -> str | None:
    """JAX's compilation cache directory when the cache is on (None otherwise)."""
    return jax_option("jax_compilation_cache_dir") or None


def _verdict_path(key: tuple) -> Path | None:
    """The file of a built-in architecture's verdict in the compilation cache's directory, or None."""
    folder = _verdict_folder()
    if not folder or not stable_key(key[0]):
        return None
    from nqf.core.version import __version__

    text = repr((_GATE_FORMAT, __version__, jax.__version__, GATE_SEED, key))
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return Path(folder) / _VERDICT_DIR / f"{digest}.json"


def _read_verdict(path: Path) -> ExpansionReport | None:
    try:
        data = json.loads(path.read_text())
        if set(data) != {f.name for f in dataclasses.fields(ExpansionReport)}:
            return None
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return ExpansionReport(**values)
    except (OSError, ValueError, TypeError):  # missing, unreadable, truncated, another format: a miss
        return None


def _write_verdict(path: Path, report: ExpansionReport) -> None:
    """Write atomically (a temporary file renamed into place); failures only skip the cache."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".verdict-", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(dataclasses.asdict(report), handle)  # inf/nan as JSON's Infinity/NaN, read back by json
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def cached_expansion_check(arch: Architecture) -> ExpansionReport:
    """``expansion_check(arch, key=jax.random.key(GATE_SEED))`` in JAX's default float dtype, remembered
    (the check costs 0.2-1 s: it compiles a probe of the unit).

    In-process: per :func:`~nqf.architectures.architecture.arch_key` (name, options, shapes
    and the hash of the jaxprs of the unit and its other functions: two modules of one class
    that compute different things never share a verdict) and dtype. On disk, when JAX's
    compilation cache is on (``nqf.enable_compilation_cache``; the command line does it): a
    small JSON file per architecture under ``<cache>/nqf-expansion/``, named by a hash of that
    key, the dtype, the nqf and JAX versions and the check's seed, written atomically. An
    architecture whose key holds its identity (a function that cannot be traced for its
    shapes) is cached in-process only.
    """
    key = (arch_key(arch), np.dtype(jnp.result_type(float)).name)

    def stored_or_checked() -> ExpansionReport:
        path = _verdict_path(key)
        report = None if path is None else _read_verdict(path)
        if report is None:
            # the key's data written out: jax.random.key(seed) would compile two programs to make it
            key_data = jax.device_put(np.array([0, GATE_SEED], dtype=np.uint32))
            report = expansion_check(arch, key=jax.random.wrap_key_data(key_data))
            if path is not None:
                _write_verdict(path, report)
        return report

    return _GATE_MEMORY.get(key, stored_or_checked)


def _clear_gate_cache() -> None:
    """Forget the in-process verdicts (tests)."""
    _GATE_MEMORY.clear()


def theory_gate(arch: Architecture, allow_inapplicable: bool = False) -> ExpansionReport:
    """The one gate of ``predict`` and ``compare``: the (cached) expansion verdict of ``arch``.

    Raises :class:`TheoryDoesNotApply` (one line: the architecture, the reason and how to run
    anyway) when the quadratic-form expansion does not hold and ``allow_inapplicable`` is false;
    returns the report otherwise (callers put it in their output either way).
    """
    report = cached_expansion_check(arch)
    if not report.applies and not allow_inapplicable:
        raise TheoryDoesNotApply(
            f"the theory does not apply to {label(arch)}: {report.reason}; "
            "allow_inapplicable=True (nqf: --allow-inapplicable) runs anyway"
        )
    return report
