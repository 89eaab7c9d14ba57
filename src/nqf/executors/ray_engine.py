"""Ray: a cluster at ``address`` (or ``RAY_ADDRESS``), else a local Ray started for the run.

The local Ray binds to 127.0.0.1 only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read by Ray
when it is imported, and ``_node_ip_address``), has no dashboard and ``jobs`` CPUs, and is
shut down by :meth:`RayExecutor.close`. A cluster given by address is left alone as it is
(this process only connects and disconnects).

Each task is one Ray task (``num_cpus=1``) running :func:`nqf.executors.base.call_task`, so an
exception in ``fn`` comes back as a value and is never retried, while a worker process that
dies is retried by Ray itself (``max_retries=retries``). Ray is imported only here, when
this executor is made.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from nqf.core.errors import NqfError, install_hint

from .base import Executor, Outcome, Task, call_task, checked_counts, died, error_line, outcome_of

LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise NqfError(f"the ray executor needs Ray: {install_hint('ray')}") from None
    return ray


PROBE_TIMEOUT_S = 5.0


def check_ray_address(address: str) -> None:
    """NqfError (one line, within ``PROBE_TIMEOUT_S``) unless ``address`` (HOST:PORT, or
    ray://HOST:PORT) accepts a TCP connection: ``ray.init`` would otherwise retry an address
    where nothing listens for minutes. ``auto`` (Ray finds its own cluster) is left to Ray."""
    import socket

    text = address.strip()
    if text == "auto":
        return
    bare = text.removeprefix("ray://")
    host, sep, port_text = bare.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise NqfError(f"--address {address!r}: give HOST:PORT of the Ray cluster (e.g. 127.0.0.1:6379)")
    try:
        with socket.create_connection((host, int(port_text)), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise NqfError(
            f"cannot connect to Ray at {address}: nothing answers at {host}:{port_text} ({reason})"
        ) from None


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """The SIGINT/SIGTERM handlers put back afterwards (``ray.init`` replaces SIGTERM's with a
    ``sys.exit``); only the main thread has handlers to keep."""
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


class RayExecutor(Executor):
    """Tasks as Ray tasks; see the module docstring."""

    name = "ray"

    def __init__(self, jobs: int = 1, address: str | None = None, retries: int = 2):
        jobs, self.retries = checked_counts(jobs, retries)
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        if self.address is not None:
            check_ray_address(self.address)  # in seconds, before Ray is imported
        if self.address is None:
            os.environ[LOOPBACK_ONLY] = "0"  # before Ray is imported: it reads it then
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray = self._ray = _import_ray()
        self._connected = False
        with _signal_handlers_kept():
            if not ray.is_initialized():
                self._init(ray, jobs)
                self._connected = True
        # call_task is module-level: Ray sends it by reference
        self._remote = ray.remote(num_cpus=1, max_retries=self.retries, retry_exceptions=False)(call_task)
        self._pending: list = []

    def _init(self, ray: Any, jobs: int) -> None:
        quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
        if self.address is not None:
            try:
                ray.init(address=self.address, **quiet)
            except Exception as err:  # ConnectionError, a timeout, a version mismatch
                raise NqfError(f"cannot connect to Ray at {self.address}: {error_line(err)}") from None
            return
        constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
        if constants is not None and getattr(constants, "ENABLE_RAY_CLUSTER", False):
            constants.ENABLE_RAY_CLUSTER = False  # Ray was imported before the variable was set
        ray.init(
            address="local",  # a new Ray, never one found in /tmp/ray
            num_cpus=jobs,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            **quiet,
        )

    def run(self, tasks: Sequence[Task]) -> Iterator[Outcome]:
        ray = self._ray
        refs = {self._remote.remote(task.fn, task.args): task for task in tasks}
        pending = self._pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                if pending:  # and every other one finished by now
                    more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                    ready += more
                self._pending = pending
                for ref in ready:
                    yield self._outcome(refs.pop(ref), ref)
        except BaseException:  # Ctrl-C, or the caller closed the iterator: stop the work in flight
            self._cancel()
            raise
        self._pending = []

    def _outcome(self, task: Task, ref: Any) -> Outcome:
        exceptions = self._ray.exceptions
        lost = (
            exceptions.WorkerCrashedError,
            exceptions.NodeDiedError,
            exceptions.ObjectLostError,
            exceptions.OutOfMemoryError,
            exceptions.LocalRayletDiedError,
        )
        try:
            answer = self._ray.get(ref)
        except lost:
            return died(task.tag, self.retries + 1)
        except exceptions.RayError as err:  # e.g. the task could not be unpickled on the worker
            cause = getattr(err, "cause", None)
            answer = (False, error_line(cause if isinstance(cause, BaseException) else err))
        return outcome_of(task, answer)

    def _cancel(self) -> None:
        for ref in self._pending:
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # already finished, or Ray is gone
                pass
        self._pending = []

    def close(self) -> None:
        if self._pending:
            self._cancel()
        if self._connected:
            self._connected = False
            with _signal_handlers_kept():
                self._ray.shutdown()
