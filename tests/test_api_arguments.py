"""The library API refuses what means nothing, in one NqfError line naming the argument (issues 34
and 35, "arguments" and "sizes"): arguments accepted silently before (complex targets, negative or
fractional seeds, a negative rotation seed, NaN or empty inputs to ``nqf.train``, masked values of
a masked array, ``lr=True``, ``closure_fraction=True``, a unit that is not finite at w = 0), ones
that raised a traceback or a warning (ragged lists, a width of 2.5, a float batch size, a batch size
of 0 for ``structure``, checkpoints as a list, a wrong-shaped x, negative input shapes, a unit of
the wrong output shape, ``solve_lv`` times that do not increase, traced values, an int or a dict
as the architecture or the config, config numbers and names of the wrong kind, float16 data), and
sizes that used to allocate or run without an estimate (a width of 10^9, 10^9 steps, 10^6 seeds),
refused in well under a second with the estimate and the memory available.

Everything goes through the public API (``nqf.train``, ``nqf.predict``, ...). The calls are
ill-typed on purpose, so jaxtyping's test-time checks are off here (they would refuse first).
"""

from __future__ import annotations

import json
import math
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
import nqf.core.memory
from nqf.core.errors import NqfError, TheoryDoesNotApply
from tests.conftest import one_line

pytestmark = pytest.mark.no_shape_checks

# a size check must answer this fast (it allocates and compiles nothing; the modules are imported first)
QUICK_S = 1.0
# the memory the size checks are told is available, so that their verdicts do not depend on the machine
AVAILABLE = 16 * 2**30


@pytest.fixture(scope="module")
def staircase():
    task = nqf.get_task("staircase")
    X, Y = (np.asarray(a) for a in task.generate(0))
    return task, task.architecture(), X, Y


@pytest.fixture
def sixteen_gib(monkeypatch):
    """16 GiB available, whatever the machine has; the modules the checks live in imported (not timed)."""
    import nqf.comparison.compare  # noqa: F401
    import nqf.theory.data_matrices.moments  # noqa: F401
    import nqf.theory.predict.grid  # noqa: F401
    import nqf.training.runs  # noqa: F401

    monkeypatch.setattr(nqf.core.memory, "available_bytes", lambda: AVAILABLE)


def predict_config(**change) -> nqf.PredictConfig:
    return nqf.PredictConfig(**{"width": 8, "lr": 0.05, "steps": 50, **change})


def train_config(**change) -> nqf.TrainConfig:
    return nqf.TrainConfig(**{"width": 8, "lr": 0.05, "steps": 50, **change})


def refused_quickly(call, match: str) -> str:
    """The one line ``call()`` is refused with, asserted to come within QUICK_S."""
    start = time.perf_counter()
    with pytest.raises(NqfError, match=match) as err:
        call()
    elapsed = time.perf_counter() - start
    assert elapsed < QUICK_S, f"refused after {elapsed:.2f} s"
    return one_line(err)


def hand_built(unit, outputs: int = 1, input_shape=(3,)) -> nqf.Architecture:
    return nqf.Architecture("hand-built", unit, {"w": jax.ShapeDtypeStruct((3,), jnp.float64)}, input_shape, outputs)


# -- arguments that meant nothing ----------------------------------------------------------


@pytest.mark.parametrize("entry", ["predict", "train"])
def test_complex_targets_are_refused(staircase, entry):
    _, arch, X, Y = staircase
    with pytest.raises(NqfError, match=r"targets Y must hold real numbers, got complex") as err:
        if entry == "predict":
            nqf.predict(arch, X, Y + 1j, predict_config())
        else:
            nqf.train(arch, X, Y + 1j, train_config())
    one_line(err)


