"""``--unit FILE.py:FUNCTION`` through the installed console script: a user's Equinox tanh
perceptron on the user's npz data in ``structure``, ``predict`` and ``compare``, the same
numbers as ``--arch mlp``, and every bad unit as one ``error:`` line with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import nqf
from tests.conftest import assert_allclose

pytestmark = pytest.mark.slow  # through the installed console script

NQF = Path(sys.executable).parent / "nqf"

UNIT_FILE = textwrap.dedent(
    '''
    """A user's own unit: the tanh perceptron a tanh(v . x) as an Equinox module."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp


    class Perceptron(eqx.Module):
        a: jax.Array
        v: jax.Array

        def __call__(self, x):
            return self.a * jnp.tanh(jnp.dot(self.v, x))


    class Relu(Perceptron):
        def __call__(self, x):
            return self.a * jax.nn.relu(jnp.dot(self.v, x))


    class Counter(eqx.Module):
        count: int = 3

        def __call__(self, x):
            return x


    def perceptron(input_shape, outputs):
        (inputs,) = input_shape
        return Perceptron(jnp.zeros(outputs), jnp.zeros(inputs))


    def fixed():
        return Perceptron(jnp.zeros(3), jnp.zeros(8)), (8,), 3


    def bare():
        return Perceptron(jnp.zeros(3), jnp.zeros(4))


    def relu(input_shape, outputs):
        return Relu(jnp.zeros(outputs), jnp.zeros(input_shape[0]))


    def broken():
        raise ValueError("no weights today")


    def number():
        return 42


    def no_arrays():
        return Counter(), (4,), 3


    def needs(depth):
        return None


    not_a_function = 3
    '''
)


def run_nqf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    assert NQF.exists(), f"console script {NQF} is missing: pip install -e . first"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([str(NQF), *args], capture_output=True, text=True, env=env, timeout=300, cwd=cwd)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("unit")
    unit = folder / "my_unit.py"
    unit.write_text(UNIT_FILE)
    task = nqf.get_task("staircase", inputs=4, outputs=3, singular_values=(3.0, 2.0, 1.0), samples=64)
    X, Y = (np.asarray(a) for a in task.generate(0))
    data = folder / "data.npz"
    np.savez(data, X=X, Y=Y)
    (folder / "notes.txt").write_text("not python\n")
    (folder / "raises.py").write_text("raise RuntimeError('import failed')\n")
    return {"unit": unit, "data": data, "folder": folder}


PREDICT = ["--width", "8", "--sigma0", "1e-6", "--lr", "0.05", "--steps", "400", "--json"]


def test_structure_of_a_unit_file(files):
    out = run_nqf("structure", "--unit", f"{files['unit']}:perceptron", "--inputs", "4", "--outputs", "3", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["arch"] == "my_unit.py:perceptron" and data["d"] == 7 and data["outputs"] == 3
    assert data["input_shape"] == [4]
    assert [b["name"] for b in data["parameter_blocks"]] == ["a", "v"]
    assert [(b["rows"], b["cols"]) for b in data["blocks"]] == [("a", "v")]
    assert data["expansion"]["applies"] is True and data["closed_form"] == []
    # the unit file was only read: no bytecode written next to it
    assert not (files["folder"] / "__pycache__").exists()


def test_predict_with_unit_equals_arch_mlp(files):
    unit = run_nqf("predict", "--data", str(files["data"]), "--unit", f"{files['unit']}:perceptron", *PREDICT)
    assert unit.returncode == 0, unit.stderr
    mlp = run_nqf("predict", "--data", str(files["data"]), "--arch", "mlp", "--inputs", "4", "--outputs", "3", *PREDICT)
    assert mlp.returncode == 0, mlp.stderr
    got, expected = json.loads(unit.stdout), json.loads(mlp.stdout)
    steps = np.asarray(expected["mflow"]["switch_steps"], dtype=float)
    assert len(steps) == 3 and np.all(np.isfinite(steps))
    assert_allclose(np.asarray(got["mflow"]["switch_steps"], dtype=float), steps, rtol=1e-9)
    assert_allclose(got["lv"]["switch_steps"], expected["lv"]["switch_steps"], rtol=1e-9)


def test_compare_with_unit_on_npz(files):
    common = [
        "--task",
        "npz",
        "--path",
        str(files["data"]),
        "--width",
        "8",
        "--sigma0",
        "1e-4",
        "--lr",
        "0.05",
        "--steps",
        "300",
        "--json",
    ]
    unit = run_nqf("compare", *common, "--unit", f"{files['unit']}:perceptron")
    assert unit.returncode == 0, unit.stderr
    natural = run_nqf("compare", *common)  # the npz task's natural architecture: mlp, tanh
    assert natural.returncode == 0, natural.stderr
    got, expected = json.loads(unit.stdout), json.loads(natural.stdout)
    assert got["arch"] == "my_unit.py:perceptron" and expected["arch"] == "mlp"
    assert len(got["modes"]) == len(expected["modes"]) == 3
    for mine, theirs in zip(got["modes"], expected["modes"], strict=True):
        assert_allclose(mine["predicted"]["mflow"], theirs["predicted"]["mflow"], rtol=1e-9)
        # the trained network is the same function of the same W0 (rounding may differ)
        assert abs(mine["measured"]["network"]["gd"] - theirs["measured"]["network"]["gd"]) <= 1
        assert abs(mine["measured"]["network"]["gd"] - mine["predicted"]["mflow"]) <= 0.2 * mine["predicted"]["mflow"]


# (id, arguments, a fragment of the error line); {unit} the unit file, {folder} its folder, {data} the npz
BAD = [
    ("missing-file", ["structure", "--unit", "{folder}/missing.py:f"], "does not exist"),
    ("not-py", ["structure", "--unit", "{folder}/notes.txt:f"], "is not a .py file"),
    ("no-function-part", ["structure", "--unit", "{unit}"], "no :FUNCTION part"),
    ("function-missing", ["structure", "--unit", "{unit}:absent"], "has no function 'absent'"),
    ("not-a-function", ["structure", "--unit", "{unit}:not_a_function"], "not a function"),
    ("file-raises", ["structure", "--unit", "{folder}/raises.py:f"], "raised RuntimeError: import failed"),
    ("function-raises", ["structure", "--unit", "{unit}:broken"], "raised ValueError: no weights today"),
    ("returns-int", ["structure", "--unit", "{unit}:number"], "returned int"),
    ("no-arrays", ["structure", "--unit", "{unit}:no_arrays"], "no trainable"),
    ("extra-argument", ["structure", "--unit", "{unit}:needs"], "takes an argument 'depth'"),
    ("shapes-unknown", ["structure", "--unit", "{unit}:perceptron"], "give --inputs"),
    ("bare-module-without-shapes", ["structure", "--unit", "{unit}:bare"], "give --inputs"),
    ("structure-with-arch", ["structure", "mlp", "--unit", "{unit}:fixed"], "not both"),
    ("relu", ["structure", "--unit", "{unit}:relu", "--inputs", "4", "--outputs", "3"], "not smooth at w = 0"),
    (
        "predict-unit-inputs-8-data-4",
        ["predict", "--data", "{data}", *PREDICT, "--unit", "{unit}:fixed"],
        "takes inputs of shape (8,), but the data",
    ),
    (
        "predict-inputs-disagree",
        ["predict", "--data", "{data}", *PREDICT, "--unit", "{unit}:perceptron", "--inputs", "5"],
        "--inputs 5 disagrees with the data",
    ),
    (
        "predict-with-arch",
        ["predict", "--data", "{data}", *PREDICT, "--unit", "{unit}:perceptron", "--arch", "mlp"],
        "not both",
    ),
    (
        "predict-unknown-option",
        ["predict", "--data", "{data}", *PREDICT, "--unit", "{unit}:perceptron", "--depth", "2"],
        "no option --depth",
    ),
    (
        "compare-npz-conflict",
        [
            "compare",
            "--task",
            "npz",
            "--path",
            "{data}",
            "--unit",
            "{unit}:fixed",
            "--width",
            "4",
            "--sigma0",
            "0.01",
            "--lr",
            "0.1",
            "--steps",
            "10",
        ],
        "takes inputs of shape (8,)",
    ),
    (
        "compare-with-arch",
        [
            "compare",
            "--task",
            "npz",
            "--path",
            "{data}",
            "--unit",
            "{unit}:fixed",
            "--arch",
            "mlp",
            "--width",
            "4",
            "--sigma0",
            "0.01",
            "--lr",
            "0.1",
            "--steps",
            "10",
        ],
        "not both",
    ),
]


@pytest.mark.parametrize("args, fragment", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_unit_is_one_error_line(files, args, fragment):
    names = {"unit": files["unit"], "folder": files["folder"], "data": files["data"]}
    line = one_error_line(run_nqf(*(a.format(**names) for a in args)))
    assert fragment in line, line
