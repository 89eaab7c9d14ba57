"""Computing the missing runs of a plan through an executor (:mod:`nqf.executors`).

Each run is one task, :func:`compute_and_store`, which claims the run in the store, computes
it and stores it atomically as soon as it finishes, in whichever process or machine runs it;
the driver then reads the record from the store. Two passes: first every run not claimed by
another process, then the ones that were, now waiting for their claims (most are then found
in the store). A run whose task raised, or whose worker died more than ``retries`` times, is
"failed" with its one-line reason; the others go on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nqf.executors import Executor, SlurmOptions, Task, make_executor
from nqf.store.code import check_same_code
from nqf.store.results import ResultsStore
from nqf_paper._base import RunSpec

from .events import Progress, ProgressEvent
from .plan import Plan

SLURM_FOLDER = "slurm"  # under the output folder: submitit's files and the jobs' logs


def compute_and_store(
    root: str, version: str, experiment: str, spec: RunSpec, force: bool, wait: bool
) -> tuple[str, float]:
    """Compute one run under the store's claim and store it, in whichever process runs this.

    Returns ``(state, seconds)``: "computed"; "stored" when, once claimed, the run is found
    in the store (another process stored it since the plan was made; with ``force`` only
    after waiting for that process); or "busy" when another process holds the claim and
    ``wait`` is false. The record itself stays in the store, where the driver reads it: what
    comes back from a worker (on another machine, with Ray or Slurm) is small. A worker whose
    nqf source differs from the driver's (``version``) refuses (:func:`check_same_code`).
    """
    check_same_code(version)
    store = ResultsStore(root, version)
    claim = store.claim(experiment, store.key(experiment, spec.name, spec.config), wait=wait)
    if claim is None:
        return "busy", 0.0
    with claim:
        if wait or not force:
            if store.get(experiment, spec.name, spec.config) is not None:
                return "stored", 0.0
        start = time.perf_counter()
        store.put(experiment, spec.name, spec.config, spec.compute(dict(spec.config)))
        return "computed", time.perf_counter() - start


def execute(plan: Plan, store: ResultsStore, executor: Executor, progress: Progress, force: bool) -> None:
    """Compute the plan's missing runs with ``executor``; each is stored as soon as it finishes."""
    todo = plan.todo()
    root, version = str(store.root), store.version
    for wait in (False, True):
        if not todo:
            return
        tasks = [
            Task(compute_and_store, (root, version, experiment, spec, force, wait), tag=(experiment, spec))
            for experiment, spec in todo
        ]
        busy = []
        outcomes = executor.run(tasks)
        try:
            for outcome in outcomes:
                experiment, spec = outcome.tag
                if not outcome.ok:
                    _finished(plan, store, progress, experiment, spec, "failed", outcome.error or "", 0.0)
                    continue
                state, seconds = outcome.value
                if state == "busy":
                    busy.append((experiment, spec))
                else:
                    _finished(plan, store, progress, experiment, spec, state, "", seconds)
        finally:  # stops the work in flight now when this ends early (Ctrl-C in a progress callback)
            getattr(outcomes, "close", lambda: None)()
        todo = busy


def _finished(
    plan: Plan,
    store: ResultsStore,
    progress: Progress,
    experiment: str,
    spec: RunSpec,
    state: str,
    error: str,
    seconds: float,
) -> None:
    """Note a run's end in the plan (reading its record from the store) and report it."""
    if state != "failed":
        record = store.get(experiment, spec.name, spec.config)
        if record is None:
            state, error = "failed", "its record could not be read back from the store"
        else:
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


@contextmanager
def open_executor(
    executor: str | Executor,
    todo: int,
    out_dir: Path,
    jobs: int = 1,
    address: str | None = None,
    slurm: SlurmOptions | None = None,
    retries: int = 2,
) -> Iterator[Executor]:
    """The executor for ``todo`` runs, closed afterwards unless the caller gave an instance.

    "local" uses at most one worker a run, and none (this process) for a single run; the
    Slurm executor keeps its files in ``out_dir/slurm``.
    """
    if isinstance(executor, Executor):
        yield executor
        return
    if executor == "local":
        jobs = min(jobs, todo) if todo > 1 else 1
    folder = out_dir / SLURM_FOLDER if executor == "slurm" else None
    with make_executor(executor, jobs=jobs, address=address, retries=retries, slurm=slurm, folder=folder) as made:
        yield made
