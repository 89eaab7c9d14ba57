"""``nqf reproduce`` killed at random moments, and run twice at once, through the real console script.

Each scenario runs ``nqf reproduce --quick --only E1,E6`` (E6 cut to two optimizers, so
there are 12 runs and an uninterrupted run takes about half a minute here) and checks:

* SIGINT and SIGTERM print one ``interrupted:`` line (no traceback) whose count matches
  the store, and exit 130 / 143; SIGKILL needs no cooperation at all.
* No process of the run is left afterwards: neither the process tree seen just before
  the signal (workers, the multiprocessing resource tracker) nor any process carrying the
  scenario's environment tag or naming its output folder.
* Records stored before a kill keep their bytes, inode and mtime through every later
  attempt; the final attempt reports exactly the missing runs as computed.
* The final store holds the same records, byte for byte, as an uninterrupted run, and
  the report's summary lines (claims and verdict counts) are the same. (report.html itself
  is compared in ``test_reproduce.py`` on toy runs; here it is the store that must match:
  the report is a function of the records.)

The kill moments are seeded random delays after the attempt has written its plan
(``manifest.json``: workers starting, first compilations) or stored its first run; the
signals come in two orders, one per ``--jobs``.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # kills the real console script

NQF = Path(sys.executable).with_name("nqf")
ARGS = ["reproduce", "--quick", "--only", "E1,E6", "--set", "E6.optimizers=gd,momentum"]
TOTAL = 12
SUMMARY = re.compile(r"^(E\d)\s+.*: (\d+) runs \(([^)]*)\); (.*)$")
INTERRUPTED = re.compile(r"^interrupted: (\d+) of (\d+) runs are stored in (.+); run the same command again to resume$")


def _start(out: Path, jobs: int, tag: str) -> tuple[subprocess.Popen, Path]:
    """Start one attempt; its stdout/stderr go to files (no pipe can fill up and stall it)."""
    log = out.parent / f"{tag}"
    env = {**os.environ, "NQF_KILL_TEST_TAG": tag}
    with open(f"{log}.out", "w") as stdout, open(f"{log}.err", "w") as stderr:
        process = subprocess.Popen(
            [str(NQF), *ARGS, "--out", str(out), "--jobs", str(jobs)],
            cwd=out.parent,
            env=env,
            stdout=stdout,
            stderr=stderr,
        )
    return process, log


def _records(out: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every record file of the store: relative path -> (inode, mtime_ns, bytes)."""
    found = {}
    for path in sorted((out / "runs").glob("*/*.json")):
        info = path.stat()
        found[str(path.relative_to(out))] = (info.st_ino, info.st_mtime_ns, path.read_bytes())
    return found


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_mtime_ns


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """The processes still running (zombies are dead: only their exit status waits to be read)."""
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


def _tagged(tag: str, out: Path) -> list[psutil.Process]:
    """Running processes that belong to the attempt: its environment tag, or its folder on the command line."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "environ", "status"]):
        if process.pid == os.getpid() or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        environ = process.info["environ"] or {}
        cmdline = " ".join(process.info["cmdline"] or [])
        if environ.get("NQF_KILL_TEST_TAG") == tag or str(out) in cmdline:
            found.append(process)
    return found


def _assert_nothing_left(tree: list[psutil.Process], tag: str, out: Path) -> None:
    deadline = time.monotonic() + 20
    while (_alive(tree) or _tagged(tag, out)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _alive(tree) + _tagged(tag, out)
    names = [" ".join(p.cmdline())[:200] for p in left]
    for process in left:  # do not leave them running when the test fails
        process.kill()
    assert not left, names


def _summary(stdout: str) -> dict[str, tuple[dict[str, int], str]]:
    """Summary lines as {experiment: ({state: count}, claims text)}."""
    found = {}
    for line in stdout.splitlines():
        match = SUMMARY.match(line)
        if match:
            states = {state: int(count) for count, state in (part.split() for part in match[3].split(", "))}
            found[match[1]] = (states, match[4])
    return found


def _finish(out: Path, jobs: int, tag: str) -> tuple[str, str]:
    process, log = _start(out, jobs, tag)
    try:
        process.wait(timeout=300)
    finally:
        process.kill()
    stdout, stderr = Path(f"{log}.out").read_text(), Path(f"{log}.err").read_text()
    assert process.returncode == 0, stderr[-3000:]
    return stdout, stderr


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict, dict]:
    """An uninterrupted run: its record files and summary."""
    out = tmp_path_factory.mktemp("reference") / "out"
    stdout, _ = _finish(out, 1, "reference")
    records = {name: data for name, (_, _, data) in _records(out).items()}
    assert len(records) == TOTAL
    return records, _summary(stdout)


def _kill_at_random_moment(out: Path, jobs: int, signum: int, after: str, delay: float, tag: str) -> dict:
    """One attempt, signalled ``delay`` seconds after it wrote its plan (``after="plan"``) or
    stored its first run (``after="record"``); checks the aftermath and returns the store's records."""
    manifest = out / "manifest.json"
    before = _stamp(manifest)
    stored_before = len(_records(out)) if out.exists() else 0
    process, log = _start(out, jobs, tag)
    deadline = time.monotonic() + 240
    try:
        while _stamp(manifest) in (before, None) or (after == "record" and len(_records(out)) == stored_before):
            assert process.poll() is None, Path(f"{log}.err").read_text()[-3000:]
            assert time.monotonic() < deadline, f"the attempt never reached its {after}"
            time.sleep(0.02)
        time.sleep(delay)
        assert process.poll() is None, "the attempt finished before the signal; shorten the delays"
        tree = psutil.Process(process.pid).children(recursive=True)
        if jobs > 1 and len(_records(out)) < TOTAL:  # work outstanding: the pool's workers are up
            # (once every run is stored the pool is shut down and the driver writes the report:
            # with faster runs a moment up to 3 s after a record can fall there)
            assert len(tree) >= 2, "no worker processes at the moment of the signal"
        process.send_signal(signum)
        returncode = process.wait(timeout=120)
    finally:
        process.kill()
    _assert_nothing_left(tree, tag, out)
    stderr = Path(f"{log}.err").read_text()
    records = _records(out)
    if signum == signal.SIGKILL:
        assert returncode == -signal.SIGKILL
    else:
        assert returncode == 128 + signum, stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        lines = [line for line in stderr.splitlines() if line.startswith("interrupted:")]
        assert len(lines) == 1 and lines[0] == stderr.rstrip("\n").splitlines()[-1], stderr[-3000:]
        match = INTERRUPTED.match(lines[0])
        assert match and (int(match[1]), int(match[2]), match[3]) == (len(records), TOTAL, str(out)), lines[0]
    return records


