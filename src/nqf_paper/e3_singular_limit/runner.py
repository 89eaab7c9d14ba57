r"""E3's runs: the staircase's LV flow and exact GD map, its quadratic model trained by GD, and the
competing LV, each at every init scale (or eps), under ``jax.enable_x64(True)``."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from .._base import RunSpec
from .._staircase import setup, task_dict
from .config import COMPETITION_C, COMPETITION_K, HORIZON, OFF_DIAGONAL_ROUNDING, PUSHED_OUT, SingularLimitConfig
from .limit import _competition_system, _level_crossings, eps_of, gd_limit_times


def lv_staircase_run(run: dict[str, Any]) -> dict[str, Any]:
    """The staircase's LV flow (solve_lv) and exact GD map (lv_occupations) at every sigma0."""
    from nqf.core.measure import switch_steps
    from nqf.theory.lotka_volterra.maps import lv_occupations
    from nqf.theory.lotka_volterra.solve import solve_lv, switch_times
    from nqf.theory.lotka_volterra.system import LotkaVolterra
    from nqf.theory.singular_limit import singular_limit

    with jax.enable_x64(True):
        s = setup(run["task"])
        lr, width, points = run["lr"], run["width"], run["curve_points"]
        loss0 = 0.5 * float(np.mean(np.sum(np.asarray(s.Y) ** 2, axis=1)))
        off_diagonal = np.abs(s.K - np.diag(np.diag(s.K))).max() / np.abs(np.diag(s.K)).max()
        # K diagonal up to rounding (whitened data): the exact logistic closed form, else the ODE
        K = np.diag(s.K) if off_diagonal <= OFF_DIAGONAL_ROUNDING else s.K
        flow_limit = singular_limit(LotkaVolterra(c=s.c, K=K, m0=np.full(len(s.c), 1e-12), lr=lr, loss0=loss0))
        gd_limit = gd_limit_times(s.c, lr)
        s_flow = np.linspace(0.0, HORIZON * np.nanmax(flow_limit.switch_times), points)
        s_gd = np.linspace(0.0, HORIZON * gd_limit.max(), points)
        out: dict[str, list] = {key: [] for key in ("flow_switch", "flow_loss", "gd_switch", "gd_loss")}
        # one length for every scale: the GD map's scan compiles once
        num_steps = int(math.ceil(s_gd[-1] * float(eps_of(min(run["sigma0s"]), width))))
        for sigma0 in run["sigma0s"]:
            eps = float(eps_of(sigma0, width))
            system = LotkaVolterra(c=s.c, K=K, m0=np.full(len(s.c), math.exp(-eps)), lr=lr, loss0=loss0)
            sol = solve_lv(system, s_flow[-1] * eps, s_flow * eps)
            out["flow_switch"].append(switch_times(sol))
            out["flow_loss"].append(sol.losses)
            occ = lv_occupations(system, num_steps)
            out["gd_switch"].append(switch_steps(np.arange(num_steps + 1), occ, s.thresholds))
            probe = np.minimum(np.rint(s_gd * eps).astype(int), num_steps)
            out["gd_loss"].append(system.loss(occ[probe]))
        return {
            **out,
            "c": s.c,
            "K": s.K,
            "m_star": s.m_star,
            "loss0": loss0,
            "K_off_diagonal": float(off_diagonal),
            "s_flow": s_flow,
            "s_gd": s_gd,
            "flow_limit_switch": flow_limit.switch_times,
            "flow_limit_steps": flow_limit.step_times,
            "limit_order": flow_limit.activation_order,
            "limit_plateaus": flow_limit.plateau_losses,
            "gd_limit_switch": gd_limit,
        }


