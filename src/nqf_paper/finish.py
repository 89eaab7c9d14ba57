"""The end of ``reproduce``: summarise each experiment into claims, draw its figures, write the report.

The report side (matplotlib, HTML) is imported only here, when figures and report are drawn.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from nqf.core.errors import NqfError
from nqf.executors import LocalExecutor, Task
from nqf.store.results import ResultsStore
from nqf_paper._base import Experiment, ExperimentOutcome, ExperimentResult, RunSpec, RunStatus
from nqf_paper._config import config_to_dict

from .events import Progress, ProgressEvent, ReproduceOutcome
from .plan import FIGURE_DIR, Plan, error_line


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
            result, error = None, f"summarising failed: {error_line(err)}"
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


def draw_figures(figures: str, name: str, result: Any, figure_dir: Path) -> tuple:
    """Experiment ``name``'s figures of ``result`` into ``figure_dir``: its plot function
    ``figures`` ("module:function", imported here, with the report side) called, and the
    SavedFigure objects it returned checked. A task of :func:`_draw`'s pool."""
    from nqf.report.style import check_saved

    module_name, _, function_name = figures.partition(":")
    plot = getattr(importlib.import_module(module_name), function_name)
    return check_saved(plot(result, figure_dir), name)


def _draw(
    experiments: Sequence[Experiment],
    outcomes,
    figure_dir: Path,
    jobs: int,
    problems: list[str],
    pool: LocalExecutor | None = None,
) -> dict:
    """Every experiment's figures (name -> SavedFigure tuple; empty without a result or a plot
    function), drawn by ``pool`` (the workers that ran the runs, left open) or by ``jobs`` spawned
    processes at once (``nqf.executors.LocalExecutor``; one: here). Figures are most of what
    follows the runs (about 19 of the 24 s of ``nqf report`` after ``make demo``, one process),
    and each experiment's are drawn on their own. A failure is a problem, in the experiments'
    order, and never costs the rest of the report."""
    tasks = [
        Task(draw_figures, (exp.figures, exp.name, outcome.result, figure_dir), tag=exp.name)
        for exp, outcome in zip(experiments, outcomes, strict=True)
        if exp.figures is not None and outcome.result is not None
    ]
    drawn: dict[str, tuple] = {exp.name: () for exp in experiments}
    failed: dict[str, str] = {}
    with nullcontext(pool) if pool is not None else LocalExecutor(max(1, min(jobs, len(tasks)))) as drawing:
        for done in drawing.run(tasks):
            if done.ok:
                drawn[done.tag] = done.value
            else:
                failed[done.tag] = f"figures of {done.tag} failed: {done.error}"
    problems.extend(failed[exp.name] for exp in experiments if exp.name in failed)
    return drawn


def finish(
    out_dir: Path,
    experiments: Sequence[Experiment],
    plan: Plan,
    store: ResultsStore,
    mode: str,
    progress: Progress,
    computed: int,
    problems: Sequence[str] = (),
    jobs: int = 1,
    pool: LocalExecutor | None = None,
) -> ReproduceOutcome:
    """Summarise each experiment into claims, draw the figures (``pool``'s workers, else ``jobs``
    processes at once) and write the report."""
    from nqf_paper.report_page import build_report

    problems = list(problems)
    outcomes = [
        _summarise(exp, plan.configs[exp.name], plan.specs[exp.name], plan.keys, plan.records, plan.states)
        for exp in experiments
    ]
    figures = _draw(experiments, outcomes, out_dir / FIGURE_DIR, jobs, problems, pool)
    for exp in experiments:
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
