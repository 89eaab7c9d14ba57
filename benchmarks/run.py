#!/usr/bin/env python
"""nqf benchmarks: speed claims measured as ratios within one run.

    .venv/bin/python benchmarks/run.py                 # everything (what `make bench` runs)
    .venv/bin/python benchmarks/run.py --quick         # smaller sizes, a few minutes
    .venv/bin/python benchmarks/run.py --only lv_log_space --only lv_many_modes

Each benchmark returns rows (printed as a markdown table), a summary and its targets.
Results go to benchmarks/out/<UTC time>-<quick|full>.json and benchmarks/out/latest.json.
Exit status 1 when a benchmark fails or misses a target (see README.md).

Wall times are taken after compilation unless a column says otherwise: a warm-up call
first (or an explicit ahead-of-time compile, timed on its own), then the best (minimum)
of ``repeats`` calls, each ended by ``jax.block_until_ready``. The minimum is the least
noisy statistic on a shared machine; the median is stored in the JSON too.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import jax

# An application, not library code: the benchmarks run in float64 (tiny sigma0, m0 = 1e-60).
jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from nqf.architectures.architecture import init_weights  # noqa: E402
from nqf.theory.data_matrices.build import data_matrices  # noqa: E402
from nqf.theory.flow import gd_map  # noqa: E402
from nqf.theory.lotka_volterra.solve import solve_lv, suggested_horizon, switch_times
from nqf.theory.lotka_volterra.system import LotkaVolterra, fixed_point, logistic_switch_time
from nqf.training.config import TrainConfig, checkpoint_steps
from nqf.training.runs import _build_run, train, training_keys
from nqf.training.grid import train_grid
from nqf.training.tasks import get_task  # noqa: E402

OUT_DIR = Path(__file__).resolve().parent / "out"
DTYPE = "float64"


from _timing import Outcome, Timing, _timed, print_outcome, time_calls, timed_with_compile  # noqa: E402,F401


def _staircase():
    task = get_task("staircase")
    arch = task.architecture()
    X, Y = task.generate(0, DTYPE)
    return task, arch, X, Y, np.asarray(task.mode_basis(0))


def mflow_vs_training(quick: bool, repeats: int) -> Outcome:
    """Exact GD map on M (``gd_map``) versus GD training of the quadratic model (``train``,
    model quadratic, optimizer gd) from the same W0, same steps and checkpoints, at width n.

    Training time is the execution of the compiled run: ``train`` compiles a fresh closure
    on every call, so the run is built with ``_build_run`` (what ``train`` calls), compiled
    ahead of time (timed separately) and then timed. One end-to-end ``train`` call is
    reported as well. The M-flow is timed after a warm-up call (its compiled driver is
    cached across calls with the same d).
    """
    task, arch, X, Y, Q = _staircase()
    widths = (64, 256, 1024, 4096)
    steps = 500 if quick else 2000
    lr, sigma0, seed = 0.05, 1e-3, 0
    data = data_matrices(arch, X, Y)
    ckpts = checkpoint_steps(steps, 64)
    rows = []
    for n in widths:
        config = TrainConfig(
            optimizer="gd",
            lr=lr,
            steps=steps,
            width=n,
            sigma0=sigma0,
            seed=seed,
            dtype=DTYPE,
            model="quadratic",
            checkpoints=64,
        )
        init_key, batch_key = training_keys(seed)
        W0 = init_weights(arch, init_key, n, sigma0, jnp.float64)
        M0 = np.asarray(W0 @ W0.T)

        flow_time, flow = time_calls(
            lambda: gd_map(data, M0, lr, steps, checkpoints=ckpts, basis=Q, record_M=False), repeats
        )

        run, run_ckpts, _ = _build_run(arch, X, Y, config, Q, jnp.float64)
        assert np.array_equal(run_ckpts, ckpts)
        compile_s, compile_reported_s, compiled = timed_with_compile(
            lambda: jax.jit(run).lower(W0, batch_key).compile()
        )
        train_time, (records, _, W_final) = time_calls(lambda: compiled(W0, batch_key), repeats)
        end_to_end_s, end_to_end_compile_s, _ = timed_with_compile(lambda: train(arch, X, Y, config, basis=Q).loss)

        M_train = np.asarray(W_final) @ np.asarray(W_final).T
        M_flow = np.asarray(flow.final)
        rows.append(
            {
                "n": n,
                "steps": steps,
                "mflow_s": flow_time.best,
                "train_s": train_time.best,
                "ratio_train_over_mflow": train_time.best / flow_time.best,
                "train_compile_s": compile_s,
                "train_compile_reported_s": compile_reported_s,
                "train_end_to_end_s": end_to_end_s,
                "train_end_to_end_compile_s": end_to_end_compile_s,
                "final_M_rel_diff": float(np.abs(M_train - M_flow).max() / np.abs(M_flow).max()),
                "occupation_max_diff": float(np.abs(np.asarray(records[1]) - np.asarray(flow.occupations)).max()),
                "mflow_timing": flow_time.as_dict(),
                "train_timing": train_time.as_dict(),
            }
        )
    ratios = [r["ratio_train_over_mflow"] for r in rows]
    flow_times = [r["mflow_s"] for r in rows]
    return Outcome(
        params={
            "task": "staircase",
            "arch": "mlp (tanh)",
            "lr": lr,
            "sigma0": sigma0,
            "steps": steps,
            "checkpoints": int(ckpts.size),
            "widths": list(widths),
            "d": arch.dim,
            "samples": int(X.shape[0]),
        },
        rows=rows,
        summary={
            "ratio_smallest_n": ratios[0],
            "ratio_largest_n": ratios[-1],
            "mflow_time_spread": max(flow_times) / min(flow_times),
            "max_final_M_rel_diff": max(r["final_M_rel_diff"] for r in rows),
        },
        targets={
            "ratio grows with n (largest n > smallest n)": ratios[-1] > ratios[0],
            "M-flow and training agree (final M rel diff < 1e-10)": all(r["final_M_rel_diff"] < 1e-10 for r in rows),
        },
    )


def _partner_system(s: np.ndarray, m0: float, lr: float) -> LotkaVolterra:
    """docs/theory.md section 3 worked case: q_k+- = (u_k, +-v_k)/sqrt2, c = +-s_k/2, and
    K[P_k+] = (P_k+ - P_k-)/4, so each pair has K = [[1/4, -1/4], [-1/4, 1/4]]."""
    r = s.size
    c = np.concatenate([s / 2, -s / 2])
    K = np.zeros((2 * r, 2 * r))
    idx = np.arange(r)
    K[idx, idx] = K[r + idx, r + idx] = 0.25
    K[idx, r + idx] = K[r + idx, idx] = -0.25
    return LotkaVolterra(c, K, m0=m0, lr=lr)


def _coupled_system(s: np.ndarray, m0: float, lr: float, coupling: float) -> LotkaVolterra:
    """Staircase c_k = s_k/2 with K = I/4 plus a small uniform off-diagonal coupling."""
    r = s.size
    K = 0.25 * np.eye(r) + coupling * (np.ones((r, r)) - np.eye(r))
    return LotkaVolterra(s / 2, K, m0=m0, lr=lr)


def lv_log_space(quick: bool, repeats: int) -> Outcome:
    """Solver steps of ``solve_lv`` (log-space ODE, Kvaerno5) at sigma0 = 1e-3 and 1e-30
    (m0 = sigma0^2), each to its own ``suggested_horizon`` (past the last switch-on).
    Plateaus are ~9x longer at 1e-30; the step count must stay within 2x."""
    s = np.array([3.0, 2.0, 1.0, 0.5])
    lr = 0.05
    sigmas = (1e-3, 1e-30)
    cases = {
        "partner modes (8 modes)": lambda m0: _partner_system(s, m0, lr),
        "coupled staircase (4 modes, K_kj = 0.02)": lambda m0: _coupled_system(s, m0, lr, 0.02),
    }
    rows, targets = [], {}
    for case, build in cases.items():
        per_sigma = []
        for sigma0 in sigmas:
            system = build(sigma0**2)
            horizon = suggested_horizon(system)
            timing, sol = time_calls(lambda: solve_lv(system, horizon), repeats)
            switched = switch_times(sol)
            row = {
                "case": case,
                "sigma0": sigma0,
                "m0": sigma0**2,
                "horizon_steps": horizon,
                "solver_steps": sol.num_steps,
                "accepted_steps": sol.num_accepted_steps,
                "wall_s": timing.best,
                "first_call_s": timing.first,
                "last_switch": float(np.nanmax(switched)),
                "switch_times": switched.tolist(),
                "timing": timing.as_dict(),
            }
            if case.startswith("partner"):
                exact = logistic_switch_time(s / 2, 0.25, sigma0**2, lr)
                row["switch_rel_diff_vs_logistic"] = float(np.max(np.abs(switched[: s.size] / exact - 1)))
            per_sigma.append(row)
        small, tiny = per_sigma
        ratio = tiny["solver_steps"] / small["solver_steps"]
        for row in per_sigma:
            row["step_ratio_1e-30_over_1e-3"] = ratio
            row["horizon_ratio"] = tiny["horizon_steps"] / small["horizon_steps"]
        targets[f"{case}: step ratio within 2x"] = 0.5 <= ratio <= 2.0
        rows.extend(per_sigma)
    return Outcome(
        params={
            "singular_values": s.tolist(),
            "lr": lr,
            "sigma0s": list(sigmas),
            "method": "kvaerno5 (auto)",
            "rtol": 1e-8,
            "atol": 1e-8,
        },
        rows=rows,
        summary={r["case"] + " step ratio": r["step_ratio_1e-30_over_1e-3"] for r in rows[1::2]},
        targets=targets,
    )


def lv_many_modes(quick: bool, repeats: int) -> Outcome:
    """10^5 uncoupled modes, c_k = k^-alpha, K = I (diagonal: ``solve_lv``'s exact logistic
    path), m0 = 1e-12, solved on the default output grid up to just past the last
    switch-on: 1023 times x 10^5 modes = 1.0e8 closed-form evaluations (losses and excess
    losses at every time; occupations not kept). Switched modes are counted from the
    solution at the horizon: m_k(t_final) >= m_k*/2. Same size in quick and full runs."""
    modes, alpha, m0, lr = 10**5, 1.5, 1e-12, 0.05
    c = np.arange(1, modes + 1, dtype=np.float64) ** -alpha
    system = LotkaVolterra(c, np.ones(modes), m0=m0, lr=lr)
    horizon = float(np.max(logistic_switch_time(c, 1.0, m0, lr))) * (1 + 1e-9)
    timing, sol = time_calls(lambda: solve_lv(system, horizon, save_occupations=False), repeats)
    half = np.log(0.5 * fixed_point(system))
    switched = int(np.count_nonzero(sol.log_occupation(horizon) >= half))
    evaluations = modes * int(sol.ts.size)
    row = {
        "modes": modes,
        "alpha": alpha,
        "m0": m0,
        "horizon_steps": horizon,
        "output_times": int(sol.ts.size),
        "method": sol.method,
        "evaluations": evaluations,
        "wall_s": timing.best,
        "first_call_s": timing.first,
        "ns_per_evaluation": 1e9 * timing.best / evaluations,
        "switched": switched,
        "final_excess_loss": float(sol.excess_losses[-1]),
        "timing": timing.as_dict(),
    }
    return Outcome(
        params={"modes": modes, "alpha": alpha, "m0": m0, "lr": lr, "K": "identity (diagonal)"},
        rows=[row],
        summary={"wall_s": timing.best, "first_call_s": timing.first, "switched": switched},
        targets={
            "every mode switched by the horizon": switched == modes,
            "wall <= 0.5 s": timing.best <= 0.5,
        },
        notes=[],
    )


def sweep_vs_loop(quick: bool, repeats: int) -> Outcome:
    """``train_grid(batching="vmap")`` over init scales x seeds (one compiled, vmapped call)
    versus a Python loop of ``train`` over the same runs (tanh network, GD, staircase).
    (``batching="auto"`` loops ``train``'s own compiled run on one CPU device: see
    ``bench_batch.py`` for that route.)

    ``train`` reuses its compiled run for calls with equal shapes and static settings
    (seed and sigma0 are traced arguments), so the loop compiles once, on its first call.
    Both routes start from an empty run cache (``_clear_compiled``) and are timed once, end
    to end, compilation included: that is what a user of each route pays. The number of
    times the loop's run was traced comes from the cache's trace counter.
    """
    from nqf.training.runs import _clear_compiled, _trace_count

    task, arch, X, Y, Q = _staircase()
    scales, seeds_count = (8, 2) if quick else (32, 4)
    steps = 300
    config = TrainConfig(optimizer="gd", lr=0.05, steps=steps, width=32, dtype=DTYPE, model="network", checkpoints=64)
    sigma0s = np.geomspace(1e-1, 1e-6, scales)
    seeds = np.arange(seeds_count)
    _clear_compiled()

    sweep_s, sweep_compile_s, sweep = timed_with_compile(
        lambda: train_grid(arch, X, Y, config, sigma0s, seeds, basis=Q, batching="vmap").loss
    )

    def loop():
        return [
            [train(arch, X, Y, replace(config, sigma0=float(s0), seed=int(sd)), basis=Q).loss for sd in seeds]
            for s0 in sigma0s
        ]

    traces_before = _trace_count()
    loop_s, loop_compile_s, loop_losses = timed_with_compile(loop)
    loop_traces = _trace_count() - traces_before
    agreement = float(np.nanmax(np.abs(np.asarray(loop_losses) - np.asarray(sweep))))
    compile_ratio = loop_compile_s / sweep_compile_s
    runs = scales * seeds_count
    row = {
        "runs": runs,
        "scales": scales,
        "seeds": seeds_count,
        "steps": steps,
        "sweep_s": sweep_s,
        "sweep_compile_s": sweep_compile_s,
        "sweep_run_s": sweep_s - sweep_compile_s,
        "loop_train_s": loop_s,
        "loop_train_compile_s": loop_compile_s,
        "loop_train_run_s": loop_s - loop_compile_s,
        "loop_traces": loop_traces,
        "ratio_loop_over_sweep": loop_s / sweep_s,
        "ratio_loop_compile_over_sweep_compile": compile_ratio,
        "max_loss_diff_sweep_vs_loop": agreement,
    }
    return Outcome(
        params={
            "task": "staircase",
            "arch": "mlp (tanh)",
            "model": "network",
            "optimizer": "gd",
            "lr": 0.05,
            "width": 32,
            "steps": steps,
            "checkpoints": 64,
            "sigma0s": sigma0s.tolist(),
            "seeds": seeds.tolist(),
        },
        rows=[row],
        summary={
            "ratio_loop_over_sweep": loop_s / sweep_s,
            "ratio_loop_compile_over_sweep_compile": compile_ratio,
            "loop_traces": loop_traces,
        },
        targets={
            "the loop of train compiles once (one trace; compile <= 1.5x one sweep compile)": loop_traces == 1
            and compile_ratio <= 1.5,
            "sweep equals the loop (max loss diff < 1e-10)": agreement < 1e-10,
        },
        notes=[
            "wall times include compilation (one call each, no repeats); *_compile_s is the part JAX "
            "reports as tracing + lowering + compiling (jax.monitoring), *_run_s the rest"
        ],
    )


BENCHMARKS: dict[str, Callable[[bool, int], Outcome]] = {
    "mflow_vs_training": mflow_vs_training,
    "lv_log_space": lv_log_space,
    "lv_many_modes": lv_many_modes,
    "sweep_vs_loop": sweep_vs_loop,
}

# Columns printed per benchmark (everything is in the JSON).
COLUMNS = {
    "mflow_vs_training": [
        "n",
        "steps",
        "mflow_s",
        "train_s",
        "ratio_train_over_mflow",
        "train_compile_s",
        "train_end_to_end_s",
        "final_M_rel_diff",
    ],
    "lv_log_space": [
        "case",
        "sigma0",
        "horizon_steps",
        "solver_steps",
        "accepted_steps",
        "step_ratio_1e-30_over_1e-3",
        "wall_s",
        "first_call_s",
    ],
    "lv_many_modes": [
        "modes",
        "alpha",
        "m0",
        "horizon_steps",
        "output_times",
        "method",
        "wall_s",
        "first_call_s",
        "ns_per_evaluation",
        "switched",
    ],
    "sweep_vs_loop": [
        "runs",
        "steps",
        "sweep_s",
        "sweep_compile_s",
        "loop_train_s",
        "loop_train_compile_s",
        "loop_traces",
        "ratio_loop_over_sweep",
        "ratio_loop_compile_over_sweep_compile",
        "max_loss_diff_sweep_vs_loop",
    ],
}


def _load_benchmark_modules() -> None:
    """Add the benchmarks of every ``bench_*.py`` beside this file (each defines BENCHMARKS and COLUMNS)."""
    import importlib

    for path in sorted(Path(__file__).resolve().parent.glob("bench_*.py")):
        module = importlib.import_module(path.stem)
        BENCHMARKS.update(module.BENCHMARKS)
        COLUMNS.update(module.COLUMNS)


_load_benchmark_modules()

# -- output ----------------------------------------------------------------------------


def machine() -> dict:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {
        "cpu": model or platform.processor(),
        "cores_available": cores,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
    }


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (np.floating, float)):
        return None if not np.isfinite(x) else float(x)
    return x


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only this benchmark (repeatable or comma-separated): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes on 2 cores)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls after warm-up (default 3 quick, 5 full)")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output folder (default benchmarks/out)")
    args = parser.parse_args(argv)
    names = [n for item in args.only for n in item.split(",") if n] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    repeats = args.repeats or (3 if args.quick else 5)
    if repeats < 1:
        parser.error("--repeats must be >= 1")

    started = _dt.datetime.now(_dt.UTC)
    info = machine()
    mode = "quick" if args.quick else "full"
    print(
        f"nqf benchmarks ({mode}, {repeats} timed repeats) on {info['cpu']}, {info['cores_available']} cores, "
        f"jax {info['jax']} ({info['jax_backend']})  {started:%Y-%m-%d %H:%M} UTC\n"
    )
    results, failed = {}, []
    for name in names:
        t0 = time.perf_counter()
        try:
            outcome = BENCHMARKS[name](args.quick, repeats)
        except Exception as exc:  # report and go on: one broken module should not hide the rest
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            failed.append(f"{name}: error {type(exc).__name__}: {exc}")
            print(f"## {name}: ERROR {type(exc).__name__}: {exc}\n")
            continue
        elapsed = time.perf_counter() - t0
        results[name] = {
            "elapsed_s": elapsed,
            "params": outcome.params,
            "rows": outcome.rows,
            "summary": outcome.summary,
            "targets": outcome.targets,
            "notes": outcome.notes,
        }
        print(f"## {name}  ({elapsed:.0f} s)\n")
        print_outcome(outcome, COLUMNS[name])
        failed += [f"{name}: missed target {target}" for target, met in outcome.targets.items() if not met]
        print()

    record = {
        "date_utc": started.isoformat(timespec="seconds"),
        "mode": mode,
        "repeats": repeats,
        "machine": info,
        "benchmarks": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{started:%Y%m%dT%H%M%SZ}-{mode}.json"
    text = json.dumps(_jsonable(record), indent=2)
    path.write_text(text)
    (args.out / "latest.json").write_text(text)
    print(f"results: {path}")
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
