"""Where ``nqf sweep`` and ``nqf reproduce`` compute: the options ``--executor``, ``--jobs``,
``--address`` and ``--slurm-*``, declared (the ``...Option`` types) and checked
(:meth:`ExecutorArgs.checked`) once for both (docs/clusters.md).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from nqf.core.errors import NqfError

from .app import check_jobs

ExecutorOption = Annotated[str, typer.Option("--executor", help="Where runs are computed: local, ray or slurm.")]
JobsOption = Annotated[
    int | None,
    typer.Option("--jobs", help="Workers: local processes, or a local Ray's CPUs (default 1: in this process)."),
]
AddressOption = Annotated[
    str | None,
    typer.Option("--address", help="Ray cluster host:port (ray; default RAY_ADDRESS, else a local Ray)."),
]
SlurmPartitionOption = Annotated[str | None, typer.Option("--slurm-partition", help="Slurm partition (slurm).")]
SlurmTimeOption = Annotated[
    str | None,
    typer.Option("--slurm-time", help="Time limit of one task: minutes or [D-]H:MM:SS (slurm; default 60 minutes)."),
]
SlurmArraySizeOption = Annotated[
    int | None, typer.Option("--slurm-array-size", min=1, help="Array tasks running at once (slurm).")
]
SlurmClusterOption = Annotated[
    str | None, typer.Option("--slurm-cluster", help="slurm, or local: submitit's local executor (tests).")
]


def slurm_minutes(text: str) -> int:
    """``--slurm-time``: minutes (``90``), ``H:MM:SS``, ``MM:SS`` or ``D-HH:MM:SS``, rounded up to minutes."""
    text = text.strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        raise NqfError(f"--slurm-time takes minutes or [D-]H:MM:SS, got {text!r}")
    days, a, b, c = match.groups()
    if b is None:
        minutes = int(a) * 60 if days else int(a)
    elif c is None:
        minutes = int(a) * 60 + int(b) if days else int(a) + (1 if int(b) else 0)
    else:
        minutes = int(a) * 60 + int(b) + (1 if int(c) else 0)
    minutes += int(days or 0) * 24 * 60
    if minutes < 1:
        raise NqfError(f"--slurm-time must be at least one minute, got {text!r}")
    return minutes


@dataclass(frozen=True)
class ExecutorArgs:
    """The executor options of a command as typer read them (None: not given)."""

    executor: str
    jobs: int | None
    address: str | None
    slurm_partition: str | None
    slurm_time: str | None
    slurm_array_size: int | None
    slurm_cluster: str | None

    def checked(self) -> dict[str, Any]:
        """The executor's arguments, ``executor``, ``jobs``, ``address`` and ``slurm``
        (``nqf.executors.SlurmOptions`` for slurm, else None), as ``nqf.executors.make_executor``
        takes them; NqfError (one line) for an unknown executor, an option that does not fit it
        (``--address`` but for ray, or empty; ``--slurm-*`` but for slurm; ``--jobs`` for slurm or
        a Ray cluster given by address, whose CPUs decide), more ``--jobs`` than this machine runs
        well, an engine that is not installed or a Ray cluster that does not answer."""
        from nqf.executors import EXECUTORS, SlurmOptions, check_available  # imports no engine

        executor, jobs, address = self.executor, self.jobs, self.address
        if executor not in EXECUTORS:
            raise NqfError(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
        if address is not None and executor != "ray":
            raise NqfError(f"--address applies to --executor ray, not {executor}")
        if address is not None and not address.strip():
            raise NqfError("--address is empty; give host:port of the Ray cluster")
        slurm_given = {
            "--slurm-partition": self.slurm_partition,
            "--slurm-time": self.slurm_time,
            "--slurm-array-size": self.slurm_array_size,
            "--slurm-cluster": self.slurm_cluster,
        }
        for option, value in slurm_given.items():
            if value is not None and executor != "slurm":
                raise NqfError(f"{option} applies to --executor slurm, not {executor}")
        cluster = address or os.environ.get("RAY_ADDRESS")  # a Ray cluster given by address
        if jobs is not None and executor == "slurm":
            raise NqfError("--jobs does not apply to --executor slurm; --slurm-array-size limits the runs at once")
        if jobs is not None and executor == "ray" and cluster:
            raise NqfError("--jobs does not apply to a Ray cluster given by address: its CPUs decide")
        if jobs is not None:
            check_jobs(jobs)  # worker processes (or a local Ray's CPUs) on this machine: a few per core at most
        slurm = None
        if executor == "slurm":
            slurm = SlurmOptions(
                partition=self.slurm_partition,
                time_min=60 if self.slurm_time is None else slurm_minutes(self.slurm_time),
                array_size=self.slurm_array_size,
                cluster=self.slurm_cluster or "slurm",
                poll_s=0.5 if self.slurm_cluster == "local" else 2.0,
            )
        check_available(executor, slurm)  # Ray, or submitit and sbatch: before anything is made
        if executor == "ray" and cluster:
            from nqf.executors.ray_engine import check_ray_address  # seconds, not Ray's minutes of retries

            check_ray_address(cluster)
        return {"executor": executor, "jobs": jobs or 1, "address": address, "slurm": slurm}
