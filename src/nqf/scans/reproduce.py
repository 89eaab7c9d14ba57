"""Run the experiment suite through the results store and write the report.

``reproduce`` plans every selected experiment's runs, reads the finished ones from the
store (``out_dir/runs``), computes the rest (in this process, or in ``jobs`` spawned
worker processes, each storing its run atomically as soon as it finishes), summarises
each experiment into claims, draws its figures and writes ``out_dir/report.html``.
Interrupting it loses at most the runs in flight; the next call resumes.

Processes sharing ``out_dir`` share the work: a run is computed under the store's claim
(an ``flock``, see :meth:`ResultsStore.claim`), and a run claimed by another process is
put off until the rest is done, then waited for and read from the store (or computed
here, if the other process failed or died). Worker processes die with the driver, even
when it is SIGKILLed, and are stopped when it is interrupted (:class:`Interrupted`).

``rebuild_report`` redoes the last three steps from the store alone, using the
experiments and configs that the last ``reproduce`` wrote to ``out_dir/manifest.json``.

The report side (matplotlib, HTML) is imported only when figures and report are drawn.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import importlib
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nqf.core.errors import NqfError
from nqf.store.results import ResultsStore, atomic_write_bytes
from nqf.experiments._base import Experiment, ExperimentOutcome, ExperimentResult, RunSpec, RunStatus
from nqf.experiments._config import (
    build_config,
    config_from_dict,
    config_to_dict,
    load_config_file,
    parse_overrides,
)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "nqf-manifest"
FIGURE_DIR = "figures"


@dataclass(frozen=True)
class ProgressEvent:
    """Sent to the ``progress`` callback.

    ``stage``: "plan" (runs counted; ``stored`` already in the store), "run" (run ``run``
    finished, ``failed`` if it raised), "summarise" (experiment summarised). ``done`` of
    ``total`` runs are finished (stored ones included); ``seconds`` is the run's compute time.
    """

    experiment: str
    stage: str
    done: int
    total: int
    stored: int = 0
    run: str | None = None
    failed: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class ReproduceOutcome:
    """What ``reproduce`` / ``rebuild_report`` did: the report path, each experiment's outcome, counts."""

    report: Path
    outcomes: tuple[ExperimentOutcome, ...]
    problems: tuple[str, ...]
    computed: int
    stored: int
    failed: int


Progress = Callable[[ProgressEvent], None]


class Interrupted(KeyboardInterrupt):
    """``reproduce`` was stopped by a KeyboardInterrupt (Ctrl-C, or a signal handler raising it).

    Its workers are stopped; the store keeps ``stored`` of the ``total`` planned runs, and
    calling ``reproduce`` again with the same arguments computes only the others.
    """

    def __init__(self, out_dir: Path, stored: int, total: int):
        super().__init__(f"interrupted: {stored} of {total} runs are stored in {out_dir}")
        self.out_dir = out_dir
        self.stored = stored
        self.total = total


def _registry(experiments: Mapping[str, Experiment] | None) -> Mapping[str, Experiment]:
    if experiments is not None:
        return experiments
    from nqf.experiments import EXPERIMENTS

    return EXPERIMENTS


def _lookup(registry: Mapping[str, Experiment], name: str) -> str:
    for known in registry:
        if known.lower() == name.strip().lower():
            return known
    raise NqfError(f"unknown experiment {name.strip()!r}; choose from {', '.join(registry) or '(none registered)'}")


def select_experiments(
    registry: Mapping[str, Experiment], only: str | Iterable[str] | None
) -> tuple[Experiment, ...]:
    """The experiments named in ``only`` ("E1,E4" or a list; case-insensitive), or all, in registry order."""
    if not registry:
        raise NqfError("no experiments are registered")
    if only is None:
        return tuple(registry.values())
    names = only.split(",") if isinstance(only, str) else list(only)
    names = [n for n in names if n.strip()]
    if not names:
        raise NqfError("--only names no experiment")
    chosen = {_lookup(registry, name) for name in names}
    return tuple(exp for name, exp in registry.items() if name in chosen)


