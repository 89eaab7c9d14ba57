"""Bad input to every command: exit 2, one ``error:`` line, no traceback, no warning, no file.

Each case runs in its own empty working folder with every output pointing inside it;
the folder (and the shared folder of input files) must be unchanged afterwards. Most
cases run in-process through ``nqf.cli.main`` (fd-level capture, so C-level output and
warnings are seen too); a representative subset, including sizes that used to abort
inside XLA and Ctrl-C, runs through the installed console script.

``CASES`` (ids and argument lists, with ``{D}`` the folder of input files and ``{C}`` the
working folder) and ``make_inputs`` are plain data and functions, so that a script can
run the same list against another version of the code.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # every command through the real console script

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

# -- input files ---------------------------------------------------------------------------


def make_inputs(folder: Path) -> None:
    """Every input file the cases name, in ``folder``."""
    rng = np.random.default_rng(0)
    N = 32
    X = rng.standard_normal((N, 8))
    Y = rng.standard_normal((N, 4))

    def save(name, **arrays):
        np.savez(folder / name, **arrays)

    save("ok.npz", X=X, Y=Y)
    save("labels.npz", X=X, Y=rng.integers(0, 4, N))
    save("no_x.npz", Y=Y)
    save("no_y.npz", X=X)
    save("nothing.npz")
    save("x_complex.npz", X=X + 1j, Y=Y)
    save("y_complex.npz", X=X, Y=Y + 1j)
    np.savez(folder / "x_object.npz", X=np.array([[object()]] * N, dtype=object), Y=Y)
    save("x_strings.npz", X=np.array([["a"] * 8] * N), Y=Y)
    save("y_strings.npz", X=X, Y=np.array([["a"] * 4] * N))
    save("x_bytes.npz", X=np.array([[b"a"] * 8] * N), Y=Y)
    save("x_dates.npz", X=np.zeros((N, 8), dtype="datetime64[s]"), Y=Y)
    save("x_timedelta.npz", X=np.zeros((N, 8), dtype="timedelta64[s]"), Y=Y)
    save("x_records.npz", X=np.zeros((N, 8), dtype=[("a", "f8")]), Y=Y)
    for label, value in (("nan", np.nan), ("inf", np.inf), ("neginf", -np.inf), ("1e300", 1e300), ("1e31", 1e31)):
        Xb = X.copy()
        Xb[3, 2] = value
        Yb = Y.copy()
        Yb[1, 0] = value
        save(f"x_{label}.npz", X=Xb, Y=Y)
        save(f"y_{label}.npz", X=X, Y=Yb)
    save("x_scaled_1e300.npz", X=X * 1e300, Y=Y)
    save("x_float32_inf.npz", X=np.full((N, 8), np.inf, dtype=np.float32), Y=Y)
    save("x_uint64_huge.npz", X=np.full((N, 8), 2**64 - 1, dtype=np.uint64), Y=Y)
    save("mismatch.npz", X=X, Y=Y[:-1])
    save("y_scalar.npz", X=X, Y=np.float64(1.0))
    save("x_scalar.npz", X=np.float64(1.0), Y=Y)
    save("zero.npz", X=np.zeros((0, 8)), Y=np.zeros((0, 4)))
    save("x_wide.npz", X=rng.standard_normal((N, 5)), Y=Y)
    save("x_1d.npz", X=X[:, 0], Y=Y)
    save("x_3d.npz", X=X.reshape(N, 2, 4), Y=Y)
    save("x_empty_features.npz", X=np.zeros((N, 0)), Y=Y)
    save("y_k3.npz", X=X, Y=Y[:, :3])
    save("y_3d.npz", X=X, Y=Y.reshape(N, 2, 2))
    save("y_float_1d.npz", X=X, Y=Y[:, 0])
    save("labels_high.npz", X=X, Y=np.full(N, 4))
    save("labels_negative.npz", X=X, Y=np.full(N, -1))
    save("y_not_probabilities.npz", X=X, Y=np.abs(Y))
    d = 12  # mlp, 8 inputs, 4 outputs
    W = rng.standard_normal((d, 4)) * 0.01
    save("w_ok.npz", W=W)
    save("w_shape.npz", W=W[:5])
    save("w_1d.npz", W=W[:, 0])
    save("w_width.npz", W=rng.standard_normal((d, 3)))
    save("w_nan.npz", W=np.where(W > 0, np.nan, W))
    save("w_1e300.npz", W=W * 1e300)
    save("w_complex.npz", W=W + 0j)
    save("w_missing.npz", V=W)
    np.save(folder / "array.npy", X)
    (folder / "empty.npz").write_bytes(b"")
    (folder / "text.npz").write_text("X,Y\n1,2\n3,4\n")
    (folder / "text.txt").write_text("hello\n")
    (folder / "pickle.npz").write_bytes(pickle.dumps({"X": X, "Y": Y}))
    (folder / "binary.npz").write_bytes(bytes(range(256)) * 4)
    (folder / "truncated.npz").write_bytes((folder / "ok.npz").read_bytes()[:300])
    with zipfile.ZipFile(folder / "zip_not_npz.npz", "w") as archive:
        archive.writestr("readme.txt", "not numpy")
    (folder / "folder.npz").mkdir()
    (folder / "file").write_text("a regular file\n")
    (folder / "config.toml").write_text("[E1]\nsigma0 = 'abc'\n")
    (folder / "bad.toml").write_text("this is not toml\n")
    (folder / "unit.py").write_text(UNIT_FILE)  # for --unit FILE.py:FUNCTION
    (folder / "unit_raises.py").write_text("raise ImportError('a module this unit needs is missing')\n")
    (folder / "unit_generator_exit.py").write_text("raise GeneratorExit('stop at import')\n")
    # sweep specs: a good one, axes too long to expand, an npz path longer than the OS allows
    (folder / "sweep.toml").write_text(SWEEP_SPEC.format(axis="[0.05, 0.1]"))
    (folder / "sweep_range.toml").write_text(
        SWEEP_SPEC.format(axis="[0.05]").replace("[axes]", "[axes]\nseed = {range = [0, 1000000000000]}")
    )
    (folder / "sweep_logspace.toml").write_text(SWEEP_SPEC.format(axis="{logspace = [-3, -1, 1000000000000000000]}"))
    (folder / "sweep_npz_long.toml").write_text(
        SWEEP_SPEC.format(axis="[0.1]").replace('name = "staircase"', f'name = "npz"\npath = "{"n" * 300}.npz"')
        + '[arch]\nname = "mlp"\n'
    )
    # measured loss curves (--overlay)
    (folder / "curve_columns.csv").write_text("epoch,value\n0,1\n10,0.5\n")
    (folder / "curve_text.csv").write_text("step,loss\n0,1\n10,abc\n")
    (folder / "curve_nan.csv").write_text("step,loss\n0,1\n10,nan\n")
    (folder / "curve_decreasing.csv").write_text("step,loss\n0,1\n10,0.5\n5,0.2\n")
    (folder / "curve_negative.csv").write_text("step,loss\n-1,1\n10,0.5\n")
    (folder / "curve_empty.csv").write_text("")
    np.save(folder / "curve_shape.npy", np.zeros((4, 3)))
    (folder / "curve_nan.json").write_text('{"step": [0, 1], "loss": [1, NaN]}')
    (folder / "curve_keys.json").write_text('{"steps": [0, 1], "loss": [1, 2]}')


UNIT_FILE = """
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


