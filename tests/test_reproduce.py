"""``nqf reproduce`` / ``nqf report`` on toy experiments: resume, force, interrupt, failures, CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nqf.core.errors import NqfError
from nqf.store.results import ResultsStore
from nqf_paper.reproduce import rebuild_report, reproduce
from tests._toy_experiments import make_registry

pytestmark = pytest.mark.slow  # nqf reproduce, subprocesses

ROOT = Path(__file__).resolve().parents[1]
ALL_RUNS = {f"{e}/r{i}" for e in ("T1", "T2") for i in range(3)}


def _started(markers: Path) -> list[str]:
    if not markers.exists():
        return []
    return [line.split()[1] for line in markers.read_text().splitlines() if line.startswith("start ")]


def _verdicts(outcome):
    return {(o.name, claim.claim): claim.verdict.status for o in outcome.outcomes for claim, _ in o.rows()}


def test_reproduce_resumes_from_the_store_and_force_recomputes(tmp_path, monkeypatch):
    markers = tmp_path / "markers"
    monkeypatch.setenv("NQF_TOY_MARKERS", str(markers))
    events = []
    first = reproduce(tmp_path / "out", experiments=make_registry(), progress=events.append)
    assert (first.computed, first.stored, first.failed, first.problems) == (6, 0, 0, ())
    assert sorted(_started(markers)) == sorted(ALL_RUNS)
    assert [e.stage for e in events if e.experiment == "T1"] == ["plan", "run", "run", "run", "summarise"]
    assert events[-1].done == events[-1].total == 3
    report = first.report.read_bytes()
    assert (
        first.report == tmp_path / "out" / "report.html" and (tmp_path / "out" / "figures" / "T1_curves.pdf").is_file()
    )

    # A worker killed after storing its run but before releasing the claim leaves a lock file
    # that no later claimant meets (the run is stored): the next attempt's plan removes it.
    store = ResultsStore(tmp_path / "out")
    (record,) = [doc for doc in store.scan() if doc["experiment"] == "T1" and doc["run"] == "r0"]
    left = store.path("T1", record["key"]).with_name(f".{record['key']}.lock")
    left.write_text("")
    second = reproduce(tmp_path / "out", experiments=make_registry())
    assert (second.computed, second.stored) == (0, 6) and len(_started(markers)) == 6
    assert not list((tmp_path / "out").rglob(".*.lock"))
    assert second.report.read_bytes() == report

    forced = reproduce(tmp_path / "out", only="t2", force=True, experiments=make_registry())
    assert (forced.computed, forced.stored) == (3, 0) and [o.name for o in forced.outcomes] == ["T2"]
    assert sorted(_started(markers)[6:]) == ["T2/r0", "T2/r1", "T2/r2"]


def test_a_deliberately_wrong_prediction_is_reported_not_confirmed(tmp_path):
    outcome = reproduce(tmp_path, overrides=["T1.wrong_by=0.5"], experiments=make_registry())
    verdicts = _verdicts(outcome)
    assert verdicts[("T1", "the values sum to scale·n(n+1)/2")] == "not confirmed"
    assert verdicts[("T2", "the values sum to scale·n(n+1)/2")] == "confirmed"
    assert verdicts[("T1", "a mode that never switches on")] == "not applicable"
    text = outcome.report.read_text()
    assert text.count('<tr class="refuted">') == 1 and "✗ 1 not confirmed" in text
    squared = reproduce(tmp_path / "sq", overrides=["T2.kind=squared"], experiments=make_registry())
    assert _verdicts(squared)[("T2", "the values sum to scale·n(n+1)/2")] == "not applicable"
    assert "no closed form for the squared toy" in squared.report.read_text()


def test_interrupted_reproduce_recomputes_only_unfinished_runs(tmp_path, monkeypatch):
    out, sleep = tmp_path / "out", "0.4"
    env = {**os.environ, "NQF_TOY_MARKERS": str(tmp_path / "markers-killed")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "tests._toy_experiments", str(out), "--sleep", sleep],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 180
    try:
        while not list((out / "runs").rglob("*.json")):  # wait until the first run is stored
            assert process.poll() is None, process.communicate()[1].decode()[-2000:]
            assert time.monotonic() < deadline, "the first run never finished"
            time.sleep(0.02)
    finally:
        process.kill()  # SIGKILL: no cleanup, as a crash or a power cut
        stdout, _ = process.communicate()
    assert b"finished" not in stdout
    finished = {f"{doc['experiment']}/{doc['run']}" for doc in ResultsStore(out).scan()}
    assert 1 <= len(finished) < len(ALL_RUNS)

    markers = tmp_path / "markers-resumed"
    monkeypatch.setenv("NQF_TOY_MARKERS", str(markers))
    overrides = [f"T1.sleep={sleep}", f"T2.sleep={sleep}"]
    resumed = reproduce(out, overrides=overrides, experiments=make_registry())
    assert sorted(_started(markers)) == sorted(ALL_RUNS - finished)  # only unfinished runs recomputed
    assert (resumed.stored, resumed.computed, resumed.problems) == (len(finished), len(ALL_RUNS - finished), ())

    monkeypatch.setenv("NQF_TOY_MARKERS", str(tmp_path / "markers-reference"))
    reference = reproduce(tmp_path / "reference", overrides=overrides, experiments=make_registry())
    assert resumed.report.read_bytes() == reference.report.read_bytes()


def test_rebuild_report_reads_only_the_store_and_survives_damage(tmp_path, monkeypatch):
    markers = tmp_path / "markers"
    monkeypatch.setenv("NQF_TOY_MARKERS", str(markers))
    out = tmp_path / "out"
    with pytest.raises(NqfError, match="run `nqf reproduce"):
        rebuild_report(out, experiments=make_registry())
    first = reproduce(out, overrides=["T1.scale=3"], experiments=make_registry())
    report = first.report.read_bytes()
    first.report.unlink()
    rebuilt = rebuild_report(out, experiments=make_registry())
    assert rebuilt.report.read_bytes() == report and rebuilt.computed == 0  # the manifest keeps T1.scale=3

    store = ResultsStore(out)
    victim = store.path("T1", next(r.key for r in first.outcomes[0].runs if r.name == "r1"))
    victim.write_text('{"format": "nqf-run", "rec')  # truncated by hand
    (out / "runs" / "T2" / "README.txt").write_text("foreign")
    damaged = rebuild_report(out, experiments=make_registry())
    assert len(_started(markers)) == 6  # nothing recomputed
    t1, t2 = damaged.outcomes
    assert t1.result is None and t1.missing == ("r1",) and t2.result is not None
    ((placeholder, is_placeholder),) = t1.rows()
    assert is_placeholder and placeholder.verdict.status == "not applicable"
    assert "runs missing from the store: r1" in placeholder.verdict.reason
    assert len(damaged.problems) == 2 and "not valid JSON" in damaged.problems[0]
    text = damaged.report.read_text()
    assert "README.txt: foreign file in the store; skipped" in text and "runs missing from the store: r1" in text

    resumed = reproduce(out, overrides=["T1.scale=3"], experiments=make_registry())
    assert resumed.computed == 1 and _started(markers)[-1] == "T1/r1"


def test_failing_runs_and_broken_figures_are_reported_not_raised(tmp_path, monkeypatch):
    registry = make_registry()
    registry["T2"] = type(registry["T2"])(
        **{**registry["T2"].__dict__, "figures": "tests._toy_experiments:broken_plot"}
    )
    outcome = reproduce(tmp_path, overrides=["T1.fail_run=1"], experiments=registry)
    assert (outcome.failed, outcome.computed) == (1, 5)
    t1, t2 = outcome.outcomes
    assert [r.state for r in t1.runs] == ["computed", "failed", "computed"]
    assert t1.runs[1].error == "RuntimeError: toy run T1/r1 fails on purpose"
    assert t1.rows()[0][0].verdict.status == "not applicable" and t2.result is not None
    assert outcome.problems == ("figures of T2 failed: RuntimeError: this plot is broken on purpose",)
    text = outcome.report.read_text()
    assert "Failed runs" in text and "T1/r1: RuntimeError" in text and "this plot is broken" in text


def test_parallel_jobs_give_the_same_report(tmp_path):
    serial = reproduce(tmp_path / "serial", experiments=make_registry())
    parallel = reproduce(tmp_path / "parallel", jobs=2, experiments=make_registry())
    assert (parallel.computed, parallel.failed) == (6, 0)
    assert parallel.report.read_bytes() == serial.report.read_bytes()
    # the figures drawn by the pool's processes are the bytes this process draws, and so is a
    # report rebuilt with two of them
    drawn = sorted((tmp_path / "serial" / "figures").iterdir())
    assert [path.name for path in drawn] == ["T1_curves.pdf", "T1_curves.png"]
    for path in drawn:
        assert (tmp_path / "parallel" / "figures" / path.name).read_bytes() == path.read_bytes()
    rebuilt = rebuild_report(tmp_path / "parallel", experiments=make_registry(), jobs=2)
    assert rebuilt.report.read_bytes() == serial.report.read_bytes()

    # a plot that raises in a worker is one problem line, as in this process
    registry = make_registry()
    registry["T2"] = type(registry["T2"])(
        **{**registry["T2"].__dict__, "figures": "tests._toy_experiments:broken_plot"}
    )
    broken = reproduce(tmp_path / "broken", jobs=2, experiments=registry)
    assert broken.problems == ("figures of T2 failed: RuntimeError: this plot is broken on purpose",)

    # A worker that dies takes the pool with it: its runs fail, the report is still written.
    crashed = reproduce(tmp_path / "crashed", jobs=2, overrides=["T1.crash_run=0"], experiments=make_registry())
    t1 = crashed.outcomes[0]
    assert t1.runs[0].state == "failed" and "worker process died" in t1.runs[0].error
    assert crashed.failed >= 1 and crashed.report.is_file()


def test_bad_selection_and_config_file_raise_nqf_error(tmp_path):
    with pytest.raises(NqfError, match="unknown experiment 'E9'; choose from T1, T2"):
        reproduce(tmp_path, only="T1,E9", experiments=make_registry())
    (tmp_path / "c.toml").write_text("[E9]\nx = 1\n")
    with pytest.raises(NqfError, match="unknown experiment 'E9'"):
        reproduce(tmp_path, config_file=tmp_path / "c.toml", experiments=make_registry())
    with pytest.raises(NqfError, match="no experiments are registered"):
        reproduce(tmp_path, experiments={})
    assert not (tmp_path / "runs").exists()


def _cli(args: list[str], cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    code = (
        "import sys; from tests._toy_experiments import register; register(); "
        "from nqf.cli import main; main(sys.argv[1:])"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        **(env_extra or {}),
    }
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_cli_reproduce_report_and_errors(tmp_path, monkeypatch, capsys):
    out = tmp_path / "res"
    done = _cli(["reproduce", "--quick", "--out", str(out), "--set", "T1.wrong_by=2", "--jobs", "1"], ROOT)
    assert done.returncode == 0, done.stderr
    assert f"report: {out / 'report.html'}" in done.stdout
    assert "T1   toy sum: 3 runs (3 computed); 3 claims: 1 confirmed, 1 not confirmed, 1 not applicable" in done.stdout
    unknown = _cli(["reproduce", "--only", "E1,T1", "--out", str(out)], ROOT)
    assert unknown.returncode == 2
    assert unknown.stderr == "error: unknown experiment 'E1'; choose from T1, T2\n"

    # The rest in this process, with the toy registry patched in.
    from nqf.cli import main

    monkeypatch.setattr("nqf_paper.registry.EXPERIMENTS", make_registry())
    main(["report", "--out", str(out)])
    assert "3 runs (3 stored)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit:  # figure-drawing processes: a few per core, as reproduce's workers
        main(["report", "--out", str(out), "--jobs", "1000"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.startswith("error: --jobs 1000 is more workers than") and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit:
        main(["reproduce", "--set", "T1.nope=1", "--out", str(out)])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1 and "has no field 'nope'" in err
    with pytest.raises(SystemExit) as exit:
        main(["reproduce", "--only", "T1", "--set", "T1.fail_run=0", "--out", str(out)])
    err = capsys.readouterr().err
    assert exit.value.code == 1 and "1 run(s) failed" in err
    assert "failed: T1/r0: RuntimeError: toy run T1/r0 fails on purpose\n" in err  # the reason, on the terminal
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["name"] for e in manifest["experiments"]] == ["T1"] and manifest["mode"] == "quick"


def _reproduce_into(results: list, out: Path, jobs: int, registry) -> None:
    results.append(reproduce(out, jobs=jobs, experiments=registry))


def _ended(markers: Path) -> list[str]:
    if not markers.exists():
        return []
    return [line.split()[1] for line in markers.read_text().splitlines() if line.startswith("end ")]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_run_claimed_by_another_process_is_waited_for_not_recomputed(tmp_path, monkeypatch, jobs):
    """Another process (here: the test) holds T1/r1's claim: reproduce does the other runs first,
    then waits, and reads what the holder stored; a holder that stores nothing leaves it to us."""
    markers = tmp_path / "markers"
    monkeypatch.setenv("NQF_TOY_MARKERS", str(markers))
    registry = make_registry()
    for stores_it in (True, False):
        out = tmp_path / f"out-{stores_it}"
        store = ResultsStore(out)
        spec = registry["T1"].run_specs(registry["T1"].config_type.quick())[1]
        claim = store.claim("T1", store.key("T1", spec.name, spec.config))
        results: list = []
        thread = threading.Thread(target=_reproduce_into, args=(results, out, jobs, registry))
        thread.start()
        deadline = time.monotonic() + 120
        while len(_ended(markers)) < 5:
            assert time.monotonic() < deadline and thread.is_alive(), "the five free runs never finished"
            time.sleep(0.05)
        time.sleep(0.5)
        assert thread.is_alive() and "T1/r1" not in _started(markers)  # waiting for the claim
        if stores_it:
            store.put("T1", spec.name, spec.config, spec.compute(dict(spec.config)))
        claim.release()
        thread.join(120)
        (outcome,) = results
        assert outcome.failed == 0 and outcome.problems == ()
        states = {(o.name, r.name): r.state for o in outcome.outcomes for r in o.runs}
        assert states.pop(("T1", "r1")) == ("stored" if stores_it else "computed")
        assert set(states.values()) == {"computed"}
        started = _started(markers)
        # once in all: by the "other process" (the test) that stored it, else by reproduce after the wait
        assert sorted(started) == sorted(ALL_RUNS)
        markers.unlink()


def test_two_concurrent_reproduce_processes_compute_each_run_once(tmp_path):
    out, markers = tmp_path / "out", tmp_path / "markers"
    env = {**os.environ, "NQF_TOY_MARKERS": str(markers)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests._toy_experiments", str(out), "--sleep", "0.5", "--jobs", jobs],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for jobs in ("1", "2")
    ]
    for process in processes:
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0 and "finished" in stdout, stderr[-2000:]
    assert sorted(_started(markers)) == sorted(ALL_RUNS)  # each run computed once, by one of the two
    store = ResultsStore(out)
    assert len(list(store.scan())) == 6 and store.problems == []
    assert not list(out.rglob(".*.lock"))


def test_output_folder_is_checked_before_anything_is_computed(tmp_path, monkeypatch):
    markers = tmp_path / "markers"
    monkeypatch.setenv("NQF_TOY_MARKERS", str(markers))
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(NqfError, match="is a file, not a folder"):
        reproduce(tmp_path / "a-file", experiments=make_registry())
    with pytest.raises(NqfError, match="cannot be written"):
        reproduce("/proc/nqf-test/out", experiments=make_registry())
    (tmp_path / "runs-file").mkdir()
    (tmp_path / "runs-file" / "runs").write_text("a file where the store goes")
    with pytest.raises(NqfError, match="runs is a file"):
        reproduce(tmp_path / "runs-file", experiments=make_registry())
    with pytest.raises(NqfError, match="does not exist"):
        rebuild_report(tmp_path / "missing", experiments=make_registry())
    assert not markers.exists() and not (tmp_path / "missing").exists()
    assert not (tmp_path / "runs-file" / "manifest.json").exists()

    deep = tmp_path / "new" / "deeper" / "out"  # missing parents are made
    assert reproduce(deep, only="T2", experiments=make_registry()).report == deep / "report.html"


def test_read_only_output_folder_is_refused_before_anything_is_computed(tmp_path, monkeypatch):
    (tmp_path / "probe").mkdir(mode=0o555)
    if os.access(tmp_path / "probe", os.W_OK):
        pytest.skip("this process (root) writes into read-only folders, so there is nothing to refuse")
    markers = tmp_path / "markers"
    monkeypatch.setenv("NQF_TOY_MARKERS", str(markers))
    out = tmp_path / "out"
    reproduce(out, only="T2", experiments=make_registry())
    markers.unlink()
    for folder in (out, tmp_path / "locked"):
        folder.mkdir(exist_ok=True)
        folder.chmod(0o555)
    try:
        with pytest.raises(NqfError, match="cannot be written"):
            reproduce(tmp_path / "locked", experiments=make_registry())
        with pytest.raises(NqfError, match="cannot be written"):
            reproduce(tmp_path / "locked" / "sub", experiments=make_registry())
        with pytest.raises(NqfError, match="cannot be written"):
            rebuild_report(out, experiments=make_registry())
    finally:
        for folder in (out, tmp_path / "locked"):
            folder.chmod(0o755)
    assert not markers.exists() and not (tmp_path / "locked" / "sub").exists()


def test_cli_refuses_bad_output_folders_in_one_line_before_computing(tmp_path):
    markers = tmp_path / "markers"
    (tmp_path / "file").write_text("x")
    cases = [
        (["reproduce", "--out", "/proc/nqf-test"], "error: --out /proc/nqf-test: cannot be written"),
        (
            ["reproduce", "--out", str(tmp_path / "file")],
            f"error: --out {tmp_path / 'file'} exists and is not a folder",
        ),
        (["report", "--out", str(tmp_path / "none")], f"error: {tmp_path / 'none' / 'manifest.json'} does not exist"),
    ]
    for args, expected in cases:
        start = time.monotonic()
        done = _cli(args, tmp_path, {"NQF_TOY_MARKERS": str(markers)})
        assert done.returncode == 2 and done.stderr.startswith(expected) and done.stderr.count("\n") == 1, done.stderr
        assert done.stdout == "" and time.monotonic() - start < 60
    assert not markers.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_signal_swallowed_inside_a_gc_callback_is_delivered_again(tmp_path):
    """Python runs signal handlers also inside ``__del__`` and gc callbacks (JAX has some), where the
    raised KeyboardInterrupt is swallowed; the CLI's unraisable hook must deliver the signal again."""
    code = """
import os, signal, sys, time
from nqf.cli.reproduce import _signals, _signals_as_interrupts

class Victim:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside __del__
        sum(range(100000))

with _signals_as_interrupts():
    try:
        Victim()
        time.sleep(20)
        print("the signal was lost")
    except KeyboardInterrupt:
        print("interrupted by", _signals)
print(
    "handler restored:",
    signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
    sys.unraisablehook is sys.__unraisablehook__,
)
"""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"interrupted by [{int(signal.SIGTERM)}]", "handler restored: True True"]
    assert "Exception ignored" not in done.stderr and time.monotonic() - start < 15


def test_without_the_papers_package_the_commands_say_how_to_install_it(tmp_path):
    """nqf_paper is a package of its own: where it is absent, `nqf report` and `nqf reproduce` stop
    with one line saying where it comes from (exit 2), before any work."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'nqf_paper' or name.startswith('nqf_paper.'):\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\", name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from nqf.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    for command in (["report", "--out", str(tmp_path / "r")], ["reproduce", "--quick", "--out", str(tmp_path / "q")]):
        done = subprocess.run(
            [sys.executable, "-c", code, *command], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "the package nqf_paper, which is not installed" in lines[0], done.stderr
        assert "pip install -e ." in lines[0]
    assert not (tmp_path / "q").exists()  # nothing written
