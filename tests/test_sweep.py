"""``nqf sweep``: spec checks, the 24-point sweep on every executor, resume after SIGKILL,
batched = per-point, dry run, table and figures (``nqf.scans.sweep``).

Tiny sizes (staircase, 64 samples, width 8, 200 steps). The sweeps run through the installed
``nqf`` console script; the batching tests call the library in this process.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # nqf sweep on every executor

NQF = str(Path(sys.executable).with_name("nqf"))

SPEC = """
[sweep]
mode = "compare"

[task]
name = "staircase"
samples = 64

[settings]
width = 8
steps = 200
lr = 0.05
optimizers = ["gd"]

[axes]
sigma0 = {logspace = [-6, -2, 6]}
seed = {range = [0, 4]}

[figures]
heatmap = ["sigma0", "seed"]
curves = [0, 23]
"""

MODES = 4  # the staircase's singular values 3, 2, 1, 0.5
NOT_NUMBERS = {"seconds", "error", "point"}


def nqf(*args, timeout=300, check=None):
    proc = subprocess.run([NQF, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def write_spec(folder: Path, text: str, name: str = "spec.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def read_rows(out: Path):
    from nqf.scans.sweep.table import read_table

    path = out / "points.parquet" if (out / "points.parquet").exists() else out / "points.csv"
    return read_table(path)


def assert_same_tables(a, b, rtol=1e-12):
    """Same rows and columns; every number equal to rtol (timings aside)."""
    assert len(a) == len(b)
    key = lambda r: (r["point"], r["mode"])  # noqa: E731
    a, b = sorted(a, key=key), sorted(b, key=key)
    assert list(a[0]) == list(b[0])
    worst = 0.0
    for ra, rb in zip(a, b, strict=True):
        for column, va in ra.items():
            vb = rb[column]
            if column in NOT_NUMBERS:
                continue
            if isinstance(va, float) and isinstance(vb, float):
                assert math.isclose(va, vb, rel_tol=rtol, abs_tol=1e-300), (column, ra["point"], va, vb)
                worst = max(worst, abs(va - vb) / max(abs(va), 1e-300))
            else:
                assert va == vb, (column, ra["point"], va, vb)
    return worst


def store_files(store: Path) -> list[Path]:
    return sorted((store / "runs").glob("*/*.json"))


# -- bad specs: one line per key, exit 2, nothing written --------------------------------


def _bad(tmp_path, text, expected_keys, extra=()):
    spec = write_spec(tmp_path, text)
    out = tmp_path / "out"
    proc = nqf("sweep", spec, "--out", out, *extra, check=2)
    lines = proc.stderr.strip().splitlines()
    assert all(line.startswith("error: spec ") for line in lines), proc.stderr
    for key in expected_keys:
        assert any(line.startswith(f"error: spec {key}:") for line in lines), (key, proc.stderr)
    assert len(lines) == len(expected_keys), proc.stderr
    assert not out.exists()
    assert proc.stdout == ""
    return lines


def test_bad_spec_every_key_one_line(tmp_path):
    text = """
