r"""E4's runs: the many-mode LV systems (one per alpha), the LV system of the trained task's own
spectrum, and the task learned by GD (quadratic model, network), under ``jax.enable_x64(True)``."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from .._base import RunSpec
from .._common import gd_train_config, predict_config
from .config import PowerLawConfig


def lv_run(run: dict[str, Any]) -> dict[str, Any]:
    """Many uncoupled LV modes c_k = k^-alpha, K = 1: exact excess loss on log-spaced times."""
    from nqf.theory.lotka_volterra.solve import solve_lv, switch_times
    from nqf.theory.scaling import power_law_system

    with jax.enable_x64(True):
        alpha = run["alpha"]
        system = power_law_system(run["modes"], alpha, m0=run["m0"], lr=run["lr"])
        switch = switch_times(system)  # (modes,) closed form, increasing in k
        lo, hi = run["window_modes"]
        ts = np.geomspace(0.2 * switch[0], 1.5 * switch[-1], run["points"])
        sol = solve_lv(system, ts[-1], ts, save_occupations=False)
        # the mode switching at each time (switch times increase with k): k*(t) for the corrected formula
        k_star = np.interp(np.log(ts), np.log(switch), np.arange(1, switch.size + 1), left=np.nan, right=np.nan)
        return {
            "eps": system.eps,
            "ts": ts,
            "excess": sol.excess_losses,
            "window": (float(switch[lo - 1]), float(switch[hi - 1])),
            "k_star": k_star,
            "switch_first_last": (float(switch[0]), float(switch[-1])),
        }


def _powerlaw_task(run: dict[str, Any]):
    from nqf.training.tasks import get_task

    modes = run["modes"]
    return get_task(
        "powerlaw",
        modes=modes,
        alpha=run["alpha"],
        scale=run["scale"],
        inputs=modes,
        outputs=modes,
        samples=run["samples"],
    )


def own_spectrum_run(run: dict[str, Any]) -> dict[str, Any]:
    """The LV system of the trained task's own spectrum: exact GD map (and the flow) at every step."""
    from nqf.core.measure import switch_steps
    from nqf.theory.lotka_volterra.maps import lv_occupations
    from nqf.theory.lotka_volterra.solve import solve_lv
    from nqf.theory.lotka_volterra.system import LotkaVolterra

    with jax.enable_x64(True):
        task = _powerlaw_task(run)
        c = np.asarray(task.spectrum(run["data_seed"]))
        m_star = np.asarray(task.fixed_point_occupations())
        loss0 = float(task.plateau_losses()[0])  # whitened: L(W = 0) = (1/2) sum_k s_k^2
        m0 = run["width"] * run["sigma0"] ** 2
        system = LotkaVolterra(c=c, K=c / m_star, m0=m0, lr=run["lr"], loss0=loss0)
        steps = run["steps"]
        occ = lv_occupations(system, steps)
        flow = solve_lv(system, float(steps), np.arange(steps + 1, dtype=np.float64), save_occupations=False)
        return {
            "eps": system.eps,
            "c": c,
            "m_star": m_star,
            "loss": system.loss(occ),
            "flow_loss": flow.losses,
            "switch": switch_steps(np.arange(steps + 1), occ, 0.5 * m_star),
        }


def trained_run(run: dict[str, Any]) -> dict[str, Any]:
    """The powerlaw task learned by GD (network or quadratic model), loss and switch steps at every step."""
    from nqf.core.measure import switch_steps
    from nqf.training.runs import train

    with jax.enable_x64(True):
        task = _powerlaw_task(run)
        X, Y = task.generate(run["data_seed"], "float64")
        result = train(task.architecture(), X, Y, gd_train_config(run), basis=task.mode_basis(run["data_seed"]))
        m_star = np.asarray(task.fixed_point_occupations())
        return {
            "loss": result.loss,
            "switch": switch_steps(result.steps, result.occupations, 0.5 * m_star),
            "initial_occupations": result.occupations[0],
            "diverged_at": result.diverged_at,
        }


def network_own_run(run: dict[str, Any]) -> dict[str, Any]:
    """The tanh network's own prediction on the powerlaw task (``predict``'s mean-field flow of its
    units, no time budget): its loss at every step, or the notes that say why there is none."""
    from nqf.theory.predict.pipeline import predict

    with jax.enable_x64(True):
        task = _powerlaw_task(run)
        X, Y = task.generate(run["data_seed"], "float64")
        p = predict(task.architecture(), X, Y, predict_config(run, network_budget=None))
        return {
            "steps": None if p.network is None else p.network.steps,
            "loss": None if p.network is None else p.network.loss,
            "notes": [note for note in p.notes if note.startswith("network (")],
        }


def train_steps(c: PowerLawConfig) -> int:
    """Training length: 1.6 x the flow switch time of the last window mode (GD is <= 7% slower)."""
    from nqf.theory.lotka_volterra.system import logistic_switch_time

    k = c.train_window_modes[1]
    s_k = c.train_scale * k ** (-c.train_alpha)
    t_k = logistic_switch_time(s_k / 2, 0.25, c.train_width * c.train_sigma0**2, c.train_lr)
    return int(math.ceil(1.6 * t_k))


def runs(c: PowerLawConfig) -> list[RunSpec]:
    specs = [
        RunSpec(
            f"lv-alpha{alpha:g}",
            {
                "alpha": alpha,
                "modes": c.lv_modes,
                "m0": c.lv_m0,
                "lr": c.lv_lr,
                "window_modes": list(c.lv_window_modes),
                "points": c.lv_points,
            },
            lv_run,
        )
        for alpha in c.alphas
    ]
    base = {
        "alpha": c.train_alpha,
        "modes": c.train_modes,
        "scale": c.train_scale,
        "samples": c.train_samples,
        "data_seed": c.data_seed,
        "width": c.train_width,
        "sigma0": c.train_sigma0,
        "lr": c.train_lr,
        "steps": train_steps(c),
    }
    specs.append(RunSpec("own-spectrum-lv", base, own_spectrum_run))
    for model in c.train_models:
        specs.append(RunSpec(f"trained-{model}", {**base, "model": model, "seed": c.seed}, trained_run))
    if "network" in c.train_models:  # the network's own prediction: its claims' second verdict
        specs.append(RunSpec("network-own", {**base, "seed": c.seed}, network_own_run))
    return specs
