"""The executors (local, Ray, Slurm through submitit's local executor) run the same tasks alike.

Every test is bounded in time (pytest-timeout). Ray runs on loopback only: the session's
``ray_cluster`` (tests/conftest.py) and the local Ray an executor starts itself; a test
checks that every listening TCP socket of their processes is on 127.0.0.1 (or ::1).
Nothing here sends traffic to any other address.

The task functions are module-level (sent by reference), so the workers import this module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from nqf.core.errors import NqfError
from nqf.executors import WORKER_DIED, SlurmOptions, Task, make_executor
from nqf.store.results import ResultsStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # Ray and Slurm's local executor start processes

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def square(x: int) -> int:
    return x * x


def fail(x: int) -> int:
    raise ValueError(f"point {x} fails on purpose\nand says more")


def die_once(marker: str, x: int) -> int:
    """Kill this worker process on the first attempt (the marker file says which attempt this is)."""
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def die_always(x: int) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return x


TASKS = [Task(square, (i,), tag=f"sq{i}") for i in range(5)] + [Task(fail, (7,), tag="fail")]
EXPECTED = {f"sq{i}": (True, i * i) for i in range(5)}
EXPECTED["fail"] = (False, "ValueError: point 7 fails on purpose and says more")


def _results(executor, tasks) -> dict:
    with executor:
        outcomes = list(executor.run(tasks))
    assert len(outcomes) == len(tasks) and {o.tag for o in outcomes} == {t.tag for t in tasks}
    return {o.tag: (o.ok, o.value if o.ok else o.error) for o in outcomes}


def _slurm(tmp_path: Path, monkeypatch) -> object:
    pytest.importorskip("submitit")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.chdir(ROOT)
    options = SlurmOptions(cluster="local", time_min=5, poll_s=0.2)
    return make_executor("slurm", slurm=options, folder=tmp_path / "slurm", retries=2)


def _ray_processes(cluster: dict) -> list[psutil.Process]:
    """The processes of the fixture's cluster: `ray start` and its descendants, and anything
    naming the cluster's own temp folder."""
    head = psutil.Process(cluster["process"].pid)
    found = {p.pid: p for p in [head, *head.children(recursive=True)]}
    for proc in psutil.process_iter(["cmdline"]):
        if cluster["temp_dir"] in " ".join(proc.info["cmdline"] or []):
            found.setdefault(proc.pid, proc)
    return list(found.values())


def _listening(processes: list[psutil.Process]) -> list[tuple[str, str, int]]:
    found = []
    for proc in processes:
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((proc.name(), conn.laddr.ip, conn.laddr.port))
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return found


@pytest.mark.parametrize("jobs", [1, 2])
def test_local_runs_every_task_and_reports_a_raising_one(jobs):
    assert _results(make_executor("local", jobs=jobs), TASKS) == EXPECTED


def test_local_pool_retries_a_dead_worker_then_reports_it(tmp_path):
    marker = str(tmp_path / "marker")
    tasks = [*TASKS, Task(die_once, (marker, 3), tag="once"), Task(die_always, (1,), tag="always")]
    with make_executor("local", jobs=2, retries=2) as executor:
        outcomes = {o.tag: o for o in executor.run(tasks)}
        again = {o.tag: o.value for o in executor.run(TASKS[:2])}  # the pool is made anew and usable
    assert {t: (o.ok, o.value if o.ok else o.error) for t, o in outcomes.items() if t in EXPECTED} == EXPECTED
    assert outcomes["once"].ok and outcomes["once"].value == 9 and outcomes["once"].attempts == 2
    always = outcomes["always"]
    assert always.worker_died and always.attempts == 3 and always.error.startswith(WORKER_DIED)
    assert all(outcomes[t].attempts == 1 for t in EXPECTED)  # the dead worker's neighbours count nothing
    assert again == {"sq0": 0, "sq1": 1}


def test_ray_cluster_listens_on_loopback_only(ray_cluster):
    from tests.conftest import RAY_CLUSTERS

    listening = _listening(_ray_processes(RAY_CLUSTERS[ray_cluster]))
    assert listening, "found no listening socket of the Ray cluster"
    assert {ip for _, ip, _ in listening} <= LOOPBACK, listening


def test_ray_at_an_address_gives_the_same_outcomes_and_retries_a_dead_worker(ray_cluster, tmp_path):
    marker = str(tmp_path / "marker")
    tasks = [*TASKS, Task(die_once, (marker, 3), tag="once"), Task(die_always, (1,), tag="always")]
    executor = make_executor("ray", address=ray_cluster, retries=1)
    with executor:
        outcomes = {o.tag: o for o in executor.run(tasks)}
        driver = _listening([psutil.Process()])
    assert {t: (o.ok, o.value if o.ok else o.error) for t, o in outcomes.items() if t in EXPECTED} == EXPECTED
    assert outcomes["once"].ok and outcomes["once"].value == 9 and os.path.exists(marker)
    assert outcomes["always"].worker_died and outcomes["always"].attempts == 2
    assert {ip for _, ip, _ in driver} <= LOOPBACK, driver  # this process, as a Ray driver


