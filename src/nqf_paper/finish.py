"""The end of ``reproduce``: summarise each experiment into claims, draw its figures, write the report.

The report side (matplotlib, HTML) is imported only here, when figures and report are drawn.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nqf.core.errors import NqfError
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


def _plot(exp: Experiment, outcome: ExperimentOutcome, figure_dir: Path, problems: list[str]) -> tuple:
    """The experiment's figures (report side, imported here lazily); failures become problems."""
    if exp.figures is None or outcome.result is None:
        return ()
    from nqf.report.style import check_saved

    module_name, _, function_name = exp.figures.partition(":")
    try:
        plot = getattr(importlib.import_module(module_name), function_name)
        return check_saved(plot(outcome.result, figure_dir), exp.name)
    except Exception as err:  # a broken figure must not cost the rest of the report
        problems.append(f"figures of {exp.name} failed: {error_line(err)}")
        return ()


def finish(
    out_dir: Path,
    experiments: Sequence[Experiment],
    plan: Plan,
    store: ResultsStore,
    mode: str,
    progress: Progress,
    computed: int,
    problems: Sequence[str] = (),
) -> ReproduceOutcome:
    from nqf_paper.report_page import build_report

    problems = list(problems)
    outcomes, figures = [], {}
    for exp in experiments:
        outcome = _summarise(exp, plan.configs[exp.name], plan.specs[exp.name], plan.keys, plan.records, plan.states)
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
