r"""Claims, tolerances and the one function that turns them into verdicts.

A claim pairs a number the theory predicts with the number an experiment measured and
a tolerance stated in advance. Its verdict is *computed* (:func:`judge`), never
written by hand:

* ``"confirmed"``: both numbers exist and ``measured`` lies within the tolerance of
  ``predicted``;
* ``"not confirmed"``: both numbers exist and it does not (or one of them is NaN/inf);
* ``"not applicable"``: a number is missing (``None``), with the reason, e.g. the
  theory gives no prediction for this architecture, or the mode never switched on.

Tolerance kinds, with p = predicted and m = measured (docs/theory.md section 5: tolerances
are stated in numbers):

=============  ==========================================  =====================
kind           confirmed when                              ``value``
=============  ==========================================  =====================
relative       |m - p| <= value * |p|                      float >= 0
absolute       |m - p| <= value                            float >= 0
interval       lo <= m - p <= hi                           (lo, hi), lo <= hi
at_least       m >= p - value                              float >= 0 (slack)
at_most        m <= p + value                              float >= 0 (slack)
=============  ==========================================  =====================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal, cast

from nqf.core.errors import NqfError

CONFIRMED: Final = "confirmed"
NOT_CONFIRMED: Final = "not confirmed"
NOT_APPLICABLE: Final = "not applicable"

ToleranceKind = Literal["relative", "absolute", "interval", "at_least", "at_most"]
TOLERANCE_KINDS: tuple[str, ...] = ("relative", "absolute", "interval", "at_least", "at_most")


def _number(value: float) -> str:
    """Four significant digits, the precision every number in the report is shown at."""
    return f"{value:.4g}"


@dataclass(frozen=True)
class Tolerance:
    """How far ``measured`` may be from ``predicted``; see the module docstring for the kinds."""

    kind: ToleranceKind
    value: float | tuple[float, float] = 0.0

    def __post_init__(self) -> None:
        if self.kind not in TOLERANCE_KINDS:
            raise NqfError(f"unknown tolerance kind {self.kind!r}; choose one of {', '.join(TOLERANCE_KINDS)}")
        if self.kind == "interval":
            try:
                lo, hi = (float(v) for v in self.value)  # type: ignore[union-attr]
            except (TypeError, ValueError):
                raise NqfError(f"an interval tolerance needs (lo, hi), got {self.value!r}") from None
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise NqfError(f"an interval tolerance needs finite lo <= hi, got ({lo}, {hi})")
            object.__setattr__(self, "value", (lo, hi))
        else:
            if isinstance(self.value, (tuple, list)):
                raise NqfError(f"a {self.kind} tolerance takes one number, got {self.value!r}")
            value = float(self.value)
            if not (math.isfinite(value) and value >= 0):
                raise NqfError(f"a {self.kind} tolerance must be a finite number >= 0, got {self.value!r}")
            object.__setattr__(self, "value", value)

    @property
    def _one(self) -> float:
        """The value of a one-number kind (a float after __post_init__)."""
        return cast(float, self.value)

    @property
    def _pair(self) -> tuple[float, float]:
        """The (lo, hi) of an interval (a pair of floats after __post_init__)."""
        return cast(tuple[float, float], self.value)

    def describe(self) -> str:
        """The tolerance as it is printed in the report's table."""
        if self.kind == "relative":
            if self._one >= 1e-4:
                return f"±{self._one * 100:.3g}% of predicted"
            return f"±{self._one:.3g}·|predicted|"
        if self.kind == "absolute":
            return f"±{_number(self._one)}"
        if self.kind == "interval":
            lo, hi = self._pair
            return f"measured − predicted in [{_number(lo)}, {_number(hi)}]"
        if self.kind == "at_least":
            return "measured ≥ predicted" + (f" − {_number(self._one)}" if self._one else "")
        return "measured ≤ predicted" + (f" + {_number(self._one)}" if self._one else "")

    def check(self, predicted: float, measured: float) -> tuple[bool, str]:
        """Whether finite ``measured`` is within tolerance of finite ``predicted``, and why."""
        p, m = float(predicted), float(measured)
        diff = m - p
        if self.kind == "relative":
            bound = self._one * abs(p)
            ok = abs(diff) <= bound
            share = f" (relative {abs(diff) / abs(p):.3g})" if p != 0 else ""
            return ok, (
                f"|measured − predicted| = {_number(abs(diff))}{share} "
                f"{'≤' if ok else '>'} {self._one:.3g}·|predicted| = {_number(bound)}"
            )
        if self.kind == "absolute":
            ok = abs(diff) <= self._one
            return ok, f"|measured − predicted| = {_number(abs(diff))} {'≤' if ok else '>'} {_number(self._one)}"
        if self.kind == "interval":
            lo, hi = self._pair
            ok = lo <= diff <= hi
            where = "inside" if ok else "outside"
            return ok, f"measured − predicted = {_number(diff)}, {where} [{_number(lo)}, {_number(hi)}]"
        if self.kind == "at_least":
            bound = p - self._one
            ok = m >= bound
            return ok, f"measured = {_number(m)} {'≥' if ok else '<'} {_number(bound)}"
        bound = p + self._one
        ok = m <= bound
        return ok, f"measured = {_number(m)} {'≤' if ok else '>'} {_number(bound)}"


