r"""E2's runs: one compiled sweep per model (switch-on steps at every init scale and seed) and
``predict`` at every scale, under ``jax.enable_x64(True)``."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from nqf.core.errors import NqfError

from .._base import RunSpec
from .._staircase import basis_overlap, setup, task_dict
from .config import MODELS, PREDICTED_SOURCES, InitSweepConfig


def sweep_run(run: dict[str, Any]) -> dict[str, Any]:
    """GD on one model for every (sigma0, seed) in one compiled call: switch-on steps (S, seeds, m)."""
    from nqf.core.measure import switch_steps
    from nqf.training.config import TrainConfig
    from nqf.training.grid import train_grid

    with jax.enable_x64(True):
        s = setup(run["task"])
        config = TrainConfig(
            optimizer="gd", lr=run["lr"], steps=run["steps"], width=run["width"], dtype="float64", model=run["model"]
        )
        result = train_grid(s.arch, s.X, s.Y, config, run["sigma0s"], run["seeds"], basis=s.Q)
        return {
            "switch_steps": switch_steps(result.steps, result.occupations, s.thresholds),
            "thresholds": s.thresholds,
            "c": s.c,
            "final_occupations": result.occupations[:, :, -1, :],
            "final_loss": result.loss[:, :, -1],
            "diverged_at": result.diverged_at,
        }


def predict_run(run: dict[str, Any]) -> dict[str, Any]:
    """``predict`` (GD) at every (sigma0, seed): the theory's switch-on steps, each (S, seeds, m), and
    the network's own prediction (``network_flow``: the mean-field flow of its units; NaN where
    predict did not compute it, with the reason in ``network_notes``)."""
    from nqf.theory.predict.pipeline import PredictConfig, predict

    with jax.enable_x64(True):
        s = setup(run["task"])
        out: dict[str, list] = {name: [] for name in (*PREDICTED_SOURCES, "network_flow")}
        network_notes: list[str] = []
        overlap = math.inf
        growth = None
        failures = []
        m = s.Q.shape[1]
        for sigma0 in run["sigma0s"]:
            rows: dict[str, list] = {name: [] for name in (*PREDICTED_SOURCES, "network_flow")}
            for seed in run["seeds"]:
                config = PredictConfig(width=run["width"], lr=run["lr"], steps=run["steps"], sigma0=sigma0, seed=seed)
                try:
                    p = predict(s.arch, s.X, s.Y, config)
                except NqfError as err:
                    # e.g. the float64 M-flow diverging at tiny sigma0: a finding to report, not a crash
                    failures.append({"sigma0": sigma0, "seed": seed, "error": str(err)})
                    for name in rows:
                        rows[name].append(np.full(m, np.nan))
                    continue
                g = p.num_growing
                if g != s.Q.shape[1]:
                    raise NqfError(f"E2: predict found {g} growing modes, the staircase has {s.Q.shape[1]}")
                overlap = min(overlap, basis_overlap(p.modes.basis[:, :g], s.Q))
                growth = p.modes.growth[:g]
                rows["mflow"].append(p.mflow_switch_steps)
                rows["lv"].append(p.lv_switch_steps)
                rows["lv_continuous"].append(p.lv_continuous_switch_steps)
                rows["closed_form"].append(p.closed_form_switch_steps)
                rows["singular"].append(p.singular_switch_steps)
                rows["network_flow"].append(np.full(g, np.nan) if p.network is None else p.network.switch_steps)
                network_notes += [note for note in p.notes if note.startswith("network (")]
            for name in rows:
                out[name].append(rows[name])
        if growth is None:
            raise NqfError(f"E2: predict failed at every init scale, e.g. {failures[0]['error']}")
        return {
            **{name: np.asarray(v, dtype=np.float64) for name, v in out.items()},
            "growth": growth,
            "basis_overlap": overlap,
            "failures": failures,
            "network_notes": sorted(set(network_notes)),
        }


def init_seeds_run(run: dict[str, Any]) -> dict[str, Any]:
    """The tanh network over the init seeds ``init_seeds`` at every scale (the data fixed): its
    switch-on steps trained (:func:`sweep_run` over those seeds) and by its own prediction from
    each init's M0 (one ``predict_grid``: the mean-field flow at every point), each (S, seeds, m),
    NaN where a mode does not switch on or the prediction has no number."""
    from nqf.theory.predict import predict_grid
    from nqf.theory.predict.pipeline import PredictConfig

    seeds, sigma0s = list(run["init_seeds"]), list(run["sigma0s"])
    swept = sweep_run({**run, "model": "network", "seeds": seeds})
    trained = np.asarray(swept["switch_steps"], dtype=np.float64)
    with jax.enable_x64(True):
        s = setup(run["task"])
        # no time budget: a record must not depend on the machine's speed (the grid's flows, 2 x 64
        # particles each, took about 2 s for 5 scales x 3 seeds on a 2-core machine)
        config = PredictConfig(
            width=run["width"], lr=run["lr"], steps=run["steps"], sigma0=sigma0s[0], network_budget=None
        )
        grid = predict_grid(s.arch, s.X, s.Y, config, sigma0s=sigma0s, seeds=seeds)
        predicted = np.full(trained.shape, np.nan)
        notes: set[str] = set()
        for i in range(len(sigma0s)):
            for j in range(len(seeds)):
                p = grid.prediction(0, i, j)
                if p.network is not None and p.num_growing == trained.shape[2]:
                    predicted[i, j] = p.network.switch_steps
                notes.update(note for note in p.notes if note.startswith("network ("))
        return {"trained": trained, "predicted": predicted, "seeds": seeds, "network_notes": sorted(notes)}


def runs(c: InitSweepConfig) -> list[RunSpec]:
    base = {
        "task": task_dict(c.inputs, c.outputs, c.singular_values, c.samples, c.data_seed),
        "width": c.width,
        "lr": c.lr,
        "steps": c.steps,
        "sigma0s": list(c.sigma0s),
        "seeds": list(c.seeds),
    }
    specs = [RunSpec(f"sweep-{model}", {**base, "model": model}, sweep_run) for model in MODELS]
    specs.append(RunSpec("predict", base, predict_run))
    over_inits = {**{k: v for k, v in base.items() if k != "seeds"}, "init_seeds": list(c.init_seeds)}
    specs.append(RunSpec("init-seeds", over_inits, init_seeds_run))
    return specs
