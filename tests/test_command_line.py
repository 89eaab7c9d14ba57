"""One command line (issue 32, item 4), through the real command: an architecture named on the
command line takes its input and output sizes from the data as ``nqf.predict`` does with a name;
a size that does not fit says which option to change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nqf
from nqf.theory.predict.pipeline import PredictConfig
from tests.conftest import run_cli

pytestmark = pytest.mark.slow  # starts the console script

NQF = Path(sys.executable).parent / "nqf"
RUN = ["--width", "8", "--sigma0", "1e-6", "--lr", "0.5", "--steps", "150"]


def _nqf(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([str(NQF), *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def wine(tmp_path_factory) -> tuple[Path, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    Y = np.eye(3)[y] - np.eye(3)[y].mean(0)
    path = tmp_path_factory.mktemp("data") / "wine.npz"
    np.savez(path, X=X, Y=Y)
    return path, X, Y


def test_arch_takes_its_sizes_from_the_data(wine):
    path, X, Y = wine
    done = _nqf("predict", "--data", path, "--arch", "mlp", *RUN, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["config"]["arch_options"]["inputs"] == 13 and result["config"]["arch_options"]["outputs"] == 3
    api = nqf.predict("mlp", X, Y, PredictConfig(width=8, lr=0.5, steps=150, sigma0=1e-6))
    assert result["mflow"]["switch_steps"] == [None if np.isnan(v) else float(v) for v in api.mflow_switch_steps]


def test_a_size_that_does_not_fit_names_the_option(wine):
    path, _, _ = wine
    done = _nqf("predict", "--data", path, "--arch", "mlp", "--inputs", "8", *RUN)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ") and "give --inputs 13" in done.stderr


def test_compare_takes_data_as_predict_does(wine):
    """``compare --data FILE`` is ``compare --task npz --path FILE`` (``predict --data FILE`` reads the same)."""
    path, _, _ = wine
    by_data = _nqf("compare", "--data", path, *RUN, "--json")
    by_task = _nqf("compare", "--task", "npz", "--path", path, *RUN, "--json")
    assert by_data.returncode == 0 and by_task.returncode == 0, by_data.stderr + by_task.stderr
    first, second = json.loads(by_data.stdout), json.loads(by_task.stdout)
    assert first["task"] == "npz" and first["task_options"]["path"] == str(path)
    assert first["modes"] == second["modes"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((), "compare needs --task TASK (a built-in task) or --data FILE.npz"),
        (("--task", "staircase", "--data", "{path}"), "give --task staircase or --data"),
        (("--data", "{path}", "--path", "{path}"), "give --data FILE or --path FILE, not both"),
    ],
)
def test_compare_takes_a_task_or_data_not_both(wine, args, fragment):
    path, _, _ = wine
    done = _nqf("compare", *(a.format(path=path) for a in args), *RUN)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and fragment in done.stderr, done.stderr


@pytest.mark.parametrize(("command", "names"), [("predict", ("--inputs", "--outputs")), ("compare", ("--path",))])
def test_help_names_the_options_that_follow_as_name_value(command, names):
    done = _nqf(command, "--help")
    assert done.returncode == 0
    for name in names:
        assert name in done.stdout, (name, done.stdout)


def test_the_overlay_names_the_w0_it_was_compared_with(wine, tmp_path):
    """With --init the overlay's header names the file W0 came from (it said "seed 0")."""
    path, _, _ = wine
    W0 = 1e-6 * np.random.default_rng(5).normal(size=(16, 8))  # mlp on wine: d = 13 + 3
    np.savez(tmp_path / "w0.npz", W=W0)
    steps = np.arange(0, 151, 5)
    np.savetxt(tmp_path / "curve.csv", np.c_[steps, 0.33 * np.exp(-steps / 80.0)], delimiter=",", header="step,loss")
    args = ["predict", "--data", path, "--arch", "mlp", "--width", "8", "--lr", "0.5", "--steps", "150"]
    given = _nqf(*args, "--init", tmp_path / "w0.npz", "--overlay", tmp_path / "curve.csv", "--json")
    drawn = _nqf(*args, "--sigma0", "1e-6", "--seed", "3", "--overlay", tmp_path / "curve.csv", "--json")
    assert given.returncode == 0 and drawn.returncode == 0, given.stderr + drawn.stderr
    assert json.loads(given.stdout)["overlay"]["against"] == "M-flow (gd), W0 from w0.npz"
    assert json.loads(drawn.stdout)["overlay"]["against"] == "M-flow (gd), seed 3"