def _configs(
    registry: Mapping[str, Experiment],
    selected: Sequence[Experiment],
    mode: str,
    config_file: str | os.PathLike | None,
    overrides: Iterable[str],
) -> dict[str, Any]:
    file_tables = load_config_file(config_file) if config_file is not None else {}
    file_tables = {_lookup(registry, name): table for name, table in file_tables.items()}
    sets = {_lookup(registry, name): values for name, values in parse_overrides(overrides).items()}
    return {exp.name: build_config(exp, mode, file_tables.get(exp.name), sets.get(exp.name)) for exp in selected}


def _error_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def _compute_and_store(
    root: str, version: str, experiment: str, spec: RunSpec, force: bool, wait: bool
) -> tuple[str, dict | None, float]:
    """Compute one run under the store's claim and store it, in whichever process runs this.

    Returns ``(state, record, seconds)``: "computed"; "stored" when, once claimed, the run
    is found in the store (another process stored it since the plan was made; with
    ``force`` only after waiting for that process); or "busy" (record None) when another
    process holds the claim and ``wait`` is false.
    """
    store = ResultsStore(root, version)
    claim = store.claim(experiment, store.key(experiment, spec.name, spec.config), wait=wait)
    if claim is None:
        return "busy", None, 0.0
    with claim:
        if wait or not force:
            record = store.get(experiment, spec.name, spec.config)
            if record is not None:
                return "stored", record, 0.0
        start = time.perf_counter()
        record = spec.compute(dict(spec.config))
        stored = store.put(experiment, spec.name, spec.config, record)
        return "computed", stored, time.perf_counter() - start


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _worker_init(parent: int) -> None:
    """Initializer of the pool's workers: leave Ctrl-C to the driver, and die with it.

    On Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` has the kernel kill the worker when the
    driver dies, however it dies; elsewhere (or if prctl fails) a daemon thread polls the
    parent pid. A driver that died before this ran is caught by the first ``getppid``.
    Once no worker is left, the multiprocessing resource tracker sees its pipe close and exits.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), name="nqf-parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    """Exit the worker as soon as its parent is gone (the fallback of :func:`_worker_init`)."""
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)


def _stop_pool(executor: concurrent.futures.ProcessPoolExecutor) -> None:
    """Stop the workers now (runs in flight are lost, their claims freed by the kernel) and wait for them.

    SIGTERM first, SIGKILL for any worker still there after 5 s. ``ProcessPoolExecutor``
    has no public way to stop busy workers before Python 3.14 (``terminate_workers``),
    hence its ``_processes`` table.
    """
    processes = list((getattr(executor, "_processes", None) or {}).values())
    for stop in ("terminate", "kill"):
        for process in processes:
            try:
                if process.is_alive():
                    getattr(process, stop)()
            except (OSError, ValueError):  # already gone or closed
                pass
        deadline = time.monotonic() + 5
        for process in processes:
            try:
                process.join(max(0.0, deadline - time.monotonic()))
            except (AssertionError, ValueError):
                pass
    executor.shutdown(wait=True, cancel_futures=True)


class _Plan:
    """Runs of the selected experiments, with what the store already holds."""

    def __init__(self, experiments: Sequence[Experiment], configs: Mapping[str, Any], store: ResultsStore, force: bool):
        self.experiments = tuple(experiments)
        self.configs = dict(configs)
        self.specs = {exp.name: exp.run_specs(configs[exp.name]) for exp in experiments}
        self.keys = {
            (exp.name, spec.name): store.key(exp.name, spec.name, spec.config)
            for exp in experiments
            for spec in self.specs[exp.name]
        }
        self.records: dict[tuple[str, str], dict] = {}
        self.states: dict[tuple[str, str], tuple[str, str]] = {}
        for exp in experiments:
            for spec in self.specs[exp.name]:
                record = None if force else store.get(exp.name, spec.name, spec.config)
                if record is not None:
                    self.records[(exp.name, spec.name)] = record
                    self.states[(exp.name, spec.name)] = ("stored", "")
                else:
                    self.states[(exp.name, spec.name)] = ("missing", "")

    def todo(self) -> list[tuple[str, RunSpec]]:
        return [
            (exp.name, spec)
            for exp in self.experiments
            for spec in self.specs[exp.name]
            if self.states[(exp.name, spec.name)][0] == "missing"
        ]

    def count(self, experiment: str, *states: str) -> int:
        return sum(1 for spec in self.specs[experiment] if self.states[(experiment, spec.name)][0] in states)

    def manifest(self, mode: str, version: str) -> dict:
        return {
            "format": MANIFEST_FORMAT,
            "format_version": 1,
            "mode": mode,
            "nqf_version": version,
            "experiments": [
                {
                    "name": exp.name,
                    "config": config_to_dict(self.configs[exp.name]),
                    "runs": [
                        {"name": spec.name, "key": self.keys[(exp.name, spec.name)]} for spec in self.specs[exp.name]
                    ],
                }
                for exp in self.experiments
            ],
        }


def _execute(plan: _Plan, store: ResultsStore, jobs: int, progress: Progress, force: bool) -> None:
    """Compute the missing runs; each is stored as soon as it finishes.

    First pass: every run not claimed by another process. Second pass: the runs that
    were, now waiting for their claims; most are then found in the store.
    """
    todo = plan.todo()

    def finished(experiment: str, spec: RunSpec, state: str, record: dict | None, error: str, seconds: float) -> None:
        if record is not None:
            plan.records[(experiment, spec.name)] = record
        plan.states[(experiment, spec.name)] = (state, error)
        progress(
            ProgressEvent(
                experiment,
                "run",
                done=plan.count(experiment, "stored", "computed", "failed"),
                total=len(plan.specs[experiment]),
                stored=plan.count(experiment, "stored"),
                run=spec.name,
                failed=state == "failed",
                seconds=seconds,
            )
        )

    root, version = str(store.root), store.version
    if jobs <= 1 or len(todo) <= 1:
        for wait in (False, True):
            busy = []
            for experiment, spec in todo:
                start = time.perf_counter()
                try:
                    state, record, seconds = _compute_and_store(root, version, experiment, spec, force, wait)
                except Exception as err:  # a failing run must not stop the others; it is reported
                    finished(experiment, spec, "failed", None, _error_line(err), time.perf_counter() - start)
                    continue
                if state == "busy":
                    busy.append((experiment, spec))
                else:
                    finished(experiment, spec, state, record, "", seconds)
            todo = busy
        return

    # Spawned (not forked) workers: JAX is multithreaded and must not be forked.
    context = multiprocessing.get_context("spawn")
    executor = concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs, mp_context=context, initializer=_worker_init, initargs=(os.getpid(),)
    )
    try:
        for wait in (False, True):
            futures = {}
            for experiment, spec in todo:
                try:
                    future = executor.submit(_compute_and_store, root, version, experiment, spec, force, wait)
                except concurrent.futures.process.BrokenProcessPool:  # broken in the first pass
                    finished(experiment, spec, "failed", None, "a worker process died (killed or out of memory)", 0.0)
                else:
                    futures[future] = (experiment, spec)
            busy = []
            for future in concurrent.futures.as_completed(futures):
                experiment, spec = futures[future]
                try:
                    state, record, seconds = future.result()
                except concurrent.futures.process.BrokenProcessPool:
                    # A worker was killed (out of memory?); this and every unfinished run fail,
                    # the report is still written.
                    finished(experiment, spec, "failed", None, "a worker process died (killed or out of memory)", 0.0)
                except Exception as err:
                    finished(experiment, spec, "failed", None, _error_line(err), 0.0)
                else:
                    if state == "busy":
                        busy.append((experiment, spec))
                    else:
                        finished(experiment, spec, state, record, "", seconds)
            todo = busy
            if not todo:
                break
    except BaseException:
        _stop_pool(executor)
        raise
    executor.shutdown(wait=True)


def _summarise(exp: Experiment, config: Any, plan_specs: Sequence[RunSpec], keys, records, states) -> ExperimentOutcome:
    runs = tuple(
        RunStatus(spec.name, keys[(exp.name, spec.name)], *states[(exp.name, spec.name)]) for spec in plan_specs
    )
    result, error = None, ""
    if all(run.state in ("stored", "computed") for run in runs):
        try:
            result = exp.summarise(config, {spec.name: records[(exp.name, spec.name)] for spec in plan_specs})
            if not isinstance(result, ExperimentResult):
                raise NqfError(f"summarise returned {type(result).__name__}, not an ExperimentResult")
        except Exception as err:  # reported in the table and the report, never crashes it
            result, error = None, f"summarising failed: {_error_line(err)}"
    elif any(run.state == "failed" for run in runs):
        failed = [run.name for run in runs if run.state == "failed"]
        error = f"run(s) failed: {', '.join(failed)} (see Failed runs)"
    return ExperimentOutcome(
        name=exp.name,
        title=exp.title,
        description=exp.description,
        config=config_to_dict(config),
        runs=runs,
        result=result,
        error=error,
    )


def _plot(exp: Experiment, outcome: ExperimentOutcome, figure_dir: Path, problems: list[str]) -> tuple:
    """The experiment's figures (report side, imported here lazily); failures become problems."""
    if exp.figures is None or outcome.result is None:
        return ()
    from nqf.report._style import check_saved

    module_name, _, function_name = exp.figures.partition(":")
    try:
        plot = getattr(importlib.import_module(module_name), function_name)
        return check_saved(plot(outcome.result, figure_dir), exp.name)
    except Exception as err:  # a broken figure must not cost the rest of the report
        problems.append(f"figures of {exp.name} failed: {_error_line(err)}")
        return ()


