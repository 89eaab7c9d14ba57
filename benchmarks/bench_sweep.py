"""``nqf sweep`` on Ray with 1 and 2 CPUs and on the local pool with 2 workers: the whole
command's wall time, its fixed costs, and whether the three points tables agree.

Loaded by ``run.py``; runs on its own too:

    .venv/bin/python benchmarks/bench_sweep.py [--quick] [--rounds N] [--keep DIR]

The sweep: ``compare`` on the staircase (128 samples, tanh network, optimizer gd, lr 0.05,
width 32, 800 steps), 8 sigma0 (1e-8 ... 1e-3, log-spaced) x 8 seeds = 64 points, run with
``--batch-size 8`` (8 batches; quick: 4 x 4 points, 400 steps, ``--batch-size 2``, 8
batches). About 30 s on one idle core. Three cases, each the whole command run as a
subprocess, timed from start to exit:

- ``ray1``: ``nqf sweep --executor ray --jobs 1`` (no ``--address``, no ``RAY_ADDRESS``: the
  executor starts a local Ray for the run with ``num_cpus=1``, bound to 127.0.0.1,
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, and shuts it down at the end);
- ``ray2``: the same with ``--jobs 2``;
- ``local2``: ``--executor local --jobs 2`` (a pool of 2 spawned worker processes).

Nothing is reused between runs: every command gets a fresh output folder (so a fresh
results store) and a fresh, empty ``NQF_CACHE_DIR`` (JAX's persistent compilation cache,
which the driver switches on; the workers compile afresh in any case). So each worker
imports JAX and nqf and compiles its programs once, inside the measured time. Every command
imports nqf from a copy of the package taken when the benchmark starts (``PYTHONPATH``), so
that edits to the working tree during the run cannot mix code versions (the workers refuse
to run a different nqf than the driver's).

Fixed costs, measured per case in the same run and reported beside the sweep:
``engine_s``, a subprocess that starts the executor, runs one trivial task per worker (all
workers up) and closes it (Ray start and stop, or spawning the pool); ``one_point_s``, the
whole command on a 1-point sweep of the same settings (Python, JAX import, planning, the
executor, a worker's JAX import and compilation, one point, table and figures). The
64-point wall time minus ``one_point_s`` is the part that parallel workers can share.

Targets (ratios within one run): ``ray1 / ray2 >= 1.7`` (2 CPUs nearly twice as fast) and
``ray2 / local2 <= 1.1`` (Ray not more than 10 % slower than the local pool); the tables
(every column but ``seconds``, the compute time) agree to 1e-12 relative, and no point fails.
``run.py`` runs one round whatever its ``--repeats`` (a round takes about 3 min); standalone,
``--rounds N`` takes the minimum of N rounds per case.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _timing import Outcome, print_outcome

SIZES = {  # quick, full
    True: {"sigma0s": 4, "seeds": 4, "steps": 400, "batch_size": 2},
    False: {"sigma0s": 8, "seeds": 8, "steps": 800, "batch_size": 8},
}
WIDTH, LR, SAMPLES = 32, 0.05, 128
CASES = (("ray1", "ray", 1), ("ray2", "ray", 2), ("local2", "local", 2))
TARGET_SPEEDUP = 1.7  # ray1 / ray2
TARGET_RAY_OVER_LOCAL = 1.1  # ray2 / local2
AGREEMENT = 1e-12
MIN_BATCHES = 8

SPEC = """\
[sweep]
mode = "compare"

[task]
name = "staircase"
samples = {samples}

[settings]
width = {width}
steps = {steps}
lr = {lr}
optimizers = ["gd"]

[axes]
sigma0 = {{logspace = [{lo}, -3, {sigma0s}]}}
seed = {{range = [0, {seeds}]}}
"""

ENGINE_PROBE = """\
import sys, time
t0 = time.perf_counter()
from nqf.executors import Task, make_executor
import math
name, jobs = sys.argv[1], int(sys.argv[2])
with make_executor(name, jobs=jobs) as engine:
    outs = list(engine.run([Task(math.sqrt, (4.0,), tag=i) for i in range(4 * jobs)]))