@pytest.mark.parametrize("seed", [-1, 1.5, 2**32])
@pytest.mark.parametrize("config", [predict_config, train_config])
def test_a_seed_is_an_integer_in_the_generators_range(config, seed):
    with pytest.raises(NqfError, match=r"seed must be an integer in \[0, 4294967295\], got") as err:
        config(seed=seed)
    one_line(err)


def test_compare_seeds_stay_in_the_generators_range():
    with pytest.raises(NqfError, match=r"seed must be an integer in \[0, 4294967295\] \(with 2 seeds") as err:
        nqf.CompareConfig(seed=2**32 - 1, seeds=2)
    one_line(err)


def test_closure_diagnostic_refuses_a_negative_rotation_seed():
    task = nqf.get_task("staircase")
    X, Y = task.generate(0, "float64")
    config = nqf.TrainConfig(width=4, lr=0.05, steps=2, sigma0=1e-3, model="quadratic")
    for bad in (-1, 1.5):
        with pytest.raises(NqfError, match=r"^rotation_seed must be an integer in \[0, 4294967295\]"):
            nqf.closure_diagnostic(task.architecture(), X, Y, config, rotation_seed=bad)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ("nan", r"inputs X contains 1 non-finite value"),
        ("empty", r"inputs X must have shape \(N, 8\) with N >= 1, got \(0, 8\)"),
    ],
)
def test_train_refuses_nan_or_empty_inputs_as_predict_does(staircase, inputs, message):
    _, arch, X, Y = staircase
    if inputs == "nan":
        X = X.copy()
        X[3, 2] = np.nan
    else:
        X, Y = X[:0], Y[:0]
    for call in (lambda: nqf.train(arch, X, Y, train_config()), lambda: nqf.predict(arch, X, Y, predict_config())):
        with pytest.raises(NqfError, match=message) as err:
            call()
        one_line(err)


def test_float16_data_passes_the_finite_check_without_a_warning():
    from nqf.theory.data_matrices.checks import check_finite

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" was a RuntimeWarning
        check_finite("inputs X", np.ones((4, 3), dtype=np.float16))
        with pytest.raises(NqfError, match=r"inputs X contains 1 non-finite value"):
            check_finite("inputs X", np.array([[1.0, np.inf]], dtype=np.float16))
        with pytest.raises(NqfError, match=r"of magnitude above 1e\+30"):
            check_finite("inputs X", np.array([[1.0, 1e31]], dtype=np.float32))


def test_a_masked_array_with_masked_values_is_refused(staircase):
    _, arch, X, Y = staircase
    masked = np.ma.masked_array(X, mask=np.abs(X) > 2)
    count = int(np.count_nonzero(np.abs(X) > 2))
    with pytest.raises(NqfError, match=rf"inputs X is a masked array with {count} masked value\(s\)") as err:
        nqf.predict(arch, masked, Y, predict_config())
    one_line(err)
    with pytest.raises(NqfError, match=r"targets Y is a masked array"):
        nqf.train(arch, X, np.ma.masked_array(Y, mask=Y > 1), nqf.TrainConfig(width=8, lr=0.05, steps=20))
    from nqf.core.arguments import real_array

    assert real_array("X", np.ma.masked_array([1.0, 2.0])).tolist() == [1.0, 2.0]  # nothing masked: taken


UNITS_NOT_FINITE_AT_ZERO = {
    # (w.x)^2 everywhere but at w = 0 itself, where it is NaN
    "nan_at_zero": lambda p, x: jnp.reshape((p["w"] @ x) ** 2 + jnp.where(jnp.all(p["w"] == 0), jnp.nan, 0.0), (1,)),
    # (w.x)^2 |w| / |w|: 0 / 0 at w = 0
    "norm_ratio": lambda p, x: jnp.reshape((p["w"] @ x) ** 2 * jnp.linalg.norm(p["w"]) / jnp.linalg.norm(p["w"]), (1,)),
    # (w.x)^2 through sqrt: finite, but its autodiff derivatives at 0 are 0 * inf
    "through_sqrt": lambda p, x: jnp.reshape(jnp.sqrt(jnp.abs(p["w"] @ x)) ** 4, (1,)),
}


