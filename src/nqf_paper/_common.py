r"""Pieces several experiments share: records back as arrays, step and percent text, the GD
training config of a run, ``predict``'s curves and switch-on steps, the M-flow claims of E1
and E7, and the diagnosis of a switch-on slope fit (E2, E6).

Call the run helpers under ``jax.enable_x64(True)``: the experiments run in float64.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nqf.core.errors import NqfError
from nqf_paper.verdict import Claim, Tolerance

# -- config checks ---------------------------------------------------------------------


def check_seeds(experiment: str, name: str, seeds) -> None:
    """A non-empty tuple of distinct integers >= 0."""
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise NqfError(f"{experiment}: {name} must be distinct integers >= 0, got {seeds!r}")


def check_sigma0s(experiment: str, sigma0s) -> None:
    """At least three distinct init scales in (0, 1), enough for a slope and its error."""
    if len(sigma0s) < 3 or any(not (math.isfinite(s) and 0 < s < 1) for s in sigma0s):
        raise NqfError(f"{experiment}: sigma0s needs at least three values in (0, 1), got {sigma0s!r}")
    if len(set(sigma0s)) != len(sigma0s):
        raise NqfError(f"{experiment}: sigma0s must be distinct, got {sigma0s!r}")


def check_gd_run(experiment: str, width: int, steps: int, lr: float, sigma0: float | None = None) -> None:
    """Width >= 1, steps >= 2, a positive finite lr and (when given) sigma0 in (0, 1)."""
    if width < 1 or steps < 2:
        raise NqfError(f"{experiment}: width must be >= 1 and steps >= 2, got {width!r}, {steps!r}")
    if not (math.isfinite(lr) and lr > 0):
        raise NqfError(f"{experiment}: lr must be a positive number, got {lr!r}")
    if sigma0 is not None and not (math.isfinite(sigma0) and 0 < sigma0 < 1):
        raise NqfError(f"{experiment}: sigma0 must lie in (0, 1), got {sigma0!r}")


# -- records ---------------------------------------------------------------------------


def as_array(value) -> np.ndarray:
    """A record's list back as floats (None, as JSON may write NaN, becomes NaN)."""
    if value is None:
        return np.array(np.nan)
    return np.array(value, dtype=np.float64)


def steps_text(values, digits: int = 0) -> str:
    """Comma-separated values with ``digits`` decimals, "n/a" where not finite."""
    return ", ".join("n/a" if not np.isfinite(v) else f"{v:.{digits}f}" for v in np.asarray(values, dtype=float))


def percent(values) -> str:
    """Comma-separated signed percentages, "n/a" where not finite."""
    return ", ".join("n/a" if not np.isfinite(v) else f"{v:+.1%}" for v in np.asarray(values, dtype=float))


# -- runs ------------------------------------------------------------------------------


def gd_train_config(run: dict[str, Any]):
    """Plain full-batch GD in float64 with the run's lr, steps, seed, sigma0, width and model."""
    from nqf.training.config import TrainConfig

    return TrainConfig(
        optimizer="gd",
        lr=run["lr"],
        steps=run["steps"],
        seed=run["seed"],
        sigma0=run["sigma0"],
        width=run["width"],
        dtype="float64",
        model=run["model"],
    )


def predict_config(run: dict[str, Any], **extra):
    """``predict``'s config for the run's width, lr, steps, sigma0 and seed (GD), with ``extra`` settings."""
    from nqf.theory.predict.pipeline import PredictConfig

    return PredictConfig(
        width=run["width"], lr=run["lr"], steps=run["steps"], sigma0=run["sigma0"], seed=run["seed"], **extra
    )


def predict_record(p) -> dict[str, Any]:
    """The part of a ``predict`` result that E1 and E7 record: curves, the g growing modes, switch-on
    steps; the network's own (``Prediction.network``: the mean-field flow of its units; NaN where
    there is none) with the notes that say why a step is missing."""
    g = p.num_growing
    return {
        "network_switch": np.full(g, np.nan) if p.network is None else p.network.switch_steps,
        "network_notes": [note for note in p.notes if note.startswith("network (")],
        "steps": p.flow.steps,
        "mflow_loss": p.flow.loss,
        "mflow_occupations": p.flow.occupations,
        "lv_loss": p.lv_loss,
        "thresholds": p.thresholds,
        "growth": p.modes.growth[:g],
        "interactions": p.modes.interactions[:g, :g],
        "mflow_switch": p.mflow_switch_steps,
        "lv_switch": p.lv_switch_steps,
        "lv_continuous_switch": p.lv_continuous_switch_steps,
        "singular_switch": p.singular_switch_steps,
        "lv_plateau_losses": p.lv_plateau_losses,
        "defect": p.defect,
        "init_defect": p.init_defect,
        "lv_applies": p.lv_applies,
    }


# -- summaries -------------------------------------------------------------------------


def predict_summary(pred: dict[str, Any]) -> dict[str, Any]:
    """A :func:`predict_record` back as arrays: thresholds m_k*/2, fixed point m_k*, switch-on steps, curves."""
    thresholds = as_array(pred["thresholds"])
    return {
        "thresholds": thresholds,
        "fixed_point": 2.0 * thresholds,
        "mflow": as_array(pred["mflow_switch"]),
        "lv": as_array(pred["lv_switch"]),
        "lv_continuous": as_array(pred["lv_continuous_switch"]),
        "singular": as_array(pred["singular_switch"]),
        "steps": as_array(pred["steps"]),
        "mflow_loss": as_array(pred["mflow_loss"]),
        "lv_loss": as_array(pred["lv_loss"]),
        "mflow_occupations": as_array(pred["mflow_occupations"]),
        "network_own": as_array(pred["network_switch"]),
        "network_notes": tuple(pred["network_notes"]),
    }