def _finish(
    out_dir: Path,
    experiments: Sequence[Experiment],
    plan: _Plan,
    store: ResultsStore,
    mode: str,
    progress: Progress,
    computed: int,
    problems: Sequence[str] = (),
) -> ReproduceOutcome:
    from nqf.report._html import build_report

    problems = list(problems)
    outcomes, figures = [], {}
    for exp in experiments:
        outcome = _summarise(
            exp, plan.configs[exp.name], plan.specs[exp.name], plan.keys, plan.records, plan.states
        )
        figures[exp.name] = _plot(exp, outcome, out_dir / FIGURE_DIR, problems)
        outcomes.append(outcome)
        total = len(plan.specs[exp.name])
        progress(
            ProgressEvent(
                exp.name,
                "summarise",
                done=plan.count(exp.name, "stored", "computed", "failed"),
                total=total,
                stored=plan.count(exp.name, "stored"),
            )
        )
    list(store.scan())  # validate every file in the store, so foreign and corrupt files are listed
    all_problems = tuple(problems + store.problems)
    report = build_report(out_dir, outcomes, figures, all_problems, mode=mode, version=store.version)
    failed = sum(1 for state, _ in plan.states.values() if state == "failed")
    stored = sum(1 for state, _ in plan.states.values() if state == "stored")
    return ReproduceOutcome(report, tuple(outcomes), all_problems, computed, stored, failed)