@pytest.mark.parametrize("unit", sorted(UNITS_NOT_FINITE_AT_ZERO))
def test_a_unit_not_finite_at_zero_does_not_pass_the_expansion_check(unit):
    arch = hand_built(UNITS_NOT_FINITE_AT_ZERO[unit])
    report = nqf.expansion_check(arch)
    assert not report.applies
    assert report.reason.startswith("not finite at w = 0: ")
    X = np.random.default_rng(0).standard_normal((16, 3))
    with pytest.raises(TheoryDoesNotApply, match="not finite at w = 0") as err:
        nqf.predict(arch, X, X[:, :1], predict_config())
    one_line(err)


def test_a_unit_finite_at_zero_still_passes():
    assert nqf.expansion_check(hand_built(lambda p, x: jnp.reshape((p["w"] @ x) ** 2, (1,)))).applies


# -- tracebacks that became one line -----------------------------------------------------------


@pytest.mark.parametrize("which", ["X", "Y"])
@pytest.mark.parametrize("entry", ["predict", "train"])
def test_ragged_lists_are_one_line(staircase, entry, which):
    _, arch, X, Y = staircase
    ragged = [[1.0, 2.0], [3.0]]
    X, Y = (ragged, Y[:2]) if which == "X" else (X[:2], ragged)
    name = "inputs X" if which == "X" else "targets Y"
    with pytest.raises(NqfError, match=rf"{name} is not a rectangular array of numbers") as err:
        if entry == "predict":
            nqf.predict(arch, X, Y, predict_config())
        else:
            nqf.train(arch, X, Y, train_config())
    one_line(err)


@pytest.mark.parametrize("width", [8.0, math.nan, math.inf, None])
def test_predict_width_is_a_positive_integer(staircase, width):
    _, arch, X, Y = staircase
    with pytest.raises(NqfError, match=r"width must be a positive integer, got") as err:
        nqf.predict(arch, X, Y, predict_config(width=width))
    one_line(err)


@pytest.mark.parametrize("steps", [10.0, math.inf])
def test_predict_steps_are_a_positive_integer(staircase, steps):
    _, arch, X, Y = staircase
    with pytest.raises(NqfError, match=r"steps must be a positive integer <= 2147483647, got") as err:
        nqf.predict(arch, X, Y, predict_config(steps=steps))
    one_line(err)


def test_init_weights_width_is_a_positive_integer(staircase):
    _, arch, _, _ = staircase
    with pytest.raises(NqfError, match=r"width must be a positive integer, got 2.5") as err:
        nqf.init_weights(arch, jax.random.key(0), 2.5, 1e-3)
    one_line(err)


@pytest.mark.parametrize("entry", ["predict", "train"])
def test_a_batch_size_is_a_positive_integer(staircase, entry):
    _, arch, X, Y = staircase
    with pytest.raises(NqfError, match=r"batch_size must be a positive integer, got 2.5") as err:
        if entry == "predict":
            nqf.predict(arch, X, Y, predict_config(optimizer="sgd", batch_size=2.5))
        else:
            nqf.train(arch, X, Y, train_config(optimizer="sgd", batch_size=2.5))
    one_line(err)


@pytest.mark.parametrize("batch_size", [-1, 0, 2.5])
def test_structure_refuses_a_batch_size_below_one(batch_size):
    arch = nqf.get_architecture("mlp")
    X = np.random.default_rng(0).standard_normal((5, 8))
    with pytest.raises(NqfError, match=rf"^batch_size must be a positive integer, got {batch_size!r}$"):
        nqf.structure(arch, X, method="autodiff", batch_size=batch_size)