assert all(o.ok for o in outs), outs
print(f"engine {time.perf_counter() - t0:.3f}")
"""


def _nqf() -> str:
    beside = Path(sys.executable).parent / "nqf"
    found = str(beside) if beside.exists() else shutil.which("nqf")
    if not found:
        raise RuntimeError("the nqf command is not installed (expected beside the Python running this)")
    return found


_SNAPSHOT: list[Path] = []  # the folder holding this run's copy of the nqf package


def _snapshot(work: Path) -> Path:
    """A copy of the nqf package the benchmark runs, so that edits made to the working tree
    while it runs cannot mix code versions between the driver and its workers (the workers
    refuse to run then) or between the cases."""
    import importlib.util

    package = Path(importlib.util.find_spec("nqf").origin).parent
    target = work / "src"
    shutil.copytree(package, target / "nqf", ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _env(cache: Path) -> dict[str, str]:
    """This environment, with a fresh compilation cache and a local Ray (never a cluster),
    importing nqf from the snapshot (PYTHONPATH comes before the editable install)."""
    env = dict(os.environ)
    if _SNAPSHOT:
        env["PYTHONPATH"] = os.pathsep.join([str(_SNAPSHOT[0])] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("RAY_ADDRESS", None)
    env["NQF_CACHE_DIR"] = str(cache)
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # as the executor sets it: loopback only
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, str, float]:
    """(wall s, stdout, 1-min load average at the start) of a command that must succeed."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{tail}")
    return wall, proc.stdout, load


def _spec(folder: Path, size: dict, points: int | None = None) -> Path:
    grid = (
        {"sigma0s": 1, "seeds": 1, "lo": -3}
        if points == 1
        else {"sigma0s": size["sigma0s"], "seeds": size["seeds"], "lo": -8}
    )
    text = SPEC.format(samples=SAMPLES, width=WIDTH, lr=LR, steps=size["steps"], **grid)
    path = folder / ("one.toml" if points == 1 else "sweep.toml")
    path.write_text(text)
    return path


def _sweep(spec: Path, work: Path, label: str, executor: str, jobs: int, batch_size: int) -> dict:
    """One whole ``nqf sweep`` command in a fresh output folder with a fresh compilation cache."""
    out, cache = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=work)), Path(tempfile.mkdtemp(prefix="cache-", dir=work))
    cmd = [
        _nqf(),
        "sweep",
        str(spec),
        "--out",
        str(out),
        "--executor",
        executor,
        "--jobs",
        str(jobs),
        "--batch-size",
        str(batch_size),
        "--quiet",
    ]
    wall, stdout, load = _run(cmd, _env(cache))
    m = re.search(r"(\d+) point\(s\): (\d+) computed, (\d+) already stored, (\d+) failed; ([\d.]+) s", stdout)
    if not m:
        raise RuntimeError(f"unexpected output of {' '.join(cmd)}:\n{stdout}")
    points, computed, stored, failed = (int(m[i]) for i in range(1, 5))
    inside = float(m[5])
    return {
        "wall_s": wall,
        "sweep_s": inside,
        "points": points,
        "computed": computed,
        "stored": stored,
        "failed": failed,
        "out": out,
        "load_1min": load,
    }


def _engine(work: Path, executor: str, jobs: int) -> float:
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
    wall, stdout, _ = _run([sys.executable, "-c", ENGINE_PROBE, executor, str(jobs)], _env(cache))
    return wall


def _batches(spec: Path, work: Path, batch_size: int) -> int:
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
    _, stdout, _ = _run(
        [_nqf(), "sweep", str(spec), "--out", str(work / "dry"), "--batch-size", str(batch_size), "--dry-run"],
        _env(cache),
    )
    m = re.search(r"in (\d+) batch\(es\)", stdout)
    if not m:
        raise RuntimeError(f"unexpected dry-run output:\n{stdout}")
    return int(m[1])


def read_table(out: Path) -> dict[str, list]:
    """DIR/points.parquet (or points.csv) as columns of Python values."""
    parquet = out / "points.parquet"
    if parquet.exists():
        import pyarrow.parquet as pq

        return pq.read_table(parquet).to_pydict()
    import csv

    with open(out / "points.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: [r[k] for r in rows] for k in (rows[0] if rows else {})}


def _number(v):
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v) if v != "" else None
    except ValueError:
        return v