@dataclass(frozen=True)
class Verdict:
    """``status`` is one of "confirmed", "not confirmed", "not applicable"; ``reason`` says why."""

    status: Literal["confirmed", "not confirmed", "not applicable"]
    reason: str


@dataclass(frozen=True)
class Claim:
    """One row of the report's table: what the theory predicts and what was measured.

    ``predicted`` / ``measured`` are plain numbers (``None`` when missing; then
    ``why_missing`` says why, e.g. "the LV reduction needs a shared eigenbasis").
    ``why_missing`` may only be given when a number is missing, so a claim with both
    numbers is always judged by its tolerance. ``unit`` is appended to the numbers.
    The verdict is the property :attr:`verdict`, computed by :func:`judge`.

    A claim about a nonlinear network may carry a second prediction, the network's own
    (``network_predicted``: the mean-field flow of its units, ``nqf.theory.departure.mean_field``;
    ``network_why_missing`` when there is none, e.g. a router couples the units). Its verdict,
    :attr:`network_verdict`, is judged against the same measurement and tolerance; the
    quadratic theory's :attr:`verdict` is unchanged by it. None where the claim has neither.
    """

    claim: str
    measured_what: str
    predicted: float | None
    measured: float | None
    tolerance: Tolerance
    unit: str = ""
    why_missing: str = ""
    network_predicted: float | None = None
    network_why_missing: str = ""

    def __post_init__(self) -> None:
        if not self.claim or not self.measured_what:
            raise NqfError("a claim needs a non-empty statement and a description of what was measured")
        if not isinstance(self.tolerance, Tolerance):
            raise NqfError(f"a claim's tolerance must be a Tolerance, got {type(self.tolerance).__name__}")
        for name in ("predicted", "measured", "network_predicted"):
            value = getattr(self, name)
            if value is None:
                continue
            try:
                if isinstance(value, (bool, str)):
                    raise TypeError
                number = float(value)
            except (TypeError, ValueError):
                raise NqfError(f"a claim's {name} value must be a number or None, got {value!r}") from None
            object.__setattr__(self, name, number)
        if self.why_missing and self.predicted is not None and self.measured is not None:
            raise NqfError(
                f"claim {self.claim!r} has both numbers, so its verdict comes from the tolerance; "
                "why_missing is only for a missing prediction or measurement"
            )

        if self.network_why_missing and self.network_predicted is not None and self.measured is not None:
            raise NqfError(
                f"claim {self.claim!r} has the network's prediction and a measurement; network_why_missing is only "
                "for a missing one"
            )

    @property
    def verdict(self) -> Verdict:
        return judge(self)

    @property
    def network_verdict(self) -> Verdict | None:
        """The verdict of the network's own prediction against the same measurement and tolerance
        (:func:`judge`), or None for a claim without one (not about a nonlinear network)."""
        if self.network_predicted is None and not self.network_why_missing:
            return None
        missing = self.network_why_missing or (self.why_missing if self.measured is None else "")
        second = Claim(
            self.claim,
            self.measured_what,
            self.network_predicted,
            self.measured,
            self.tolerance,
            self.unit,
            "" if self.network_predicted is not None and self.measured is not None else missing,
        )
        return judge(second)


def judge(claim: Claim) -> Verdict:
    """The verdict of a claim: the only place a verdict is decided."""
    if claim.predicted is None or claim.measured is None:
        if claim.why_missing:
            reason = claim.why_missing
        elif claim.predicted is None:
            reason = "the theory gives no prediction here"
        else:
            reason = "nothing was measured"
        return Verdict(NOT_APPLICABLE, reason)
    bad = [name for name in ("predicted", "measured") if not math.isfinite(getattr(claim, name))]
    if bad:
        return Verdict(NOT_CONFIRMED, f"{' and '.join(bad)} value is not finite")
    ok, reason = claim.tolerance.check(claim.predicted, claim.measured)
    return Verdict(CONFIRMED if ok else NOT_CONFIRMED, reason)