@pytest.mark.parametrize("checkpoints", [[1, 2, 3], 2.5])
def test_checkpoints_are_a_count(checkpoints):
    with pytest.raises(NqfError, match=r"checkpoints must be an integer >= 2") as err:
        train_config(checkpoints=checkpoints)
    one_line(err)


def test_structure_matrix_takes_one_input_of_the_architectures_shape(staircase):
    _, arch, X, _ = staircase
    for x in (X[0, :7], X[:2]):
        with pytest.raises(NqfError, match=r"structure_matrix takes one input x of shape \(8,\), got") as err:
            nqf.structure_matrix(arch, x)
        one_line(err)


def test_negative_input_shapes_are_refused():
    module = eqx.nn.Linear(3, 1, key=jax.random.key(0))
    with pytest.raises(NqfError, match=r"input_shape must be a tuple of positive integers, got \(-3,\)") as err:
        nqf.from_equinox(module, input_shape=-3, outputs=1)
    one_line(err)
    with pytest.raises(NqfError, match=r"input_shape must be a tuple of positive integers, got \(-1,\)") as err:
        hand_built(lambda p, x: jnp.reshape(p["w"] @ p["w"], (1,)), input_shape=(-1,))
    one_line(err)


def test_a_unit_of_the_wrong_output_shape_is_refused():
    X = np.ones((4, 3))
    with pytest.raises(NqfError, match=r"the unit returns shape \(3,\) .* but outputs = 1") as err:
        arch = hand_built(lambda p, x: p["w"] ** 2 * x[0])  # (3,) numbers for outputs = 1
        nqf.structure_matrix(arch, X[0])  # at first use, if not at construction
    one_line(err)


@pytest.mark.parametrize("ts", [[5.0, 1.0], [1.0, 1.0, 2.0], [0.0, float("nan")]])
def test_solve_lv_refuses_times_not_strictly_increasing(ts):
    lv = nqf.LotkaVolterra(c=[1.0, 0.5], K=[[1.0, 0.2], [0.2, 1.0]], m0=1e-3, lr=0.1)
    with pytest.raises(NqfError, match=r"^solve_lv: "):
        nqf.solve_lv(lv, 10.0, ts=ts)


def test_traced_arguments_are_one_line(staircase):
    _, arch, X, Y = staircase
    traced = "is a traced JAX value (inside jax.jit, vmap or grad)"
    cases = {
        "inputs X": lambda: jax.jit(lambda x: nqf.predict(arch, x, Y, predict_config()).flow.loss)(X),
        "targets Y": lambda: jax.jit(lambda y: nqf.train(arch, X, y, nqf.TrainConfig(width=8, steps=20)).loss)(Y),
        "config.lr": lambda: jax.jit(lambda lr: nqf.predict(arch, X, Y, predict_config(lr=lr)).flow.loss)(0.05),
        "inputs X ": lambda: jax.vmap(lambda x: nqf.predict(arch, [x], Y[:1], predict_config()).flow.loss)(X[:2]),
    }
    for name, call in cases.items():
        with pytest.raises(NqfError) as err:
            call()
        # JAX appends its note on filtered frames to an exception raised while it traces: the line is nqf's
        first = str(err.value).splitlines()[0]
        assert first.startswith(f"{name.strip()} {traced}: nqf.predict, nqf.train and nqf.compare read"), first


def test_wrong_kinds_of_arch_or_config_are_one_line(staircase):
    _, arch, X, Y = staircase
    train_config = nqf.TrainConfig(width=8, lr=0.05, steps=20)
    cases = [
        (lambda: nqf.predict(3, X, Y, predict_config()), "predict needs an architecture .* or its name, got int"),
        (lambda: nqf.predict(None, X, Y, predict_config()), "got NoneType"),
        (lambda: nqf.predict(arch, X, Y, {"width": 8}), "predict needs a PredictConfig as its config, got dict"),
        (lambda: nqf.predict(arch, X, Y, train_config), "predict needs a PredictConfig as its config, got TrainConfig"),
        (lambda: nqf.train(None, X, Y, train_config), "train needs an architecture .* or its name, got NoneType"),
        (lambda: nqf.train(arch, X, Y, predict_config()), "train needs a TrainConfig as its config, got PredictConfig"),
    ]
    for call, message in cases:
        with pytest.raises(NqfError, match=message) as err:
            call()
        one_line(err)