colour = "red"
[sweep]
zip = [["sigma0", "lr"]]
[task]
name = "staircase"
samples = 64
wobble = 1
[arch]
activation = "tanh"
depth = 3
[settings]
width = 8
steps = 200
learning_rate = 0.1
[axes]
sigma0 = {logspace = [-6, -2, 3]}
lr = [0.01, 0.02]
seed = []
"arch.activation" = ["tanh", 3]
[figures]
heatmap = ["sigma0", "width"]
"""
    lines = _bad(
        tmp_path,
        text,
        [
            "colour",
            "task.wobble",
            "arch.depth",
            "settings.learning_rate",
            "axes.seed",
            "axes.arch.activation",
            "sweep.zip[0]",
            "figures.heatmap",
        ],
    )
    assert "error: spec axes.seed: empty axis" in lines


@pytest.mark.parametrize(
    "settings, axes, key, words",
    [
        ("width = 8\nsteps = 200\nlr = 0.05", "seed = [0]", "settings.sigma0", "missing"),
        ("width = 8\nsteps = 200\nsigma0 = 1e-6", "lr = {linspace = [0.05, 5.0, 3]}", "axes.lr", "unstable"),
        ("width = 0\nsteps = 200\nlr = 0.05\nsigma0 = 1e-6", "seed = [0]", "settings.width", "positive"),
        ("width = 8\nsteps = 200\nlr = 0.05", "sigma0 = {logspace = [-6, -2, 0]}", "axes.sigma0", "empty axis"),
        (
            'width = 8\nsteps = 200\nlr = 0.05\nsigma0 = 1e-6\noptimizers = ["rmsprop"]',
            "seed = [0]",
            "settings.optimizers[0]",  # the key path of the bad item
            "unknown optimizer",
        ),
        ("width = 8\nsteps = 200\nlr = 0.05\nsigma0 = 1e-200", "seed = [0]", "settings.sigma0", "underflow"),
    ],
    ids=["missing", "unstable-lr", "width", "empty-range", "optimizer", "underflow"],
)
def test_bad_setting(tmp_path, settings, axes, key, words):
    text = f'[task]\nname = "staircase"\nsamples = 64\n[settings]\n{settings}\n[axes]\n{axes}\n'
    lines = _bad(tmp_path, text, [key])
    assert words in lines[0], lines


def test_bad_task_and_theory_gate(tmp_path):
    _bad(
        tmp_path,
        '[task]\nname = "nosuchtask"\n[settings]\nwidth = 8\nsteps = 9\nlr = 0.1\nsigma0 = 1e-6\n',
        ["task.name"],
    )
    text = (
        '[task]\nname = "staircase"\nsamples = 64\n[settings]\nwidth = 8\nsteps = 100\nlr = 0.05\nsigma0 = 1e-6\n'
        '[axes]\n"arch.activation" = ["tanh", "relu"]\n'
    )
    lines = _bad(tmp_path, text, ["axes.arch.activation"])
    assert "does not apply" in lines[0]


# -- the 24-point sweep -------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    spec = write_spec(folder, SPEC)
    out = folder / "local"
    dry = nqf("sweep", spec, "--out", out, "--dry-run", check=0)
    assert not out.exists()  # a dry run writes nothing
    start = time.perf_counter()
    proc = nqf("sweep", spec, "--out", out, check=0)
    seconds = time.perf_counter() - start
    print(f"24-point sweep, local executor: {seconds:.1f} s")
    return {"spec": spec, "out": out, "proc": proc, "dry": dry, "seconds": seconds, "folder": folder}


def test_dry_run_counts(local_sweep):
    assert "24 point(s) (compare), 0 already stored, 24 to compute in" in local_sweep["dry"].stdout
    again = nqf("sweep", local_sweep["spec"], "--out", local_sweep["out"], "--dry-run", check=0)
    assert "24 point(s) (compare), 24 already stored, 0 to compute in 0 batch(es)" in again.stdout


def test_table_rows_and_columns(local_sweep):
    out = local_sweep["out"]
    assert "24 point(s): 24 computed, 0 already stored, 0 failed" in local_sweep["proc"].stdout
    assert "(parquet)" in local_sweep["proc"].stdout
    rows = read_rows(out)
    assert len(rows) == 24 * MODES
    assert {(r["point"], r["mode"]) for r in rows} == {(p, m) for p in range(24) for m in range(1, MODES + 1)}
    columns = set(rows[0])
    for column in (
        "point",
        "sigma0",
        "seed",
        "mode",
        "growth",
        "switch_mflow",
        "switch_lv",
        "switch_singular_limit",
        "switch_quadratic",
        "switch_network_gd",
        "relerr_network_gd",
        "plateau_network_gd",
        "plateau_singular_limit",
        "closure_defect_gd",
        "switch_mean_field_gd",  # the network's own prediction, the mean-field flow
        "plateau_mean_field_gd",
        "seconds",
        "error",
    ):
        assert column in columns, column
    assert all(r["error"] == "" for r in rows)
    assert sorted({r["sigma0"] for r in rows}) == pytest.approx(
        [1e-6, 1e-5 * 10**-0.2, 10**-4.4, 10**-3.6, 10**-2.8, 1e-2], rel=1e-12
    )
    # the quadratic model follows its M-flow (same W0, exact map) on the modes that switch within 200 steps
    first = [r for r in rows if r["mode"] == 1]
    assert all(abs(r["relerr_quadratic"]) < 0.02 for r in first)
    assert json.loads((out / "failed.json").read_text())["failed"] == []


def test_figures_are_png(local_sweep):
    for name in ("switch_steps", "heatmap", "curves"):
        data = (local_sweep["out"] / "figures" / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name


def test_rerun_computes_nothing(local_sweep):
    store = local_sweep["out"] / "store"
    before = {p: p.stat().st_mtime_ns for p in store_files(store)}
    proc = nqf("sweep", local_sweep["spec"], "--out", local_sweep["out"], check=0)
    assert "24 point(s): 0 computed, 24 already stored, 0 failed" in proc.stdout
    assert {p: p.stat().st_mtime_ns for p in store_files(store)} == before


def test_ray_gives_the_same_table(local_sweep, request):
    extra = ["--address", request.getfixturevalue("ray_cluster")]
    out = local_sweep["folder"] / "ray"
    start = time.perf_counter()
    proc = nqf("sweep", local_sweep["spec"], "--out", out, "--executor", "ray", *extra, "--quiet", check=0, timeout=600)
    print(f"24-point sweep, ray executor: {time.perf_counter() - start:.1f} s")
    assert "24 computed" in proc.stdout
    worst = assert_same_tables(read_rows(local_sweep["out"]), read_rows(out))
    print(f"largest relative difference local vs ray: {worst:.2e}")


def test_slurm_local_gives_the_same_table(local_sweep):
    out = local_sweep["folder"] / "slurm"
    start = time.perf_counter()
    proc = nqf(
        "sweep",
        local_sweep["spec"],
        "--out",
        out,
        "--executor",
        "slurm",
        "--slurm-cluster",
        "local",
        "--batch-size",
        "12",
        "--quiet",
        check=0,
        timeout=600,
    )
    print(f"24-point sweep, slurm (submitit local) executor: {time.perf_counter() - start:.1f} s")
    assert "24 computed" in proc.stdout
    assert_same_tables(read_rows(local_sweep["out"]), read_rows(out))


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_killed_driver_resumes(local_sweep, executor, request):
    """SIGKILL the driver midway: the rerun computes only the points the store lacks.

    With Ray the cluster outlives the driver, so batches in flight may still store their
    points after the kill; the rerun then finds them stored (it waits for a point another
    process holds). Points stored before the kill are never rewritten.
    """
    out = local_sweep["folder"] / f"killed-{executor}"
    store = out / "store"
    extra = ["--executor", "ray", "--address", request.getfixturevalue("ray_cluster")] if executor == "ray" else []
    proc = subprocess.Popen(
        [NQF, "sweep", local_sweep["spec"], "--out", out, "--batch-size", "2", "--quiet", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while len(store_files(store)) < 6 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {p: p.stat().st_mtime_ns for p in store_files(store)}
    stored = len(before)
    print(f"{executor}: killed with {stored} of 24 points stored")
    assert 6 <= stored < 24
    assert not (out / "points.parquet").exists()
    rerun = nqf("sweep", local_sweep["spec"], "--out", out, *extra, check=0, timeout=600)
    counts = re.search(r"24 point\(s\): (\d+) computed, (\d+) already stored, 0 failed", rerun.stdout)
    assert counts, rerun.stdout + rerun.stderr
    computed, found = int(counts.group(1)), int(counts.group(2))
    assert computed + found == 24 and found >= stored
    if executor == "local":  # nothing outlives a local driver
        assert computed == 24 - stored
    assert {p: p.stat().st_mtime_ns for p in store_files(store) if p in before} == before
    assert len(store_files(store)) == 24
    assert_same_tables(read_rows(local_sweep["out"]), read_rows(out))


# -- in process: batching and failures -------------------------------------------------------


def _plan(tmp_path, batch_size, text=SPEC, name="spec.toml"):
    from nqf.scans.sweep.run import plan_sweep

    spec = write_spec(tmp_path, text, name)
    return plan_sweep(spec, tmp_path / f"out-{batch_size}", batch_size=batch_size)


def test_batched_equals_per_point(tmp_path, monkeypatch):
    """One batch of 12 points (2 train_grid calls: network and quadratic model) equals 12 batches of one."""
    import nqf.training.grid as runs
    from nqf.scans.sweep.run import run_sweep

    calls = []
    original = runs.train_grid

    def counting(*args, **kwargs):
        calls.append(len(args[4]) * len(args[5]))
        return original(*args, **kwargs)

    monkeypatch.setattr(runs, "train_grid", counting)
    text = SPEC.replace("{logspace = [-6, -2, 6]}", "[1e-6, 1e-4, 1e-2]").replace("curves = [0, 23]", "curves = 1")
    batched = _plan(tmp_path, 12, text)
    assert len(batched.batches) == 1
    run_sweep(batched, tmp_path / "out-12", quiet=True)
    assert calls == [12, 12]  # the quadratic model and the network, each one vmapped call over 3 sigma0 x 4 seeds
    calls.clear()
    single = _plan(tmp_path, 1, text)
    assert len(single.batches) == 12
    run_sweep(single, tmp_path / "out-1", quiet=True)
    assert set(calls) == {1}
    worst = assert_same_tables(read_rows(tmp_path / "out-12"), read_rows(tmp_path / "out-1"))
    print(f"largest relative difference batched vs per point: {worst:.2e}")


def test_batches_group_static_settings(tmp_path):
    from nqf.scans.sweep.points import make_batches

    text = SPEC.replace("seed = {range = [0, 4]}", "seed = {range = [0, 4]}\nlr = [0.05, 0.02]").replace(
        "lr = 0.05\n", ""
    )
    plan = _plan(tmp_path, 5, text)
    assert len(plan.points) == 48
    for batch in plan.batches:
        assert len(batch) <= 5
        assert len({p.config["settings"]["lr"] for p in batch}) == 1  # lr is not vmapped: never mixed
    assert sorted(p.index for b in plan.batches for p in b) == list(range(48))
    rows = make_batches(plan.points, 8)  # whole sigma0 rows of 4 seeds fit twice
    assert all(len({p.sigma0 for p in b}) == 2 and len(b) == 8 for b in rows)


def test_failed_point_is_recorded_and_retried(tmp_path, monkeypatch):
    import nqf.scans.sweep.compute as compute
    from nqf.scans.sweep.run import run_sweep

    text = (
        SPEC.replace("{logspace = [-6, -2, 6]}", "[1e-6, 1e-3]")
        .replace("{range = [0, 4]}", "[0, 1]")
        .replace("curves = [0, 23]", "curves = [0, 3]")
    )
    original = compute.compute_point

    def failing(batch, config, train=None):
        if config["settings"]["seed"] == 1 and config["settings"]["sigma0"] == 1e-3:
            raise FloatingPointError("boom")
        return original(batch, config, train)

    monkeypatch.setattr(compute, "compute_point", failing)
    plan = _plan(tmp_path, 4, text)
    out = tmp_path / "out-4"
    result = run_sweep(plan, out, quiet=True)
    assert result.count("computed") == 3 and result.count("failed") == 1
    rows = read_rows(out)
    bad = [r for r in rows if r["error"]]
    assert len(bad) == 1 and bad[0]["point"] == 3 and bad[0]["mode"] is None
    assert bad[0]["error"] == "FloatingPointError: boom"
    assert len(rows) == 3 * MODES + 1
    assert json.loads((out / "failed.json").read_text())["failed"][0]["point"] == 3
    monkeypatch.setattr(compute, "compute_point", original)
    # A lock file left on a stored point (its holder killed after storing it) goes with the next plan.
    left = next((out / "store" / "runs").rglob("*.json"))
    left.with_name(f".{left.stem}.lock").write_text("")
    again = _plan(tmp_path, 4, text)
    assert len(again.stored) == 3 and not list(out.rglob(".*.lock"))
    result = run_sweep(again, out, quiet=True)
    assert result.count("computed") == 1 and result.count("failed") == 0
    assert json.loads((out / "failed.json").read_text())["failed"] == []


def test_predict_sweep_with_zipped_axes(tmp_path):
    text = """
