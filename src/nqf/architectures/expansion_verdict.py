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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture
from nqf.architectures.expansion_probes import (
    EPS_FLOAT32,
    EPS_FLOAT64,
    Ladder,
    Samples,
    UnitFunctions,
    UnitProbe,
    draw_samples,
    log_log_slope,
    probe_layer,
    probe_unit,
    unit_functions,
)
from nqf.architectures.expansion_report import (
    APPLIES,
    LINEAR_TERM,
    NOT_SMOOTH,
    VANISHING_FORM,
    ExpansionReport,
    format_eps,
    format_order,
)
from nqf.core.errors import NqfError


def _ladder_text(ratios) -> str:
    return ", ".join(f"{v:.3g}" for v in ratios)


@dataclass(frozen=True)
class Evidence:
    """What the verdicts read: the unit's probe, the ladder and the numbers derived from them.

    Attributes:
        unit: the unit's probe; ladder: the eps ladder and its rounding model.
        value_at_zero, gradient_at_zero, quad_size: max |phi(0)|, max |grad phi(0)|, max |w^T A w|.
        scale: S; tolerance: sqrt(u), relative to S.
        plain: (E, N, K) the remainder phi(eps w) - eps^2 w^T A w.
        ratios, floor: rho(eps) of ``plain`` and its rounding floor; order, falls: their fit.
        span: "eps = first ... last", as the reasons print it.
        fields: the ExpansionReport fields every verdict shares.
    """

    unit: UnitProbe
    ladder: Ladder
    value_at_zero: float
    gradient_at_zero: float
    quad_size: float
    scale: float
    tolerance: float
    plain: np.ndarray
    ratios: np.ndarray
    floor: np.ndarray
    order: float
    falls: bool
    span: str
    fields: dict[str, Any]


def _common_fields(arch: Architecture, unit: UnitProbe, ladder: Ladder, scale: float, dtype) -> dict[str, Any]:
    """The report fields known before any verdict: the sizes at w = 0, S, the leading order, eps and dtype."""
    phi_size = np.max(np.abs(unit.values), axis=(1, 2))  # (E,)
    return dict(
        architecture=arch.name,
        value_at_zero=float(np.max(np.abs(unit.value0))),
        gradient_at_zero=float(np.max(unit.grad_norm)),
        quadratic_scale=scale,
        leading_order=log_log_slope(ladder.e, phi_size) if np.all(phi_size > 0) else math.nan,
        eps=ladder.eps,
        dtype=str(np.dtype(dtype)),
    )


def _evidence(unit: UnitProbe, ladder: Ladder, scale: float, fields: dict[str, Any]) -> Evidence:
    """Fit the remainder ratio of the unit (S > 0) and collect what the verdicts read."""
    plain = ladder.remainder(unit.values, unit.quad)  # docs/theory.md's ratio (phi(eps w) - eps^2 w^T A w) / eps^2
    ratios, floor = ladder.ratios(plain, scale)
    order, falls = ladder.order(ratios, floor)
    fields = {**fields, "remainder_order": order, "ratios": tuple(map(float, ratios))}
    fields["rounding_floor"] = tuple(map(float, floor))
    return Evidence(
        unit=unit,
        ladder=ladder,
        value_at_zero=fields["value_at_zero"],
        gradient_at_zero=fields["gradient_at_zero"],
        quad_size=float(np.max(np.abs(unit.quad))),
        scale=scale,
        tolerance=math.sqrt(ladder.u),
        plain=plain,
        ratios=ratios,
        floor=floor,
        order=order,
        falls=falls,
        span=f"eps = {format_eps(ladder.eps[0])} ... {format_eps(ladder.eps[-1])}",
        fields=fields,
    )


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


