"""Issue 34's leftovers: bad input gets one ``error:`` line and exit 2 before any heavy work, and
nothing half-written is left behind; each case through the real command.

1. an init scale that is not small (``--sigma0 0.5``): the prediction without its vanishing-init
   limit, and a note saying why and below which sigma0 the limit exists (was an internal
   "singular_limit: eps must be positive");
2. ``--batch`` / ``--beta`` that the chosen optimizer does not use: refused (predict, compare,
   a sweep spec), no longer ignored;
3. ``nqf sweep`` refuses an option that does not fit ``--executor`` as ``nqf reproduce`` does;
4. ``nqf reproduce --set`` values the experiment's runs refuse: refused before any run computes;
5. a spec whose only line is ``mode = "train"`` (above any table) gets the mode's error;
6. ``nqf store gc`` leaves a record-named file holding ``{}`` alone and says so once;
7. float targets Y of shape (N,) for several outputs: the shapes that fit, and how to get them;
8. ``--overlay``: a level the measured curve is below at its first record is no switch-on.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import nqf
from nqf.core.errors import NqfError
from tests.conftest import assert_allclose

NQF = Path(sys.executable).parent / "nqf"
N, D, K = 32, 8, 4  # mlp's default: 8 inputs, 4 outputs


def run_nqf(*args, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    assert NQF.exists(), f"console script {NQF} is missing: pip install -e . first"
    return subprocess.run([str(NQF), *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def error_line(done: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a refused command (exit 2, nothing on stdout, no traceback)."""
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """ok.npz: X (32, 8), Y (32, 4); y1d.npz: Y (32,) floats."""
    folder = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((N, D)), rng.standard_normal((N, K))
    np.savez(folder / "ok.npz", X=X, Y=Y)
    np.savez(folder / "y1d.npz", X=X, Y=Y[:, 0])
    return {"ok": folder / "ok.npz", "y1d": folder / "y1d.npz", "X": X, "Y": Y}  # type: ignore[dict-item]


def predict_args(data_file: Path, *extra: str, width: int = 4, sigma0: str = "0.01", steps: int = 50) -> list[str]:
    common = ["predict", "--data", str(data_file), "--arch", "mlp", "--width", str(width), "--sigma0", sigma0]
    return [*common, "--lr", "0.1", "--steps", str(steps), *map(str, extra)]


# -- 1. an init that is not small: the prediction without the vanishing-init limit ---------------


