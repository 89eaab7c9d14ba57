"""What ``reproduce`` tells its caller: progress events, the outcome, and :class:`Interrupted`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nqf_paper._base import ExperimentOutcome


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


def ignore(event: ProgressEvent) -> None:
    """The progress callback that does nothing."""
