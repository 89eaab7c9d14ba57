"""Progress of the library's long computations, for whoever shows it: the library reports
through a context-local callback and never prints; the command line draws a bar from it.

``report(stage, done, total)`` is a no-op unless a caller installed a callback with
:func:`progress_to` (``total`` may grow as the work discovers more of itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Reporter = Callable[[str, int, int], None]
_REPORTER: ContextVar[Reporter | None] = ContextVar("nqf_progress", default=None)


def report(stage: str, done: int, total: int) -> None:
    """Tell the installed callback (if any) that ``done`` of ``total`` steps of ``stage`` are done."""
    reporter = _REPORTER.get()
    if reporter is not None:
        reporter(stage, done, total)


@contextmanager
def progress_to(callback: Reporter) -> Iterator[None]:
    """Send the library's progress reports to ``callback(stage, done, total)`` inside the block."""
    token = _REPORTER.set(callback)
    try:
        yield
    finally:
        _REPORTER.reset(token)
