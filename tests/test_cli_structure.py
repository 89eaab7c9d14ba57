"""``nqf structure`` through the installed console script (each call pays the JAX import)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nqf import ARCHITECTURES, architecture_options, get_architecture

pytestmark = pytest.mark.slow  # through the installed console script

NQF = Path(sys.executable).parent / "nqf"


def run_nqf(*args: str) -> subprocess.CompletedProcess:
    assert NQF.exists(), f"console script {NQF} is missing: pip install -e . first"
    return subprocess.run([str(NQF), *args], capture_output=True, text=True, timeout=300)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize(
    "name, options, status",
    [(name, (), 0) for name in ARCHITECTURES] + [("mlp", ("--activation", "relu"), 2)],
)
def test_json_schema(name, options, status):
    result = run_nqf("structure", name, *options, "--json")
    assert result.returncode == status, result.stderr
    data = json.loads(result.stdout)  # strict JSON: exactly one object on stdout
    arch = get_architecture(name, **{options[0][2:]: options[1]} if options else {})
    assert data["arch"] == name
    assert data["d"] == arch.dim and data["outputs"] == arch.outputs
    assert data["options"] == {k: v for k, v in arch.options}
    names = {b.name for b in arch.blocks}
    for block in data["blocks"]:
        assert set(block) == {"rows", "cols", "norm"}
        assert block["rows"] in names and block["cols"] in names and block["norm"] > 0
    expansion = data["expansion"]
    assert isinstance(expansion["applies"], bool) and expansion["applies"] == (status == 0)
    assert isinstance(expansion["reason"], str) and expansion["reason"]
    order = expansion["remainder_order"]
    assert order is None or isinstance(order, float)
    if data["closed_form_max_relative_error"] is not None:
        assert data["closed_form_max_relative_error"] < 1e-12  # closed form = autodiff in float64
    if status == 0:
        assert data["blocks"], "the quadratic form of a built-in architecture couples some blocks"

    # closed forms of the coupled block at the sample input x = default_rng(seed 0) normal
    x = np.random.default_rng(0).standard_normal(arch.input_shape)
    if name == "mlp" and status == 0:
        # A_c[a, v] = sigma'(0)/2 e_c x^T with sigma'(0) = 1 (tanh): |A[a, v]| = sqrt(K) |x| / 2
        assert [(b["rows"], b["cols"]) for b in data["blocks"]] == [("a", "v")]
        assert math.isclose(data["blocks"][0]["norm"], math.sqrt(arch.outputs) * np.linalg.norm(x) / 2, rel_tol=1e-12)
    if name == "attention":
        # uniform attention at w = 0: only W_V x W_O couple, A_c[V_ab, O_bc] = xbar_a / 2
        xbar = x.mean(axis=0)
        dv = arch.block("W_O").shape[0]
        assert [{b["rows"], b["cols"]} for b in data["blocks"]] == [{"W_V", "W_O"}]
        expected = math.sqrt(arch.outputs * dv) * np.linalg.norm(xbar) / 2
        assert math.isclose(data["blocks"][0]["norm"], expected, rel_tol=1e-12)
    if status == 2:
        assert data["blocks"] == []  # autodiff's relu''(0) = relu'(0) = 0: A = 0
        assert expansion["reason"].startswith("not smooth at w = 0")


def test_relu_prints_one_line_and_exits_2():
    result = run_nqf("structure", "mlp", "--activation", "relu")
    assert result.returncode == 2
    assert result.stdout == ""
    line = one_error_line(result)
    assert "does not apply" in line and "not smooth at w = 0" in line


def test_list_shows_every_architecture_with_its_options():
    result = run_nqf("structure", "--list", "--json")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)["architectures"]
    assert [e["name"] for e in entries] == list(ARCHITECTURES)
    for entry in entries:
        assert entry["options"] == architecture_options(entry["name"])
        assert entry["description"]


def test_text_output_prints_small_blocks_with_options_in_both_spellings():
    # mlp-fixed with square: A = x x^T / 2 for x = default_rng(3) normal, printed in full (3 x 3)
    result = run_nqf("structure", "mlp-fixed", "--inputs=3", "--activation", "square", "--seed", "3")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "mlp-fixed (inputs=3, activation=square)" in out
    assert "expansion: applies" in out and "v x v" in out and "A[v, v]:" in out
    x = np.random.default_rng(3).standard_normal(3)
    printed = out.split("A[v, v]:")[1].replace("[", " ").replace("]", " ").split()[:9]
    np.testing.assert_allclose(np.array(printed, dtype=float).reshape(3, 3), np.outer(x, x) / 2, atol=6e-4)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("structure", "transformer"), "unknown architecture 'transformer'"),
        (("structure", "mlp", "--width", "3"), "mlp has no option --width"),
        (("structure", "mlp", "--inputs", "eight"), "option --inputs takes an integer, got 'eight'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    result = run_nqf(*args)
    assert result.returncode == 2
    assert fragment in one_error_line(result)