def quadratic_gd_run(run: dict[str, Any]) -> dict[str, Any]:
    """The staircase's quadratic model trained by GD at every sigma0 (one compiled sweep)."""
    from nqf.core.measure import switch_steps
    from nqf.training.config import TrainConfig
    from nqf.training.grid import train_grid

    with jax.enable_x64(True):
        s = setup(run["task"])
        lr, width = run["lr"], run["width"]
        sigma0s = np.asarray(run["sigma0s"], dtype=np.float64)
        eps = eps_of(sigma0s, width)
        gd_limit = np.sort(gd_limit_times(s.c, lr))
        steps = int(math.ceil(HORIZON * gd_limit[-1] * eps.max()))
        config = TrainConfig(
            optimizer="gd", lr=lr, steps=steps, seed=run["seed"], width=width, dtype="float64", model="quadratic"
        )
        sweep = train_grid(s.arch, s.X, s.Y, config, sigma0s, [run["seed"]], basis=s.Q)
        switch = switch_steps(sweep.steps, sweep.occupations, s.thresholds)[:, 0]  # (scales, modes)
        s_gd = np.linspace(0.0, HORIZON * gd_limit[-1], run["curve_points"])
        probe = np.minimum(np.rint(s_gd[None, :] * eps[:, None]).astype(int), steps)
        # halfway (in s) between consecutive limit steps: one probe per plateau between steps
        mid = 0.5 * (gd_limit[:-1] + gd_limit[1:])
        plateau_steps = np.rint(mid[None, :] * eps[:, None]).astype(int)
        loss = sweep.loss[:, 0]
        return {
            "eps": eps,
            "steps": steps,
            "switch": switch,
            "s_gd": s_gd,
            "loss": np.take_along_axis(loss, probe, axis=1),
            "plateau_steps": plateau_steps,
            "plateau_losses": np.take_along_axis(loss, plateau_steps, axis=1),
            "initial_occupations": sweep.occupations[:, 0, 0, :],
            "diverged_at": sweep.diverged_at[:, 0],
        }


def competition_run(run: dict[str, Any]) -> dict[str, Any]:
    """The competing LV (module docstring) solved at every eps: event times, u_k(s), loss(s)."""
    from nqf.theory.lotka_volterra.solve import solve_lv, switch_times
    from nqf.theory.singular_limit import singular_limit

    with jax.enable_x64(True):
        lr, points = run["lr"], run["curve_points"]
        limit = singular_limit(_competition_system(10.0, lr))  # event times in s do not depend on eps
        s_last = max(s for s, _, _ in limit.events)
        s_grid = np.linspace(0.0, HORIZON * s_last, points)
        # probes halfway between consecutive distinct event times, and after the last
        times = sorted({float(s) for s, _, _ in limit.events})
        probes = np.array(
            [0.5 * (a + b) for a, b in zip(times[:-1], times[1:], strict=True)] + [0.5 * (times[-1] + s_grid[-1])]
        )
        # half of the pushed-out mode's equilibrium while it is on (alone in its pair)
        transient = 0.5 * COMPETITION_C[PUSHED_OUT] / COMPETITION_K[PUSHED_OUT][PUSHED_OUT]
        keys = ("switch", "pushed_on", "pushed_off", "u", "loss", "probe_losses", "final_log")
        out: dict[str, list] = {k: [] for k in keys}
        for eps in run["eps"]:
            system = _competition_system(eps, lr)
            sol = solve_lv(system, s_grid[-1] * eps, s_grid * eps, method="kvaerno5")
            out["switch"].append(switch_times(sol))
            bracket = np.linspace(0.0, s_grid[-1] * eps, 4 * points)
            crossings, rising = _level_crossings(sol, PUSHED_OUT, transient, bracket)
            ups, downs = crossings[rising], crossings[~rising]
            out["pushed_on"].append(float(ups[0]) if ups.size else math.nan)
            out["pushed_off"].append(float(downs[0]) if downs.size else math.nan)
            out["u"].append(sol.log_occupation(s_grid * eps) / eps)  # ln m from the solver: no underflow
            out["loss"].append(sol.losses)
            out["probe_losses"].append(system.loss(sol.occupation(probes * eps)))
            out["final_log"].append(sol.log_occupation(s_grid[-1] * eps))
        return {
            **out,
            "eps": list(run["eps"]),
            "s_grid": s_grid,
            "probes": probes,
            "transient_threshold": transient,
        }


def runs(c: SingularLimitConfig) -> list[RunSpec]:
    task = task_dict(c.inputs, c.outputs, c.singular_values, c.samples, c.data_seed)
    base = {"task": task, "lr": c.lr, "width": c.width, "sigma0s": list(c.sigma0s), "curve_points": c.curve_points}
    return [
        RunSpec("lv-staircase", base, lv_staircase_run),
        RunSpec("quadratic-gd", {**base, "seed": c.seed}, quadratic_gd_run),
        RunSpec(
            "lv-competition",
            {"lr": c.lr, "eps": list(c.competition_eps), "curve_points": c.curve_points},
            competition_run,
        ),
    ]