def compare_tables(a: dict[str, list], b: dict[str, list], skip=("seconds",)) -> tuple[float, float, list[str]]:
    """(max abs diff, max rel diff, problems) over every column but ``skip``; None/NaN must match."""
    problems = []
    if list(a) != list(b):
        problems.append(f"columns differ: {list(a)} vs {list(b)}")
    max_abs = max_rel = 0.0
    for col in a:
        if col in skip or col not in b:
            continue
        if len(a[col]) != len(b[col]):
            problems.append(f"{col}: {len(a[col])} vs {len(b[col])} rows")
            continue
        for i, (x, y) in enumerate(zip(a[col], b[col], strict=True)):
            x, y = _number(x), _number(y)
            if isinstance(x, float) and isinstance(y, float):
                if math.isnan(x) or math.isnan(y):
                    if not (math.isnan(x) and math.isnan(y)):
                        problems.append(f"{col}[{i}]: {x} vs {y}")
                    continue
                d = abs(x - y)
                max_abs = max(max_abs, d)
                if d:
                    max_rel = max(max_rel, d / max(abs(x), abs(y)))
            elif x != y:
                problems.append(f"{col}[{i}]: {x!r} vs {y!r}")
    return max_abs, max_rel, problems


def _point_seconds(table: dict[str, list]) -> dict:
    """Point -> the table's ``seconds`` (one value per point, repeated on its mode rows)."""
    seen: dict = {}
    for point, s in zip(table.get("point", []), table.get("seconds", []), strict=True):
        if s is not None and point not in seen:
            seen[point] = float(s)
    return seen


def _compute_seconds(table: dict[str, list]) -> float:
    """Sum over points of their compute time in the workers."""
    return sum(_point_seconds(table).values())