def model_summary(record: dict[str, Any], thresholds: np.ndarray) -> dict[str, Any]:
    """A training record (steps, loss, occupations (T, m), diverged_at) with its switch-on steps at ``thresholds``."""
    from nqf.core.measure import switch_steps

    steps, occ, loss = as_array(record["steps"]), as_array(record["occupations"]), as_array(record["loss"])
    return {
        "steps": steps,
        "loss": loss,
        "occupations": occ,
        "switch": switch_steps(steps, occ, thresholds),
        "final_occupations": occ[-1],
        "diverged_at": record["diverged_at"],
    }


def relative_loss_gap(experiment: str, quad, flow, floor: float) -> tuple[float, int, int]:
    """max |L_quad - L_flow| / L_flow over steps with L_flow >= floor * L_flow(0).

    Returns (gap, step of the maximum, last step compared); the losses are at steps 0..T.
    """
    quad, flow = np.asarray(quad, dtype=np.float64), np.asarray(flow, dtype=np.float64)
    if quad.shape != flow.shape:
        raise NqfError(f"{experiment}: quadratic-model and M-flow losses have {quad.size} and {flow.size} records")
    keep = np.flatnonzero(flow >= floor * flow[0])
    gap = np.abs(quad[keep] - flow[keep]) / flow[keep]
    i = int(np.argmax(gap))
    return float(gap[i]), int(keep[i]), int(keep.max())


def loss_gap_claim(gap: float, gap_step: int, last_step: int, floor: float, agreement: float, where: str) -> Claim:
    """The M-flow reproduces the quadratic model's loss to ``agreement`` (relative, see :func:`relative_loss_gap`)."""
    return Claim(
        claim="the M-flow reproduces the quadratic model's loss curve (exact GD map on M)",
        measured_what=f"max over steps 0..{last_step} (loss >= {floor:g} L(0)) of |L_quad - L_flow| / L_flow "
        f"(at step {gap_step}), {where}",
        predicted=0.0,
        measured=gap,
        tolerance=Tolerance("at_most", agreement),
    )


def network_switch_claims(
    net: dict[str, Any],
    prediction: dict[str, Any],
    claimed: int,
    tolerance: float,
    steps: int,
    where: str,
    say_diverged: bool = False,
) -> list[Claim]:
    """The tanh network's modes 1..claimed switch on at the M-flow's steps, within ``tolerance`` (relative).

    net: a :func:`model_summary`; prediction: a :func:`predict_summary` (the M-flow's steps, the
    thresholds, and the network's own predicted steps, each claim's second verdict: a missing one
    takes the prediction's network notes as its reason). With ``say_diverged`` a missing step of a
    diverged network says so.
    """
    mflow, thresholds = prediction["mflow"], prediction["thresholds"]
    own, own_notes = prediction["network_own"], prediction["network_notes"]
    claims = []
    for k in range(min(claimed, mflow.size)):
        value = float(own[k]) if k < own.size and np.isfinite(own[k]) else None
        # the notes that say why: the flow not computed, or left the finite numbers, or this mode's step withheld
        said = [n for n in own_notes if f"mode {k + 1} has no step" in n or "not computed" in n or "finite" in n]
        reason = "; ".join(said) or f"mode {k + 1} does not switch on in the mean-field flow within {steps} steps"
        measured = float(net["switch"][k]) if np.isfinite(net["switch"][k]) else None
        predicted = float(mflow[k]) if np.isfinite(mflow[k]) else None
        why = ""
        if predicted is None:
            why = f"the M-flow's mode {k + 1} does not switch on within {steps} steps"
        elif measured is None and say_diverged and net["diverged_at"] is not None:
            why = f"the tanh network diverged at step {net['diverged_at']}"
        elif measured is None:
            why = f"the tanh network's mode {k + 1} never reached m_k*/2 within {steps} steps"
        claims.append(
            Claim(
                claim=f"the tanh network's mode {k + 1} switches on at the M-flow's step",
                measured_what=f"first step with m_{k + 1} >= m_{k + 1}*/2 = {thresholds[k]:.4g}, tanh network, {where}",
                predicted=predicted,
                measured=measured,
                tolerance=Tolerance("relative", tolerance),
                unit="steps",
                why_missing=why,
                network_predicted=value,
                network_why_missing="" if value is not None else reason,
            )
        )
    return claims


# -- switch-on slope fits (E2, E6) -----------------------------------------------------


def switch_fit_problem(sigma0s: np.ndarray, steps: np.ndarray, what: str) -> str:
    """Why the switch-on steps (S, seeds) of one mode are no resolved slope measurement ("" when they are).

    Resolved when the mode switched on at every scale and seed, later than step 1 (a
    switch at step 0 or 1 says the init was already near the threshold).
    """
    finite = np.isfinite(steps)
    if not finite.all():
        bad = sorted({float(sigma0s[i]) for i in np.nonzero(~finite)[0]})
        return f"{what} never reached half its fixed point at sigma0 = {', '.join(f'{s:g}' for s in bad)}"
    if np.min(steps) <= 1:
        return f"{what} switched on at step {np.min(steps):g}: the init is already at the threshold"
    return ""


def fmt_fit(fit) -> str:
    """A fit's slope with its standard error ("n/a" when there is no slope)."""
    if not np.isfinite(fit.slope):
        return "n/a"
    err = f" ± {fit.stderr:.2g}" if np.isfinite(fit.stderr) else ""
    return f"{fit.slope:.3f}{err}"
