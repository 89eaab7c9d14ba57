r"""Network-corrected switch-on steps (part (b) of ``nqf.theory.departure.estimate``, whose docstring
has the construction and the measurements).

From the first switch-on T_1, sequentially: find both models' plateau states for the learned
modes, run the unlearned rows' linear(ised) maps of both models over the next segment, take
the first mode whose network occupation reaches the quadratic model's level at the M-flow's
switch step as the next switch-on, and restart both maps there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, Real

from nqf.architectures.architecture import Architecture
from nqf.core.errors import NqfError
from nqf.core.measure import switch_steps
from nqf.core.optimizers import optimizer_record
from nqf.core.progress import report
from nqf.theory.data_matrices.protocol import AbstractDataMatrices
from nqf.theory.departure.path import DEFAULT_SAMPLES, check_prediction, departure_inputs, path_weights
from nqf.theory.departure.plateaus import UnlearnedMap, plateau_state

CONSTRUCTIONS = ("linearised", "near_zero")
# A level reached to this much in ln(occupation) counts as reached. When the unit is exactly
# quadratic the network's and the quadratic model's maps agree only as far as their plateau
# states do, each a BFGS solve to gtol 1e-10 (``nqf.theory.departure.plateaus``), whose path
# rounding steers: measured |ln n - level| at the M-flow's switch up to 3.1e-8 (mlp-fixed z^2/2,
# seeds 0-3, widths 16 and 24, 2026-12-05). 1e-9 sat inside that spread; a crossing step moves
# by this tolerance only where a recorded occupation is within 1e-7 of the level.
_LEVEL_ROUNDING = 1e-7
# A plateau whose network curvature is steeper than the quadratic model's steepest by this factor
# gets a note: the restricted plateau state is then a saddle the network leaves along a direction
# the quadratic model does not have (measured: mixture of experts), and the corrections there are suspect.
_SADDLE_FACTOR = 1.1
_MODELS = ("network", "quadratic")


def _segment_gaps(rec: np.ndarray, start: int, stop: int | None = None) -> np.ndarray:
    """Steps between records for a map started at step ``start`` (and stopped at ``stop``): zero outside."""
    stop = int(rec[-1]) if stop is None else stop
    keep = (rec > start) & (rec <= stop)
    gaps = np.where(keep, np.diff(rec, prepend=0), 0)
    if keep.any():
        first = int(np.argmax(keep))
        gaps[first] = rec[first] - start
    return gaps.astype(np.int32)


def _crossing(steps, values, level, start) -> float:
    """First step >= start where values (R,) reach level, linearly interpolated between records; NaN if never."""
    v = np.where(steps >= start, values, -np.inf)
    return float(switch_steps(steps, v[:, None], np.array([level]))[0])


def _side_changes(steps: np.ndarray, values: np.ndarray, level: float) -> list[tuple[float, bool]]:
    """(step, upward) of each time ``values`` (R,) change side of ``level`` (at or above: one side),
    at the first record on the new side (interpolated linearly between records more than a step apart)."""
    above = values >= level
    out = []
    for i in np.flatnonzero(above[1:] != above[:-1]) + 1:
        v0, v1 = values[i - 1], values[i]
        step = float(steps[i])
        if steps[i] - steps[i - 1] > 1 and np.isfinite(v0) and np.isfinite(v1) and v1 != v0:
            step = float(steps[i - 1] + (level - v0) / (v1 - v0) * (steps[i] - steps[i - 1]))
        out.append((step, bool(above[i])))
    return out


def _matching_crossing(steps, values, reference, level: float, start: int, t_ref: float) -> float:
    """The step at which ``values`` (R,) cross ``level`` the way ``reference`` (R,) does at ``t_ref``.

    The level of a mode is the quadratic map's (``reference``) ln occupation at the M-flow's
    switch step t_ref; the corrected step is where the network's map reaches it. An unlearned
    mode's occupation need not rise monotonically on a plateau (it can fall while a
    neighbouring mode finishes switching on, and rise again), so "the first record at or above
    the level" can be a record where the occupation is still above it from before: the old
    rule, which on an exactly quadratic unit put a mode 44 steps early. Instead, within the
    segment (records from ``start`` on), the reference's crossing at t_ref is its j-th change of
    side of the level, in some direction; the corrected step is the network's j-th change of
    side when it starts on the same side and crosses the same way (so equal maps give t_ref
    exactly), else its first crossing in that direction. A network already past the event
    when the segment starts (above a level the reference rises to, below one it falls
    through) switches at ``start``. A level counts as reached within _LEVEL_ROUNDING, on the
    side the crossing comes from. NaN: no such crossing within the records.
    """
    keep = steps >= start
    s, v, r = steps[keep], values[keep], reference[keep]
    if s.size == 0:
        return math.nan
    ref_changes = [c for c in _side_changes(s, r, level) if c[0] <= t_ref + 1]
    if not (np.isfinite(t_ref) and t_ref >= s[0]) or not ref_changes:
        # the level's step lies before this segment: the mode is due once the network is at its level
        return _crossing(steps, values, level - _LEVEL_ROUNDING, start)
    j, upward = len(ref_changes), ref_changes[-1][1]
    reach = level - _LEVEL_ROUNDING if upward else level + _LEVEL_ROUNDING
    net_above, ref_above = bool(v[0] >= reach), bool(r[0] >= level)
    if net_above != ref_above and net_above == upward:
        return float(s[0])  # already past the event: above a level the reference rises to, below one it falls through
    net_changes = _side_changes(s, v, reach)
    if net_above == ref_above and len(net_changes) >= j and net_changes[j - 1][1] == upward:
        return net_changes[j - 1][0]
    same_way = [t for t, up in net_changes if up == upward]
    return same_way[0] if same_way else math.nan


@dataclass(frozen=True, eq=False)
class _Setting:
    """What every segment of :func:`corrected_switch_steps` shares, fixed by the prediction.

    rec (R,): the M-flow's recorded steps; mflow (g,): its switch steps; full (d, d): the
    eigenbasis of C; m_star (d,): the LV fixed point (1 beyond the growing modes); Rhat
    (d, n): the normalised rows q_k^T W0; Xj, Yj: the samples used; first, t1, start: the
    first switching mode, its M-flow step and the recorded step at or after it; start_rows:
    the quadratic path's mode rows (Q^T W, Q^T V) there, the common start of both maps.
    """

    arch: Architecture
    loss: str
    optimizer: str
    dtype: np.dtype
    g: int
    rec: np.ndarray
    mflow: np.ndarray
    full: np.ndarray
    m_star: np.ndarray
    Rhat: jax.Array
    Xj: jax.Array
    Yj: jax.Array
    lr: jax.Array
    beta: jax.Array
    first: int
    t1: float
    start: int
    start_rows: tuple


def _setting(arch, prediction, Xs, Ys, W0, data: AbstractDataMatrices, mflow: np.ndarray) -> _Setting:
    """The :class:`_Setting` of ``prediction`` on the samples (Xs, Ys) from W0; mflow (g,) has a finite entry."""
    config = prediction.config
    dtype = data.dtype
    g = prediction.num_growing
    rec = np.asarray(prediction.flow.steps, dtype=np.int64)
    full = np.asarray(prediction.modes.full_basis, dtype=np.float64)
    d = full.shape[0]
    thresholds = np.asarray(prediction.thresholds, dtype=np.float64)
    t1 = float(np.nanmin(mflow))
    first = int(np.nanargmin(mflow))
    start = int(rec[min(int(np.searchsorted(rec, t1, side="left")), rec.size - 1)])
    # the quadratic path's unlearned rows at the first switch-on: the common start of both maps
    Ws, Vs = path_weights(data, W0, config.optimizer, config.lr, np.array([start]), config.beta)
    W_t1, V_t1 = np.asarray(Ws[-1]), np.asarray(Vs[-1])
    lr = jnp.asarray(config.lr, dtype=dtype)
    beta = jnp.asarray(config.beta if optimizer_record(config.optimizer).flow_takes_beta else 0.0, dtype=dtype)
    profiles = full.T @ np.asarray(W0, dtype=np.float64)  # (d, n) rows q_k^T W0
    norms = np.linalg.norm(profiles, axis=1)
    Rhat = jnp.asarray(profiles / np.where(norms > 0, norms, 1.0)[:, None], dtype=dtype)
    m_star = np.ones(d)
    m_star[:g] = np.where(thresholds > 0, 2.0 * thresholds, 1.0)
    Xj, Yj = jnp.asarray(Xs, dtype=dtype), jnp.asarray(Ys, dtype=dtype)
    return _Setting(
        arch=arch,
        loss=config.loss,
        optimizer=config.optimizer,
        dtype=dtype,
        g=g,
        rec=rec,
        mflow=mflow,
        full=full,
        m_star=m_star,
        Rhat=Rhat,
        Xj=Xj,
        Yj=Yj,
        lr=lr,
        beta=beta,
        first=first,
        t1=t1,
        start=start,
        start_rows=(full.T @ W_t1, full.T @ V_t1),
    )


def _run_segment(s: _Setting, construction: str, learned, newest: int, B: dict, rows: dict, seg_start: int):
    """Both models on the plateau of the modes ``learned`` (d,) bool, from the recorded step ``seg_start``.

    Each model's plateau state starts from its previous B (``B[model]``, replaced by the new
    B*) with mode ``newest`` at sqrt(m_newest*); its unlearned rows start from ``rows[model]``
    (Q^T W, Q^T V). Returns ({model: (R, d) occupations of the unlearned rows over the records
    after seg_start}, {model: (map, D0, V0)}, {model: (plateau loss, the map)}).
    """
    QL, QU = jnp.asarray(s.full * learned, dtype=s.dtype), jnp.asarray(s.full * ~learned, dtype=s.dtype)
    free = np.outer(learned, learned)
    occ, states, found = {}, {}, {}
    for model in _MODELS:
        B0 = B[model].copy()
        B0[newest, newest] = math.sqrt(s.m_star[newest])
        B[model], value = plateau_state(s.arch, model, s.loss, QL, s.Rhat, s.Xj, s.Yj, B0, free)
        Wstar = QL @ jnp.asarray(B[model], dtype=s.dtype) @ s.Rhat
        D0, V0 = (jnp.asarray(r * ~learned[:, None], dtype=s.dtype) for r in rows[model])
        linear = UnlearnedMap(s.arch, model, s.loss, construction, s.optimizer, Wstar, QU, s.Xj, s.Yj, D0, s.lr, s.beta)
        o, _, _ = linear.run(D0, V0, _segment_gaps(s.rec, seg_start))
        occ[model] = np.asarray(o, dtype=np.float64)
        states[model] = (linear, D0, V0)
        found[model] = (value, linear)  # its lowest curvature is read only where it is reported
    return occ, states, found


def _next_switch(s: _Setting, learned, log_n: np.ndarray, history_q: np.ndarray, seg_start: int):
    """(mode, corrected step) of the next growing mode to switch on in the network, or None.

    Mode k switches when ln of its network occupation (log_n (R, d)) reaches, from seg_start on,
    the quadratic map's level at the M-flow's own switch step, crossing it as the quadratic map
    does there (:func:`_matching_crossing`; history_q (R, d): the quadratic map's log
    occupations stitched from T_1 on); the earliest mode wins.
    """
    candidates = {}
    for k in np.flatnonzero(~learned[: s.g]):
        if not np.isfinite(s.mflow[k]):
            continue
        # the quadratic map's level at the M-flow's own switch step (history stitched from T_1 on)
        level = float(np.interp(s.mflow[k], s.rec, history_q[:, k]))
        candidates[int(k)] = (
            _matching_crossing(s.rec, log_n[:, k], history_q[:, k], level, seg_start, s.mflow[k])
            if np.isfinite(level)
            else math.nan
        )
    live = {k: t for k, t in candidates.items() if np.isfinite(t)}
    if not live:
        return None
    k_next = min(live, key=lambda k: live[k])
    return k_next, live[k_next]


def _restart_rows(s: _Setting, states: dict, seg_start: int, new_start: int) -> dict:
    """{model: (Q^T W, Q^T V)} at ``new_start``: each model's map of the segment (``states``) stopped there."""
    rows = {}
    for model in _MODELS:
        linear, D0, V0 = states[model]
        _, Dn, Vn = linear.run(D0, V0, _segment_gaps(s.rec, seg_start, new_start))
        rows[model] = (np.asarray(Dn, dtype=np.float64), np.asarray(Vn, dtype=np.float64))
    return rows