def finiteness_verdict(arch: Architecture, unit: UnitProbe, eps: tuple[float, ...], dtype) -> ExpansionReport | None:
    """0. The expansion is about w = 0, so the unit must be finite there and near it: phi(0, x),
    grad_w phi(0, x), w^T A(x) w and phi(eps w, x) at every probe point. A ``not smooth`` report
    naming the first that is not (a log or a division by the weights, sqrt|w|), else None: the
    ratios of the later verdicts compare NaN, which no verdict would catch."""
    probes = (
        ("phi(0, x)", unit.value0),
        ("|grad_w phi(0, x)|", unit.grad_norm),
        ("w^T A(x) w (A the Hessian at w = 0)", unit.quad),
        ("phi(eps w, x)", unit.values),
    )
    bad = [(what, values[~np.isfinite(values)]) for what, values in probes if not np.all(np.isfinite(values))]
    if not bad:
        return None
    what, values = bad[0]
    return ExpansionReport(
        architecture=arch.name,
        applies=False,
        kind=NOT_SMOOTH,
        reason=(
            f"not finite at w = 0: {what} = {float(values[0])} at a probe input (standard normal x); "
            "the theory expands the unit about w = 0"
        ),
        remainder_order=math.nan,
        value_at_zero=float(np.max(np.abs(unit.value0))),
        gradient_at_zero=float(np.max(unit.grad_norm)),
        quadratic_scale=math.nan,
        leading_order=math.nan,
        eps=eps,
        ratios=tuple(math.nan for _ in eps),
        rounding_floor=tuple(math.nan for _ in eps),
        dtype=str(np.dtype(dtype)),
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
    taylor_ratios, taylor_floor = ladder.ratios(taylor, taylor_scale)
    taylor_order, taylor_falls = ladder.order(taylor_ratios, taylor_floor)
    if taylor_falls:
        return None
    return ExpansionReport(
        applies=False,
        kind=NOT_SMOOTH,
        reason=(
            f"not smooth at w = 0: the Taylor remainder ratio does not fall "
            f"({_ladder_text(taylor_ratios)} at {ev.span}, order {format_order(taylor_order)})"
        ),
        **ev.fields,
    )


def linear_term_verdict(ev: Evidence) -> ExpansionReport | None:
    """2. No term below second order, seen directly at w = 0: a ``linear term`` report when
    phi(0, x) or grad_w phi(0, x) exceeds sqrt(u) S, else None."""
    limit = ev.tolerance * ev.scale
    if not (ev.value_at_zero > limit or ev.gradient_at_zero > limit):
        return None
    what = (
        f"phi(0, x) = {ev.value_at_zero:.3g} != 0"
        if ev.value_at_zero > limit
        else f"|grad_w phi(0, x)| = {ev.gradient_at_zero:.3g} != 0"
    )
    return ExpansionReport(
        applies=False,
        kind=LINEAR_TERM,
        reason=(
            f"linear term present: {what}; the remainder ratio grows like eps^{format_order(ev.order)} "
            f"({_ladder_text(ev.ratios)} at {ev.span})"
        ),
        **ev.fields,
    )


def quadratic_form_verdict(ev: Evidence) -> ExpansionReport | None:
    """3. A smooth unit without linear term must have the quadratic form at all: a ``vanishing
    form`` report naming the leading order (cubic, quartic, eps^p) when A(x) = 0 to rounding;
    a ``not smooth`` report when the remainder ratio does not fall (a guard); else None."""
    if ev.quad_size <= ev.tolerance * ev.scale:
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
    if not ev.falls:  # cannot happen for a smooth unit without linear term; kept as a guard
        return ExpansionReport(
            applies=False,
            kind=NOT_SMOOTH,
            reason=(
                f"not smooth at w = 0: the remainder ratio does not fall "
                f"({_ladder_text(ev.ratios)} at {ev.span}, order {format_order(ev.order)})"
            ),
            **ev.fields,
        )
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
    lscale = ladder.scale(lquad, lvalues[0])
    lratios, lfloor = ladder.ratios(ladder.remainder(lvalues, lquad), lscale)
    layer_order, layer_falls = ladder.order(lratios, lfloor)
    fields = {**ev.fields, "layer_ratios": tuple(map(float, lratios)), "layer_order": layer_order}
    if layer_falls:
        return fields, None
    return fields, ExpansionReport(
        applies=False,
        kind=NOT_SMOOTH,
        reason=(
            f"not smooth at w = 0: the gate across the {arch.router.units} units is not smooth; the layer's remainder "
            f"ratio does not fall ({_ladder_text(lratios)} at {ev.span}, order {format_order(layer_order)})"
        ),
        **fields,
    )


def applies_verdict(ev: Evidence, fields: dict[str, Any]) -> ExpansionReport:
    """The verdict when every check passed: the quadratic form holds, with how the ratio falls."""
    order, eps = ev.order, ev.ladder.eps
    if math.isinf(order):
        falls_text = "is at rounding level for every eps (exact)"
    elif math.isnan(order):
        falls_text = f"falls under rounding below eps = {format_eps(eps[0])} (order not resolved in {fields['dtype']})"
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
        :func:`quadratic_form_verdict`,
        :func:`gate_verdict`, else :func:`applies_verdict`.
    """
    dtype = jnp.result_type(float)
    eps = _check_ladder(eps, num_inputs, dtype)
    key = jax.random.key(0) if key is None else key
    samples = draw_samples(arch, key, num_inputs, dtype)
    fns = unit_functions(arch, dtype)
    unit = probe_unit(fns, samples, eps, dtype)
    report = finiteness_verdict(arch, unit, eps, dtype)
    if report is not None:
        return report
    ladder = Ladder.of(eps, dtype, unit.values)
    scale = ladder.scale(unit.quad, unit.values[0])
    fields = _common_fields(arch, unit, ladder, scale, dtype)
    if scale == 0.0:
        return _nothing_to_reduce(fields)
    ev = _evidence(unit, ladder, scale, fields)
    for verdict in (smoothness_verdict, linear_term_verdict, quadratic_form_verdict):
        report = verdict(ev)
        if report is not None:
            return report
    fields, report = gate_verdict(arch, fns, samples, ev, dtype)
    return report if report is not None else applies_verdict(ev, fields)