class Static(eqx.Module):
    count: int = 3

    def __call__(self, x):
        return x


def perceptron(input_shape, outputs):
    return Perceptron(jnp.zeros(outputs), jnp.zeros(input_shape[0]))


def relu(input_shape, outputs):
    return Relu(jnp.zeros(outputs), jnp.zeros(input_shape[0]))


def fixed10():
    return Perceptron(jnp.zeros(4), jnp.zeros(10)), (10,), 4


def broken():
    raise ValueError("no weights today")


def number():
    return 42


def no_arrays():
    return Static(), (8,), 4


class Logged(Perceptron):  # log|v|^2 is -inf at w = 0: phi(0, x) is NaN
    def __call__(self, x):
        return self.a * jnp.log(jnp.sum(self.v**2))


class Rooted(Perceptron):  # finite at w = 0, but its second derivative there is not
    def __call__(self, x):
        return self.a * jnp.sqrt(jnp.abs(jnp.dot(self.v, x)))


def nan_at_zero(input_shape, outputs):
    return Logged(jnp.zeros(outputs), jnp.zeros(input_shape[0]))


def root_at_zero(input_shape, outputs):
    return Rooted(jnp.zeros(outputs), jnp.zeros(input_shape[0]))


def generator_exit():
    raise GeneratorExit("a BaseException from the user's function")