def _ignore(event: ProgressEvent) -> None:
    pass


def reproduce(
    out_dir: str | os.PathLike,
    mode: str = "quick",
    only: str | Iterable[str] | None = None,
    jobs: int = 1,
    force: bool = False,
    config_file: str | os.PathLike | None = None,
    overrides: Iterable[str] = (),
    progress: Progress | None = None,
    experiments: Mapping[str, Experiment] | None = None,
) -> ReproduceOutcome:
    """Run the selected experiments (resuming from the store) and write ``out_dir/report.html``.

    ``mode`` picks each config's ``quick()`` or ``full()``; ``config_file`` (TOML, sections
    ``[E1]``) and ``overrides`` (``"E1.sigma0=1e-8"``) change fields. ``force`` recomputes
    runs already in the store. ``experiments`` replaces the registry (tests).
    """
    if mode not in ("quick", "full"):
        raise NqfError(f"mode must be 'quick' or 'full', got {mode!r}")
    if int(jobs) < 1:
        raise NqfError(f"--jobs must be at least 1, got {jobs}")
    progress = progress or _ignore
    registry = _registry(experiments)
    selected = select_experiments(registry, only)
    configs = _configs(registry, selected, mode, config_file, overrides)
    out = Path(out_dir)
    check_output_folder(out, create=True)
    store = ResultsStore(out, recompute=True)
    plan = _Plan(selected, configs, store, force)
    try:
        manifest = json.dumps(plan.manifest(mode, store.version), indent=1, sort_keys=True)
        atomic_write_bytes(out / MANIFEST_NAME, manifest.encode("utf-8"))
        for exp in selected:
            progress(
                ProgressEvent(
                    exp.name,
                    "plan",
                    done=plan.count(exp.name, "stored"),
                    total=len(plan.specs[exp.name]),
                    stored=plan.count(exp.name, "stored"),
                )
            )
        _execute(plan, store, int(jobs), progress, force)
        computed = sum(1 for state, _ in plan.states.values() if state == "computed")
        return _finish(out, selected, plan, store, mode, progress, computed)
    except KeyboardInterrupt:
        # Count from the files, not the plan: a worker may have stored a run the driver never heard of.
        fresh = ResultsStore(out, store.version)
        stored = sum(
            1
            for exp in selected
            for spec in plan.specs[exp.name]
            if fresh.get(exp.name, spec.name, spec.config) is not None
        )
        raise Interrupted(out, stored, len(plan.keys)) from None


