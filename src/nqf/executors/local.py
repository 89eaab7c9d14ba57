"""This machine: in-process (``jobs=1``) or a pool of ``jobs`` spawned worker processes.

Workers are spawned, not forked (JAX is multithreaded and must not be forked), ignore
Ctrl-C (the driver handles it) and die with the driver, however it dies (see
:func:`_worker_init`). A worker that dies takes the pool with it (``ProcessPoolExecutor``
cannot lose one process and go on): the pool is then made anew and every unfinished task
submitted again. Only the tasks that were running in the dead worker count an attempt
(each task notes its worker's pid in a file as it starts; the workers the pool stopped
itself exit with SIGTERM); when that cannot be told, every task that had started counts one.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import itertools
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .base import Executor, Outcome, Task, call_task, checked_counts, died, error_line, outcome_of

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _worker_init(parent: int) -> None:
    """Initializer of the pool's workers: leave Ctrl-C to the driver, and die with it.

    On Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` has the kernel kill the worker when the
    driver dies, however it dies; elsewhere (or if prctl fails) a daemon thread polls the
    parent pid. A driver that died before this ran is caught by the first ``getppid``.
    Once no worker is left, the multiprocessing resource tracker sees its pipe close and exits.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), name="nqf-parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    """Exit the worker as soon as its parent is gone (the fallback of :func:`_worker_init`)."""
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)


def _stop_pool(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Stop the workers now (tasks in flight are lost, their flocks freed by the kernel) and wait for them.

    SIGTERM first, SIGKILL for any worker still there after 5 s. ``ProcessPoolExecutor``
    has no public way to stop busy workers before Python 3.14 (``terminate_workers``),
    hence its ``_processes`` table.
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for stop in ("terminate", "kill"):
        for process in processes:
            try:
                if process.is_alive():
                    getattr(process, stop)()
            except (OSError, ValueError):  # already gone or closed
                pass
        deadline = time.monotonic() + 5
        for process in processes:
            try:
                process.join(max(0.0, deadline - time.monotonic()))
            except (AssertionError, ValueError):
                pass
    pool.shutdown(wait=True, cancel_futures=True)


def _shut_down(pool: concurrent.futures.ProcessPoolExecutor, cancel_futures: bool = False) -> None:
    """``pool.shutdown(wait=True, cancel_futures=...)``, finished even when a signal (Ctrl-C, SIGTERM as an interrupt)
    lands inside the wait; the interrupt is raised afterwards, without the frames it came through.

    Why: an unfinished shutdown keeps the pool's queues, and so does the interrupted
    ``Thread.join`` frame in the exception's traceback (its ``self`` is the pool's manager
    thread). The CLI leaves with ``os._exit`` while it holds that exception, so the queues'
    semaphores were never released and the resource tracker printed "5 leaked semaphore
    objects" after nqf's ``interrupted:`` line.
    """
    interrupt: BaseException | None = None
    try:
        pool.shutdown(wait=True, cancel_futures=cancel_futures)
    except BaseException as err:
        _stop_pool(pool)
        interrupt = err.with_traceback(None)
    if interrupt is not None:
        raise interrupt


def _pool_call(marks: str, token: int, fn: Callable[..., Any], args: tuple) -> tuple[bool, Any]:
    """In a worker: note this process's pid under ``marks/token``, then run the task."""
    try:
        fd = os.open(os.path.join(marks, str(token)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, str(os.getpid()).encode("ascii"))
        finally:
            os.close(fd)
    except OSError:  # without the note the driver blames every started task; the task still runs
        pass
    return call_task(fn, args)


class LocalExecutor(Executor):
    """``jobs=1``: each task runs in this process, one after another (a task that kills its
    process kills the driver; nothing to retry). ``jobs > 1``: a spawned process pool."""

    name = "local"

    def __init__(self, jobs: int = 1, retries: int = 2):
        self.jobs, self.retries = checked_counts(jobs, retries)
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._marks: str | None = None
        self._tokens = itertools.count()
        self._busy = False  # tasks are in flight in the pool

    def run(self, tasks: Sequence[Task]) -> Iterator[Outcome]:
        tasks = list(tasks)
        if self.jobs == 1:
            for task in tasks:
                yield outcome_of(task, call_task(task.fn, task.args))
            return
        yield from self._run_pool(tasks)

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._marks is None:
            self._marks = tempfile.mkdtemp(prefix="nqf-workers-")
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init,
                initargs=(os.getpid(),),
            )
        return self._pool

    def _run_pool(self, tasks: list[Task]) -> Iterator[Outcome]:
        deaths = [0] * len(tasks)  # attempts that ended with the worker dead
        queue = deque(range(len(tasks)))
        running: dict[concurrent.futures.Future, tuple[int, int]] = {}  # future -> (task index, token)
        barren = 0  # pool breaks in a row that no started task explains
        try:
            while queue or running:
                pool = self._new_pool()
                broken = self._submit(pool, tasks, queue, running)
                processes = dict(getattr(pool, "_processes", None) or {})
                if not broken:
                    self._busy = True
                    done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                    for future in done:
                        if isinstance(future.exception(), BrokenProcessPool):
                            broken = True
                            continue
                        index, token = running.pop(future)
                        self._unmark(token)
                        barren = 0
                        yield outcome_of(tasks[index], self._answer(future), deaths[index] + 1)
                if broken:
                    blamed, finished = self._recover(pool, processes, running)
                    for index, answer in finished:
                        yield outcome_of(tasks[index], answer, deaths[index] + 1)
                    barren = 0 if blamed else barren + 1
                    if not blamed and barren > self.retries:  # workers die before running anything
                        blamed = [index for index, _ in running.values()] or list(queue)
                    for index in blamed:
                        deaths[index] += 1
                    for index, token in running.values():  # submitted again, before the rest
                        self._unmark(token)
                        queue.appendleft(index)
                    running.clear()
                    for index in [i for i in queue if deaths[i] > self.retries]:
                        queue.remove(index)
                        yield died(tasks[index].tag, deaths[index])
        except BaseException:  # Ctrl-C, or the caller closed the iterator: stop the work in flight
            if running:
                self._stop()
            raise
        finally:
            self._busy = False

    def _submit(self, pool, tasks: list[Task], queue: deque, running: dict) -> bool:
        """Submit every queued task; True when the pool turned out to be broken."""
        while queue:
            index = queue[0]
            token = next(self._tokens)
            try:
                future = pool.submit(_pool_call, self._marks, token, tasks[index].fn, tasks[index].args)
            except BrokenProcessPool:
                return True
            queue.popleft()
            running[future] = (index, token)
        return False

    @staticmethod
    def _answer(future: concurrent.futures.Future) -> tuple[bool, Any]:
        try:
            return future.result()
        except Exception as err:  # the task or its value could not be sent (pickling)
            return False, error_line(err)

    def _recover(self, pool, processes: dict, running: dict) -> tuple[list[int], list[tuple[int, tuple]]]:
        """After a worker died: collect what finished, find the tasks that were in the dead
        worker, and drop the pool (the next round makes a new one).

        Returns ``(blamed, finished)``: task indices that count a death; ``(index, answer)``
        of tasks that finished all the same. ``running`` keeps the tasks to submit again.
        """
        concurrent.futures.wait(running)
        finished = []
        for future, (index, token) in list(running.items()):
            if not isinstance(future.exception(), BrokenProcessPool):
                del running[future]
                self._unmark(token)
                finished.append((index, self._answer(future)))
        _shut_down(pool, cancel_futures=True)
        self._pool = None
        dead = set()
        for pid, process in processes.items():
            process.join(5)
            if process.exitcode not in (None, 0, -signal.SIGTERM):
                dead.add(pid)
        started = {}
        for index, token in running.values():
            pid = self._pid_of(token)
            if pid is not None:
                started[index] = pid
        blamed = [index for index, pid in started.items() if pid in dead] or list(started)
        return blamed, finished

    def _pid_of(self, token: int) -> int | None:
        try:
            with open(os.path.join(self._marks or "", str(token))) as handle:
                return int(handle.read() or "-1")
        except (OSError, ValueError):
            return None

    def _unmark(self, token: int) -> None:
        try:
            os.unlink(os.path.join(self._marks or "", str(token)))
        except OSError:
            pass

    def _stop(self) -> None:
        if self._pool is not None:
            _stop_pool(self._pool)
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            if self._busy:  # closed while a run was in flight (its iterator not closed)
                self._stop()
            else:
                _shut_down(self._pool)
                self._pool = None
        self._busy = False
        if self._marks is not None:
            shutil.rmtree(self._marks, ignore_errors=True)
            self._marks = None
