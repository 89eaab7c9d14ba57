"""Run the experiment suite through the results store and write the report.

``reproduce`` plans every selected experiment's runs (:mod:`.plan`), reads the finished
ones from the store (``out_dir/runs``), computes the rest through an executor
(:mod:`.execute`: in this process, in ``jobs`` spawned worker processes, on a Ray cluster or
on Slurm; each run is stored atomically as soon as it finishes), summarises each
experiment into claims, draws its figures and writes ``out_dir/report.html``
(:mod:`.finish`). Interrupting it loses at most the runs in flight; the next call resumes.

Processes sharing ``out_dir`` share the work: a run is computed under the store's claim
(an ``flock``, see :meth:`ResultsStore.claim`), and a run claimed by another process is
put off until the rest is done, then waited for and read from the store (or computed
here, if the other process failed or died). Local worker processes die with the driver,
even when it is SIGKILLed, and are stopped when it is interrupted (:class:`Interrupted`).

``rebuild_report`` redoes the last three steps from the store alone, using the
experiments and configs that the last ``reproduce`` wrote to ``out_dir/manifest.json``.

The report side (matplotlib, HTML) is imported only when figures and report are drawn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from pathlib import Path

from nqf.core.errors import NqfError
from nqf.executors import EXECUTORS, Executor, LocalExecutor, SlurmOptions, check_available
from nqf.store.results import ResultsStore, atomic_write_bytes
from nqf_paper._base import Experiment
from nqf_paper._config import config_from_dict

from .events import Interrupted as Interrupted
from .events import Progress as Progress
from .events import ProgressEvent as ProgressEvent
from .events import ReproduceOutcome as ReproduceOutcome
from .events import ignore
from .execute import execute, open_executor
from .finish import finish
from .plan import FIGURE_DIR as FIGURE_DIR
from .plan import MANIFEST_FORMAT as MANIFEST_FORMAT
from .plan import MANIFEST_NAME as MANIFEST_NAME
from .plan import Plan, configs_for, registry_or_default
from .plan import check_output_folder as check_output_folder
from .plan import read_manifest as read_manifest
from .plan import select_experiments as select_experiments


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
    executor: str | Executor = "local",
    address: str | None = None,
    slurm: SlurmOptions | None = None,
    retries: int = 2,
) -> ReproduceOutcome:
    """Run the selected experiments (resuming from the store) and write ``out_dir/report.html``.

    ``mode`` picks each config's ``quick()`` or ``full()``; ``config_file`` (TOML, sections
    ``[E1]``) and ``overrides`` (``"E1.sigma0=1e-8"``) change fields. ``force`` recomputes
    runs already in the store. ``experiments`` replaces the registry (tests).

    ``executor`` ("local", "ray", "slurm", or an :class:`~nqf.executors.Executor`, which the
    caller then closes) computes the missing runs, with ``jobs``, ``address``, ``slurm`` and
    ``retries`` as in :func:`nqf.executors.make_executor`; no executor is started when the
    store already holds every run.
    """
    if mode not in ("quick", "full"):
        raise NqfError(f"mode must be 'quick' or 'full', got {mode!r}")
    if int(jobs) < 1:
        raise NqfError(f"--jobs must be at least 1, got {jobs}")
    if not isinstance(executor, Executor):
        if executor not in EXECUTORS:
            raise NqfError(f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}")
        check_available(executor, slurm)
    progress = progress or ignore
    registry = registry_or_default(experiments)
    selected = select_experiments(registry, only)
    configs = configs_for(registry, selected, mode, config_file, overrides)
    for exp in selected:  # the runs of each config (their own checks) before anything is made
        exp.run_specs(configs[exp.name])
    out = Path(out_dir)
    check_output_folder(out, create=True)
    store = ResultsStore(out, recompute=True)
    plan = Plan(selected, configs, store, force)
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
        todo = len(plan.todo())
        opened = open_executor(executor, todo, out, int(jobs), address, slurm, retries) if todo else nullcontext()
        with opened as engine:
            if engine is not None:
                execute(plan, store, engine, progress, force)
            computed = sum(1 for state, _ in plan.states.values() if state == "computed")
            # the local workers that ran the runs draw the figures too (nqf already imported there)
            pool = engine if isinstance(engine, LocalExecutor) and engine.jobs > 1 else None
            return finish(out, selected, plan, store, mode, progress, computed, jobs=int(jobs), pool=pool)
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


def rebuild_report(
    out_dir: str | os.PathLike,
    progress: Progress | None = None,
    experiments: Mapping[str, Experiment] | None = None,
    jobs: int = 1,
) -> ReproduceOutcome:
    """Rebuild ``out_dir/report.html`` from the store without computing anything; ``jobs``
    processes draw the figures.

    Runs absent from the store (interrupted, failed, or computed by another nqf version)
    make their experiment "incomplete" in the report.
    """
    progress = progress or ignore
    registry = registry_or_default(experiments)
    manifest = read_manifest(out_dir)
    out = Path(out_dir)
    check_output_folder(out, create=False)
    store = ResultsStore(out)
    selected, configs, problems = [], {}, []
    for entry in manifest["experiments"]:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name not in registry:
            problems.append(f"manifest names experiment {name!r}, which this nqf does not have; skipped")
            continue
        exp = registry[name]
        try:
            configs[name] = config_from_dict(exp.config_type, entry.get("config") or {})
        except NqfError as err:
            problems.append(f"manifest config of {name} no longer fits {exp.config_type.__name__} ({err}); skipped")
            continue
        selected.append(exp)
    plan = Plan(selected, configs, store, force=False)
    return finish(out, selected, plan, store, manifest["mode"], progress, computed=0, problems=problems, jobs=jobs)
