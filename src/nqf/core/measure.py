r"""Measurements on recorded trajectories: switch-on steps, loss crossings, slopes versus init scale.

A mode's switch-on step is the first step at which its occupation m_k = q_k^T M q_k
reaches a threshold: by convention half of the theory's fixed-point occupation, one
threshold for every model (docs/theory.md section 5); :func:`own_thresholds` gives half of a
run's own final occupation instead, for comparison (:func:`switch_steps_own`: NaN for a run that
diverged and for a mode that never reached the common threshold, i.e. never switched on).

Resolution: where consecutive records are one step apart the answer is exact, the
first recorded step t with m(t) >= threshold (an integer). Where the crossing falls
between records further apart, the step is linearly interpolated in m between the two
records around it (a fractional step; the occupation's growth is exponential, so this
is an estimate good to a fraction of the gap). Never reached: NaN. Non-finite records
(a diverged run) never count as reaching.

All functions take records with any leading axes (seeds, init scales) and the record
steps as the last-but-one (occupations) or last (loss) axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nqf.core.errors import NqfError

if TYPE_CHECKING:  # jaxtyping imports JAX; annotations only, so this module stays JAX-free
    from jaxtyping import ArrayLike, Float, Real


def _first_crossing(steps: ArrayLike, values: np.ndarray, threshold: np.ndarray, upward: bool) -> np.ndarray:
    """First step where values (..., R) reach threshold (...,); NaN if never. See the module docstring."""
    steps = np.asarray(steps, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    threshold = np.broadcast_to(np.asarray(threshold, dtype=np.float64), values.shape[:-1])
    if values.shape[-1] != steps.shape[0]:
        raise NqfError(f"records have {values.shape[-1]} entries but there are {steps.shape[0]} record steps")
    reached = np.isfinite(values) & ((values >= threshold[..., None]) if upward else (values <= threshold[..., None]))
    k = np.argmax(reached, axis=-1)  # the first record reached (0 where none is)
    before = np.maximum(k - 1, 0)
    v0 = np.take_along_axis(values, before[..., None], axis=-1)[..., 0]
    v1 = np.take_along_axis(values, k[..., None], axis=-1)[..., 0]
    exact = (k == 0) | (steps[k] - steps[before] <= 1) | ~np.isfinite(v0)
    with np.errstate(invalid="ignore", divide="ignore"):  # the exact and the never-reached are not read
        between = steps[before] + (threshold - v0) / (v1 - v0) * (steps[k] - steps[before])
    return np.where(reached.any(axis=-1), np.where(exact, steps[k], between), np.nan)


def switch_steps(
    steps: Real[ArrayLike, " R"],
    occupations: Float[ArrayLike, "*batch R m"],
    thresholds: Float[ArrayLike, " m"] | Float[ArrayLike, "*batch m"],
) -> Float[np.ndarray, "*batch m"]:
    """Switch-on step of each mode: first step with occupations[..., t, k] >= thresholds[k].

    steps: (R,) record steps; occupations: (..., R, m); thresholds: (m,) or (..., m).
    Returns (..., m) floats (NaN: never reached).
    """
    occ = np.asarray(occupations, dtype=np.float64)
    if occ.ndim < 2:
        raise NqfError(f"occupations must be (..., R, m), got shape {occ.shape}")
    thr = np.asarray(thresholds, dtype=np.float64)
    return _first_crossing(steps, np.moveaxis(occ, -1, -2), thr, upward=True)


def half_fixed_point(fixed_point_occupations) -> np.ndarray:
    """The convention's thresholds: half of the theory's fixed-point occupations m_k*."""
    return 0.5 * np.asarray(fixed_point_occupations, dtype=np.float64)


def own_thresholds(occupations, fraction: float = 0.5) -> np.ndarray:
    """``fraction`` of each run's own final occupation (the last finite record), (..., m)."""
    occ = np.asarray(occupations, dtype=np.float64)
    finite_rows = np.all(np.isfinite(occ), axis=-1)  # (..., R)
    last = occ.shape[-2] - 1 - np.argmax(finite_rows[..., ::-1], axis=-1)
    final = np.take_along_axis(occ, last[..., None, None], axis=-2)[..., 0, :]
    final = np.where(finite_rows.any(axis=-1)[..., None], final, np.nan)
    return fraction * final