def _corrected_switches(
    s: _Setting, construction: str, plateau: dict | None, curvature: dict | None, on_segment=lambda: None
) -> dict:
    """{mode: corrected switch step} of one construction, in the order found (the first mode: T_1).

    Segment by segment (:func:`_run_segment`, :func:`_next_switch`) until every mode is
    learned or none switches within the horizon. ``plateau``, ``curvature`` ({model: (g,)}),
    when given, get each model's plateau loss and lowest curvature after each growing mode.
    """
    d = s.full.shape[0]
    learned = np.zeros(d, dtype=bool)
    learned[s.first] = True
    switched = {s.first: s.t1}
    seg_start = s.start
    rows = {m: s.start_rows for m in _MODELS}
    B = {m: np.zeros((d, d)) for m in _MODELS}
    history_q = np.full((s.rec.size, d), np.nan)  # stitched log-occupations of the quadratic map
    while not learned.all():
        newest = list(switched)[-1]  # the mode learned last (insertion order: ties in time are possible)
        occ, states, found = _run_segment(s, construction, learned, newest, B, rows, seg_start)
        on_segment()
        if plateau is not None and curvature is not None and newest < s.g:
            for model, (value, linear) in found.items():
                plateau[model][newest] = value
                curvature[model][newest] = linear.lowest
        with np.errstate(divide="ignore"):
            log_q, log_n = np.log(occ["quadratic"]), np.log(occ["network"])
        after = s.rec >= seg_start
        history_q[after] = np.where(learned[None, :], history_q[after], log_q[after])
        found_next = _next_switch(s, learned, log_n, history_q, seg_start)
        if found_next is None:
            break
        k_next, t_next = found_next
        switched[k_next] = t_next
        # the unlearned rows at the new segment start (the same compiled map, stopped there)
        new_start = int(s.rec[min(int(np.searchsorted(s.rec, t_next, side="left")), s.rec.size - 1)])
        rows = _restart_rows(s, states, seg_start, new_start)
        learned[k_next] = True
        seg_start = new_start
    return switched