def check_output_folder(out: Path, create: bool) -> None:
    """NqfError unless ``out`` is a folder this process can write in (made here if ``create``).

    Checked before anything is computed or drawn, by writing and removing a probe file in
    ``out`` and in its ``runs`` and ``figures`` folders where they exist: permission bits
    alone do not tell (root, read-only mounts, /proc). On failure, folders made here are
    removed again, so a refused ``out`` leaves nothing behind.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise NqfError(f"output folder {out} is a file, not a folder")
    made: list[Path] = []
    try:
        if not out.exists():
            if not create:
                raise NqfError(f"output folder {out} does not exist")
            for folder in reversed([out, *out.parents]):
                if not folder.exists():
                    try:
                        folder.mkdir()
                    except FileExistsError:  # a concurrent run on the same --out made it first
                        continue
                    made.append(folder)
        for folder in (out, out / "runs", out / FIGURE_DIR):
            if folder.exists() and not folder.is_dir():
                raise NqfError(f"{folder} is a file; the output folder needs a folder there")
            if folder.is_dir():
                fd, probe = tempfile.mkstemp(dir=folder, prefix=".nqf-probe-")
                os.close(fd)
                os.unlink(probe)
    except (OSError, NqfError) as err:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass
        if isinstance(err, NqfError):
            raise
        reason = err.strerror or type(err).__name__
        raise NqfError(f"output folder {out} cannot be written ({reason}: {err.filename or out})") from None


def read_manifest(out_dir: str | os.PathLike) -> dict:
    """``out_dir/manifest.json`` checked; NqfError when missing or not a manifest."""
    path = Path(out_dir) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NqfError(f"{path} does not exist; run `nqf reproduce --out {out_dir}` first") from None
    except (OSError, ValueError) as err:
        raise NqfError(f"{path} is unreadable: {_error_line(err)}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise NqfError(f"{path} is not an nqf manifest")
    if manifest.get("mode") not in ("quick", "full") or not isinstance(manifest.get("experiments"), list):
        raise NqfError(f"{path} is damaged (mode or experiments missing)")
    return manifest


def rebuild_report(
    out_dir: str | os.PathLike,
    progress: Progress | None = None,
    experiments: Mapping[str, Experiment] | None = None,
) -> ReproduceOutcome:
    """Rebuild ``out_dir/report.html`` from the store without computing anything.

    Runs absent from the store (interrupted, failed, or computed by another nqf version)
    make their experiment "incomplete" in the report.
    """
    progress = progress or _ignore
    registry = _registry(experiments)
    manifest = read_manifest(out_dir)
    out = Path(out_dir)
    check_output_folder(out, create=False)
    store = ResultsStore(out)
    selected, configs, problems = [], {}, []
    for entry in manifest["experiments"]:
        name = entry.get("name") if isinstance(entry, dict) else None
        if name not in registry:
            problems.append(f"manifest names experiment {name!r}, which this nqf does not have; skipped")
            continue
        exp = registry[name]
        try:
            configs[name] = config_from_dict(exp.config_type, entry.get("config") or {})
        except NqfError as err:
            problems.append(f"manifest config of {name} no longer fits {exp.config_type.__name__} ({err}); skipped")
            continue
        selected.append(exp)
    plan = _Plan(selected, configs, store, force=False)
    return _finish(out, selected, plan, store, manifest["mode"], progress, computed=0, problems=problems)
