"""Run the experiment suite through the results store and write the report.

``reproduce`` plans every selected experiment's runs, reads the finished ones from the
store (``out_dir/runs``), computes the rest (in this process, or in ``jobs`` spawned
worker processes, each storing its run atomically as soon as it finishes), summarises
each experiment into claims, draws its figures and writes ``out_dir/report.html``.
Interrupting it loses at most the runs in flight; the next call resumes.

``rebuild_report`` redoes the last three steps from the store alone, using the
experiments and configs that the last ``reproduce`` wrote to ``out_dir/manifest.json``.

The report side (matplotlib, HTML) is imported only when figures and report are drawn.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import NqfError
from ._store import ResultsStore, atomic_write_bytes
from .experiments._base import Experiment, ExperimentOutcome, ExperimentResult, RunSpec, RunStatus
from .experiments._config import (
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


def _registry(experiments: Mapping[str, Experiment] | None) -> Mapping[str, Experiment]:
    if experiments is not None:
        return experiments
    from .experiments import EXPERIMENTS

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


def _compute_and_store(root: str, version: str, experiment: str, spec: RunSpec) -> tuple[dict, float]:
    """Compute one run and store it (in whichever process runs this); the record and the seconds it took."""
    start = time.perf_counter()
    record = spec.compute(dict(spec.config))
    stored = ResultsStore(root, version).put(experiment, spec.name, spec.config, record)
    return stored, time.perf_counter() - start


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


def _execute(plan: _Plan, store: ResultsStore, jobs: int, progress: Progress) -> None:
    """Compute the missing runs; each is stored as soon as it finishes."""
    todo = plan.todo()

    def finished(experiment: str, spec: RunSpec, record: dict | None, error: str, seconds: float) -> None:
        if record is not None:
            plan.records[(experiment, spec.name)] = record
            plan.states[(experiment, spec.name)] = ("computed", "")
        else:
            plan.states[(experiment, spec.name)] = ("failed", error)
        progress(
            ProgressEvent(
                experiment,
                "run",
                done=plan.count(experiment, "stored", "computed", "failed"),
                total=len(plan.specs[experiment]),
                stored=plan.count(experiment, "stored"),
                run=spec.name,
                failed=record is None,
                seconds=seconds,
            )
        )

    if jobs <= 1 or len(todo) <= 1:
        for experiment, spec in todo:
            start = time.perf_counter()
            try:
                record, seconds = _compute_and_store(str(store.root), store.version, experiment, spec)
            except Exception as err:  # a failing run must not stop the others; it is reported
                finished(experiment, spec, None, _error_line(err), time.perf_counter() - start)
            else:
                finished(experiment, spec, record, "", seconds)
        return

    # Spawned (not forked) workers: JAX is multithreaded and must not be forked.
    context = multiprocessing.get_context("spawn")
    executor = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context)
    try:
        futures = {
            executor.submit(_compute_and_store, str(store.root), store.version, experiment, spec): (experiment, spec)
            for experiment, spec in todo
        }
        for future in concurrent.futures.as_completed(futures):
            experiment, spec = futures[future]
            try:
                record, seconds = future.result()
            except concurrent.futures.process.BrokenProcessPool:
                # A worker was killed (out of memory?); this and every unfinished run fail, the report is still written.
                finished(experiment, spec, None, "a worker process died (killed or out of memory)", 0.0)
            except Exception as err:
                finished(experiment, spec, None, _error_line(err), 0.0)
            else:
                finished(experiment, spec, record, "", seconds)
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
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
    from .report._style import check_saved

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
    from .report._html import build_report

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
    store = ResultsStore(out)
    plan = _Plan(selected, configs, store, force)
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
    _execute(plan, store, int(jobs), progress)
    computed = sum(1 for state, _ in plan.states.values() if state == "computed")
    return _finish(out, selected, plan, store, mode, progress, computed)


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
