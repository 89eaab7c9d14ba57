"""The layer as matrix products (Readout, network_batch) against the unit evaluated one by one.

A unit that declares its readout, phi(w, x) = R(w) g(w, x), is trained through
``network_batch``: one contraction over the units instead of the (N, n, K) products. It must
equal the generic path (``network`` vmapped over samples, the reference that every unit has)
to 1e-12, for the built-in mlp with several activations, for a user's unit with r = 2
features, and through ``nqf.train`` (losses, final weights) and ``nqf.train_sweep``."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.architectures.architecture import Architecture, Readout, network, network_batch

from .conftest import assert_allclose


def _generic(arch):
    return dataclasses.replace(arch, readout=None)


def _reference(arch, W, X):
    return jax.vmap(lambda x: network(arch, W, x))(X)


@pytest.mark.parametrize("activation", ["tanh", "sin", "gelu", "linear", "relu"])
def test_mlp_readout_equals_the_unit(activation):
    arch = nqf.get_architecture("mlp", activation=activation, inputs=5, outputs=3)
    assert arch.readout is not None
    rng = np.random.default_rng(0)
    W = jnp.asarray(0.7 * rng.standard_normal((arch.dim, 11)))
    X = jnp.asarray(rng.standard_normal((40, 5)))
    expected = _reference(arch, W, X)
    assert_allclose(network_batch(arch, W, X), expected, rtol=0, atol=1e-12 * float(jnp.abs(expected).max()))


def _two_feature_unit(inputs=4, outputs=2):
    """phi(w, x) = B [tanh(v.x), sin(u.x)]: a user's unit with r = 2 readout features."""

    def unit(w, x):
        return w["B"] @ jnp.stack([jnp.tanh(w["v"] @ x), jnp.sin(w["u"] @ x)])

    def features(w, X):
        return jnp.stack([jnp.tanh(X @ w["v"]), jnp.sin(X @ w["u"])], axis=1)

    template = {
        "B": jax.ShapeDtypeStruct((outputs, 2), jnp.float32),
        "u": jax.ShapeDtypeStruct((inputs,), jnp.float32),
        "v": jax.ShapeDtypeStruct((inputs,), jnp.float32),
    }
    return Architecture("two-features", unit, template, (inputs,), outputs, readout=Readout("B", features))


def test_a_users_readout_with_two_features():
    arch = _two_feature_unit()
    rng = np.random.default_rng(1)
    W = jnp.asarray(rng.standard_normal((arch.dim, 7)))
    X = jnp.asarray(rng.standard_normal((30, 4)))
    expected = _reference(arch, W, X)
    assert_allclose(network_batch(arch, W, X), expected, rtol=0, atol=1e-12 * float(jnp.abs(expected).max()))


@pytest.mark.parametrize("optimizer", ["gd", "adam"])
def test_training_through_the_readout_equals_the_generic_path(optimizer):
    X, Y = nqf.get_task("staircase").generate(0)
    arch = nqf.get_architecture("mlp", activation="tanh")
    config = nqf.TrainConfig(
        optimizer=optimizer, lr=0.05 if optimizer == "gd" else 0.01, steps=300, width=16, sigma0=1e-3, checkpoints=20
    )
    fast = nqf.train(arch, X, Y, config)
    slow = nqf.train(_generic(arch), X, Y, config)
    assert_allclose(fast.loss, slow.loss, rtol=1e-12, atol=1e-15)
    assert_allclose(fast.W_final, slow.W_final, rtol=1e-10, atol=1e-14)
    sweep_fast = nqf.train_sweep(arch, X, Y, config, [1e-3, 1e-4], [0, 1])
    sweep_slow = nqf.train_sweep(_generic(arch), X, Y, config, [1e-3, 1e-4], [0, 1])
    assert_allclose(sweep_fast.loss, sweep_slow.loss, rtol=1e-12, atol=1e-15)
