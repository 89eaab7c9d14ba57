"""One interface for every engine that runs many independent tasks.

A :class:`Task` is ``fn(*args)`` run in a worker: ``fn`` is a module-level function (sent
by reference, so the worker imports nqf) and ``args`` are picklable. The task writes its own
result where it belongs (the results store, on a path every worker can reach) and returns
something small. An executor runs a batch of tasks and yields one :class:`Outcome` per task,
in the order they finish:

- ``fn`` raised: ``error`` holds one line ``Type: message``; the other tasks go on;
- the worker died (killed, out of memory, node lost): the task is retried up to
  ``retries`` times, then reported with ``worker_died=True`` (``error`` then starts with
  :data:`WORKER_DIED`).

``attempts`` counts the runs of a task the executor knows of (Ray retries on its own and
reports 1 unless the task died on every attempt).

Another engine is one small subclass of :class:`Executor` (see ``local``, ``ray_engine``,
``slurm``). Executors never decide what is computed or stored; that is the caller's.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from nqf.core.errors import NqfError


@dataclass(frozen=True)
class Task:
    """``fn(*args)`` in a worker; ``tag`` identifies the task to the driver and is not sent."""

    fn: Callable[..., Any]
    args: tuple = ()
    tag: Any = None


@dataclass(frozen=True)
class Outcome:
    """What became of one task: its return value, or one error line."""

    tag: Any
    value: Any = None
    error: str | None = None
    worker_died: bool = False
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None


def error_line(err: BaseException) -> str:
    """``Type: message`` on one line (the form every outcome and failed: line uses)."""
    message = " ".join(str(err).split())
    return f"{type(err).__name__}: {message}" if message else type(err).__name__


WORKER_DIED = "a worker process died (killed or out of memory)"


def died(tag: Any, attempts: int) -> Outcome:
    """The outcome of a task whose worker died on every one of its ``attempts``."""
    return Outcome(tag, error=f"{WORKER_DIED}; {attempts} attempt(s)", worker_died=True, attempts=attempts)


def checked_counts(jobs: int, retries: int) -> tuple[int, int]:
    """``(jobs, retries)`` as ints; NqfError unless jobs >= 1 and retries >= 0."""
    if int(jobs) < 1:
        raise NqfError(f"jobs must be at least 1, got {jobs}")
    if int(retries) < 0:
        raise NqfError(f"retries must be at least 0, got {retries}")
    return int(jobs), int(retries)


def call_task(fn: Callable[..., Any], args: tuple) -> tuple[bool, Any]:
    """``(True, fn(*args))``, or ``(False, error line)`` when ``fn`` raised: what a worker sends back.

    Every engine runs its tasks through this, so an exception in ``fn`` is an outcome, never
    a retry, and only a worker that dies is retried.
    """
    try:
        return True, fn(*args)
    except Exception as err:  # reported as the task's outcome; the other tasks go on
        return False, error_line(err)


def outcome_of(task: Task, answer: tuple[bool, Any], attempts: int = 1) -> Outcome:
    """The :class:`Outcome` for what :func:`call_task` returned."""
    ok, value = answer
    if ok:
        return Outcome(task.tag, value=value, attempts=attempts)
    return Outcome(task.tag, error=value, attempts=attempts)


class Executor(abc.ABC):
    """Runs tasks; subclasses implement :meth:`run`. Use as a context manager."""

    name: ClassVar[str]

    @abc.abstractmethod
    def run(self, tasks: Sequence[Task]) -> Iterator[Outcome]:
        """Run every task and yield each outcome as it finishes (any order).

        Closing the iterator early, or an exception in the driver (Ctrl-C), stops the work in
        flight; a task stopped that way is simply not reported. The executor stays usable:
        ``run`` may be called again (``nqf reproduce`` makes two passes).
        """

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release workers and connections (idempotent)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
