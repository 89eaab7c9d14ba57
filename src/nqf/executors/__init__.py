"""Executors: one interface over the engines that run many independent tasks.

``make_executor("local" | "ray" | "slurm", ...)`` gives an :class:`Executor`; its
``run(tasks)`` yields one :class:`Outcome` per :class:`Task` as they finish (see
:mod:`nqf.executors.base`). Ray and submitit are imported only by the executor that uses them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

from nqf.core.errors import NqfError, install_hint

from .base import WORKER_DIED as WORKER_DIED
from .base import Executor as Executor
from .base import Outcome as Outcome
from .base import Task as Task
from .base import call_task as call_task
from .base import checked_counts
from .base import error_line as error_line
from .local import LocalExecutor as LocalExecutor
from .ray_engine import RayExecutor as RayExecutor
from .slurm import NO_SLURM
from .slurm import SlurmExecutor as SlurmExecutor
from .slurm import SlurmOptions as SlurmOptions

EXECUTORS = ("local", "ray", "slurm")


def make_executor(
    name: str,
    *,
    jobs: int = 1,
    address: str | None = None,
    retries: int = 2,
    slurm: SlurmOptions | None = None,
    folder: str | os.PathLike | None = None,
) -> Executor:
    """The executor ``name``: "local", "ray" or "slurm". Use it as a context manager.

    - local: ``jobs`` worker processes (1: in this process, no retries);
    - ray: the cluster at ``address`` (else ``RAY_ADDRESS``; else a local Ray with ``jobs``
      CPUs, on 127.0.0.1 only, shut down on close);
    - slurm: array jobs with the ``slurm`` options; ``folder`` (required) holds submitit's
      files and logs and must be shared with the compute nodes.

    A worker that dies is retried up to ``retries`` times. Options that do not apply to
    ``name`` (an address for local, Slurm options for ray, ...) are an NqfError.
    """
    if name not in EXECUTORS:
        raise NqfError(f"unknown executor {name!r}; choose from {', '.join(EXECUTORS)}")
    checked_counts(jobs, retries)
    if address is not None and name != "ray":
        raise NqfError(f"an address applies to the ray executor, not to {name}")
    if slurm is not None and name != "slurm":
        raise NqfError(f"Slurm options apply to the slurm executor, not to {name}")
    if name == "local":
        return LocalExecutor(jobs=jobs, retries=retries)
    if name == "ray":
        return RayExecutor(jobs=jobs, address=address, retries=retries)
    if folder is None:
        raise NqfError("the slurm executor needs a folder on a filesystem the compute nodes share")
    return SlurmExecutor(folder, slurm, retries=retries)


_PACKAGES = {"ray": ("ray", "ray"), "slurm": ("submitit", "slurm")}


def check_available(name: str, slurm: SlurmOptions | None = None) -> None:
    """NqfError (one line: what to install) unless the engine behind executor ``name`` is
    here: Ray, or submitit and (unless ``slurm.cluster`` is "local") Slurm's ``sbatch``.
    Imports nothing: a check made before any work starts."""
    if name not in _PACKAGES:
        return
    module, extra = _PACKAGES[name]
    if importlib.util.find_spec(module) is None:
        raise NqfError(f"the {name} executor needs {module}: {install_hint(extra)}")
    if name == "slurm" and (slurm is None or slurm.cluster == "slurm") and shutil.which("sbatch") is None:
        raise NqfError(NO_SLURM)