# -- config numbers and names of the wrong kind ----------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: predict_config(sigma0="0.1"), r"sigma0 must be a positive finite number, got '0.1'"),
        (lambda: predict_config(sigma0=None), r"sigma0 must be a positive finite number, got None"),
        (lambda: predict_config(lr=[0.1]), r"learning rate must be a positive finite number, got \[0.1\]"),
        (lambda: predict_config(lr=True), r"learning rate must be a positive finite number, got True"),
        (lambda: predict_config(lr=np.complex128(0.1)), r"learning rate must be a positive finite number"),
        (lambda: predict_config(lr=np.array([0.1, 0.2])), r"learning rate must be a positive finite number"),
        (lambda: predict_config(optimizer="momentum", beta="0.5"), r"beta must lie in \[0, 1\), got '0.5'"),
        (lambda: predict_config(check_lr="no"), r"check_lr must be True or False, got 'no'"),
        (lambda: nqf.TrainConfig(lr=True), r"learning rate must be a positive finite number, got True"),
        (lambda: nqf.TrainConfig(optimizer="momentum", beta="x"), r"beta must lie in \[0, 1\), got 'x'"),
        (lambda: nqf.TrainConfig(optimizer="adam", eps=[1e-8]), r"eps must be >= 0, got \[1e-08\]"),
        (lambda: nqf.CompareConfig(optimizers=None), r"optimizers must be a name or names of optimizers, got None"),
        (lambda: nqf.CompareConfig(learning_rates=0.1), r"learning_rates must be \(optimizer, lr\) pairs or a mapping"),
        (lambda: nqf.CompareConfig(learning_rates=[0.1]), r"learning_rates must be \(optimizer, lr\) pairs"),
        # ints beyond float's range: OverflowError tracebacks before
        (lambda: nqf.TrainConfig(sigma0=10**400), r"sigma0 must be a finite number >= 0, got 1000"),
        (lambda: nqf.CompareConfig(lr=10**400), r"learning rate must be a positive finite number, got 1000"),
        (lambda: predict_config(lr=10**400), r"learning rate must be a positive finite number, got 1000"),
        # a horizon past the compiled loops' int32 step counter (predict ran for minutes before);
        # the settings schema's limit and wording (nqf.comparison.settings.Steps)
        (lambda: predict_config(steps=2**31), r"steps must be a positive integer <= 2147483647, got 2147483648"),
        (lambda: nqf.TrainConfig(steps=2**31), r"steps must be a positive integer <= 2147483647, got 2147483648"),
        (lambda: nqf.CompareConfig(steps=2**31), r"steps must be a positive integer <= 2147483647, got 2147483648"),
    ],
)
def test_config_numbers_must_be_real_numbers(make, message):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # np.complex128 was accepted with a ComplexWarning
        with pytest.raises(NqfError, match=message) as err:
            make()
    one_line(err)


