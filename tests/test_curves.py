"""Curves out and in: the measured-curve reader (``nqf.comparison.curves``), switch-on steps read from a
loss (none for a level the curve is already below at its first record), and ``--plot``, ``--csv`` and
``--overlay`` of ``nqf predict`` and ``nqf compare`` through the console script."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nqf
from nqf.comparison.curves import loss_switch_steps, midpoint_levels, read_loss_curve
from nqf.core.errors import NqfError
from tests.conftest import assert_allclose, predict_args

NQF = Path(sys.executable).parent / "nqf"
STEPS = np.array([0.0, 10.0, 20.0, 35.0])
LOSS = np.array([2.5, 2.0, 0.75, 0.125])


# -- reading ---------------------------------------------------------------------------------


def _write(folder: Path, name: str, content) -> Path:
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        np.save(path, content, allow_pickle=True)
    return path


GOOD = {
    "header.csv": "step,loss\n0,2.5\n10,2.0\n20,0.75\n35,0.125\n",
    "reordered-extra-column.csv": "Loss, accuracy ,STEP\n2.5,0.1,0\n2.0,0.2,10\n\n0.75,0.3,20\n0.125,0.4,35\n",
    "no-header.csv": "0,2.5\n10,2\n20,0.75\n35,1.25e-1\n",
    "savetxt-header.txt": "# step,loss\n0.000000000000000000e+00,2.5\n1e1,2.0\n# a comment\n2e1,0.75\n3.5e1,0.125\n",
    "numeric-comment.csv": "# 1,2,3\n0,2.5\n10,2.0\n20,0.75\n35,0.125\n",
    "float.npy": np.stack([STEPS, LOSS], axis=1),
    "int-steps.npy": None,  # made below: an int array cannot hold the losses, so steps and losses x 8
    "dict.json": json.dumps({"step": STEPS.astype(int).tolist(), "loss": LOSS.tolist(), "note": "ignored"}),
    "pairs.json": json.dumps([[int(s), float(v)] for s, v in zip(STEPS, LOSS, strict=True)]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GOOD))
def test_reader_reads_every_format(name, tmp_path):
    expected_loss = LOSS
    content = GOOD[name]
    if name == "int-steps.npy":
        content = np.stack([STEPS, LOSS * 8], axis=1).astype(np.int64)
        expected_loss = LOSS * 8
    curve = read_loss_curve(_write(tmp_path, name, content))
    assert curve.steps.dtype == np.float64 and curve.loss.dtype == np.float64
    np.testing.assert_array_equal(curve.steps, STEPS)
    np.testing.assert_array_equal(curve.loss, expected_loss)
    assert curve.path == str(tmp_path / name)


BAD = {
    # name: (file name, content, message fragment)
    "csv-wrong-columns": ("a.csv", "epoch,value\n0,1\n1,2\n", "no column step or loss"),
    "csv-missing-loss": ("a.csv", "step,train_loss\n0,1\n1,2\n", "no column loss"),
    "csv-three-columns-no-header": ("a.csv", "0,1,2\n1,2,3\n", "exactly two"),
    "csv-one-column": ("a.csv", "0\n1\n", "exactly two"),
    "csv-non-numeric": ("a.csv", "step,loss\n0,1\n1,abc\n", "line 3: 'abc' is not a number"),
    "csv-empty-cell": ("a.csv", "step,loss\n0,1\n1,\n", "line 3: '' is not a number"),
    "csv-ragged": ("a.csv", "step,loss\n0,1\n1,2,3\n", "line 3 has 3 columns, expected 2"),
    "csv-nan": ("a.csv", "step,loss\n0,1\n1,nan\n", "line 3: loss is nan, not finite"),
    "csv-inf-step": ("a.csv", "0,1\ninf,2\n", "line 2: step is inf, not finite"),
    "csv-decreasing": ("a.csv", "step,loss\n0,3\n5,2\n4,1\n", "line 4: step 4 does not increase"),
    "csv-repeated": ("a.csv", "0,3\n5,2\n5,1\n", "step 5 does not increase"),
    "csv-negative": ("a.csv", "step,loss\n-1,3\n5,2\n", "line 2: step -1 is negative"),
    "csv-empty": ("a.csv", "", "no records"),
    "csv-blank": ("a.csv", "\n  \n", "no records"),
    "csv-header-only": ("a.csv", "step,loss\n", "no records"),
    "csv-one-record": ("a.csv", "step,loss\n0,1\n", "only one record"),
    "csv-binary": ("a.csv", bytes(range(256)), "not a text file"),
    "txt-nul": ("a.txt", b"step,loss\n0,1\x00\n", "not a text file"),
    "npy-three-columns": ("a.npy", np.zeros((4, 3)), "shape (4, 3)"),
    "npy-1d": ("a.npy", np.arange(4.0), "shape (4,)"),
    "npy-transposed": ("a.npy", np.zeros((2, 5)), "shape (2, 5)"),
    "npy-empty": ("a.npy", np.zeros((0, 2)), "no records"),
    "npy-complex": ("a.npy", np.zeros((3, 2), dtype=complex), "not real numbers"),
    "npy-strings": ("a.npy", np.array([["0", "1"], ["1", "2"]]), "not real numbers"),
    "npy-bool": ("a.npy", np.ones((3, 2), dtype=bool), "not real numbers"),
    "npy-object": ("a.npy", np.array([[0, 1], [1, None]], dtype=object), "Python objects"),
    "npy-nan": ("a.npy", np.array([[0.0, 1.0], [1.0, np.nan]]), "record 1: loss is nan"),
    "npy-negative": ("a.npy", np.array([[-2.0, 1.0], [1.0, 0.5]]), "record 0: step -2 is negative"),
    "npy-decreasing": ("a.npy", np.array([[0.0, 1.0], [2.0, 0.5], [1.0, 0.2]]), "record 2: step 1 does not increase"),
    "npy-text": ("a.npy", "step,loss\n0,1\n", "cannot read it as .npy"),
    "json-invalid": ("a.json", "{step: [0, 1]}", "not valid JSON"),
    "json-nan-token": ("a.json", '{"step": [0, 1], "loss": [1, NaN]}', "NaN is not a finite number"),
    "json-infinity-token": ("a.json", "[[0, 1], [1, Infinity]]", "Infinity is not a finite number"),
    "json-missing-key": ("a.json", '{"steps": [0, 1], "loss": [1, 2]}', "no key step"),
    "json-lengths": ("a.json", '{"step": [0, 1, 2], "loss": [1, 2]}', "3 steps but 2 losses"),
    "json-string-value": ("a.json", '{"step": [0, 1], "loss": [1, "2"]}', "loss[1] is not a number"),
    "json-bool-value": ("a.json", "[[0, 1], [true, 2]]", "entry 1: step is not a number"),
    "json-triples": ("a.json", "[[0, 1, 2], [1, 2, 3]]", "entry 0 is not a [step, loss] pair"),
    "json-scalar": ("a.json", "3", "holds a int"),
    "json-empty-list": ("a.json", "[]", "no records"),
    "json-not-lists": ("a.json", '{"step": 0, "loss": 1}', "must be lists"),
    "json-negative": ("a.json", '{"step": [-1, 1], "loss": [1, 2]}', "step -1 is negative"),
    "json-huge-overflow": ("a.json", '{"step": [0, 1], "loss": [1, 1e999]}', "loss is inf, not finite"),
    "json-huge-integer": ("a.json", '{"step": [0, 1], "loss": [1, 1' + "0" * 400 + "]}", "record 1: loss is inf"),
    "suffix": ("a.dat", "0,1\n1,2\n", "a .csv, .txt (CSV), .npy or .json file"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BAD))
def test_reader_refuses_bad_curves(name, tmp_path):
    file_name, content, fragment = BAD[name]
    path = _write(tmp_path, file_name, content)
    with pytest.raises(NqfError) as info:
        read_loss_curve(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert fragment in message, message
    assert "\n" not in message


@pytest.mark.slow
def test_reader_refuses_missing_files_and_folders(tmp_path):
    with pytest.raises(NqfError, match="no such file"):
        read_loss_curve(tmp_path / "missing.csv")
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(NqfError, match="is a folder"):
        read_loss_curve(tmp_path / "folder.csv")


# -- switch-on steps from a loss -------------------------------------------------------------


def staircase_loss(t, levels, switches, width):
    """L_last + sum_k (L_{k-1} - L_k) (1 - sigmoid((t - t_k) / width)): at t_k the k-th drop is
    half done and the others (100 steps away, width 3) done or not to e^-33."""
    t = np.asarray(t, dtype=np.float64)[:, None]
    drops = -np.diff(levels)
    return levels[-1] + np.sum(drops / (1.0 + np.exp((t - switches) / width)), axis=1)


@pytest.mark.slow
def test_midpoint_levels_follow_the_activation_order():
    # modes 0..3 activate in the order 2, 0, (1 and 3 at once); plateaus after each activation
    levels = midpoint_levels(
        initial_loss=10.0,
        step_times=np.array([1.0, 2.0, 3.0, 3.0]),
        activation_order=np.array([2, 0, 1, 3]),
        plateau_losses=np.array([6.0, 4.0, 3.0, 1.0]),
        num_modes=5,
    )
    # mode 2: (10 + 6)/2; mode 0: (6 + 4)/2; modes 1 and 3 at once: from 4 to 1; mode 4 never
    assert_allclose(levels[:4], [5.0, 2.5, 8.0, 2.5], rtol=0, atol=0)
    assert math.isnan(levels[4])


@pytest.mark.slow
def test_switch_steps_of_a_staircase_loss():
    """A synthetic staircase with known switch steps 100, 200, 300, 400: found to 0.01 of a step
    with every step recorded (the first step at or below each midpoint) and interpolated
    between records every 7 steps."""
    plateaus = np.array([4.0, 2.0, 1.0, 0.5, 0.2])
    switches = np.array([100.0, 200.0, 300.0, 400.0])
    levels = 0.5 * (plateaus[:-1] + plateaus[1:])
    every = np.arange(0, 601)
    found = loss_switch_steps(every, staircase_loss(every, plateaus, switches, 3.0), levels)
    # at t_k the loss equals the midpoint up to e^-33 either way: the first record at or below is t_k or t_k + 1
    assert np.all((found == switches) | (found == switches + 1)), found
    half = switches + 0.5
    found = loss_switch_steps(every, staircase_loss(every, plateaus, half, 3.0), levels)
    np.testing.assert_array_equal(found, switches + 1)  # first integer step past t_k + 0.5
    sparse = np.arange(0, 601, 7)
    found = loss_switch_steps(sparse, staircase_loss(sparse, plateaus, switches, 3.0), levels)
    # the sigmoid is odd about t_k: the linear interpolation's error is a small fraction of 7 steps
    assert np.all(np.abs(found - switches) < 0.25), found
    # a level never reached, and a NaN level
    found = loss_switch_steps(every, staircase_loss(every, plateaus, switches, 3.0), [0.1, np.nan])
    assert np.all(np.isnan(found))


def test_loss_switch_steps_leave_out_levels_reached_before_the_curve_begins():
    from nqf.comparison.curves import below_at_start

    steps, loss = np.array([0.0, 1.0, 2.0, 3.0]), np.array([1.5, 1.2, 0.9, 0.5])
    levels = np.array([1.8, 1.5, 1.0, 0.1, np.nan])
    assert below_at_start(loss, levels).tolist() == [True, True, False, False, False]
    assert_allclose(loss_switch_steps(steps, loss, levels), [np.nan, np.nan, 2.0, np.nan, np.nan], rtol=0)


@pytest.mark.slow
def test_overlay_of_the_predicted_curve_itself(tmp_path):
    """compare_overlay on the M-flow's own loss curve: zero error; shifted by 25 steps: error 25 / t_k."""
    from nqf.comparison.curves import LossCurve, compare_overlay, prediction_levels
    from nqf.theory.predict.pipeline import PredictConfig, predict

    X, Y = nqf.get_task("staircase").generate(0)
    p = predict(nqf.get_architecture("mlp"), X, Y, PredictConfig(width=32, lr=0.05, steps=600, sigma0=1e-6))
    steps, loss = np.asarray(p.flow.steps, dtype=np.float64), np.asarray(p.flow.loss)
    levels = prediction_levels(p)
    # the staircase's plateaus (1/2) sum_{j > k} s_j^2 with s = 3, 2, 1, 0.5: midpoints by hand
    plateaus = np.array([7.125, 2.625, 0.625, 0.125, 0.0])
    assert_allclose(levels, 0.5 * (plateaus[:-1] + plateaus[1:]), rtol=1e-9, atol=1e-12)
    same = compare_overlay(LossCurve("self", steps, loss), p)
    np.testing.assert_array_equal(same.switch_steps, same.predicted_switch_steps)
    assert np.all(np.isfinite(same.switch_steps)) and np.all(same.relative_error == 0)
    # by hand: the first recorded step at or below each level
    by_hand = [steps[np.argmax(loss <= level)] for level in levels]
    np.testing.assert_array_equal(same.predicted_switch_steps, by_hand)
    shifted = compare_overlay(LossCurve("shifted", steps + 25, loss), p)
    assert_allclose(shifted.switch_steps, same.predicted_switch_steps + 25, rtol=0, atol=1e-12)
    assert_allclose(shifted.relative_error, 25 / same.predicted_switch_steps, rtol=1e-12)
    # by the loss the M-flow switches within a few steps of the occupation convention (m_k = m_k*/2)
    assert np.all(np.abs(same.predicted_switch_steps - p.mflow_switch_steps) <= 0.05 * p.mflow_switch_steps)

    # the figure, with and without the overlay; a wrong suffix is refused
    from nqf.report.predict_plot import plot_prediction

    assert plot_prediction(p, tmp_path / "bare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_prediction(p, tmp_path / "over.pdf", overlay=shifted).read_bytes()[:5] == b"%PDF-"
    with pytest.raises(NqfError, match=".png or .pdf"):
        plot_prediction(p, tmp_path / "x.svg")


# -- the console script ----------------------------------------------------------------------


def run_nqf(*args: str, cwd=None) -> subprocess.CompletedProcess:
    assert NQF.exists(), f"console script {NQF} is missing: pip install -e . first"
    return subprocess.run([str(NQF), *args], capture_output=True, text=True, timeout=600, cwd=cwd, check=False)


def strict_json(text: str):
    def refuse(token):
        raise ValueError(f"non-finite token {token} in the JSON")

    return json.loads(text, parse_constant=refuse)


def read_table(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow  # through the console script
def test_predict_plot_csv_overlay(tmp_path):
    """nqf predict --plot --csv --overlay: an overlay that is the predicted curve 40 steps late
    reports switch-on steps 40 later and errors 40 / t_k (to 1e-9); the tables hold the curves."""
    X, Y = nqf.get_task("staircase").generate(0)
    data = tmp_path / "data.npz"
    np.savez(data, X=np.asarray(X), Y=np.asarray(Y))
    common = [
        "predict",
        "--data",
        str(data),
        "--arch",
        "mlp",
        "--width",
        "32",
        "--sigma0",
        "1e-6",
        "--lr",
        "0.05",
        "--steps",
        "600",
    ]
    first = run_nqf(*common, "--json")
    assert first.returncode == 0, first.stderr
    base = strict_json(first.stdout)
    steps, loss = np.array(base["mflow"]["steps"], dtype=float), np.array(base["mflow"]["loss"])
    shift = 40
    overlay = tmp_path / "measured.csv"
    np.savetxt(overlay, np.stack([steps + shift, loss], axis=1), delimiter=",", header="step,loss")
    figure, tables = tmp_path / "predict.png", tmp_path / "tables"
    out = run_nqf(*common, "--json", "--plot", str(figure), "--csv", str(tables), "--overlay", str(overlay))
    assert out.returncode == 0, out.stderr
    result = strict_json(out.stdout)
    assert result["mflow"] == base["mflow"]  # the overlay changes nothing else
    block = result["overlay"]
    assert block["file"] == str(overlay) and block["records"] == steps.size
    # the shifted curve runs past the prediction's horizon: said, and counted
    assert block["horizon"] == steps[-1]
    assert block["records_beyond_horizon"] == np.count_nonzero(steps + shift > steps[-1]) > 0
    predicted = np.array(block["predicted_switch_steps_by_loss"], dtype=float)
    assert predicted.size == 4 and np.all(np.isfinite(predicted))
    levels = np.array(block["levels"])
    assert_allclose(predicted, [steps[np.argmax(loss <= level)] for level in levels], rtol=0, atol=0)
    assert_allclose(block["switch_steps"], predicted + shift, rtol=0, atol=1e-9)
    assert_allclose(block["relative_error"], shift / predicted, rtol=1e-9)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 10_000

    rows = read_table(tables / "curves.csv")
    assert list(rows[0]) == ["source", "optimizer", "seed", "step", "loss"]
    mflow = [r for r in rows if r["source"] == "mflow"]
    assert [int(r["step"]) for r in mflow] == base["mflow"]["steps"]
    assert [float(r["loss"]) for r in mflow] == base["mflow"]["loss"]  # shortest repr: exact round trip
    assert {r["optimizer"] for r in mflow} == {"gd"} and {r["seed"] for r in mflow} == {"0"}
    assert len([r for r in rows if r["source"] == "lv"]) == steps.size
    assert [float(r["step"]) for r in rows if r["source"] == "overlay"] == (steps + shift).tolist()
    modes = read_table(tables / "modes.csv")
    by = {(r["source"], r["convention"], r["mode"]): r for r in modes}
    for k in range(4):
        mode = str(k + 1)
        assert float(by["mflow", "occupation", mode]["switch_step"]) == result["mflow"]["switch_steps"][k]
        assert float(by["lv", "occupation", mode]["switch_step"]) == result["lv"]["switch_steps"][k]
        assert float(by["singular_limit", "occupation", mode]["plateau_loss"]) == result["lv"]["plateau_losses"][k]
        assert float(by["overlay", "loss", mode]["switch_step"]) == block["switch_steps"][k]
        assert float(by["mflow", "loss", mode]["switch_step"]) == block["predicted_switch_steps_by_loss"][k]

    # the table output and a PDF; a bad overlay is refused before any compute
    pdf = tmp_path / "predict.pdf"
    text = run_nqf(*common, "--plot", str(pdf), "--overlay", str(overlay))
    assert text.returncode == 0, text.stderr
    assert "measured curve" in text.stdout and f"+{100 * shift / predicted[0]:.1f}%" in text.stdout
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 5_000
    bad = tmp_path / "bad.csv"
    bad.write_text("step,loss\n0,1\n0,2\n")
    refused = run_nqf(*common, "--overlay", str(bad), "--csv", str(tmp_path / "never"))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"error: --overlay {bad}: line 3: step 0 does not increase (after step 0); steps must be strictly increasing"
    ]
    assert not (tmp_path / "never").exists()


@pytest.mark.slow  # through the console script
def test_overlay_starting_below_a_modes_level_reports_no_switch_on(mlp_data, tmp_path):
    """Was: modes 1-3 "switched on" at step 0, errors -100%."""
    curve = tmp_path / "low.csv"
    curve.write_text("step,loss\n0,1.65\n10,1.64\n50,1.59\n100,1.5\n200,1.4\n")
    done = run_nqf(*predict_args(mlp_data["ok"], "--json", "--overlay", curve, steps=200))
    assert done.returncode == 0, done.stderr
    block = json.loads(done.stdout)["overlay"]
    levels = np.array(block["levels"])
    assert_allclose(levels[:3], [1.9004, 1.7682, 1.6515], rtol=1e-4)  # all above the curve's first 1.65
    assert block["below_at_start"] == [True, True, True, False]
    assert block["predicted_below_at_start"] == [False] * 4
    assert block["switch_steps"][:3] == [None] * 3 and block["relative_error"][:3] == [None] * 3
    assert_allclose(block["switch_steps"][3], 50 + (1.59 - levels[3]) / (1.59 - 1.5) * 50, rtol=1e-9)  # 53.9
    assert all(step is not None for step in block["predicted_switch_steps_by_loss"])
    text = run_nqf(*predict_args(mlp_data["ok"], "--overlay", curve, steps=200))
    assert text.returncode == 0, text.stderr
    assert (
        "note: the measured loss is already below the level of mode(s) 1, 2, 3 at its first record (step 0): "
        "not a switch-on, so no step there (-)"
    ) in " ".join(text.stdout.split())


@pytest.mark.slow  # through the console script
def test_compare_json_and_csv_carry_every_curve(tmp_path):
    """nqf compare --json: every curve (network per optimizer, quadratic model, M-flow and LV per
    flow) for every seed at the recorded steps, strict JSON; --csv: the same numbers as tables."""
    overlay = tmp_path / "measured.json"
    figure, tables = tmp_path / "compare.png", tmp_path / "out"
    tables.mkdir()
    args = [
        "compare",
        "--task",
        "staircase",
        "--width",
        "32",
        "--sigma0",
        "1e-6",
        "--lr",
        "0.05",
        "--steps",
        "150",
        "--optimizers",
        "gd,momentum",
        "--seeds",
        "2",
        "--json",
        "--plot",
        str(figure),
        "--csv",
        str(tables),
    ]
    first = run_nqf(*args)
    assert first.returncode == 0, first.stderr
    data = strict_json(first.stdout)
    curves = data["curves"]
    assert set(curves) == {"network", "quadratic", "mflow", "lv"}
    assert set(curves["network"]) == {"gd", "momentum"} and set(curves["mflow"]) == {"gd", "momentum"}
    assert set(curves["lv"]) == {"gd", "momentum"} and set(curves["quadratic"]) == {"gd"}
    for source, by_opt in curves.items():
        for opt, entry in by_opt.items():
            assert entry["seeds"] == [0, 1] == data["seeds"]
            assert entry["steps"] == list(range(151)), (source, opt)
            assert len(entry["loss"]) == 2 and all(len(seed) == 151 for seed in entry["loss"])
            assert all(v is not None and v > 0 for seed in entry["loss"] for v in seed), (source, opt)
    # the quadratic model reproduces the GD M-flow, seed by seed; the seeds differ
    assert_allclose(curves["quadratic"]["gd"]["loss"], curves["mflow"]["gd"]["loss"], rtol=0, atol=1e-8)
    assert curves["network"]["gd"]["loss"][0] != curves["network"]["gd"]["loss"][1]
    # the per-mode numbers still match the curves' switch steps
    assert [m["mode"] for m in data["modes"]] == [1, 2, 3, 4]
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 10_000

    rows = read_table(tables / "curves.csv")
    assert len(rows) == sum(2 * 151 for by_opt in curves.values() for _ in by_opt)
    for source, by_opt in curves.items():
        for opt, entry in by_opt.items():
            for j, seed in enumerate(entry["seeds"]):
                got = [
                    float(r["loss"])
                    for r in rows
                    if (r["source"], r["optimizer"], r["seed"]) == (source, opt, str(seed))
                ]
                assert got == entry["loss"][j], (source, opt, seed)
    modes = read_table(tables / "modes.csv")
    net = {
        (r["optimizer"], r["seed"], r["mode"]): r
        for r in modes
        if r["source"] == "network" and r["convention"] == "occupation"
    }
    for m in data["modes"]:
        for opt in ("gd", "momentum"):
            steps = data["modes"][m["mode"] - 1]["network_seeds"][opt]["steps"]
            for j, seed in enumerate((0, 1)):
                cell = net[opt, str(seed), str(m["mode"])]["switch_step"]
                assert (None if cell == "" else float(cell)) == steps[j]

    # an overlay: the GD M-flow curve of seed 0, 10 steps late
    gd = curves["mflow"]["gd"]
    overlay.write_text(json.dumps({"step": [s + 10 for s in gd["steps"]], "loss": gd["loss"][0]}))
    second = run_nqf(*args[:-2], "--overlay", str(overlay))
    assert second.returncode == 0, second.stderr
    block = strict_json(second.stdout)["overlay"]
    assert block["against"] == "M-flow (gd), seed 0"
    switched = [k for k, t in enumerate(block["predicted_switch_steps_by_loss"]) if t is not None]
    assert switched[:2] == [0, 1]  # modes 1 and 2 switch within 150 steps
    for k in switched:
        assert block["switch_steps"][k] == block["predicted_switch_steps_by_loss"][k] + 10
        assert math.isclose(block["relative_error"][k], 10 / block["predicted_switch_steps_by_loss"][k], rel_tol=1e-12)