def _saddle_notes(order: list[int], curvature: dict) -> list[str]:
    """A note when, on a plateau some growing mode still has to leave (not the last one), the
    network's lowest curvature is steeper than the quadratic model's by more than _SADDLE_FACTOR."""
    steep = [
        k
        for k in order[:-1]
        if curvature["network"][k] < _SADDLE_FACTOR * min(curvature["quadratic"][k], 0.0)
        and curvature["network"][k] < 0
    ]
    if not steep:
        return []
    listed = ", ".join(
        f"{k + 1} ({curvature['network'][k]:.3g} against {curvature['quadratic'][k]:.3g})" for k in steep
    )
    return [
        f"after the switch-on of mode(s) {listed}, the network's restricted plateau state has a direction of "
        f"curvature steeper than every growing direction of the quadratic model's (by more than {_SADDLE_FACTOR:g}x): "
        "the network leaves that state along a direction the quadratic model does not have, so the corrected "
        "steps of later modes are suspect there"
    ]


def corrected_switch_steps(
    arch: Architecture,
    X: Float[ArrayLike, " N *input"],
    Y: Float[ArrayLike, "N K"] | Real[ArrayLike, " N"],
    prediction,
    W0: Float[ArrayLike, "d n"] | None = None,
    data: AbstractDataMatrices | None = None,
    samples: int = DEFAULT_SAMPLES,
    constructions: tuple[str, ...] = CONSTRUCTIONS,
) -> tuple[dict, dict, dict, dict, tuple[str, ...]]:
    """Network-corrected switch-on steps of ``prediction`` (``nqf.theory.departure.estimate``'s docstring, part (b)).

    Returns ({construction: (g,)} corrected steps, {construction: order}, plateau losses
    {"network", "quadratic"}: (g,), lowest curvature of the unlearned rows' linearised map
    {"network", "quadratic"}: (g,) (``linearised``; NaN beyond EIGEN_LIMIT weights), notes);
    the per-mode entries belong to the plateau after mode k switched on. Steps are NaN where
    the M-flow has none.
    """
    check_prediction(arch, prediction)
    config = prediction.config
    if not optimizer_record(config.optimizer).deterministic_flow:
        raise NqfError(f"corrected switch steps are computed for gd and momentum, not {config.optimizer}")
    Xs, Ys, W0, data, _ = departure_inputs(arch, X, Y, prediction, W0, data, samples)
    g = prediction.num_growing
    mflow = np.asarray(prediction.mflow_switch_steps, dtype=np.float64)
    out_steps = {c: np.full(g, np.nan) for c in constructions}
    out_order: dict[str, list[int]] = {c: [] for c in constructions}
    plateau = {"network": np.full(g, np.nan), "quadratic": np.full(g, np.nan)}
    curvature = {"network": np.full(g, np.nan), "quadratic": np.full(g, np.nan)}
    if not np.isfinite(mflow).any():
        return out_steps, out_order, plateau, curvature, ("no mode switches on in the M-flow: nothing to correct",)
    setting = _setting(arch, prediction, Xs, Ys, W0, data, mflow)
    # progress: one plateau segment at a time, at most one per growing mode and construction
    total, done = len(constructions) * max(g, 1), [0]
    stage = "departure: network-corrected switch-on steps (plateaus)"

    def segment_done() -> None:
        done[0] += 1
        report(stage, done[0], max(total, done[0]))

    report(stage, 0, total)
    for construction in constructions:
        recorded = (plateau, curvature) if construction == constructions[0] else (None, None)
        switched = _corrected_switches(setting, construction, recorded[0], recorded[1], on_segment=segment_done)
        for k, t in switched.items():
            if k < g:
                out_steps[construction][k] = t
        out_order[construction] = [k for k, _ in sorted(switched.items(), key=lambda kv: kv[1]) if k < g]
    report(stage, total, total)
    return out_steps, out_order, plateau, curvature, tuple(_saddle_notes(out_order[constructions[0]], curvature))
