"""Slurm through submitit: one array job per batch of tasks, polled until every task is done.

Each task is one array element running :func:`nqf.executors.base.call_task` (so an exception
in ``fn`` comes back as a value); an element that ends without a result (its process killed,
out of memory, node lost: submitit's ``UncompletedJobError``) is submitted again, up to
``retries`` times. One that raised outside ``fn`` (``FailedJobError``: the task could not be
unpickled there, say) is reported with the exception's last line. An element stopped by the time limit is reported, not
retried: it would be stopped again. ``folder`` (submitit's pickles and the jobs' logs) must
be on a filesystem the compute nodes share, as must the results store.

``SlurmOptions.cluster="local"`` runs the same code through submitit's local executor
(subprocesses on this machine; the tests use it). submitit is imported only here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nqf.core.errors import NqfError, install_hint

from .base import Executor, Outcome, Task, call_task, checked_counts, died, error_line, outcome_of

CLUSTERS = ("slurm", "local")
NO_SLURM = "the slurm executor found no Slurm here (no sbatch on PATH)"


@dataclass(frozen=True)
class SlurmOptions:
    """How the tasks are submitted: ``partition`` (None: the cluster's default), ``time_min``
    (time limit of one task, minutes), ``cpus_per_task``, ``array_size`` (array elements
    running at once; None: submitit's default, 256), ``cluster`` ("slurm", or "local" for
    submitit's local executor) and ``poll_s`` (seconds between looks at the jobs)."""

    partition: str | None = None
    time_min: int = 60
    cpus_per_task: int = 1
    array_size: int | None = None
    cluster: str = "slurm"
    poll_s: float = 2.0

    def __post_init__(self) -> None:
        if self.partition is not None and not self.partition.strip():
            raise NqfError("the Slurm partition is empty")
        if int(self.time_min) < 1:
            raise NqfError(f"the Slurm time limit must be at least 1 minute, got {self.time_min}")
        if int(self.cpus_per_task) < 1:
            raise NqfError(f"cpus per task must be at least 1, got {self.cpus_per_task}")
        if self.array_size is not None and int(self.array_size) < 1:
            raise NqfError(f"the Slurm array size must be at least 1, got {self.array_size}")
        if self.cluster not in CLUSTERS:
            raise NqfError(f"the Slurm cluster must be one of {', '.join(CLUSTERS)}, got {self.cluster!r}")
        if not self.poll_s > 0:
            raise NqfError(f"the polling interval must be positive, got {self.poll_s}")


def _import_submitit() -> Any:
    try:
        import submitit
    except ImportError:
        raise NqfError(f"the slurm executor needs submitit: {install_hint('slurm')}") from None
    return submitit


class SlurmExecutor(Executor):
    """Tasks as Slurm array elements; see the module docstring."""

    name = "slurm"

    def __init__(self, folder: str | os.PathLike, options: SlurmOptions | None = None, retries: int = 2):
        options = options or SlurmOptions()
        _, retries = checked_counts(1, retries)
        if options.cluster == "slurm" and shutil.which("sbatch") is None:
            raise NqfError(NO_SLURM)
        submitit = _import_submitit()
        self.options, self.retries = options, retries
        self.folder = Path(folder)
        self._failed = submitit.core.utils.FailedJobError
        self._lost = submitit.core.utils.UncompletedJobError  # no result: the worker died
        self._executor = submitit.AutoExecutor(folder=str(self.folder / "%j"), cluster=options.cluster)
        parameters: dict[str, Any] = {
            "name": "nqf",
            "timeout_min": int(options.time_min),
            "cpus_per_task": int(options.cpus_per_task),
        }
        if options.partition is not None:
            parameters["slurm_partition"] = options.partition
        if options.array_size is not None:
            parameters["slurm_array_parallelism"] = int(options.array_size)
        self._executor.update_parameters(**parameters)
        self._pending: list[tuple[Any, int]] = []

    def _submit(self, tasks: list[Task], indices: list[int]) -> list[tuple[Any, int]]:
        try:
            # call_task is module-level: submitit pickles it by reference
            jobs = self._executor.map_array(call_task, [tasks[i].fn for i in indices], [tasks[i].args for i in indices])
        except Exception as err:  # sbatch refused (partition, limits), or the folder is not writable
            raise NqfError(f"submitting {len(indices)} task(s) to Slurm failed: {error_line(err)}") from None
        if self.options.cluster == "local":  # results are on this disk: no wait for a slow NFS (15 s a dead job)
            for job in jobs:
                job._results_timeout_s = 0
        return list(zip(jobs, indices, strict=True))

    def run(self, tasks: Sequence[Task]) -> Iterator[Outcome]:
        tasks = list(tasks)
        attempts = [1] * len(tasks)
        try:
            self._pending = self._submit(tasks, list(range(len(tasks)))) if tasks else []
            while self._pending:
                done = [(job, index) for job, index in self._pending if job.done()]
                if not done:
                    time.sleep(self.options.poll_s)
                    continue
                finished = {id(job) for job, _ in done}
                self._pending = [entry for entry in self._pending if id(entry[0]) not in finished]
                again = []
                for job, index in done:
                    outcome = self._outcome(job, tasks[index], attempts[index])
                    if outcome is None and attempts[index] <= self.retries:
                        attempts[index] += 1
                        again.append(index)
                    else:
                        yield outcome or died(tasks[index].tag, attempts[index])
                if again:
                    self._pending += self._submit(tasks, again)
        except BaseException:  # Ctrl-C, or the caller closed the iterator: cancel what is queued or running
            self._cancel()
            raise

    def _outcome(self, job: Any, task: Task, attempts: int) -> Outcome | None:
        """The finished element's outcome; None when its worker died (to be retried)."""
        try:
            answer = job.result()
        except self._failed as err:  # the job ran and raised outside fn (its pickle did not load): reported
            trace = [line.strip() for line in str(err).splitlines() if line.strip()]
            return Outcome(task.tag, error=trace[-1] if trace else error_line(err), attempts=attempts)
        except self._lost:
            if str(getattr(job, "state", "")).upper().startswith("TIMEOUT"):
                limit = f"the Slurm time limit ({self.options.time_min} min) was reached"
                return Outcome(task.tag, error=f"TimeoutError: {limit}", attempts=attempts)
            return None
        return outcome_of(task, answer, attempts)

    def _cancel(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        if self.options.cluster == "slurm":  # one scancel for all: the array ids, not every element
            arrays = sorted({str(job.job_id).split("_")[0] for job, _ in pending})
            try:
                subprocess.run(["scancel", *arrays], capture_output=True, timeout=60, check=False)
            except (OSError, subprocess.TimeoutExpired):
                pass
            return
        for job, _ in pending:
            try:
                job.cancel(check=False)
            except Exception:  # already finished
                pass

    def close(self) -> None:
        self._cancel()