def test_predict_at_a_large_init_gives_the_flows_and_says_why_there_is_no_limit(data):
    """Was ``error: singular_limit: eps must be positive (m0 < 1), got -1.27...``: the M-flow and
    the LV rest on no small init and are given; the limit's steps and plateaus are empty (null)."""
    done = run_nqf(*predict_args(data["ok"], "--json", width=16, sigma0="0.5"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    limit = result["singular_limit"]
    assert limit["eps"] is None and limit["order"] == [] and limit["switch_steps"] == [None] * K
    assert result["lv"]["plateau_losses"] == [None] * K
    assert all(step is not None for step in result["mflow"]["switch_steps"])  # the modes start near m*/2
    (note,) = [n for n in result["notes"] if n.startswith("no vanishing-init limit")]
    assert "eps = -1.27" in note and "the M-flow and the LV stand" in note, note
    # the bound it gives: eps = -mean ln m_k(0) moves by -2 ln(sigma0 ratio) for this draw
    bound = float(re.search(r"take sigma0 below ([0-9.e-]+) \(this draw\)", note).group(1))
    assert_allclose(bound, 0.5 * math.exp(-1.27 / 2), rtol=5e-3)  # 0.265 (eps -1.2728 here)
    arch = nqf.get_architecture("mlp")
    for scale, has_limit in ((0.98 * bound, True), (1.02 * bound, False)):
        config = nqf.PredictConfig(width=16, lr=0.1, steps=50, sigma0=scale)
        prediction = nqf.predict(arch, data["X"], data["Y"], config)
        assert np.isfinite(prediction.singular.eps) == has_limit, scale
        assert np.isfinite(prediction.singular_switch_steps).any() == has_limit, scale


def test_singular_limit_itself_says_what_it_needs():
    """The library function still refuses (its eps is its input), in words a researcher reads."""
    from nqf.theory.lotka_volterra.system import LotkaVolterra

    system = LotkaVolterra(c=np.array([1.0, 0.5]), K=np.diag([1.0, 1.0]), m0=np.array([2.0, 3.0]), lr=0.1, loss0=1.0)
    with pytest.raises(NqfError, match=r"needs a small init, eps = -mean ln m_k\(0\) > 0 .*got eps = -0.8959"):
        nqf.singular_limit(system)


def test_predict_grid_point_at_a_large_init_is_what_predict_gives(data):
    arch = nqf.get_architecture("mlp")
    config = nqf.PredictConfig(width=16, lr=0.1, steps=50, sigma0=1e-3)
    grid = nqf.predict_grid(arch, data["X"], data["Y"], config, sigma0s=[1e-3, 0.5])
    assert np.isfinite(grid.singular_switch_steps[0, 0, 0]).all()
    assert np.isnan(grid.singular_switch_steps[0, 1, 0]).all()
    point = grid.prediction(0, 1, 0)
    alone = nqf.predict(arch, data["X"], data["Y"], nqf.PredictConfig(width=16, lr=0.1, steps=50, sigma0=0.5))
    assert point.notes == alone.notes and any(n.startswith("no vanishing-init limit") for n in point.notes)


# -- 2. --batch / --beta of another optimizer: refused ---------------------------------------------

REFUSED_SETTINGS = {
    "predict-gd-batch": (
        ["--batch", "8"],
        "error: --batch is not used by optimizer gd (full batch): it is the minibatch size of sgd only; drop it",
    ),
    "predict-gd-beta": (
        ["--beta", "0.5"],
        "error: --beta is not used by optimizer gd: it is the heavy-ball momentum of momentum only; drop it",
    ),
    "predict-momentum-batch": (
        ["--optimizer", "momentum", "--batch", "8"],
        "error: --batch is not used by optimizer momentum (full batch): it is the minibatch size of sgd only; drop it",
    ),
    "predict-sgd-beta": (
        ["--optimizer", "sgd", "--batch", "8", "--beta", "0.5"],
        "error: --beta is not used by optimizer sgd: it is the heavy-ball momentum of momentum only; drop it",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED_SETTINGS))
def test_predict_refuses_a_setting_its_optimizer_does_not_use(case, data, tmp_path):
    extra, expected = REFUSED_SETTINGS[case]
    assert error_line(run_nqf(*predict_args(data["ok"], *extra, "--csv", tmp_path / "out"))) == expected
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "optimizers, extra, expected",
    [
        ("gd", ["--beta", "0.5"], "--beta is not used by optimizer gd: it is the heavy-ball momentum of momentum"),
        ("gd,adam", ["--beta", "0.5"], "--beta is not used by optimizers gd, adam: it is the heavy-ball momentum"),
        ("gd", ["--batch", "8"], "--batch is not used by optimizer gd (full batch): it is the minibatch size of sgd"),
    ],
)
def test_compare_refuses_a_setting_no_listed_optimizer_uses(optimizers, extra, expected):
    common = ["compare", "--task", "staircase", "--width", "4", "--sigma0", "0.01", "--lr", "0.05", "--steps", "20"]
    line = error_line(run_nqf(*common, "--optimizers", optimizers, *extra))
    assert line.startswith(f"error: {expected}") and line.endswith("to --optimizers or drop it"), line


SWEEP_BASE = '[task]\nname = "staircase"\n[settings]\nwidth = 4\nsteps = 50\nsigma0 = 0.01\nlr = 0.1\n'


@pytest.mark.parametrize(
    "spec, expected",
    [
        (
            '[sweep]\nmode = "predict"\n' + SWEEP_BASE + "batch = 8\n",
            "error: spec settings.batch: batch is not used by optimizer gd (full batch): it is the minibatch size "
            'of sgd only; drop it or set optimizer = "sgd"',
        ),
        (
            '[sweep]\nmode = "predict"\n' + SWEEP_BASE + 'optimizer = "sgd"\nbatch = 8\nbeta = 0.5\n',
            "error: spec settings.beta: beta is not used by optimizer sgd: it is the heavy-ball momentum of "
            'momentum only; drop it or set optimizer = "momentum"',
        ),
        (
            SWEEP_BASE + "beta = 0.5\n",
            "error: spec settings.beta: beta is not used by optimizer gd: it is the heavy-ball momentum of "
            "momentum only; add momentum to the optimizers or drop it",
        ),
    ],
)
def test_sweep_spec_refuses_a_setting_no_optimizer_uses(spec, expected, tmp_path):
    (tmp_path / "spec.toml").write_text(spec)
    assert error_line(run_nqf("sweep", "spec.toml", "--out", "out", "--dry-run", cwd=tmp_path)) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


def test_settings_the_optimizers_use_are_taken(data, tmp_path):
    """momentum takes --beta; a predict sweep whose optimizer axis holds sgd takes batch."""
    done = run_nqf(*predict_args(data["ok"], "--optimizer", "momentum", "--beta", "0.5", "--json"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["config"]["beta"] == 0.5
    spec = '[sweep]\nmode = "predict"\n' + SWEEP_BASE + 'batch = 8\n[axes]\noptimizer = ["gd", "sgd"]\n'
    (tmp_path / "spec.toml").write_text(spec)
    dry = run_nqf("sweep", "spec.toml", "--out", "out", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and "2 point(s) (predict)" in dry.stdout, dry.stderr


# -- 3. nqf sweep: options that do not fit the executor -------------------------------------------


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--executor", "slurm", "--jobs", "2", "--slurm-cluster", "local"],
            "error: --jobs does not apply to --executor slurm; --slurm-array-size limits the runs at once",
        ),
        (
            ["--executor", "ray", "--address", "127.0.0.1:1", "--jobs", "2"],
            "error: --jobs does not apply to a Ray cluster given by address: its CPUs decide",
        ),
        (["--address", "127.0.0.1:1"], "error: --address applies to --executor ray, not local"),
        (["--executor", "ray", "--slurm-time", "5"], "error: --slurm-time applies to --executor slurm, not ray"),
        (["--executor", "ray", "--address", " "], "error: --address is empty; give host:port of the Ray cluster"),
    ],
)
def test_sweep_refuses_options_that_do_not_fit_the_executor(args, expected, tmp_path):
    """The checks and words of ``nqf reproduce`` (tests/test_executors.py), from one function."""
    (tmp_path / "spec.toml").write_text(SWEEP_BASE)
    assert error_line(run_nqf("sweep", "spec.toml", "--out", "out", *args, cwd=tmp_path)) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


# -- 4. nqf reproduce --set: refused before any run computes ----------------------------------------


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "E5.fixed_activation=nope",
            "error: E5: fixed_activation must be one of tanh, gelu, sin, silu, linear, square, one_minus_cos, "
            "relu, abs, softplus, sigmoid, got 'nope'",
        ),
        ("E5.fixed_width=0", "error: E5: fixed_width must be a positive integer, got 0"),
        ("E5.icl_dim=3", "error: E5 run linear-attention: task icl: task_variances needs 3 entries (dim), got 4"),
        # already refused before (the key, the value's type): kept so
        ("E5.nosuch=1", "error: --set E5: ArchitecturesConfig has no field 'nosuch'; its fields are sigma0, "),
        ("E5.fixed_width=abc", "error: --set E5.fixed_width: expected an integer, got 'abc'"),
    ],
)
def test_reproduce_refuses_a_set_value_before_any_run(override, expected, tmp_path):
    """Was: 7 of E5's 8 runs computed (13 s), then ``error: 1 run(s) failed`` and a results folder."""
    started = time.monotonic()
    line = error_line(run_nqf("reproduce", "--only", "E5", "--set", override, "--out", tmp_path / "out"))
    assert line.startswith(expected), line
    assert not (tmp_path / "out").exists()
    print(f"{override}: refused in {time.monotonic() - started:.1f} s")  # 4 s (start-up), no run