"""

SWEEP_SPEC = """
[sweep]
mode = "predict"
[task]
name = "staircase"
[settings]
width = 4
steps = 50
sigma0 = 0.01
[axes]
lr = {axis}
"""


# -- the cases -----------------------------------------------------------------------------

PREDICT = [
    "predict",
    "--data",
    "{D}/ok.npz",
    "--arch",
    "mlp",
    "--width",
    "4",
    "--sigma0",
    "0.01",
    "--lr",
    "0.1",
    "--steps",
    "50",
]
COMPARE = ["compare", "--task", "staircase", "--width", "4", "--sigma0", "0.01", "--lr", "0.1", "--steps", "50"]
NPZ = [
    "compare",
    "--task",
    "npz",
    "--path",
    "{D}/ok.npz",
    "--width",
    "4",
    "--sigma0",
    "0.01",
    "--lr",
    "0.1",
    "--steps",
    "50",
]
STRUCTURE = ["structure", "mlp"]


def with_option(base: list[str], option: str, value: str | None) -> list[str]:
    """``base`` with ``option`` set to ``value`` (replaced if present, removed for None)."""
    args = list(base)
    if option in args:
        i = args.index(option)
        del args[i : i + 2]
    return args if value is None else args + [option, value]


BAD_INT = ["0", "-1", "abc", "", "1.5", "1e3", "nan"]
BAD_POSITIVE = ["0", "-1", "-inf", "nan", "inf", "abc", ""]
BAD_SEED = ["-1", "4294967296", "1180591620717411303424", "abc", "1.5"]

CASES: dict[str, list[str]] = {}


def case(name: str, args: list[str]) -> None:
    assert name not in CASES, name
    CASES[name] = args


# numbers of predict
for value in BAD_INT + ["1000000000000", str(10**30)]:
    case(f"predict-width-{value}", with_option(PREDICT, "--width", value))
for value in BAD_POSITIVE:
    case(f"predict-lr-{value}", with_option(PREDICT, "--lr", value))
    case(f"predict-sigma0-{value}", with_option(PREDICT, "--sigma0", value))
for value in BAD_INT + [str(2**31), str(10**30)]:
    case(f"predict-steps-{value}", with_option(PREDICT, "--steps", value))
for value in ["0", "-1", "abc", "1000"]:
    case(f"predict-batch-{value}", with_option(PREDICT, "--optimizer", "sgd") + ["--batch", value])
case("predict-sgd-no-batch", with_option(PREDICT, "--optimizer", "sgd"))
for value in ["-0.1", "1", "1.5", "nan", "inf", "abc"]:
    case(f"predict-beta-{value}", with_option(PREDICT, "--optimizer", "momentum") + ["--beta", value])
for value in BAD_SEED:
    case(f"predict-seed-{value}", PREDICT + ["--seed", value])
for option, value in [
    ("--optimizer", "adam"),
    ("--optimizer", ""),
    ("--loss", "hinge"),
    ("--route", "fast"),
    ("--stepping", "sometimes"),
    ("--arch", "resnet"),
    ("--arch", ""),
]:
    case(f"predict-{option[2:]}-{value or 'empty'}", with_option(PREDICT, option, value))
case(
    "predict-route-moments-cross-entropy",
    with_option(with_option(PREDICT, "--data", "{D}/labels.npz"), "--loss", "cross_entropy") + ["--route", "moments"],
)
case("predict-sigma0-and-init", PREDICT + ["--init", "{D}/w_ok.npz"])
case("predict-neither-sigma0-nor-init", with_option(PREDICT, "--sigma0", None))
case("predict-no-data", with_option(PREDICT, "--data", None))
case("predict-no-arguments", ["predict"])
case("predict-unknown-arch-option", PREDICT + ["--depth", "3"])
case("predict-arch-option-no-value", PREDICT + ["--inputs"])
case("predict-arch-option-bad", PREDICT + ["--inputs", "eight"])
case("predict-arch-option-zero", PREDICT + ["--outputs", "0"])
case("predict-arch-option-huge", PREDICT + ["--inputs", "100000"])
case("predict-stray-argument", PREDICT + ["stray"])
case("predict-stray-after-option", PREDICT + ["--inputs", "8", "stray"])
case("predict-repeated-width", PREDICT + ["--width", "5"])
case("predict-repeated-arch-option", PREDICT + ["--inputs", "8", "--inputs", "8"])
case("predict-repeated-lr-equals", PREDICT + ["--lr=0.2"])
case("predict-unknown-flag", PREDICT + ["--verbose", "1"])
case("predict-lr-unstable", with_option(PREDICT, "--lr", "1000"))

# input files, for predict --data and compare --task npz --path
BAD_DATA = [
    "missing.npz",
    "empty.npz",
    "folder.npz",
    "text.npz",
    "text.txt",
    "array.npy",
    "pickle.npz",
    "binary.npz",
    "truncated.npz",
    "zip_not_npz.npz",
    "no_x.npz",
    "no_y.npz",
    "nothing.npz",
    "x_complex.npz",
    "y_complex.npz",
    "x_object.npz",
    "x_strings.npz",
    "y_strings.npz",
    "x_bytes.npz",
    "x_dates.npz",
    "x_timedelta.npz",
    "x_records.npz",
    "x_nan.npz",
    "x_inf.npz",
    "x_neginf.npz",
    "x_1e300.npz",
    "x_1e31.npz",
    "y_nan.npz",
    "y_inf.npz",
    "y_neginf.npz",
    "y_1e300.npz",
    "y_1e31.npz",
    "x_scaled_1e300.npz",
    "x_float32_inf.npz",
    "x_uint64_huge.npz",
    "mismatch.npz",
    "y_scalar.npz",
    "x_scalar.npz",
    "zero.npz",
    "x_wide.npz",
    "x_1d.npz",
    "x_3d.npz",
    "x_empty_features.npz",
    "y_k3.npz",
    "y_3d.npz",
    "file",
]
# predict --arch takes --inputs and --outputs from the data (issue 32): a wider X, a Y with 3 columns,
# a 1-D float Y (one output) and labels up to 4 (5 classes) are inputs; negative labels are not
for name in [n for n in BAD_DATA if n not in ("x_wide.npz", "y_k3.npz")] + ["labels_negative.npz"]:
    case(f"predict-data-{name}", with_option(PREDICT, "--data", "{D}/" + name))
for name in BAD_DATA:
    if name not in ("x_wide.npz", "y_k3.npz"):  # any width is a valid input size for the npz task
        case(f"compare-npz-{name}", with_option(NPZ, "--path", "{D}/" + name))
case(
    "compare-npz-wide-for-mlp-inputs-8",
    with_option(NPZ, "--path", "{D}/x_wide.npz") + ["--arch", "mlp", "--inputs", "8"],
)
case("compare-npz-3d-needs-arch", with_option(NPZ, "--path", "{D}/x_3d.npz"))
case("compare-npz-no-path", with_option(NPZ, "--path", None))
case("compare-npz-empty-path", with_option(NPZ, "--path", ""))
for name in ["labels_negative.npz", "y_not_probabilities.npz", "y_float_1d.npz", "ok.npz"]:
    case(
        f"predict-cross-entropy-{name}",
        with_option(with_option(PREDICT, "--data", "{D}/" + name), "--loss", "cross_entropy"),
    )
case(
    "predict-cross-entropy-one-output",
    with_option(with_option(PREDICT, "--data", "{D}/labels.npz"), "--loss", "cross_entropy") + ["--outputs", "1"],
)
for name in [
    "missing.npz",
    "text.txt",
    "array.npy",
    "w_shape.npz",
    "w_1d.npz",
    "w_width.npz",
    "w_nan.npz",
    "w_1e300.npz",
    "w_complex.npz",
    "w_missing.npz",
    "folder.npz",
]:
    case(f"predict-init-{name}", with_option(PREDICT, "--sigma0", None) + ["--init", "{D}/" + name])

# numbers of compare
for value in BAD_INT + ["1000000000000"]:
    case(f"compare-width-{value}", with_option(COMPARE, "--width", value))
for value in BAD_POSITIVE:
    case(f"compare-lr-{value}", with_option(COMPARE, "--lr", value))
    case(f"compare-sigma0-{value}", with_option(COMPARE, "--sigma0", value))
for value in BAD_INT + [str(2**31)]:
    case(f"compare-steps-{value}", with_option(COMPARE, "--steps", value))
for value in ["0", "-1", "abc", "1000000000"]:
    case(f"compare-seeds-{value}", COMPARE + ["--seeds", value])
case("compare-seeds-past-seed-range", COMPARE + ["--seed", "4294967295", "--seeds", "2"])
for value in BAD_SEED:
    case(f"compare-seed-{value}", COMPARE + ["--seed", value])
    case(f"compare-data-seed-{value}", COMPARE + ["--data-seed", value])
for opt in ["sgd", "momentum", "adam", "muon"]:
    for value in ["0", "nan", "-1"]:
        case(
            f"compare-lr-{opt}-{value}",
            COMPARE + ["--optimizers", f"gd,{opt}", f"--lr-{opt}", value] + (["--batch", "16"] if opt == "sgd" else []),
        )
case("compare-lr-adam-without-adam", COMPARE + ["--lr-adam", "0.01"])
for value in ["0", "-1", "abc", "100000"]:
    case(f"compare-batch-{value}", COMPARE + ["--optimizers", "sgd", "--batch", value])
case("compare-sgd-no-batch", COMPARE + ["--optimizers", "sgd"])
for value in ["-0.1", "1", "nan", "abc"]:
    case(f"compare-beta-{value}", COMPARE + ["--optimizers", "momentum", "--beta", value])
for value in ["", ",", "foo", "gd,gd", "gd,,foo", "GD"]:
    case(f"compare-optimizers-{value or 'empty'}", COMPARE + ["--optimizers", value])
case("compare-no-task", with_option(COMPARE, "--task", None))
case("compare-no-arguments", ["compare"])
case("compare-stray-argument", COMPARE + ["stray"])
case("compare-repeated-steps", COMPARE + ["--steps", "60"])
case("compare-repeated-task-option", COMPARE + ["--samples", "64", "--samples", "64"])
case("compare-lr-unstable", with_option(COMPARE, "--lr", "1000"))

# tasks and their options
for name in ["foo", "", "Staircase"]:
    case(f"compare-task-{name or 'empty'}", with_option(COMPARE, "--task", name))
for task, option, value in [
    ("staircase", "--inputs", "0"),
    ("staircase", "--samples", "0"),
    ("staircase", "--samples", "abc"),
    ("staircase", "--samples", "1000000000000"),
    ("staircase", "--inputs", "1000000"),
    ("staircase", "--singular-values", "a,b"),
    ("staircase", "--singular-values", "-1,2"),
    ("staircase", "--singular-values", "1,2,3,4,5,6,7,8,9"),
    ("staircase", "--correlation", "2"),
    ("staircase", "--whiten", "maybe"),
    ("staircase", "--depth", "2"),
    ("powerlaw", "--alpha", "nan"),
    ("powerlaw", "--modes", "0"),
    ("powerlaw", "--scale", "-1"),
    ("quadratic", "--eigenvalues", "nan"),
    ("quadratic", "--samples", "-5"),
    ("fourier", "--length", "0"),
    ("fourier", "--samples", "2"),
    ("icl", "--prompts", "0"),
    ("icl", "--task-variances", "1,2"),
    ("icl", "--noise", "-1"),
    ("tokens", "--tokens", "0"),
    ("tokens", "--query-weight", "inf"),
    ("experts", "--experts", "0"),
    ("digits", "--samples", "5000"),
    ("digits", "--samples", "abc"),
    ("digits", "--standardize", "perhaps"),
]:
    case(f"compare-{task}{option}-{value}", with_option(COMPARE, "--task", task) + [option, value])
case("compare-arch-unknown", COMPARE + ["--arch", "resnet"])
case("compare-arch-option-unknown", COMPARE + ["--arch", "mlp", "--kernel", "3"])
case("compare-arch-mismatched-outputs", COMPARE + ["--arch", "mlp-fixed"])
case("compare-experts-width", with_option(with_option(COMPARE, "--task", "experts"), "--width", "5"))

# inapplicable units (the expansion check), without --allow-inapplicable
for activation in ["relu", "abs", "sigmoid", "softplus"]:
    case(f"predict-inapplicable-{activation}", PREDICT + ["--activation", activation])
    case(f"compare-inapplicable-{activation}", COMPARE + ["--activation", activation])
    case(f"structure-inapplicable-{activation}", STRUCTURE + ["--activation", activation])
case("predict-activation-unknown", PREDICT + ["--activation", "swish2"])
case("structure-mlp-fixed-relu", ["structure", "mlp-fixed", "--activation", "relu"])

# structure
for value in BAD_SEED:
    case(f"structure-seed-{value}", STRUCTURE + ["--seed", value])
for arch, option, value in [
    ("mlp", "--inputs", "0"),
    ("mlp", "--inputs", "-1"),
    ("mlp", "--inputs", "abc"),
    ("mlp", "--inputs", "1e3"),
    ("mlp", "--inputs", "100000"),
    ("mlp", "--inputs", str(10**30)),
    ("mlp", "--outputs", "0"),
    ("mlp", "--outputs", "100000"),
    ("mlp", "--activation", "foo"),
    ("mlp", "--depth", "2"),
    ("mlp-fixed", "--inputs", "100000"),
    ("attention", "--tokens", "0"),
    ("attention", "--dim", "100000"),
    ("attention", "--readout", "first"),
    ("linear-attention", "--dim", "0"),
    ("linear-attention", "--dim", "100000"),
    ("moe", "--experts", "0"),
    ("moe", "--top-k", "0"),
    ("moe", "--routing", "random"),
    ("moe", "--inputs", "100000"),
    ("conv1d", "--length", "0"),
    ("conv1d", "--kernel", "0"),
    ("conv1d", "--kernel", "100000"),
    ("conv1d", "--padding", "mirror"),
    ("conv2d", "--rows", "-3"),
    ("conv2d", "--kernel", "100000"),
    ("conv2d", "--readout", "sideways"),
]:
    case(f"structure-{arch}{option}-{value}", ["structure", arch, option, value])
case("structure-moe-top-k-above-experts", ["structure", "moe", "--routing", "topk", "--top-k", "9"])
case("structure-unknown-arch", ["structure", "resnet"])
case("structure-empty-arch", ["structure", ""])
case("structure-no-arch", ["structure"])
case("structure-list-with-arch", ["structure", "--list", "mlp"])
case("structure-list-with-option", ["structure", "--list", "--inputs", "3"])
case("structure-option-no-value", STRUCTURE + ["--inputs"])
case("structure-repeated-option", STRUCTURE + ["--inputs", "3", "--inputs", "4"])
case("structure-repeated-option-equals", STRUCTURE + ["--inputs=3", "--inputs=4"])
case("structure-stray", STRUCTURE + ["extra"])
case("structure-stray-dash", STRUCTURE + ["-x"])
case("structure-bool-option", STRUCTURE + ["--inputs", "true"])
case("unknown-command", ["train"])

# --unit FILE.py:FUNCTION (ok.npz has 8 inputs and 4 outputs)
UNIT = "{D}/unit.py:"
for label, spec in [
    ("missing-file", "{D}/missing.py:perceptron"),
    ("not-py", "{D}/text.txt:perceptron"),
    ("no-function", "{D}/unit.py"),
    ("function-missing", UNIT + "absent"),
    ("import-raises", "{D}/unit_raises.py:perceptron"),
    ("function-raises", UNIT + "broken"),
    ("returns-int", UNIT + "number"),
    ("no-arrays", UNIT + "no_arrays"),
    ("no-shapes", UNIT + "perceptron"),
    ("empty", ""),
]:
    case(f"structure-unit-{label}", ["structure", "--unit", spec])
case("structure-unit-and-arch", ["structure", "mlp", "--unit", UNIT + "perceptron"])
case("structure-unit-relu", ["structure", "--unit", UNIT + "relu", "--inputs", "8", "--outputs", "4"])
case("predict-unit-and-arch", PREDICT + ["--unit", UNIT + "perceptron"])
case("predict-unit-inputs-10-data-8", with_option(PREDICT, "--arch", None) + ["--unit", UNIT + "fixed10"])
case(
    "predict-unit-inputs-option-disagrees",
    with_option(PREDICT, "--arch", None) + ["--unit", UNIT + "perceptron", "--inputs", "10"],
)
case("predict-unit-relu", with_option(PREDICT, "--arch", None) + ["--unit", UNIT + "relu"])
case("predict-unit-function-raises", with_option(PREDICT, "--arch", None) + ["--unit", UNIT + "broken"])
case("predict-neither-arch-nor-unit", with_option(PREDICT, "--arch", None))
case("compare-npz-unit-inputs-10-data-8", NPZ + ["--unit", UNIT + "fixed10"])
case("compare-unit-and-arch", COMPARE + ["--arch", "mlp", "--unit", UNIT + "perceptron"])
case("compare-unit-unknown-option", COMPARE + ["--unit", UNIT + "perceptron", "--depth", "2"])
case("unknown-root-option", ["--fast", "structure", "mlp"])
# units that are not finite at w = 0, or raise a BaseException that is not an Exception
case("structure-unit-nan-at-zero", ["structure", "--unit", UNIT + "nan_at_zero", "--inputs", "8", "--outputs", "4"])
case("structure-unit-root-at-zero", ["structure", "--unit", UNIT + "root_at_zero", "--inputs", "8", "--outputs", "4"])
case("predict-unit-nan-at-zero", with_option(PREDICT, "--arch", None) + ["--unit", UNIT + "nan_at_zero"])
case("predict-unit-generator-exit", with_option(PREDICT, "--arch", None) + ["--unit", UNIT + "generator_exit"])
case("structure-unit-generator-exit-at-import", ["structure", "--unit", "{D}/unit_generator_exit.py:perceptron"])

# the network's own prediction: a method the library does not have, refused before JAX starts
case("predict-network-method-unknown", PREDICT + ["--network-method", "particles"])
case("compare-network-method-unknown", COMPARE + ["--network-method", "particles"])

# the departure's memory, estimated before anything runs (about 320 GiB at width 2,000,000)
case("predict-departure-too-wide", with_option(PREDICT, "--width", "2000000") + ["--departure"])
case("compare-departure-too-wide", with_option(COMPARE, "--width", "2000000") + ["--departure"])

# output paths: too long for the OS, one path for two outputs
LONG = "L" * 300
case("predict-plot-name-too-long", PREDICT + ["--plot", "{C}/" + LONG + ".png"])
case("predict-csv-name-too-long", PREDICT + ["--csv", "{C}/" + LONG])
case("predict-csv-path-too-long", PREDICT + ["--csv", "{C}/" + "d/" * 3000])
case("predict-plot-and-csv-same-path", PREDICT + ["--plot", "{C}/x.png", "--csv", "{C}/x.png"])
case("compare-plot-and-csv-same-path", COMPARE + ["--plot", "{C}/x.png", "--csv", "{C}/./x.png"])

# sweep: outputs, axes too long to expand, a bad Ray address (fails in seconds), an npz path too long
SWEEP = ["sweep", "{D}/sweep.toml", "--out", "{C}/out"]
for label, args in [
    ("out-proc", ["sweep", "{D}/sweep.toml", "--out", "/proc/nqf-out"]),
    ("out-name-too-long", ["sweep", "{D}/sweep.toml", "--out", "{C}/" + LONG]),
    ("store-path-too-long", SWEEP + ["--store", "{C}/" + "s/" * 3000]),
    ("out-file", ["sweep", "{D}/sweep.toml", "--out", "{D}/file"]),
    ("range-10^12", ["sweep", "{D}/sweep_range.toml", "--out", "{C}/out", "--dry-run"]),
    ("logspace-10^18", ["sweep", "{D}/sweep_logspace.toml", "--out", "{C}/out", "--dry-run"]),
    ("npz-path-too-long", ["sweep", "{D}/sweep_npz_long.toml", "--out", "{C}/out", "--dry-run"]),
    ("ray-nothing-listening", SWEEP + ["--executor", "ray", "--address", "127.0.0.1:1"]),
    ("ray-address-no-port", SWEEP + ["--executor", "ray", "--address", "localhost"]),
]:
    case(f"sweep-{label}", args)
case(
    "reproduce-ray-nothing-listening",
    ["reproduce", "--only", "E1", "--out", "{C}/r", "--executor", "ray", "--address", "127.0.0.1:1"],
)

# output paths
PLOT = COMPARE + ["--json"]
for label, path in [
    ("proc", "/proc/x.png"),
    ("missing-folder", "{C}/missing/x.png"),
    ("folder", "{C}"),
    ("dot", "."),
    ("under-file", "{D}/file/x.png"),
    ("suffix-txt", "{C}/x.txt"),
    ("no-suffix", "{C}/x"),
    ("dev-null", "/dev/null"),
    ("existing-folder-png", "{C}/made.png"),
    ("sys", "/sys/x.pdf"),
]:
    case(f"compare-plot-{label}", PLOT + ["--plot", path])

# measured loss curves (--overlay), table folders (--csv) and predict --plot
BAD_CURVES = [
    "curve_columns.csv",
    "curve_text.csv",
    "curve_nan.csv",
    "curve_decreasing.csv",
    "curve_negative.csv",
    "curve_empty.csv",
    "curve_shape.npy",
    "curve_nan.json",
    "curve_keys.json",
    "missing.csv",
    "folder.npz",
    "ok.npz",
    "text.txt",
]
for name in BAD_CURVES:
    case(f"predict-overlay-{name}", PREDICT + ["--overlay", "{D}/" + name])
for name in ["curve_decreasing.csv", "curve_nan.json", "missing.csv"]:
    case(f"compare-overlay-{name}", COMPARE + ["--overlay", "{D}/" + name])
for label, path in [
    ("proc", "/proc/x"),
    ("file", "{D}/file"),
    ("under-file", "{D}/file/x"),
    ("missing-parent", "{C}/missing/x"),
    ("sys", "/sys/x"),
]:
    case(f"predict-csv-{label}", PREDICT + ["--csv", path])
    case(f"compare-csv-{label}", COMPARE + ["--csv", path])
for label, path in [
    ("proc", "/proc/x.png"),
    ("missing-folder", "{C}/missing/x.png"),
    ("folder", "{C}"),
    ("suffix-txt", "{C}/x.txt"),
    ("under-file", "{D}/file/x.pdf"),
]:
    case(f"predict-plot-{label}", PREDICT + ["--plot", path])

# reproduce and report (their --out and options)
for label, args in [
    ("out-proc", ["reproduce", "--only", "E1", "--out", "/proc/x"]),
    ("out-file", ["reproduce", "--only", "E1", "--out", "{D}/file"]),
    ("out-under-file", ["reproduce", "--only", "E1", "--out", "{D}/file/results"]),
    ("only-unknown", ["reproduce", "--only", "E99", "--out", "{C}/results"]),
    ("only-empty", ["reproduce", "--only", "", "--out", "{C}/results"]),
    ("set-bad", ["reproduce", "--only", "E1", "--set", "bad", "--out", "{C}/results"]),
    ("set-unknown-field", ["reproduce", "--only", "E1", "--set", "E1.nofield=1", "--out", "{C}/results"]),
    ("set-unknown-experiment", ["reproduce", "--only", "E1", "--set", "E9.sigma0=1", "--out", "{C}/results"]),
    ("set-bad-value", ["reproduce", "--only", "E1", "--set", "E1.sigma0=abc", "--out", "{C}/results"]),
    ("config-missing", ["reproduce", "--only", "E1", "--config", "{C}/none.toml", "--out", "{C}/results"]),
    ("config-not-toml", ["reproduce", "--only", "E1", "--config", "{D}/bad.toml", "--out", "{C}/results"]),
    ("config-bad-value", ["reproduce", "--only", "E1", "--config", "{D}/config.toml", "--out", "{C}/results"]),
    ("config-folder", ["reproduce", "--only", "E1", "--config", "{D}/folder.npz", "--out", "{C}/results"]),
    ("jobs-zero", ["reproduce", "--only", "E1", "--jobs", "0", "--out", "{C}/results"]),
    ("stray", ["reproduce", "stray", "--out", "{C}/results"]),
    ("report-out-proc", ["report", "--out", "/proc/x"]),
    ("report-out-missing", ["report", "--out", "{C}/missing"]),
    ("report-out-file", ["report", "--out", "{D}/file"]),
]:
    case(f"reproduce-{label}", args)

# sizes that used to abort inside XLA, run through the console script too
XLA_SIZES = [
    "structure-mlp--inputs-100000",
    "predict-width-1000000000000",
    "compare-width-1000000000000",
    "compare-staircase--inputs-1000000",
    "predict-arch-option-huge",
]

# the subset that also runs through the real console script
SCRIPT_CASES = XLA_SIZES + [
    "predict-data-x_scaled_1e300.npz",
    "predict-data-y_scalar.npz",
    "predict-data-array.npy",
    "predict-data-text.txt",
    "predict-seed-1180591620717411303424",
    "compare-seed-1180591620717411303424",
    "structure-seed-1180591620717411303424",
    "compare-plot-proc",
    "compare-plot-missing-folder",
    "compare-npz-x_scaled_1e300.npz",
    "predict-data-x_nan.npz",
    "predict-lr-nan",
    "compare-optimizers-foo",
    "predict-inapplicable-relu",
    "compare-task-foo",
    "structure-repeated-option",
    "predict-repeated-width",
    "reproduce-out-proc",
    "predict-init-w_nan.npz",
    "structure-unit-function-raises",
    "predict-unit-inputs-10-data-8",
    "predict-unit-generator-exit",
    "structure-unit-generator-exit-at-import",
    "predict-csv-path-too-long",
    "predict-plot-and-csv-same-path",
    "sweep-out-proc",
    "sweep-range-10^12",
    "sweep-ray-nothing-listening",
]
assert set(SCRIPT_CASES) <= set(CASES)

# cases that hold only when not root (root writes into read-only folders)
if not ROOT:
    case("compare-plot-read-only-folder", PLOT + ["--plot", "{C}/ro/x.png"])


def prepare(cwd: Path, name: str) -> None:
    """Extra setup inside the working folder (made before the snapshot)."""
    if name == "compare-plot-existing-folder-png":
        (cwd / "made.png").mkdir()
    if name == "compare-plot-read-only-folder":
        (cwd / "ro").mkdir()
        (cwd / "ro").chmod(0o555)


def expand(args: list[str], data: Path, cwd: Path) -> list[str]:
    return [a.replace("{D}", str(data)).replace("{C}", str(cwd)) for a in args]


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else (-1, 0)
        for p in sorted(folder.rglob("*"))
    }


WARNING_WORDS = ("Warning", "warning:", "Traceback")


def assert_clean_error(name: str, code, out: str, err: str) -> None:
    lines = err.splitlines()
    assert code == 2, f"{name}: exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-3000:]}"
    assert len(lines) == 1 and lines[0].startswith("error: "), f"{name}: stderr is {err[-3000:]!r}"
    for word in WARNING_WORDS:
        assert word not in out and word not in err.replace(lines[0], ""), f"{name}: {word} in {out!r} {err!r}"
    assert "Traceback" not in err, err


# -- the tests ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("inputs")
    make_inputs(folder)
    return folder


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_in_process(name, inputs, workdir, capfd):
    """Through ``nqf.cli.main``: exit 2, one error line, nothing else printed, nothing written."""
    from nqf.cli import main

    prepare(workdir, name)
    before, before_inputs = snapshot(workdir), snapshot(inputs)
    filters = list(warnings.filters)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as leaked:
        warnings.simplefilter("always")
        try:
            main(expand(CASES[name], inputs, workdir))
            code = 0
        except SystemExit as stop:
            code = stop.code
    out, err = capfd.readouterr()
    assert_clean_error(name, code, out, err)
    assert [str(w.message) for w in leaked] == [], f"{name}: warnings reached the user"
    assert warnings.filters == filters, "the command changed the warning filters"
    assert snapshot(workdir) == before, f"{name}: the working folder changed"
    assert snapshot(inputs) == before_inputs, f"{name}: the input folder changed"


def _console_script() -> str:
    script = Path(sys.executable).parent / "nqf"
    assert script.exists(), script
    return str(script)


@pytest.mark.parametrize("name", SCRIPT_CASES)
def test_bad_input_console_script(name, inputs, tmp_path):
    """The same through the installed ``nqf``: no native abort, one error line."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    prepare(cwd, name)
    before = snapshot(cwd)
    run = subprocess.run(
        [_console_script(), *expand(CASES[name], inputs, cwd)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert_clean_error(name, run.returncode, run.stdout, run.stderr)
    assert snapshot(cwd) == before


@pytest.mark.parametrize("after", [4.0, 15.0])
def test_interrupt_prints_one_line_and_exits_130(after, tmp_path):
    """Ctrl-C during a long comparison: ``interrupted: ...``, exit 130, no traceback, no file;
    after 4 s (start-up, compiling) and after 15 s (inside the compiled training loop of about
    3 min, where the main thread cannot run a Python handler: the watcher thread answers)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    args = COMPARE[:-1] + ["2000000", "--plot", str(cwd / "x.png")]
    proc = subprocess.Popen(
        [_console_script(), *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)  # the run itself would take minutes
    lines = [line for line in err.splitlines() if not line.startswith("note: ")]
    assert proc.returncode == 130, (proc.returncode, err)
    assert lines == ["interrupted: nothing was written"], err
    assert "Traceback" not in err and out == ""
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("json", [True, False])
def test_a_full_disk_under_stdout_is_one_line(json, inputs, tmp_path):
    """stdout on /dev/full (a full disk): one ``error:`` line, exit 2, no traceback."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    args = expand(PREDICT, inputs, tmp_path) + (["--json"] if json else [])
    with open("/dev/full", "w") as full:
        run = subprocess.run(
            [_console_script(), *args], cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == ["error: cannot write the output (the standard output): No space left on device"]


def test_case_count():
    """The suite covers at least 250 cases."""
    assert len(CASES) >= 250, len(CASES)