def switch_steps_own(
    steps: Real[ArrayLike, " R"],
    occupations: Float[ArrayLike, "*batch R m"],
    fraction: float = 0.5,
    *,
    thresholds: Float[ArrayLike, " m"] | Float[ArrayLike, "*batch m"] | None = None,
    diverged: bool | ArrayLike | None = None,
) -> Float[np.ndarray, "*batch m"]:
    """Switch-on steps timed at ``fraction`` of each run's own final occupation.

    A run's own final occupation only times a switch-on that happened: with ``thresholds``
    (the common convention's, as :func:`switch_steps` takes them) a mode that never reaches
    its common threshold gets NaN (half of a still-tiny final occupation would time a bogus
    early step), and every mode of a run marked in ``diverged`` ((...) bools, or one bool)
    gets NaN (its last finite record is where it blew up, not a final occupation).
    Returns (..., m) floats.
    """
    own = switch_steps(steps, occupations, own_thresholds(occupations, fraction))
    if thresholds is not None:
        own = np.where(np.isfinite(switch_steps(steps, occupations, thresholds)), own, np.nan)
    if diverged is not None:
        bad = np.broadcast_to(np.asarray(diverged, dtype=bool), own.shape[:-1])
        own = np.where(bad[..., None], np.nan, own)
    return own


def plateau_levels(plateau_losses) -> np.ndarray:
    """Loss levels between consecutive plateaus: the arithmetic midpoints (L_j + L_{j+1}) / 2."""
    p = np.asarray(plateau_losses, dtype=np.float64)
    if p.ndim != 1 or p.size < 2:
        raise NqfError("plateau losses must be a 1-D sequence of at least two levels")
    return 0.5 * (p[:-1] + p[1:])


def loss_crossings(
    steps: Real[ArrayLike, " R"], loss: Float[ArrayLike, "*batch R"], levels: Float[ArrayLike, " L"]
) -> Float[np.ndarray, "*batch L"]:
    """First step at which loss[..., t] <= each level (interpolated as in the module docstring).

    steps: (R,); loss: (..., R); levels: (L,). Returns (..., L), NaN where never reached.
    """
    loss = np.asarray(loss, dtype=np.float64)
    levels = np.asarray(levels, dtype=np.float64)
    stacked = np.broadcast_to(loss[..., None, :], loss.shape[:-1] + (levels.size, loss.shape[-1]))
    return _first_crossing(steps, stacked, levels, upward=False)


@dataclass(frozen=True)
class SlopeFit:
    """Least-squares line step = intercept + slope * ln(1/sigma0) with standard errors.

    stderr = sqrt(s^2 / sum (x - xbar)^2), s^2 = residual sum of squares / (points - 2);
    NaN with fewer than three points.
    """

    slope: float
    stderr: float
    intercept: float
    intercept_stderr: float
    points: int


def fit_switch_slope(sigma0s, steps) -> SlopeFit:
    """Slope of switch-on step versus ln(1/sigma0).

    sigma0s: (S,); steps: (S,) or (S, seeds) (several seeds per scale); NaN entries are
    left out.
    """
    sigma0s = np.asarray(sigma0s, dtype=np.float64)
    steps = np.asarray(steps, dtype=np.float64)
    if steps.shape[0] != sigma0s.shape[0]:
        raise NqfError(f"need one row of switch steps per sigma0: {sigma0s.shape[0]} scales, {steps.shape[0]} rows")
    if np.any(sigma0s <= 0):
        raise NqfError("sigma0 values must be positive to take ln(1/sigma0)")
    x = np.broadcast_to(np.log(1.0 / sigma0s).reshape((-1,) + (1,) * (steps.ndim - 1)), steps.shape)
    keep = np.isfinite(steps)
    x, y = x[keep], steps[keep]
    n = x.size
    if n < 2 or np.ptp(x) == 0:
        raise NqfError("fitting a slope needs switch steps at two or more distinct init scales")
    xm, ym = x.mean(), y.mean()
    sxx = np.sum((x - xm) ** 2)
    slope = np.sum((x - xm) * (y - ym)) / sxx
    intercept = ym - slope * xm
    if n > 2:
        s2 = np.sum((y - intercept - slope * x) ** 2) / (n - 2)
        se = math.sqrt(s2 / sxx)
        se_int = math.sqrt(s2 * (1.0 / n + xm**2 / sxx))
    else:
        se = se_int = math.nan
    return SlopeFit(float(slope), float(se), float(intercept), float(se_int), int(n))


# Switch-on steps at most this many steps apart are simultaneous: a switch-on step is read to the
# step (the first record at or above half the fixed point; a median of two particle sets to half
# a step), so no plateau between them is resolved, and which of the two comes first is not
# measured either (near-degenerate modes trade places from one init, or one flow, to another).
SIMULTANEOUS_STEPS = 1.0


