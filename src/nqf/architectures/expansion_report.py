"""The outcome of the expansion check: :class:`ExpansionReport`, its verdict kinds and its
JSON form (``report_json``). The check: ``nqf.architectures.expansion_verdict``."""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def report_json(report: ExpansionReport | None) -> dict | None:
    """The verdict as printed in ``predict``/``compare`` JSON: applies, kind, reason, remainder_order, dtype."""
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
