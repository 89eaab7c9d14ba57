"""``nqf reproduce`` / ``nqf report`` on toy experiments: resume, force, interrupt, failures, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nqf._errors import NqfError
from nqf._reproduce import rebuild_report, reproduce
from nqf._store import ResultsStore
from tests._toy_experiments import make_registry

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
    assert first.report == tmp_path / "out" / "report.html" and (tmp_path / "out" / "figures" / "T1_curves.pdf").is_file()

    second = reproduce(tmp_path / "out", experiments=make_registry())
    assert (second.computed, second.stored) == (0, 6) and len(_started(markers)) == 6
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
    (placeholder, is_placeholder), = t1.rows()
    assert is_placeholder and placeholder.verdict.status == "not applicable"
    assert "runs missing from the store: r1" in placeholder.verdict.reason
    assert len(damaged.problems) == 2 and "not valid JSON" in damaged.problems[0]
    text = damaged.report.read_text()
    assert "README.txt: foreign file in the store; skipped" in text and "runs missing from the store: r1" in text

    resumed = reproduce(out, overrides=["T1.scale=3"], experiments=make_registry())
    assert resumed.computed == 1 and _started(markers)[-1] == "T1/r1"


def test_failing_runs_and_broken_figures_are_reported_not_raised(tmp_path, monkeypatch):
    registry = make_registry()
    registry["T2"] = type(registry["T2"])(**{**registry["T2"].__dict__, "figures": "tests._toy_experiments:broken_plot"})
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
    code = "import sys; from tests._toy_experiments import register; register(); from nqf.cli import main; main(sys.argv[1:])"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
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

    monkeypatch.setattr("nqf.experiments.EXPERIMENTS", make_registry())
    main(["report", "--out", str(out)])
    assert "3 runs (3 stored)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit:
        main(["reproduce", "--set", "T1.nope=1", "--out", str(out)])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1 and "has no field 'nope'" in err
    with pytest.raises(SystemExit) as exit:
        main(["reproduce", "--only", "T1", "--set", "T1.fail_run=0", "--out", str(out)])
    assert exit.value.code == 1 and "1 run(s) failed" in capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["name"] for e in manifest["experiments"]] == ["T1"] and manifest["mode"] == "quick"
