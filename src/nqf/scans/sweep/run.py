"""The driver of ``nqf sweep``: plan, dry run, executor, progress, resume, outputs.

:func:`run_sweep` reads and checks the spec (every problem at once, :class:`SpecError`),
expands the points and checks them against the data (nothing computed, nothing written yet),
looks up which points the results store already holds, groups the rest into batches
(``nqf.scans.sweep.points``) and hands the batches to an executor (``nqf.executors``) as
tasks (``nqf.scans.sweep.compute.compute_batch``), which store each point as it is done.
Then it writes, each atomically, DIR/points.parquet (or points.csv without pyarrow),
DIR/failed.json (the points without a record this time and why) and DIR/figures/.

Resume: rerunning the same command recomputes nothing that is stored (the store keys each
point by its full config and nqf's code); the failed points of an earlier run are tried
again. Points another process is computing (a shared ``--store``) are waited for at the end.
A run that fails (an executor that will not start, Ctrl-C) before it stored a point removes the
folders it made. The output files are checked before anything runs (:func:`check_output_files`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nqf.core.errors import NqfError
from nqf.core.output_paths import check_output_folder_path, check_output_path

from .checks import check_points
from .points import EXPERIMENT, RUN, Point, Resolver, default_batch_size, expand, make_batches
from .spec import Spec, SpecError, load_spec


@dataclass
class SweepPlan:
    spec: Spec
    points: list[Point]
    stored: set[int]
    batches: list[list[Point]]
    batch_size: int
    store_root: Path
    version: str  # the store's code identity, as the driver sees it (workers key with the same)


@dataclass
class SweepResult:
    plan: SweepPlan
    states: dict[int, str] = field(default_factory=dict)  # computed | stored | failed
    errors: dict[int, str] = field(default_factory=dict)
    table: Path | None = None
    figures: dict[str, Path | None] = field(default_factory=dict)
    seconds: float = 0.0

    def count(self, state: str) -> int:
        return sum(1 for s in self.states.values() if s == state)

    def to_dataframe(self) -> Any:
        """The sweep's table as a ``pandas.DataFrame``: ``table`` (points.parquet, or points.csv
        without pyarrow) as :func:`run_sweep` wrote it, one row per point and mode (one row
        for a failed point), the columns of ``nqf.scans.sweep.table`` in its order. Missing
        numbers (never switched, not applicable, a failed point's) are NaN / None; ``error``
        is text, empty for a point with a record. Needs pandas (``pip install
        'nqf[dataframe]'``): NqfError without it, or before the table is written.
        """
        from nqf.core.dataframes import points_frame

        return points_frame(self.table)


def plan_sweep(
    spec: str | Path | Spec,
    out: Path,
    store: Path | None = None,
    batch_size: int | None = None,
    jobs: int = 1,
    force: bool = False,
    check_data: bool = True,
) -> SweepPlan:
    """Everything before the work: the checked spec (``spec``: its file, or as :func:`load_spec`
    read it), its points, which are stored, the batches.

    Raises SpecError (one line per problem) or NqfError; computes nothing, writes nothing.
    JAX must be started (float64) by the caller. ``check_data=False`` (a dry run) leaves out
    the checks that compute (:func:`check_points`: the theory gate's probes, and the stability
    bound, which draws the data and runs a prediction); the plan is the same.
    """
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    out = Path(out)
    store_root = Path(store) if store is not None else out / "store"
    check_output_folder_path("--out", out)
    check_output_folder_path("--store", store_root)
    check_output_files(out)
    if batch_size is not None and batch_size < 1:
        raise NqfError(f"--batch-size must be a positive integer, got {batch_size}")
    resolver = Resolver()
    with _collector_paused():
        points = expand(spec, resolver)
    check_points(spec, points, resolver, data=check_data)
    from nqf.store.results import ResultsStore

    results = ResultsStore(store_root)
    experiment = EXPERIMENT[spec.mode]
    stored = set() if force or not _has_records(store_root, experiment) else _stored(results, experiment, points)
    todo = [p for p in points if p.index not in stored]
    size = batch_size or spec.batch_size or default_batch_size(len(todo), jobs)
    return SweepPlan(spec, points, stored, make_batches(todo, size), size, store_root, results.version)


# what a sweep writes into --out at the end (points.csv without pyarrow), and into DIR/figures/
OUTPUT_FILES = ("points.parquet", "points.csv", "failed.json")
FIGURE_DIR = "figures"
FIGURE_FILES = ("switch_steps.png", "heatmap.png", "curves.png")


def check_output_files(out: Path) -> None:
    """NqfError unless the files the sweep writes at the end can take their places in ``out``:
    a folder (or a special file) where one goes would fail only after every point is computed."""
    figures = out / FIGURE_DIR
    if figures.exists() and not figures.is_dir():
        raise NqfError(f"--out {out}: {figures} is not a folder; the sweep draws its figures in there")
    for path in [*(out / name for name in OUTPUT_FILES), *(figures / name for name in FIGURE_FILES)]:
        if path.is_dir():
            raise NqfError(f"--out {out}: {path} is a folder; the sweep writes its file {path.name} there")
        if path.exists() or path.is_symlink():
            check_output_path("--out", path)  # a regular file it may replace


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while a million small dicts are made: its passes over
    them (they hold no cycles) cost two thirds of expanding a 10^6-point spec."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _has_records(store_root: Path, experiment: str) -> bool:
    """Whether the store's folder of ``experiment`` holds any record (keys are only computed then)."""
    try:
        with os.scandir(store_root / "runs" / experiment) as entries:
            return any(e.name.endswith(".json") for e in entries)
    except OSError:  # no such folder yet
        return False


def _stored(results, experiment: str, points: list[Point]) -> set[int]:
    """The indices of the points whose record the store holds (and that read back sound);
    a lock file left on a stored point by a killed holder is removed on the way."""
    stored = set()
    for p in points:
        if results.get(experiment, RUN, p.config) is not None:
            stored.add(p.index)
            results.clear_stale_claim(experiment, results.key(experiment, RUN, p.config))
    return stored


def describe_plan(plan: SweepPlan) -> str:
    n = len(plan.points)
    todo = n - len(plan.stored)
    return (
        f"{n} point(s) ({plan.spec.mode}), {len(plan.stored)} already stored, {todo} to compute "
        f"in {len(plan.batches)} batch(es) of at most {plan.batch_size}; store {plan.store_root}"
    )


def eta_seconds(started: float, last: float, finished: int, todo: int, now: float) -> float | None:
    """Seconds left of a sweep's compute: the wall time per point finished so far (from
    ``started`` to ``last``, when the ``finished``-th of the ``todo`` points to compute ended;
    with several workers points finish that much faster) times the points left, less the time
    since ``last``; None before the first point. Never negative."""
    if finished <= 0 or todo <= 0:
        return None
    per_point = max(last - started, 0.0) / finished
    return max(per_point * max(todo - finished, 0) - max(now - last, 0.0), 0.0)


def _progress(total: int, quiet: bool):
    """A rich progress bar on stderr, or None when quiet or stderr is not a terminal (a pipe,
    a file: no bar, no time left). Its task's fields: ``note`` (failed points), ``started``,
    ``last``, ``finished`` and ``todo`` (the points to compute this run, :func:`eta_seconds`)."""
    if quiet or not sys.stderr.isatty():
        return None
    from datetime import timedelta

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class TimeLeft(ProgressColumn):
        """The time left, from the points finished so far (rich's own column estimates a speed
        from the last 30 s, so points minutes apart leave it at -:--:--)."""

        def render(self, task) -> Text:
            fields = task.fields
            left = eta_seconds(fields["started"], fields["last"], fields["finished"], fields["todo"], time.monotonic())
            if task.finished:
                return Text("")
            if left is None:
                return Text("-:--:-- left", style="progress.remaining")
            return Text(f"{timedelta(seconds=round(left))} left", style="progress.remaining")

    return Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        TimeLeft(),
        console=Console(stderr=True),
        transient=False,
    )