def test_ray_started_by_the_executor_is_local_loopback_and_shut_down(monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    executor = make_executor("ray", jobs=2)
    with executor:
        assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
        started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        results = {o.tag: (o.ok, o.value if o.ok else o.error) for o in executor.run(TASKS)}
        listening = _listening([psutil.Process(), *started])
    assert results == EXPECTED
    assert started and listening and {ip for _, ip, _ in listening} <= LOOPBACK, listening
    _, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, [p.pid for p in alive]  # close() shut the local Ray down


def test_slurm_local_gives_the_same_outcomes_and_resubmits_a_dead_worker(tmp_path, monkeypatch):
    marker = str(tmp_path / "marker")
    tasks = [*TASKS, Task(die_once, (marker, 3), tag="once")]
    outcomes = _results(_slurm(tmp_path, monkeypatch), tasks)
    assert {t: r for t, r in outcomes.items() if t in EXPECTED} == EXPECTED
    assert outcomes["once"] == (True, 9)


def test_bad_executor_arguments_are_one_line_errors(tmp_path):
    cases = [
        (dict(name="dask"), "unknown executor 'dask'; choose from local, ray, slurm"),
        (dict(name="local", address="127.0.0.1:1"), "an address applies to the ray executor, not to local"),
        (dict(name="ray", slurm=SlurmOptions(cluster="local")), "Slurm options apply to the slurm executor"),
        (dict(name="local", jobs=0), "jobs must be at least 1"),
        (dict(name="slurm", slurm=SlurmOptions(cluster="local")), "needs a folder"),
    ]
    for kwargs, message in cases:
        with pytest.raises(NqfError, match=message):
            make_executor(kwargs.pop("name"), **kwargs)
    with pytest.raises(NqfError, match="time limit must be at least 1 minute"):
        SlurmOptions(time_min=0)


def _reproduce(args: list[str], out: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    code = "import sys; from tests._toy_experiments import register; register(); from nqf.cli import main; main(sys.argv[1:])"  # noqa: E501
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        **(env_extra or {}),
    }
    return subprocess.run(
        [sys.executable, "-c", code, "reproduce", "--out", str(out), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _stored(out: Path) -> dict:
    return {(doc["experiment"], doc["run"]): doc["record"] for doc in ResultsStore(out).scan()}


def _summary(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(("T1 ", "T2 "))]


def test_reproduce_on_ray_and_slurm_stores_what_local_stores(ray_cluster, tmp_path):
    local = _reproduce(["--set", "T1.fail_run=2"], tmp_path / "local")
    assert local.returncode == 1 and "failed: T1/r2: RuntimeError: toy run T1/r2 fails on purpose" in local.stderr
    start = time.monotonic()
    on_ray = _reproduce(["--set", "T1.fail_run=2", "--executor", "ray", "--address", ray_cluster], tmp_path / "ray")
    seconds = time.monotonic() - start
    assert on_ray.returncode == 1, on_ray.stderr[-3000:]
    assert "failed: T1/r2: RuntimeError: toy run T1/r2 fails on purpose" in on_ray.stderr
    assert _stored(tmp_path / "ray") == _stored(tmp_path / "local") and len(_stored(tmp_path / "local")) == 5
    assert _summary(on_ray.stdout) == _summary(local.stdout) and len(_summary(local.stdout)) == 2
    slurm = _reproduce(["--executor", "slurm", "--slurm-cluster", "local", "--only", "T2"], tmp_path / "slurm")
    assert slurm.returncode == 0, slurm.stderr[-3000:]
    assert _stored(tmp_path / "slurm") == {k: v for k, v in _stored(tmp_path / "local").items() if k[0] == "T2"}
    print(f"reproduce on Ray: {seconds:.1f} s")


def test_reproduce_refuses_options_that_do_not_fit_the_executor(tmp_path):
    cases = [
        (["--address", "127.0.0.1:1"], "error: --address applies to --executor ray, not local\n"),
        (["--executor", "slurm", "--jobs", "2"], "error: --jobs does not apply to --executor slurm;"),
        (["--executor", "ray", "--slurm-time", "5"], "error: --slurm-time applies to --executor slurm, not ray\n"),
        (["--executor", "mpi"], "error: --executor must be one of local, ray, slurm, got 'mpi'\n"),
        (["--executor", "slurm"], "error: the slurm executor found no Slurm here (no sbatch on PATH)\n"),
    ]
    for args, expected in cases:
        if "found no Slurm" in expected and any(Path(p, "sbatch").exists() for p in os.environ["PATH"].split(":")):
            continue
        done = _reproduce(args, tmp_path / "out")
        assert done.returncode == 2 and done.stderr.startswith(expected) and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "out").exists()


INTERRUPTED_CLOSE = """
import os, sys, weakref
from nqf.executors import Task, make_executor
from tests.test_executors import square

def interrupt_the_close(executor):
    manager = weakref.ref(executor._pool._executor_manager_thread)  # the test keeps no queue alive

    def interrupted_join(timeout=None):  # the signal lands while close() waits for the pool's shutdown
        del manager().join  # once: the next wait is the thread's own
        raise KeyboardInterrupt

    manager().join = interrupted_join
    executor.close()

executor = make_executor("local", jobs=2)
assert sorted(o.value for o in executor.run([Task(square, (i,), tag=str(i)) for i in range(3)])) == [0, 1, 4]
try:
    interrupt_the_close(executor)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.stderr.flush()
    os._exit(130)  # as the console script leaves after Ctrl-C: no interpreter shutdown
"""


def test_a_signal_during_the_pools_shutdown_still_finishes_it():
    """A SIGTERM that lands while ``close`` waits for the pool (every run already stored) once
    left the pool's queues alive: the resource tracker then printed "5 leaked semaphore objects"
    after nqf's ``interrupted:`` line (CI of 2026-12-06). The stop is finished before re-raising."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_CLOSE], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    assert done.returncode == 130 and done.stdout == "interrupted\n", done.stderr[-2000:]
    assert "leaked" not in done.stderr, done.stderr[-2000:]