[sweep]
mode = "predict"
zip = [["lr", "steps"]]
[task]
name = "staircase"
samples = 64
[settings]
width = 8
[axes]
lr = [0.05, 0.025]
steps = [300, 600]
sigma0 = [1e-6, 1e-4]
"""
    from nqf.scans.sweep.run import run_sweep

    plan = _plan(tmp_path, None, text)
    assert [p.values for p in plan.points] == [
        {"lr": 0.05, "steps": 300, "sigma0": 1e-6},
        {"lr": 0.05, "steps": 300, "sigma0": 1e-4},
        {"lr": 0.025, "steps": 600, "sigma0": 1e-6},
        {"lr": 0.025, "steps": 600, "sigma0": 1e-4},
    ]
    out = tmp_path / "out-None"
    result = run_sweep(plan, out, quiet=True)
    assert result.count("computed") == 4
    rows = read_rows(out)
    assert len(rows) == 4 * MODES
    for column in ("switch_mflow", "switch_lv", "switch_singular_limit", "relerr_lv", "plateau_lv", "stable_lr"):
        assert column in rows[0]
    assert "switch_mean_field" in rows[0] and "plateau_mean_field" in rows[0]  # the network's own prediction
    assert result.figures["switch_steps"] is not None


def test_an_unlimited_network_budget_runs(tmp_path):
    """``network_budget = inf`` (the schema's "no limit"), fixed or an axis value: the point stores
    None (the store's JSON has no infinity, so inf refused the whole sweep before) and its
    config has no limit."""
    from nqf.scans.sweep.compute import predict_config
    from nqf.scans.sweep.run import run_sweep

    text = """
[sweep]
mode = "predict"
[task]
name = "staircase"
samples = 64
[settings]
width = 8
lr = 0.05
steps = 200
sigma0 = 1e-4
[axes]
network_budget = [inf, 2.0]
"""
    plan = _plan(tmp_path, None, text)
    budgets = [p.config["settings"]["network_budget"] for p in plan.points]
    assert budgets == [None, 2.0]
    assert [predict_config(p.config["settings"]).network_budget for p in plan.points] == [None, 2.0]
    assert run_sweep(plan, tmp_path / "out-None", quiet=True).count("computed") == 2


def test_a_predict_batch_is_one_grid_and_equals_per_point(tmp_path, monkeypatch):
    """Predict points differing in lr, sigma0 and seed form one batch, computed by one
    ``predict_grid``; its table equals the per-point one (batch size 1: ``predict`` per
    point) to 1e-5 (the LV flow's times come from a solve rescaled in lr,
    ``tests/test_predict_grid.py``; everything else agrees to rounding)."""
    import nqf.theory.predict.grid as grids
    from nqf.scans.sweep.run import run_sweep

    calls = []
    original = grids.predict_grid

    def counting(*args, **kwargs):
        calls.append((len(kwargs["lrs"]), len(kwargs["sigma0s"]), len(kwargs["seeds"])))
        return original(*args, **kwargs)

    monkeypatch.setattr(grids, "predict_grid", counting)
    text = """
[sweep]
mode = "predict"
[task]
name = "staircase"
samples = 64
[settings]
width = 8
steps = 400
[axes]
lr = [0.05, 0.03]
sigma0 = [1e-6, 1e-4]
seed = [0, 1]
"""
    batched = _plan(tmp_path, 8, text)
    assert len(batched.batches) == 1
    result = run_sweep(batched, tmp_path / "out-8", quiet=True)
    assert result.count("computed") == 8
    assert calls == [(2, 2, 2)]
    single = _plan(tmp_path, 1, text)
    assert len(single.batches) == 8
    run_sweep(single, tmp_path / "out-1", quiet=True)
    assert calls == [(2, 2, 2)]  # batches of one point run predict itself
    worst = assert_same_tables(read_rows(tmp_path / "out-8"), read_rows(tmp_path / "out-1"), rtol=1e-5)
    print(f"largest relative difference grid vs per point: {worst:.2e}")