def run_sweep(
    plan: SweepPlan,
    out: Path,
    *,
    executor: str = "local",
    jobs: int = 1,
    address: str | None = None,
    slurm: Any = None,
    retries: int = 2,
    force: bool = False,
    quiet: bool = False,
) -> SweepResult:
    """Compute the plan's batches with the executor, then write the table, failed.json and figures."""
    from nqf.executors import Task, check_available, make_executor

    from .compute import compute_batch

    start = time.perf_counter()
    out = Path(out)
    check_available(executor, slurm)  # Ray, or submitit and sbatch: before anything is made
    made = _first_missing(out)  # removed again when the run fails before it stored anything
    out.mkdir(parents=True, exist_ok=True)
    result = SweepResult(plan)
    for index in plan.stored:
        result.states[index] = "stored"
    experiment = EXPERIMENT[plan.spec.mode]
    by_index = {p.index: p for p in plan.points}
    folder = out / "slurm" if executor == "slurm" else None
    progress = _progress(len(plan.points), quiet)
    bar = None
    if progress is not None:
        progress.start()
        todo_points = len(plan.points) - len(plan.stored)
        now = time.monotonic()
        bar = progress.add_task(
            "sweep", total=len(plan.points), completed=len(plan.stored), note="", started=now, last=now, finished=0,
            todo=todo_points,
        )  # fmt: skip
    try:
        with make_executor(executor, jobs=jobs, address=address, retries=retries, slurm=slurm, folder=folder) as engine:
            todo = plan.batches
            for wait in (False, True):
                tasks = [
                    Task(
                        compute_batch,
                        (
                            str(plan.store_root),
                            experiment,
                            [(p.index, p.config) for p in batch],
                            force,
                            wait,
                            plan.version,
                        ),
                        tag=i,
                    )
                    for i, batch in enumerate(todo)
                ]
                busy: list[Point] = []
                for outcome in engine.run(tasks):
                    batch = todo[outcome.tag]
                    if outcome.ok:
                        for entry in outcome.value:
                            if entry["state"] == "busy":
                                busy.append(by_index[entry["index"]])
                                continue
                            result.states[entry["index"]] = entry["state"]
                            if entry["error"]:
                                result.errors[entry["index"]] = entry["error"]
                    else:  # the whole task failed (its worker died, ...): its stored points are kept
                        for p in batch:
                            result.states[p.index] = "failed"
                            result.errors[p.index] = outcome.error or "the task failed"
                    if bar is not None:
                        done = len(result.states)
                        failed = result.count("failed")
                        progress.update(
                            bar, completed=done, note=f"{failed} failed" if failed else "",
                            finished=done - len(plan.stored), last=time.monotonic(),
                        )  # fmt: skip
                if not busy:
                    break
                todo = [busy[i : i + plan.batch_size] for i in range(0, len(busy), plan.batch_size)]
    except BaseException:  # the executor would not start, Ctrl-C, ...: a run that stored nothing leaves nothing
        if made is not None and not _holds_records(made):
            shutil.rmtree(made, ignore_errors=True)
        raise
    finally:
        if progress is not None:
            progress.stop()
    write_outputs(result, out)
    result.seconds = time.perf_counter() - start
    return result


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (``path`` itself, or a parent), or None."""
    missing = None
    for folder in [path, *path.parents]:
        if folder.exists():
            break
        missing = folder
    return missing


def _holds_records(folder: Path) -> bool:
    """Whether a results store under ``folder`` holds a record (``runs/<experiment>/<key>.json``)."""
    return any(folder.glob("**/runs/*/*.json"))


def stored_points(plan: SweepPlan) -> int:
    """How many of the plan's points the store holds a record of now (files only: nothing read)."""
    from nqf.store.results import ResultsStore

    store = ResultsStore(plan.store_root, plan.version)
    experiment = EXPERIMENT[plan.spec.mode]
    return sum(1 for p in plan.points if store.path(experiment, store.key(experiment, RUN, p.config)).is_file())