def sweep_executors(quick: bool, repeats: int, rounds: int = 1, keep: Path | None = None) -> Outcome:
    """Ray 1 CPU vs Ray 2 CPUs vs the local pool (2 workers) on one 64-point compare sweep."""
    size = SIZES[quick]
    work = Path(tempfile.mkdtemp(prefix="nqf-bench-sweep-", dir=keep))
    try:
        _SNAPSHOT[:] = [_snapshot(work)]
        spec, one = _spec(work, size), _spec(work, size, points=1)
        batches = _batches(spec, work, size["batch_size"])
        best: dict[str, dict] = {}
        tables: dict[str, dict] = {}
        for _ in range(max(1, rounds)):
            fixed = {}
            for label, executor, jobs in CASES:  # fixed costs first, for every case
                engine = _engine(work, executor, jobs)
                single = _sweep(one, work, label + "-one", executor, jobs, size["batch_size"])
                single["point_s"] = _compute_seconds(read_table(single["out"]))
                fixed[label] = (engine, single)
            for label, executor, jobs in CASES:
                run = _sweep(spec, work, label, executor, jobs, size["batch_size"])
                run["engine_s"], single = fixed[label]
                run["one_point_s"], run["first_point_s"] = single["wall_s"], single["point_s"]
                table = read_table(run["out"])
                run["points_compute_s"] = _compute_seconds(table)
                run["median_point_s"] = statistics.median(_point_seconds(table).values())
                previous = best.get(label)
                if previous is None or run["wall_s"] < previous["wall_s"]:
                    best[label], tables[label] = run, table
                if previous is not None:  # fixed costs: the minimum over rounds too
                    for key in ("engine_s", "one_point_s", "first_point_s"):
                        best[label][key] = min(previous[key], run[key])
        rows = []
        base, ray2, local2 = best["ray1"]["wall_s"], best["ray2"]["wall_s"], best["local2"]["wall_s"]
        worst_rel, worst_abs, problems = 0.0, 0.0, []
        for label, executor, jobs in CASES:
            r = best[label]
            d_abs, d_rel, bad = compare_tables(tables["ray1"], tables[label])
            worst_rel, worst_abs = max(worst_rel, d_rel), max(worst_abs, d_abs)
            problems += [f"{label}: {p}" for p in bad[:5]]
            rows.append(
                {
                    "case": label,
                    "executor": executor,
                    "jobs": jobs,
                    "points": r["points"],
                    "batches": batches,
                    "wall_s": r["wall_s"],
                    "sweep_s": r["sweep_s"],
                    "startup_s": r["wall_s"] - r["sweep_s"],
                    "engine_s": r["engine_s"],
                    "one_point_s": r["one_point_s"],
                    "wall_minus_one_point_s": r["wall_s"] - r["one_point_s"],
                    "points_compute_s": r["points_compute_s"],
                    "median_point_s": r["median_point_s"],
                    "first_point_s": r["first_point_s"],
                    "speedup_ray1_over_this": base / r["wall_s"],
                    "ratio_this_over_local2": r["wall_s"] / local2,
                    "failed": r["failed"],
                    "max_abs_diff_vs_ray1": d_abs,
                    "max_rel_diff_vs_ray1": d_rel,
                    "load_1min": r["load_1min"],
                }
            )
        failed = sum(r["failed"] for r in rows)
        speedup, ray_over_local = base / ray2, ray2 / local2
        marginal = (best["ray1"]["wall_s"] - best["ray1"]["one_point_s"]) / (
            best["ray2"]["wall_s"] - best["ray2"]["one_point_s"]
        )
        return Outcome(
            params={
                "task": "staircase",
                "samples": SAMPLES,
                "mode": "compare",
                "optimizers": ["gd"],
                "lr": LR,
                "width": WIDTH,
                "steps": size["steps"],
                "sigma0s": size["sigma0s"],
                "seeds": size["seeds"],
                "batch_size": size["batch_size"],
                "batches": batches,
                "rounds": max(1, rounds),
                "load_at_start": os.getloadavg(),
                "cpus": os.cpu_count(),
            },
            rows=rows,
            summary={
                "speedup_ray1_over_ray2": speedup,
                "ratio_ray2_over_local2": ray_over_local,
                "speedup_without_fixed_cost": marginal,
                "max_rel_diff": worst_rel,
                "max_abs_diff": worst_abs,
                "problems": problems,
            },
            targets={
                f"at least {MIN_BATCHES} batches": batches >= MIN_BATCHES,
                f"Ray 2 CPUs >= {TARGET_SPEEDUP}x faster than Ray 1 CPU": speedup >= TARGET_SPEEDUP,
                f"Ray 2 CPUs <= {TARGET_RAY_OVER_LOCAL}x the local pool (2 workers)": ray_over_local
                <= TARGET_RAY_OVER_LOCAL,
                f"tables agree to {AGREEMENT:g} relative, no point failed": worst_rel <= AGREEMENT
                and not problems
                and failed == 0,
            },
            notes=[
                f"ray1/ray2 = {speedup:.2f}, ray2/local2 = {ray_over_local:.2f}; without the fixed cost "
                f"(wall - one_point_s): ray1/ray2 = {marginal:.2f}",
                "wall_s: the whole command (subprocess, start to exit); sweep_s: the time the command reports "
                "(executor start, workers' JAX import and compilation, compute, table, figures); startup_s: "
                "Python, JAX import and planning in the driver; engine_s: starting the executor, one trivial "
                "task per worker, closing it; one_point_s: the whole command on a 1-point sweep (fixed cost); "
                "points_compute_s: the sum of the points' compute times in the workers (compilation included; a "
                "batch's shared training split evenly over its points); median_point_s: the median point; "
                "first_point_s: the compute time of the 1-point sweep's point, in a fresh worker (its "
                "compilation included: first_point_s - median_point_s is about one worker's compile)",
                "machine load (1-min average) when the cases started: "
                + ", ".join(f"{r['case']} {r['load_1min']:.1f}" for r in rows)
                + f"; {os.cpu_count()} CPUs",
            ]
            + ([f"table problems: {problems[:5]}"] if problems else []),
        )
    finally:
        _SNAPSHOT.clear()
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


BENCHMARKS = {"sweep_executors": lambda quick, repeats: sweep_executors(quick, repeats)}

COLUMNS = {
    "sweep_executors": [
        "case",
        "points",
        "batches",
        "wall_s",
        "sweep_s",
        "startup_s",
        "engine_s",
        "one_point_s",
        "wall_minus_one_point_s",
        "points_compute_s",
        "median_point_s",
        "first_point_s",
        "speedup_ray1_over_this",
        "ratio_this_over_local2",
        "failed",
        "max_rel_diff_vs_ray1",
        "load_1min",
    ],
}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 points, 400 steps, batch size 2")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the three cases; the minimum is kept")
    parser.add_argument("--keep", type=Path, default=None, help="keep the outputs under this folder")
    args = parser.parse_args()
    t0 = time.perf_counter()
    outcome = sweep_executors(args.quick, 1, rounds=args.rounds, keep=args.keep)
    columns = COLUMNS["sweep_executors"]

    met = print_outcome(outcome, columns)
    print(f"({time.perf_counter() - t0:.0f} s)")
    raise SystemExit(0 if met else 1)
