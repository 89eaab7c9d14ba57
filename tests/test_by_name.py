"""``predict``, ``predict_grid`` and ``train`` take a built-in architecture's name, as the CLI's
``--arch`` does: its default options, with ``inputs`` and ``outputs`` from the data (issue 23):
the outputs from integer labels, the shapes from lists as from arrays. Targets that do not fit the
architecture's outputs (one float per sample for several outputs) say which shapes do, in the API
and through the real command."""

from __future__ import annotations

import json

import numpy as np
import pytest

import nqf
from nqf.architectures import architecture_for_data
from nqf.core.errors import NqfError
from tests.conftest import assert_allclose, error_line, predict_args, run_nqf


def _data(N: int = 64, D: int = 5, K: int = 3):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D))
    return X, np.tanh(X @ rng.standard_normal((D, K)))


def test_architecture_for_data_takes_inputs_and_outputs_from_the_data():
    X, Y = _data()
    arch = architecture_for_data("mlp", X, Y)
    assert (arch.input_shape, arch.outputs) == ((5,), 3)
    assert arch_options(arch) == arch_options(nqf.get_architecture("mlp", inputs=5, outputs=3))
    # an architecture without those options keeps its defaults
    assert architecture_for_data("attention", X, Y).input_shape == nqf.get_architecture("attention").input_shape


def arch_options(arch) -> dict:
    return dict(arch.options)


def test_predict_by_name_equals_predict_by_architecture():
    X, Y = _data()
    config = nqf.PredictConfig(width=8, lr=0.05, steps=300, sigma0=1e-4)
    by_name = nqf.predict("mlp", X, Y, config)
    by_arch = nqf.predict(nqf.get_architecture("mlp", inputs=5, outputs=3), X, Y, config)
    np.testing.assert_array_equal(by_name.flow.loss, by_arch.flow.loss)
    np.testing.assert_array_equal(by_name.mflow_switch_steps, by_arch.mflow_switch_steps)


def test_train_and_grid_by_name():
    X, Y = _data()
    arch = nqf.get_architecture("mlp", inputs=5, outputs=3)
    train_config = nqf.TrainConfig(width=8, lr=0.05, steps=50, sigma0=1e-2, checkpoints=4)
    np.testing.assert_array_equal(nqf.train("mlp", X, Y, train_config).loss, nqf.train(arch, X, Y, train_config).loss)
    config = nqf.PredictConfig(width=8, lr=0.05, steps=100, sigma0=1e-4)
    grid = nqf.predict_grid("mlp", X, Y, config, sigma0s=[1e-4, 1e-3])
    np.testing.assert_array_equal(
        grid.mflow_loss, nqf.predict_grid(arch, X, Y, config, sigma0s=[1e-4, 1e-3]).mflow_loss
    )


def test_unknown_name_is_one_line_error():
    X, Y = _data()
    with pytest.raises(NqfError, match="unknown architecture 'perceptron'"):
        nqf.predict("perceptron", X, Y, nqf.PredictConfig(width=8, lr=0.05, steps=10, sigma0=1e-4))


# -- outputs from integer labels, shapes from lists ---------------------------------------------------


def _labelled(N: int = 20, D: int = 3, classes: int = 2):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D))
    return X, np.arange(N) % classes


@pytest.mark.parametrize("classes", [2, 6])
def test_predict_by_name_takes_the_outputs_from_integer_labels(classes):
    X, y = _labelled(classes=classes)
    config = nqf.PredictConfig(width=4, lr=0.05, steps=20, sigma0=1e-3)
    by_name = nqf.predict("mlp", X, y, config)
    arch = nqf.get_architecture("mlp", inputs=3, outputs=classes)
    by_arch = nqf.predict(arch, X, y, config)
    np.testing.assert_array_equal(by_name.flow.loss, by_arch.flow.loss)


@pytest.mark.slow  # loads the command line's modules
def test_architecture_for_data_maps_labels_as_the_cli_does():
    from nqf.cli.unit import data_shapes

    X, y = _labelled(classes=5)
    assert architecture_for_data("mlp", X, y).outputs == 5 == data_shapes(X, y)[1]
    assert architecture_for_data("mlp", X, y == 1).outputs == 2  # booleans are labels too


@pytest.mark.no_shape_checks  # lists, as a user without the test-time checks passes them
def test_predict_and_train_by_name_take_shapes_from_lists():
    X, y = _labelled(classes=2)
    Y = np.eye(2)[y]
    config = nqf.PredictConfig(width=4, lr=0.05, steps=20, sigma0=1e-3)
    from_lists = nqf.predict("mlp", X.tolist(), Y.tolist(), config)
    from_arrays = nqf.predict("mlp", X, Y, config)
    np.testing.assert_array_equal(from_lists.flow.loss, from_arrays.flow.loss)
    train_config = nqf.TrainConfig(width=4, lr=0.05, steps=5, sigma0=1e-3)
    np.testing.assert_array_equal(
        nqf.train("mlp", X.tolist(), y.tolist(), train_config).loss, nqf.train("mlp", X, Y, train_config).loss
    )


# -- float targets of shape (N,) for several outputs -------------------------------------------------


@pytest.mark.slow  # through the console script
def test_one_float_per_sample_says_the_shapes_that_fit_and_the_fix_works(mlp_data):
    """With --outputs 4 given (without it, --arch takes its outputs from Y: one)."""
    line = error_line(run_nqf(*predict_args(mlp_data["y1d"], "--outputs", "4")))
    assert line == (
        "error: targets Y of shape (32,) (dtype float64) hold one float per sample, but the architecture has 4 "
        "outputs: for one output give it outputs=1 (--outputs 1), which takes Y as (N,) or Y[:, None] of shape "
        "(N, 1); for 4 outputs Y must have shape (N=32, K=4); for classes give integer class labels in [0, 4) "
        "(Y.astype(int))"
    )  # was: "... would be class labels, but they are floats ...; give integer labels in [0, 4) or ..."
    fixed = run_nqf(*predict_args(mlp_data["y1d"], "--outputs", "1", "--json"))
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["config"]["arch_options"]["outputs"] == 1


def test_one_float_per_sample_in_the_api_names_both_fixes(mlp_data):
    X, y = mlp_data["X"], mlp_data["Y"][:, 0]
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
