r"""E6's runs: one compiled ``train_grid`` per optimizer and model (switch-on steps at every init
scale and seed) and one closure diagnostic per optimizer, under ``jax.enable_x64(True)``."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from nqf.optimizers import optimizer_record

from .._base import RunSpec
from .._staircase import setup, task_dict
from .config import MODELS, NETWORK_CLAIMS, OptimizersConfig


def _task_dict(c: OptimizersConfig) -> dict[str, Any]:
    return task_dict(c.inputs, c.outputs, c.singular_values, c.samples, c.data_seed)


def _optimizer_dict(c: OptimizersConfig, optimizer: str) -> dict[str, Any]:
    """lr (``<name>_lr`` where E6 has one, else ``lr``), beta (heavy ball only; None: optax's
    default), batch size and steps of one optimizer."""
    record = optimizer_record(optimizer)
    return {
        "optimizer": optimizer,
        "lr": getattr(c, f"{optimizer}_lr", c.lr),
        "beta": c.beta if record.flow_takes_beta else None,
        "batch_size": c.batch_size if record.minibatches else None,
        "steps": getattr(c, f"{optimizer}_steps"),
    }


def _setup(task: dict[str, Any]):
    """Data, architecture and the theory's modes of the staircase (call under float64).

    Returns (arch, X (N, D), Y (N, K), Q (d, m) mode basis, c (m,) = q_k^T C q_k,
    K (m, m) = E[(q_k^T A q_k)(q_j^T A q_j)], m* (m,) LV fixed point, closed-form c).
    """
    s = setup(task)
    return s.arch, s.X, s.Y, s.Q, s.c, s.K, s.m_star, np.asarray(s.task.spectrum(task["data_seed"]))


def _train_config(run: dict[str, Any], **extra):
    from nqf.training.config import TrainConfig

    return TrainConfig(
        optimizer=run["optimizer"],
        lr=run["lr"],
        steps=run["steps"],
        batch_size=run["batch_size"],
        beta=run["beta"],
        width=run["width"],
        model=run["model"],
        dtype="float64",
        **extra,
    )


def sweep_run(run: dict[str, Any]) -> dict[str, Any]:
    """One optimizer and model, every (sigma0, seed): switch-on steps of each mode (one compiled call)."""
    from nqf.core.measure import half_fixed_point, switch_steps
    from nqf.training.grid import train_grid

    with jax.enable_x64(True):
        arch, X, Y, Q, c, K, m_star, closed_c = _setup(run["task"])
        thresholds = half_fixed_point(m_star)
        result = train_grid(arch, X, Y, _train_config(run), run["sigma0s"], run["seeds"], basis=Q)
        switch = switch_steps(result.steps, result.occupations, thresholds)  # (S, seeds, m)
        return {
            "switch_steps": switch,
            "final_occupations": result.occupations[:, :, -1, :],
            "final_loss": result.loss[:, :, -1],
            "diverged_at": result.diverged_at,
            "thresholds": thresholds,
            "fixed_point": m_star,
            "c": c,
            "K": K,
            "closed_form_c": closed_c,
        }


def network_own_run(run: dict[str, Any]) -> dict[str, Any]:
    """The tanh network's own prediction (``predict_grid``'s mean-field flow of its units, no time
    budget) at every (sigma0, seed): switch-on steps (S, seeds, m), or the notes that say why none."""
    from nqf.theory.predict import PredictConfig, predict_grid

    with jax.enable_x64(True):
        arch, X, Y, *_ = _setup(run["task"])
        config = PredictConfig(
            width=run["width"],
            lr=run["lr"],
            steps=run["steps"],
            sigma0=run["sigma0s"][0],
            optimizer=run["optimizer"],
            network_budget=None,
            **({} if run["beta"] is None else {"beta": run["beta"]}),
        )
        grid = predict_grid(arch, X, Y, config, sigma0s=run["sigma0s"], seeds=run["seeds"])
        steps = np.asarray(grid.network_switch_steps)[0]  # the one lr: (S, seeds, m)
        notes = [  # why a point's step is missing (the flow not computed there, or the step withheld):
            f"sigma0 {sigma0:g}, seed {seed}: {note}"  # only those points' Predictions are rebuilt
            for j, sigma0 in enumerate(run["sigma0s"])
            for k, seed in enumerate(run["seeds"])
            if not np.isfinite(steps[j, k]).all()
            for note in grid.prediction(0, j, k).notes
            if note.startswith("network (") and ("not computed" in note or "has no step" in note)
        ]
        return {"switch_steps": steps, "notes": notes}


def closure_run(run: dict[str, Any]) -> dict[str, Any]:
    """W0 versus W0 O for one optimizer: per-step M defect and update defect."""
    from nqf.training.closure import closure_diagnostic

    with jax.enable_x64(True):
        arch, X, Y, *_ = _setup(run["task"])
        config = _train_config(run, sigma0=run["sigma0"], seed=run["seed"])
        result = closure_diagnostic(arch, X, Y, config, rotation_seed=run["rotation_seed"])
        return {"m_defect": result.m_defect, "update_defect": result.update_defect}


def runs(c: OptimizersConfig) -> list[RunSpec]:
    task = _task_dict(c)
    specs = []
    for optimizer in c.optimizers:
        base = {"task": task, "width": c.width, **_optimizer_dict(c, optimizer)}
        for model in MODELS:
            config = {**base, "model": model, "sigma0s": list(c.sigma0s), "seeds": list(c.seeds)}
            specs.append(RunSpec(f"sweep-{optimizer}-{model}", config, sweep_run))
        if optimizer in NETWORK_CLAIMS:  # the network's own prediction: its slope claim's second verdict
            config = {**base, "sigma0s": list(c.sigma0s), "seeds": list(c.seeds)}
            specs.append(RunSpec(f"network-own-{optimizer}", config, network_own_run))
        closure = {**base, "model": "quadratic", "sigma0": c.closure_sigma0, "seed": c.seeds[0]}
        specs.append(RunSpec(f"closure-{optimizer}", {**closure, "rotation_seed": c.rotation_seed}, closure_run))
    if c.network_closure:
        base = {"task": task, "width": c.width, **_optimizer_dict(c, "gd")}
        closure = {**base, "model": "network", "sigma0": c.closure_sigma0, "seed": c.seeds[0]}
        specs.append(RunSpec("closure-gd-network", {**closure, "rotation_seed": c.rotation_seed}, closure_run))
    return specs