# -- 5. a spec whose only line is mode = "train" ------------------------------------------------


def test_a_top_level_mode_gets_the_error_the_sweep_table_gets(tmp_path):
    (tmp_path / "top.toml").write_text('mode = "train"\n')
    (tmp_path / "table.toml").write_text('[sweep]\nmode = "train"\n')
    top = run_nqf("sweep", "top.toml", "--out", "out", "--dry-run", cwd=tmp_path)
    table = run_nqf("sweep", "table.toml", "--out", "out", "--dry-run", cwd=tmp_path)
    assert top.returncode == table.returncode == 2
    assert top.stderr.splitlines()[0] == (
        "error: spec mode: unknown key at the top level; mode is a key of [sweep]: put it below a [sweep] line, "
        "where it must be one of compare, predict, got 'train'"
    )  # was: "error: spec mode: unknown key; a spec has sweep, task, arch, settings, axes, figures"
    assert table.stderr.splitlines()[0] == "error: spec sweep.mode: must be one of compare, predict, got 'train'"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.toml", "top.toml"]


# -- 6. nqf store gc and a record-named file that is not nqf's ---------------------------------------


def test_store_gc_leaves_a_record_named_file_holding_no_record_alone(tmp_path):
    """Was: ``removed: ...`` with ``problem: ...: not an nqf run record (foreign file); a damaged
    record``, and ``store ls`` counting it damaged: a file it called foreign, removed as its own."""
    from nqf.store.results import ResultsStore

    store = ResultsStore(tmp_path / "store")
    store.put("E1", "a", {"x": 1}, {"y": 1.0})
    folder = store.path("E1", store.key("E1", "a", {"x": 1})).parent
    foreign, truncated = folder / f"{'7' * 64}.json", folder / f"{'6' * 64}.json"
    foreign.write_text("{}")
    truncated.write_text("{")  # nqf's record cut short: damaged, removed as before

    def command(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "nqf", "store", *args, str(store.root)], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done

    listing = command("ls").stdout
    assert re.search(r"^E1\s+1\s+0\s+1$", listing, re.M), listing  # current 1, stale 0, damaged 1: the truncated
    assert listing.count(foreign.name) == 1
    assert f"runs/E1/{foreign.name}: not an nqf run record (foreign file); skipped" in listing
    for args in (("gc", "--dry-run"), ("gc",)):
        out = command(*args).stdout
        assert out.count(foreign.name) == 1, out  # said once, never "removed"
        assert f"problem: runs/E1/{foreign.name}: not an nqf run record (foreign file); left alone" in out
        assert f"remove: {truncated}" in out or f"removed: {truncated}" in out
    assert foreign.read_text() == "{}" and not truncated.exists()
    assert ResultsStore(store.root).get("E1", "a", {"x": 1}) == {"y": 1.0}