def plateau_bounds(switch, horizon: float, within: float = SIMULTANEOUS_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """Where the plateau after each mode's switch-on starts and ends: (start (g,), end (g,)).

    switch: (g,) switch steps (NaN: never). Modes that switch on within ``within`` steps of each
    other (chained) are one switch-on, and share the plateau after the last of them: start is
    that last step, end the earliest switch step after it, else ``horizon``. NaN where the mode
    never switches on.
    """
    switch = np.asarray(switch, dtype=np.float64)
    start = np.full(switch.shape, np.nan)
    end = np.full(switch.shape, np.nan)
    found = np.sort(switch[np.isfinite(switch)])
    for k, t in enumerate(switch):
        if not math.isfinite(t):
            continue
        last = float(t)
        for other in found[found > t]:  # ascending: extend the cluster while the next is close
            if other - last > within:
                break
            last = float(other)
        later = found[found > last]
        start[k], end[k] = last, float(later[0]) if later.size else float(horizon)
    return start, end


def measured_plateau_losses(steps, loss, switch, horizon: float) -> np.ndarray:
    """Loss on the plateau after each switch: loss at sqrt(t_k t_next), the middle of the
    plateau on the log-time axis (``nqf.comparison.compare``'s docstring).

    steps: (R,) record steps; loss: (R,); switch: (g,) switch steps (NaN: never).
    t_k and t_next are :func:`plateau_bounds`: modes switching on within SIMULTANEOUS_STEPS of
    each other share the plateau after the last of them; t_next is the earliest later switch step
    of any mode, else ``horizon``; t_k is floored at 1 (a log-time midpoint). The loss is
    linearly interpolated between records.
    Returns (g,), NaN where t_k is NaN or the loss there is not finite.
    """
    at = plateau_reading_steps(switch, horizon)
    out = np.full(at.shape, np.nan)
    finite = np.isfinite(at)
    out[finite] = np.interp(at[finite], np.asarray(steps, dtype=np.float64), np.asarray(loss, dtype=np.float64))
    return out


def plateau_reading_steps(switch, horizon: float) -> np.ndarray:
    """Where :func:`measured_plateau_losses` reads each plateau: sqrt(max(t_k, 1) max(t_next, 1))
    of :func:`plateau_bounds` (g,), NaN where the mode never switches on."""
    start, end = plateau_bounds(switch, horizon)
    return np.sqrt(np.maximum(start, 1.0) * np.maximum(end, 1.0))  # NaN stays NaN


# The timing error bar of a plateau reading of the network's own prediction
# (NetworkFlow.plateau_timing): how far the reading moves when its reading step moves by this
# fraction either way. One init's trained network switches its modes on a few percent from the
# prediction (benchmarks/README.md, network_init_seeds: the trained steps vary by 1.8-4.6% from
# init to init), and where its plateau is read on a drop that timing moves the reading.
# Calibrated on the 123 plateaus of network_init_seeds' cases and init seeds (benchmark
# network_plateau_flags): the trained plateau lay within one such error bar of the reading for
# 82 (67%) at 2% (57 at 1%, 100 at 3%, 109 at 5%), within two for 103 (84%).
TIMING_SHIFT = 0.02


def plateau_timing(steps, loss, switch, horizon: float, shift: float) -> np.ndarray:
    """How far each plateau reading of :func:`measured_plateau_losses` moves when its reading step
    t moves by the factor (1 + shift) either way: |L(t (1 + shift)) - L(t / (1 + shift))| / (2 L(t)),
    relative (g,); NaN where there is no reading. A plateau read where the loss still falls (a
    short one, on the drop) moves a lot; a flat one not at all."""
    at = plateau_reading_steps(switch, horizon)
    steps = np.asarray(steps, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    out = np.full(at.shape, np.nan)
    finite = np.isfinite(at)
    t = at[finite]
    with np.errstate(invalid="ignore", divide="ignore"):
        out[finite] = np.abs(np.interp(t * (1 + shift), steps, loss) - np.interp(t / (1 + shift), steps, loss)) / (
            2 * np.abs(np.interp(t, steps, loss))
        )
    return out


# Modes whose growth rates c_k agree to this relative gap (of max |c|) form one degenerate group.
DEGENERATE_RTOL = 1e-6

ModeGroups = tuple[tuple[int, ...], ...]
GroupsLike = Sequence[Sequence[int]]  # what the functions below take: ModeGroups, or lists of indices


def mode_groups(growth, rtol: float = DEGENERATE_RTOL) -> ModeGroups:
    """Degenerate groups of modes sorted by growth rate (largest first): consecutive modes whose
    c_k differ from the group's first by at most ``rtol * max|c|`` form a group.

    Why groups: inside a degenerate eigenspace of C the basis q_k is any rotation, so the
    fixed point fixes only the group's total occupation; how it splits among the q_k (one
    m_k* may be 0) and each member's own switch step depend on the draw of W0
    (docs/theory.md 5.1). A group's total occupation does not. Returns index tuples, (G,).
    """
    growth = np.asarray(growth, dtype=np.float64).ravel()
    if growth.size == 0:
        return ()
    scale = float(np.abs(growth).max())
    groups: list[list[int]] = [[0]]
    for k in range(1, growth.size):
        if abs(growth[k] - growth[groups[-1][0]]) <= rtol * scale:
            groups[-1].append(k)
        else:
            groups.append([k])
    return tuple(tuple(g) for g in groups)


def group_label(group) -> str:
    """A group's modes, numbered from 1: ``"3"``, ``"1-2"``, ``"4-7"`` (consecutive by construction)."""
    first, last = int(group[0]) + 1, int(group[-1]) + 1
    return str(first) if first == last else f"{first}-{last}"


def group_members(groups: GroupsLike, num_modes: int) -> np.ndarray:
    """(m, G) 0/1 matrix: column j sums the members of group j (occupations @ it = group totals)."""
    members = np.zeros((num_modes, len(groups)))
    for j, group in enumerate(groups):
        members[list(group), j] = 1.0
    return members


def group_thresholds(thresholds, groups: GroupsLike) -> np.ndarray:
    """A group's threshold: the sum of its members' (m_k*/2 summed = half the group's fixed-point
    total), members with no threshold (inf or NaN: m_k* = 0) counting 0; inf where the sum is 0. (G,)."""
    thr = np.asarray(thresholds, dtype=np.float64)
    finite = np.where(np.isfinite(thr) & (thr > 0), thr, 0.0)
    total = finite @ group_members(groups, thr.shape[-1])
    return np.where(total > 0, total, np.inf)


def group_switch_steps(
    steps: Real[ArrayLike, " R"],
    occupations: Float[ArrayLike, "*batch R m"],
    thresholds: Float[ArrayLike, " m"],
    groups: GroupsLike,
) -> Float[np.ndarray, "*batch G"]:
    """First step at which each group's total occupation reaches its total threshold
    (:func:`group_thresholds`), (..., G); NaN: never. A group of one is :func:`switch_steps`."""
    occ = np.asarray(occupations, dtype=np.float64)
    if occ.ndim < 2:
        raise NqfError(f"occupations must be (..., R, m), got shape {occ.shape}")
    total = occ @ group_members(groups, occ.shape[-1])
    return switch_steps(steps, total, group_thresholds(thresholds, groups))


def occupation_group_steps(per_mode, steps, occupations, thresholds, groups: GroupsLike) -> np.ndarray:
    """A curve's switch-on step per degenerate group, (G,): a mode of its own keeps its step in
    ``per_mode`` (g,); a group of several switches on when its total occupation reaches half its
    fixed-point total (:func:`group_switch_steps` of ``occupations`` (R, g) at ``steps`` (R,)):
    inside a group the init decides how the occupation splits, so a member's own step is not a
    reading of the group. Without occupations (None) every group takes its earliest member's."""
    out = group_first(per_mode, groups)
    several = [len(group) > 1 for group in groups]
    if occupations is None or not any(several):
        return out
    return np.where(several, group_switch_steps(steps, occupations, thresholds, groups), out)


def group_first(values, groups: GroupsLike) -> np.ndarray:
    """Per group, the earliest of its members' steps ((..., m) -> (..., G)); NaN if none has one.
    A group switches on when its first member does: used for the readings that time each mode
    from its own m_k(0) (LV map and flow, closed form, vanishing-init limit)."""
    values = np.asarray(values, dtype=np.float64)
    out = np.full((*values.shape[:-1], len(groups)), np.nan)
    for j, group in enumerate(groups):
        part = values[..., list(group)]
        seen = np.isfinite(part).any(axis=-1)
        out[..., j] = np.where(seen, np.min(np.where(np.isfinite(part), part, np.inf), axis=-1), np.nan)
    return out


def group_last_value(values, steps, groups: GroupsLike) -> np.ndarray:
    """Per group, ``values`` (..., m) of the member with the latest finite step in ``steps``
    (..., m): the plateau reached once the whole group is on. NaN where no member has a step."""
    values = np.asarray(values, dtype=np.float64)
    steps = np.asarray(steps, dtype=np.float64)
    out = np.full((*values.shape[:-1], len(groups)), np.nan)
    for j, group in enumerate(groups):
        idx = list(group)
        when = np.where(np.isfinite(steps[..., idx]), steps[..., idx], -np.inf)
        last = np.argmax(when, axis=-1)
        picked = np.take_along_axis(values[..., idx], last[..., None], axis=-1)[..., 0]
        out[..., j] = np.where(np.isfinite(steps[..., idx]).any(axis=-1), picked, np.nan)
    return out