def interrupted_keeps(plan: SweepPlan) -> str:
    """What an interrupted sweep leaves: its stored points, where, and how to go on."""
    stored = stored_points(plan)
    if not stored:
        return "no point was stored, nothing was written"
    return (
        f"{stored} of {len(plan.points)} point(s) are stored in {plan.store_root} (kept; the table and figures "
        "were not written); run the same command again to resume"
    )


def write_outputs(result: SweepResult, out: Path) -> None:
    """The table, failed.json and the figures, from the store (each file atomically)."""
    from nqf.store.results import ResultsStore, atomic_write_bytes

    from .table import point_rows, write_table

    plan = result.plan
    store = ResultsStore(plan.store_root, plan.version)
    experiment = EXPERIMENT[plan.spec.mode]
    axes = list(plan.spec.axes)
    rows: list[dict[str, Any]] = []
    records: dict[int, dict] = {}
    failed = []
    for p in plan.points:
        record = store.get(experiment, RUN, p.config)
        if record is not None:
            records[p.index] = record
            result.states.setdefault(p.index, "stored")
        else:
            error = result.errors.get(p.index) or "not computed (interrupted?)"
            result.errors[p.index] = error
            result.states[p.index] = "failed"
            failed.append({"point": p.index, "values": p.values, "error": error})
        rows.extend(point_rows(p, record, result.errors.get(p.index, ""), axes))
    result.table = write_table(rows, out)
    document = {"spec": str(plan.spec.path), "failed": failed}
    atomic_write_bytes(out / "failed.json", (json.dumps(document, indent=1, default=str) + "\n").encode())
    from nqf.report.sweep_figures import sweep_figures

    heatmap = plan.spec.heatmap
    if heatmap is None and len(plan.spec.groups) >= 2:
        heatmap = (plan.spec.groups[0][0], plan.spec.groups[1][0])
    result.figures = sweep_figures(rows, out / FIGURE_DIR, heatmap, _chosen(plan, records))


def _chosen(plan: SweepPlan, records: dict[int, dict]) -> list[tuple[int, dict, dict]]:
    """The points whose loss curves are drawn: the spec's indices, or ``curves`` evenly spread ones."""
    curves = plan.spec.curves
    with_record = [p for p in plan.points if p.index in records]
    if isinstance(curves, int):
        if curves == 0 or not with_record:
            return []
        step = max(1, len(with_record) // curves)
        picked = with_record[::step][:curves]
    else:
        picked = [p for p in plan.points if p.index in set(curves) and p.index in records]
    return [(p.index, p.values, records[p.index]) for p in picked]


__all__ = [
    "SpecError",
    "SweepPlan",
    "SweepResult",
    "describe_plan",
    "interrupted_keeps",
    "plan_sweep",
    "run_sweep",
    "stored_points",
    "write_outputs",
]