def test_numpy_scalars_are_taken_as_their_floats():
    config = nqf.TrainConfig(lr=np.float32(0.05), sigma0=np.float32(1e-3), optimizer="momentum", beta=np.float16(0.5))
    assert type(config.lr) is float and config.lr == float(np.float32(0.05))
    assert type(config.beta) is float and config.beta == 0.5 and type(config.sigma0) is float
    assert nqf.TrainConfig(lr=1).lr == 1  # Python numbers stay as given (store keys unchanged)
    compare = nqf.CompareConfig(optimizers=("momentum",), beta=np.float32(0.5))
    assert type(compare.beta) is float and json.dumps(compare.beta) == "0.5"
    assert predict_config(lr=np.float32(0.05), optimizer="momentum", beta=np.float64(0.5)).lr == np.float32(0.05)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: nqf.PredictConfig(width=4, lr=0.1, steps=10, optimizer=np.array(["gd", "gd"])), "optimizer must be"),
        (lambda: nqf.PredictConfig(width=4, lr=0.1, steps=10, route=np.array(["a", "b"])), "route must be a name"),
        (lambda: nqf.TrainConfig(model=np.array(["network", "x"])), "model must be a name"),
        (lambda: nqf.TrainConfig(optimizer=np.array(["gd", "x"])), "unknown optimizer"),
    ],
)
def test_a_name_given_as_an_array_is_one_line(make, message):
    """A name field given as a NumPy array raised NumPy's "truth value is ambiguous" ValueError."""
    with pytest.raises(NqfError, match=message):
        make()


def test_closure_fraction_true_is_not_taken_as_one():
    from nqf.comparison.config import CompareConfig

    with pytest.raises(NqfError, match="closure_fraction must lie in"):
        CompareConfig(width=4, sigma0=1e-3, lr=0.1, steps=10, closure_fraction=True)


# -- sizes: refused before anything is allocated ----------------------------------------------


def test_predict_of_a_huge_width_is_refused_before_allocating(staircase, sixteen_gib):
    _, arch, X, Y = staircase
    line = refused_quickly(
        lambda: nqf.predict(arch, X, Y, predict_config(width=10**9)), r"width 1000000000.* needs about .* GiB"
    )
    assert "16 GiB available" in line


def test_predict_grid_of_a_huge_width_is_refused_before_allocating(staircase, sixteen_gib):
    _, arch, X, Y = staircase
    line = refused_quickly(
        lambda: nqf.predict_grid(arch, X, Y, predict_config(width=10**9)), r"width 1000000000.* needs about .* GiB"
    )
    assert "16 GiB available" in line


def test_predict_grid_of_a_huge_horizon_is_refused_before_stepping(staircase, sixteen_gib):
    _, arch, X, Y = staircase
    refused_quickly(
        lambda: nqf.predict_grid(arch, X, Y, predict_config(steps=10**9)),
        r"predict_grid: 1 point\(s\) x 1000000000 steps.* would take roughly .* h .*nqf\.predict",
    )


def test_train_recording_every_one_of_a_huge_number_of_steps_is_refused(staircase, sixteen_gib):
    _, arch, X, Y = staircase
    line = refused_quickly(
        lambda: nqf.train(arch, X, Y, train_config(steps=10**9)), r"1000000000 steps .* needs about .* GiB"
    )
    assert "checkpoints" in line and "16 GiB available" in line


def test_compare_of_a_million_seeds_is_refused_before_the_gate(staircase, sixteen_gib):
    task, _, _, _ = staircase
    line = refused_quickly(
        lambda: nqf.compare(task, None, nqf.CompareConfig(width=8, steps=50, seeds=10**6)),
        r"1000000 seed\(s\) needs about .* GiB",
    )
    assert "16 GiB available" in line and "fewer seeds" in line


def test_negative_integer_labels_are_refused_with_an_architecture_by_name():
    """Integer targets (N,) are class labels 0 .. K-1: a negative one was read as one regression
    output of value -1 (the CLI, which now takes --outputs from the data too, refused it)."""
    from nqf.architectures import outputs_for_targets

    X = np.random.default_rng(0).normal(size=(20, 8))
    with pytest.raises(nqf.NqfError, match="hold integer class labels, but the smallest is -1"):
        nqf.predict("mlp", X, np.full(20, -1), nqf.PredictConfig(width=4, lr=0.1, steps=10))
    assert outputs_for_targets(np.array([0, 4, 2])) == 5 and outputs_for_targets(np.array([0.5, -1.0])) == 1