def test_the_prediction_block_leads_and_carries_the_networks_own_steps():
    """``to_json()`` leads with ``prediction`` (the M-flow's steps and plateaus, the conventions
    stated); each mode also has the network's own predicted step (the mean-field flow, on by
    default), and the departure block is the curve alone."""
    X, Y = nqf.get_task("staircase").generate(0)
    config = PredictConfig(width=32, lr=0.05, steps=800, sigma0=1e-6, departure=True)
    prediction = nqf.predict(nqf.get_architecture("mlp", activation="tanh"), X, Y, config)
    result = prediction.to_json()
    assert next(iter(result)) == "prediction"
    block = result["prediction"]
    assert "half its LV fixed point" in block["switch_convention"] and "log-midpoint" in block["plateau_convention"]
    assert [row["switch_step"] for row in block["modes"]] == result["mflow"]["switch_steps"]
    own = [row["network_switch_step"] for row in block["modes"]]
    assert own == result["network"]["switch_steps"] and all(v is not None for v in own)
    assert "network_corrected_switch_step" not in block["modes"][0]
    assert set(result["departure"]) == {"steps", "relative_gap", "network_loss", "quadratic_loss"} | {
        "samples",
        "subsampled",
        "notes",
    }


@pytest.mark.slow  # two comparisons through the console script, ~10 s each
def test_compare_leads_with_the_prediction_against_the_network():
    """``nqf compare``: the first table is the prediction (each optimizer's M-flow) against the
    network, the analysis (limit, LV, the quadratic model) after it; the JSON leads with a
    ``prediction`` block whose steps are the M-flow's, null for an optimizer without one."""
    args = ["compare", "--task", "staircase", "--width", "8", "--steps", "300", "--sigma0", "1e-3", "--lr", "0.05"]
    args += ["--optimizers", "gd,adam"]
    text = _nqf(*args)
    assert text.returncode == 0, text.stderr
    assert 0 <= text.stdout.index("prediction (the M-flow) against the network") < text.stdout.index("analysis:")
    done = _nqf(*args, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert next(iter(result)) == "prediction"
    rows = result["prediction"]["modes"]
    assert [row["switch_step"]["gd"] for row in rows] == [
        m["predicted_by_optimizer"]["gd"]["mflow"] for m in result["modes"]
    ]
    assert all(row["switch_step"]["adam"] is None and row["relative_error"]["adam"] is None for row in rows)
    assert [row["network_switch_step"] for row in rows] == [m["measured"]["network"] for m in result["modes"]]


SWALLOWING_UNIT = """
import time

import equinox as eqx
import jax
import jax.numpy as jnp


class Perceptron(eqx.Module):
    a: jax.Array
    v: jax.Array

    def __call__(self, x):
        return self.a * jnp.tanh(jnp.dot(self.v, x))


def swallows(input_shape, outputs):
    print("started", flush=True)
    end = time.monotonic() + 120
    while time.monotonic() < end:  # a unit whose code swallows Ctrl-C and goes on for minutes
        try:
            time.sleep(0.1)
        except KeyboardInterrupt:
            pass
    return Perceptron(jnp.zeros(outputs), jnp.zeros(input_shape[0]))
"""


def test_ctrl_c_swallowed_on_its_way_still_ends_the_command(tmp_path):
    """Ctrl-C whose KeyboardInterrupt is swallowed (here by a unit's own code; once seen under load
    in `compare`, which then ran on for minutes): the command still prints ``interrupted: ...`` and
    exits 130, SWALLOWED_GRACE_S (20 s) after the signal."""
    import signal
    import time

    (tmp_path / "units.py").write_text(SWALLOWING_UNIT)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    args = [str(NQF), "structure", "--unit", f"{tmp_path / 'units.py'}:swallows", "--inputs", "4", "--outputs", "2"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    # the unit's print goes to stderr (nqf keeps stdout for its results): its loop runs from there on
    assert proc.stderr is not None and proc.stderr.readline().strip() == "started"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=90)
    waited = time.monotonic() - sent
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines()[-1].startswith("interrupted:") and "Traceback" not in err, err
    assert 15 < waited < 60, waited  # the handler ran, the unit swallowed it: the watcher's grace


def test_ctrl_c_raised_inside_a_finalizer_is_delivered_again(capsys):
    """A SIGINT whose handler runs inside a finalizer (JAX's garbage-collection callback, in a CI
    run) raises KeyboardInterrupt where Python swallows it with an "Exception ignored" traceback;
    the CLI's unraisable hook stays silent and delivers SIGINT again from outside."""
    import signal
    import time

    from nqf.cli import _watch_interrupt

    class InterruptedWhileFinalized:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # the handler runs here, inside the finalizer

    interrupted: list[bool] = []
    restore = _watch_interrupt(interrupted)
    assert restore is not None
    try:
        with pytest.raises(KeyboardInterrupt):
            finalized = InterruptedWhileFinalized()
            del finalized
            time.sleep(5)  # the redelivered interrupt ends this within about 0.05 s
    finally:
        restore()
    assert len(interrupted) == 2, interrupted
    assert "Exception ignored" not in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# predict takes the built-in tasks as compare does (--task NAME [task options] --data-seed D)
TASK_RUN = ["--width", "8", "--sigma0", "1e-3", "--lr", "0.05", "--steps", "300"]


def _steps(values) -> list[float | None]:
    return [None if v is None or np.isnan(v) else float(v) for v in values]


def test_predict_takes_a_task_as_compare_does(capsys, tmp_path):
    """``predict --task staircase`` predicts the switch-on steps of ``compare --task staircase``'s
    M-flow column (same W0, data and flow), and of ``predict --data`` on the same data saved as
    npz with the task's natural architecture; ``--task npz --path FILE`` reads that file alike."""
    code, out, err = run_cli(["predict", "--task", "staircase", *TASK_RUN, "--json"], capsys)
    assert code == 0, err
    by_task = json.loads(out)["mflow"]["switch_steps"]
    assert by_task == [48.0, 72.0, 126.0, 255.0]  # measured; the four modes of the staircase
    code, out, err = run_cli(["compare", "--task", "staircase", *TASK_RUN, "--json"], capsys)
    assert code == 0, err
    compared = json.loads(out)
    assert [row["predicted_by_optimizer"]["gd"]["mflow"] for row in compared["modes"]] == by_task
    assert [row["predicted"]["mflow"] for row in compared["modes"]] == by_task

    task = nqf.get_task("staircase")
    X, Y = task.generate(0, "float64")
    np.savez(tmp_path / "staircase.npz", X=np.asarray(X), Y=np.asarray(Y))
    name, options = task.natural_architecture()
    arch_args = [f"--{key}={value}" for key, value in options.items()]
    code, out, err = run_cli(
        ["predict", "--data", tmp_path / "staircase.npz", "--arch", name, *arch_args, *TASK_RUN, "--json"], capsys
    )
    assert code == 0, err
    assert json.loads(out)["mflow"]["switch_steps"] == by_task
    code, out, err = run_cli(
        ["predict", "--task", "npz", "--path", tmp_path / "staircase.npz", *TASK_RUN, "--json"], capsys
    )
    assert code == 0, err
    assert json.loads(out)["mflow"]["switch_steps"] == by_task


def test_predict_takes_the_task_options_and_data_seed_as_compare_does(capsys):
    """Task options, the natural architecture's options and --data-seed go where compare sends them."""
    args = ("--task", "staircase", "--samples", "128", "--activation", "tanh", "--data-seed", "3", *TASK_RUN)
    code, out, err = run_cli(["predict", *args, "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    task = nqf.get_task("staircase", samples=128)
    X, Y = task.generate(3, "float64")
    api = nqf.predict(task.architecture(), X, Y, PredictConfig(width=8, lr=0.05, steps=300, sigma0=1e-3))
    assert result["mflow"]["switch_steps"] == _steps(api.mflow_switch_steps)
    assert result["config"]["arch_options"] == {"inputs": 8, "outputs": 4, "activation": "tanh"}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--arch", "mlp"), "predict needs --task TASK (a built-in task) or --data FILE.npz"),
        (("--task", "staircase", "--data", "{path}"), "give --task staircase or --data"),
        (("--data", "{path}", "--arch", "mlp", "--path", "{path}"), "give --data FILE or --path FILE, not both"),
        (("--data", "{path}", "--arch", "mlp", "--data-seed", "1"), "--data-seed is the seed of a task's data"),
        (("--task", "staircase", "--arch", "mlp", "--unit", "u.py:f"), "give --arch NAME or --unit"),
        (("--task", "nope"), "unknown task 'nope'"),
        (("--task", "staircase", "--colour", "red"), "no option --colour here"),
    ],
)
def test_predict_takes_a_task_or_data_not_both(wine, args, fragment):
    path, _, _ = wine
    done = _nqf("predict", *(a.format(path=path) for a in args), *RUN)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and fragment in done.stderr, done.stderr
