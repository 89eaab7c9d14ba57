"""``predict``, ``predict_grid`` and ``train`` take a built-in architecture's name, as the CLI's
``--arch`` does: its default options, with ``inputs`` and ``outputs`` from the data (issue 23)."""

from __future__ import annotations

import numpy as np
import pytest

import nqf
from nqf.architectures import architecture_for_data
from nqf.core.errors import NqfError


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
