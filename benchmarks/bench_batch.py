"""Batched runs on one worker: three routes over the same 16 runs, a Python loop of
``nqf.train`` (compiled once), ``nqf.train_grid(batching="loop")`` and
``nqf.train_grid(batching="vmap")``.

Loaded by ``run.py`` (which enables float64 first); runs on its own too:

    .venv/bin/python benchmarks/bench_batch.py [--quick] [--repeats N]

Staircase, tanh network, GD, lr 0.05, width 32, 300 steps, float64, the loss recorded at
every step (``checkpoints=None``, TrainConfig's default); 16 runs = 8 init scales (1e-1 ...
1e-6, log-spaced) x 2 seeds, in quick and full runs alike (quick only takes fewer repeats).

- ``train loop``: one ``nqf.train`` per point, the hand-written loop. ``train`` reuses its
  compiled run for calls with equal shapes and static settings (seed and sigma0 are traced
  arguments), so it compiles once, on its first call;
- ``train_grid loop``: ``train``'s compiled run once per point, every point dispatched
  before any result is read (what ``batching="auto"`` picks on one CPU device);
- ``train_grid vmap``: one program vmapped over the 16 points (the point axis sharded over
  the devices: one here).

Each route's first call runs from an empty run cache (compilation included: ``first_s``,
and the part JAX reports as tracing + lowering + compiling: ``compile_s``). Then one
untimed call of each route (the caches hold every route's program again), then
``repeats`` warm calls of the three routes taken in turn, so that they see the same load;
the table shows the minimum of each, in wall time and in this process's CPU time
(``time.process_time``, all threads: less sensitive to other processes on a shared machine
than wall time), and the ratios to the ``train loop``. Agreement: the largest difference
from the ``train loop``, relative to each run's largest |value| (loss curve and W_final).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import numpy as np
from _timing import Outcome, print_outcome, timed_with_compile

import nqf

STEPS, WIDTH, LR = 300, 32, 0.05
SCALES, SEEDS = 8, 2  # 16 runs
# train_grid(batching="loop") / train loop, warm, in CPU time (wall time swings by 2x on a
# shared machine): the batch must not be slower. It runs train's compiled run once per point,
# the same work as the loop, so allow 5 % of noise.
TARGET_RATIO = 1.05
AGREEMENT = 1e-12
ROUTES = ("train loop", "train_grid loop", "train_grid vmap")


def _routes(arch, X, Y, Q, config, sigma0s, seeds):
    def loop():
        runs = [
            nqf.train(arch, X, Y, replace(config, sigma0=float(s), seed=int(k)), basis=Q)
            for s in sigma0s
            for k in seeds
        ]
        return np.stack([r.loss for r in runs]), np.stack([r.W_final for r in runs])

    def sweep(batching):
        def call():
            r = nqf.train_grid(arch, X, Y, config, sigma0s, seeds, basis=Q, batching=batching)
            return r.loss.reshape((-1,) + r.loss.shape[2:]), r.W_final.reshape((-1,) + r.W_final.shape[2:])

        return call

    return {"train loop": loop, "train_grid loop": sweep("loop"), "train_grid vmap": sweep("vmap")}


def _rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b| per run (axis 0), the largest over the runs; NaN where both are NaN."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return float("inf")
    d = np.nan_to_num(np.abs(a - b)).reshape(len(a), -1).max(axis=1)
    scale = np.nan_to_num(np.abs(b)).reshape(len(b), -1).max(axis=1)
    return float(np.max(d / np.where(scale > 0, scale, 1.0)))


def batch_vs_loop(quick: bool, repeats: int) -> Outcome:
    """A loop of ``train`` against ``train_grid`` looped and vmapped, over the same 16 runs."""
    from nqf.training.grid import default_batching
    from nqf.training.runs import _clear_compiled

    task = nqf.get_task("staircase")
    arch = task.architecture()
    X, Y = task.generate(0, "float64")
    Q = np.asarray(task.mode_basis(0))
    config = nqf.TrainConfig(
        optimizer="gd", lr=LR, steps=STEPS, width=WIDTH, dtype="float64", model="network", checkpoints=None
    )
    sigma0s, seeds = np.geomspace(1e-1, 1e-6, SCALES), np.arange(SEEDS)
    runs = len(sigma0s) * len(seeds)
    routes = _routes(arch, X, Y, Q, config, sigma0s, seeds)
    first, outputs = {}, {}
    for name, route in routes.items():  # each from an empty run cache: its own compilation
        _clear_compiled()
        wall, compile_s, outputs[name] = timed_with_compile(route)
        first[name] = (wall, compile_s)
    for route in routes.values():  # every route's program in the caches again
        timed_with_compile(route)
    walls = {name: [] for name in routes}
    cpus = {name: [] for name in routes}
    for _ in range(repeats):
        for name, route in routes.items():
            cpu0 = time.process_time()
            walls[name].append(timed_with_compile(route)[0])
            cpus[name].append(time.process_time() - cpu0)
    base_wall, base_cpu = min(walls["train loop"]), min(cpus["train loop"])
    ref_loss, ref_W = outputs["train loop"]
    rows = []
    for name in routes:
        loss, W = outputs[name]
        wall, cpu = min(walls[name]), min(cpus[name])
        rows.append(
            {
                "route": name,
                "runs": runs,
                "wall_s": wall,
                "cpu_s": cpu,
                "ratio_wall_vs_loop": wall / base_wall,
                "ratio_cpu_vs_loop": cpu / base_cpu,
                "ms_per_run": 1e3 * wall / runs,
                "first_s": first[name][0],
                "compile_s": first[name][1],
                "max_rel_diff_loss": _rel_diff(loss, ref_loss),
                "max_rel_diff_W": _rel_diff(W, ref_W),
                "median_s": statistics.median(walls[name]),
                "runs_s": walls[name],
                "cpu_runs_s": cpus[name],
            }
        )
    by = {row["route"]: row for row in rows}
    agreement = max(max(row["max_rel_diff_loss"], row["max_rel_diff_W"]) for row in rows)
    return Outcome(
        params={
            "task": "staircase",
            "arch": "mlp (tanh)",
            "model": "network",
            "optimizer": "gd",
            "lr": LR,
            "width": WIDTH,
            "steps": STEPS,
            "checkpoints": None,
            "dtype": "float64",
            "runs": runs,
            "sigma0s": sigma0s.tolist(),
            "seeds": seeds.tolist(),
            "repeats": repeats,
            "default_batching": default_batching(),
        },
        rows=rows,
        summary={
            "ratio_cpu_sweep_loop_vs_loop": by["train_grid loop"]["ratio_cpu_vs_loop"],
            "ratio_cpu_sweep_vmap_vs_loop": by["train_grid vmap"]["ratio_cpu_vs_loop"],
            "ratio_wall_sweep_loop_vs_loop": by["train_grid loop"]["ratio_wall_vs_loop"],
            "ratio_wall_sweep_vmap_vs_loop": by["train_grid vmap"]["ratio_wall_vs_loop"],
            "default_batching": default_batching(),
            "max_rel_diff": agreement,
        },
        targets={
            f"train_grid(batching='loop') not slower than the loop of train (warm CPU time ratio <= {TARGET_RATIO})": by[
                "train_grid loop"
            ]["ratio_cpu_vs_loop"]
            <= TARGET_RATIO,
            f"every route equals the loop of train (loss and W_final, {AGREEMENT:g} relative)": agreement <= AGREEMENT,
            "batching='auto' is 'loop' on one CPU device": default_batching() == "loop",
        },
        notes=[
            (
                "warm: best of `repeats` calls of each route taken in turn; cpu_s: this process's CPU time of "
                "those calls; first_s: the first call from an empty run cache (compilation included); compile_s: "
                "the part JAX reports as tracing + lowering + compiling (jax.monitoring); ratios against the "
                "`train loop` row; max_rel_diff_*: against the `train loop`, relative to each run's largest "
                f"|value|; batching='auto' here: {default_batching()}"
            )
        ],
    )


BENCHMARKS = {"batch_vs_loop": batch_vs_loop}

COLUMNS = {
    "batch_vs_loop": [
        "route",
        "runs",
        "wall_s",
        "cpu_s",
        "ratio_wall_vs_loop",
        "ratio_cpu_vs_loop",
        "ms_per_run",
        "first_s",
        "compile_s",
        "max_rel_diff_loss",
        "max_rel_diff_W",
    ],
}


if __name__ == "__main__":
    import argparse

    import jax

    jax.config.update("jax_enable_x64", True)  # an application: float64, as run.py does
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (3; default 5): the same 16 runs")
    parser.add_argument("--repeats", type=int, default=None, help="warm calls of each route (3 quick, 5 full)")
    args = parser.parse_args()
    outcome = batch_vs_loop(args.quick, args.repeats or (3 if args.quick else 5))
    columns = COLUMNS["batch_vs_loop"]

    met = print_outcome(outcome, columns)
    raise SystemExit(0 if met else 1)