# -- 7. float targets of shape (N,) for several outputs ---------------------------------------------


def test_one_float_per_sample_says_the_shapes_that_fit_and_the_fix_works(data):
    """With --outputs 4 given (without it, --arch takes its outputs from Y: one)."""
    line = error_line(run_nqf(*predict_args(data["y1d"], "--outputs", "4")))
    assert line == (
        "error: targets Y of shape (32,) (dtype float64) hold one float per sample, but the architecture has 4 "
        "outputs: for one output give it outputs=1 (--outputs 1), which takes Y as (N,) or Y[:, None] of shape "
        "(N, 1); for 4 outputs Y must have shape (N=32, K=4); for classes give integer class labels in [0, 4) "
        "(Y.astype(int))"
    )  # was: "... would be class labels, but they are floats ...; give integer labels in [0, 4) or ..."
    fixed = run_nqf(*predict_args(data["y1d"], "--outputs", "1", "--json"))
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["config"]["arch_options"]["outputs"] == 1


def test_one_float_per_sample_in_the_api_names_both_fixes(data):
    X, y = data["X"], data["Y"][:, 0]
    config = nqf.PredictConfig(width=4, lr=0.1, steps=20, sigma0=0.01)
    four = nqf.get_architecture("mlp")
    with pytest.raises(NqfError, match=r"Y\[:, None\] of shape \(N, 1\); for 4 outputs Y must have shape \(N=32,"):
        nqf.predict(four, X, y, config)
    with pytest.raises(NqfError, match=r"cross-entropy over the architecture's 4 outputs needs integer class labels"):
        nqf.predict(four, X, y, nqf.PredictConfig(width=4, lr=0.1, steps=20, loss="cross_entropy"))
    one = nqf.get_architecture("mlp", outputs=1)
    assert_allclose(
        nqf.predict(one, X, y[:, None], config).flow.loss, nqf.predict(one, X, y, config).flow.loss, rtol=0, atol=0
    )


# -- 8. --overlay: below a level at the first record is no switch-on --------------------------------


def test_loss_switch_steps_leave_out_levels_reached_before_the_curve_begins():
    from nqf.comparison.curves import below_at_start, loss_switch_steps

    steps, loss = np.array([0.0, 1.0, 2.0, 3.0]), np.array([1.5, 1.2, 0.9, 0.5])
    levels = np.array([1.8, 1.5, 1.0, 0.1, np.nan])
    assert below_at_start(loss, levels).tolist() == [True, True, False, False, False]
    assert_allclose(loss_switch_steps(steps, loss, levels), [np.nan, np.nan, 2.0, np.nan, np.nan], rtol=0)


def test_overlay_starting_below_a_modes_level_reports_no_switch_on(data, tmp_path):
    """Was: modes 1-3 "switched on" at step 0, errors -100%."""
    curve = tmp_path / "low.csv"
    curve.write_text("step,loss\n0,1.65\n10,1.64\n50,1.59\n100,1.5\n200,1.4\n")
    done = run_nqf(*predict_args(data["ok"], "--json", "--overlay", curve, steps=200))
    assert done.returncode == 0, done.stderr
    block = json.loads(done.stdout)["overlay"]
    levels = np.array(block["levels"])
    assert_allclose(levels[:3], [1.9004, 1.7682, 1.6515], rtol=1e-4)  # all above the curve's first 1.65
    assert block["below_at_start"] == [True, True, True, False]
    assert block["predicted_below_at_start"] == [False] * 4
    assert block["switch_steps"][:3] == [None] * 3 and block["relative_error"][:3] == [None] * 3
    assert_allclose(block["switch_steps"][3], 50 + (1.59 - levels[3]) / (1.59 - 1.5) * 50, rtol=1e-9)  # 53.9
    assert all(step is not None for step in block["predicted_switch_steps_by_loss"])
    text = run_nqf(*predict_args(data["ok"], "--overlay", curve, steps=200))
    assert text.returncode == 0, text.stderr
    assert (
        "note: the measured loss is already below the level of mode(s) 1, 2, 3 at its first record (step 0): "
        "not a switch-on, so no step there (-)"
    ) in " ".join(text.stdout.split())