@pytest.mark.parametrize("jobs", [1, 2])
def test_reproduce_killed_at_random_moments_resumes_to_the_same_results(tmp_path, reference, jobs):
    rng = random.Random(20261204 + jobs)
    out = tmp_path / "out"
    kept: dict = {}
    # The first moment falls in the start of the computation (workers starting, first compilations),
    # the later ones after the attempt has stored a run, so that there are records to keep.
    moments = [("plan", rng.uniform(0.5, 4.0)), ("record", rng.uniform(0.0, 3.0)), ("record", rng.uniform(0.0, 3.0))]
    # With --jobs 2 SIGKILL comes first, while the workers start: before they can arm PR_SET_PDEATHSIG.
    signals = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
    if jobs > 1:
        signals = signals[2:] + signals[:2]
    for number, (signum, (after, delay)) in enumerate(zip(signals, moments, strict=True)):
        records = _kill_at_random_moment(out, jobs, signum, after, delay, f"kill{jobs}-{number}-{signum.name}")
        print(f"jobs {jobs}: {signum.name} {delay:.1f} s after its {after}; {len(records)} of {TOTAL} runs stored")
        for name, stamp in kept.items():  # stored before an earlier kill: untouched since
            assert records[name] == stamp, f"{name} was rewritten after {signum.name}"
        kept = records

    stdout, stderr = _finish(out, jobs, f"final{jobs}")
    final = _records(out)
    for name, stamp in kept.items():
        assert final[name] == stamp, f"{name} was rewritten by the resuming run"
    summary, (_, reference_summary) = _summary(stdout), reference
    for experiment, (states, claims) in summary.items():
        stored = sum(1 for name in kept if name.startswith(f"runs/{experiment}/"))
        total = sum(states.values())
        assert states.get("stored", 0) == stored and states.get("computed", 0) == total - stored, stdout
        assert claims == reference_summary[experiment][1]  # same claims, same verdicts
    assert set(summary) == {"E1", "E6"} and "problem:" not in stdout
    assert {name: data for name, (_, _, data) in final.items()} == reference[0]  # byte for byte
    assert not list(out.rglob(".*.lock"))  # every claim, stale ones of killed holders included, was released


def test_two_concurrent_runs_compute_each_run_once_in_total(tmp_path, reference):
    out = tmp_path / "out"
    out.mkdir()
    started = [_start(out, jobs, f"concurrent{jobs}") for jobs in (1, 2)]
    outputs = []
    for process, log in started:
        try:
            process.wait(timeout=300)
        finally:
            process.kill()
        stdout = Path(f"{log}.out").read_text()
        assert process.returncode == 0, Path(f"{log}.err").read_text()[-3000:]
        outputs.append(_summary(stdout))
    computed = [sum(states.get("computed", 0) for states, _ in summary.values()) for summary in outputs]
    for summary in outputs:
        assert {e: sum(states.values()) for e, (states, _) in summary.items()} == {"E1": 3, "E6": 9}
        assert set(state for states, _ in summary.values() for state in states) <= {"stored", "computed"}
        assert {e: claims for e, (_, claims) in summary.items()} == {e: c for e, (_, c) in reference[1].items()}
    assert sum(computed) == TOTAL, computed
    assert {name: data for name, (_, _, data) in _records(out).items()} == reference[0]
    print(f"runs computed by the two processes: {computed}")
