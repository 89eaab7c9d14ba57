"""The layer as matrix products (Readout, network_batch) against the unit evaluated one by one.

A unit that declares its readout, phi(w, x) = R(w) g(w, x), is trained through
``network_batch``: one contraction over the units instead of the (N, n, K) products. It must
equal the generic path (``network`` vmapped over samples, the reference that every unit has)
to 1e-12 of max |f|, at random O(1) weights: for every built-in architecture (and several
option settings: activations, readouts, paddings, routings), for a user's unit with r = 2
features, for an Equinox module that declares its readout, and through ``nqf.train``
(losses, final weights) and ``nqf.train_grid`` for mlp, attention and moe. Which built-in
families declare a readout is pinned, so a declaration cannot silently disappear."""

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.architectures import ARCHITECTURES
from nqf.architectures.architecture import Architecture, Readout, network, network_batch
from nqf.core.errors import NqfError

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


# The readout block of every built-in family with the structure phi = R(w) g(w, x) (whether it
# is stored as R or R^T is checked by the values below); None: no trainable readout.
DECLARED = {
    "mlp": "a",
    "mlp-fixed": None,  # phi = sigma(v.x): the output weight is fixed, not a parameter
    "attention": "W_O",
    "linear-attention": "w_OV",
    "moe": "a",
    "conv1d": "a",
    "conv2d": "a",
}

# (name, options): every registered architecture at its defaults, and other settings
CASES = [(name, {}) for name in ARCHITECTURES] + [
    ("mlp", {"activation": "relu", "outputs": 1}),
    ("mlp-fixed", {"activation": "one_minus_cos"}),
    ("attention", {"readout": "pool"}),  # scores through the keys
    ("attention", {"readout": "pool", "dim": 3, "key_dim": 4}),  # through W_Q W_K^T
    ("attention", {"tokens": 5, "dim": 3, "key_dim": 2, "value_dim": 6, "outputs": 1, "readout": "last"}),
    ("linear-attention", {"dim": 2, "context": 7}),
    ("moe", {"routing": "topk", "top_k": 2, "experts": 5}),
    ("moe", {"activation": "silu", "experts": 3, "outputs": 1}),
    ("conv1d", {"readout": "position", "outputs": 2}),
    ("conv1d", {"padding": "valid", "kernel": 5, "activation": "sin", "outputs": 3}),
    ("conv2d", {"readout": "position", "padding": "valid", "outputs": 3}),
    ("conv2d", {"rows": 5, "columns": 6, "kernel": 2, "activation": "relu", "outputs": 2}),
]


def _random(arch, n, N, seed):
    """W with O(1) entries (far from the small-init regime) and N inputs."""
    rng = np.random.default_rng(seed)
    W = jnp.asarray(rng.standard_normal((arch.dim, n)))
    X = jnp.asarray(rng.standard_normal((N, *arch.input_shape)))
    return W, X


def test_every_registered_architecture_is_listed():
    assert set(DECLARED) == set(ARCHITECTURES)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_the_declared_readout_of_each_family(name):
    for options in [opts for case, opts in CASES if case == name]:
        readout = nqf.get_architecture(name, **options).readout
        assert (None if readout is None else readout.block) == DECLARED[name], (name, options)


@pytest.mark.parametrize(("name", "options"), CASES, ids=lambda v: v if isinstance(v, str) else repr(v))
def test_network_batch_equals_the_unit_for_every_architecture(name, options):
    arch = nqf.get_architecture(name, **options)
    n = arch.router.units if arch.router is not None else 9
    W, X = _random(arch, n, 33, seed=len(repr(options)))

    def value_and_grad(layer):  # f and the gradient of a loss through it, which training uses
        return jax.jit(jax.value_and_grad(lambda W: jnp.sum(jnp.sin(layer(arch, W, X)))))(W)

    expected = jax.jit(_reference, static_argnums=0)(arch, W, X)
    assert float(jnp.abs(expected).max()) > 0.1
    got = jax.jit(network_batch, static_argnums=0)(arch, W, X)
    assert got.shape == (33, arch.outputs)
    assert_allclose(got, expected, rtol=0, atol=1e-12 * float(jnp.abs(expected).max()))
    (_, g_fast), (_, g_slow) = value_and_grad(network_batch), value_and_grad(_reference)
    assert_allclose(g_fast, g_slow, rtol=0, atol=1e-12 * float(jnp.abs(g_slow).max()))


def test_network_batch_checks_the_width_of_a_router():
    arch = nqf.get_architecture("moe", experts=4)
    W, X = _random(arch, 3, 5, seed=0)
    with pytest.raises(NqfError, match="width must be 4"):
        network_batch(arch, W, X)


def test_a_readout_block_that_is_no_k_by_r_matrix_is_refused():
    arch = nqf.get_architecture("mlp", inputs=5, outputs=3)
    with pytest.raises(NqfError, match="not a multiple of outputs"):
        dataclasses.replace(arch, readout=Readout("v", arch.readout.features))
    with pytest.raises(NqfError, match="no parameter block"):
        dataclasses.replace(arch, readout=Readout("b", arch.readout.features))


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
    sweep_fast = nqf.train_grid(arch, X, Y, config, [1e-3, 1e-4], [0, 1])
    sweep_slow = nqf.train_grid(_generic(arch), X, Y, config, [1e-3, 1e-4], [0, 1])
    assert_allclose(sweep_fast.loss, sweep_slow.loss, rtol=1e-12, atol=1e-15)


def _equinox_unit(D=5, K=3, r=4, transposed=False):
    """An Equinox perceptron with an r-dimensional hidden layer that declares its readout."""
    import equinox as eqx

    class Perceptron(eqx.Module):
        a: jax.Array  # (K, r): the readout
        v: jax.Array  # (r, D)
        readout_block: ClassVar[str] = "a"

        def __call__(self, x):
            return self.a @ jnp.tanh(self.v @ x)

        def features(self, X):
            return jnp.tanh(X @ self.v.T)

    class Transposed(eqx.Module):
        v: jax.Array  # (D, r)
        w_out: jax.Array  # (r, K): R^T, applied on the right
        readout_block: ClassVar[str] = "w_out"
        readout_transposed: ClassVar[bool] = True

        def __call__(self, x):
            return jnp.sin(x @ self.v) @ self.w_out

        def features(self, X):
            return jnp.sin(X @ self.v)

    if transposed:
        return nqf.from_equinox(Transposed(jnp.zeros((D, r)), jnp.zeros((r, K))), (D,), K)
    return nqf.from_equinox(Perceptron(jnp.zeros((K, r)), jnp.zeros((r, D))), (D,), K)


@pytest.mark.parametrize("transposed", [False, True])
def test_an_equinox_module_declares_its_readout(transposed):
    arch = _equinox_unit(transposed=transposed)
    assert arch.readout is not None
    assert arch.readout.transposed == transposed
    W, X = _random(arch, 6, 25, seed=3)
    expected = _reference(arch, W, X)
    assert_allclose(network_batch(arch, W, X), expected, rtol=0, atol=1e-12 * float(jnp.abs(expected).max()))


def test_an_equinox_module_trains_through_its_readout():
    arch = _equinox_unit(D=8, K=4, r=2)
    X, Y = nqf.get_task("staircase").generate(0)
    config = nqf.TrainConfig(optimizer="gd", lr=0.05, steps=100, width=8, sigma0=1e-2, checkpoints=10)
    fast = nqf.train(arch, X, Y, config)
    slow = nqf.train(_generic(arch), X, Y, config)
    assert_allclose(fast.loss, slow.loss, rtol=1e-12, atol=1e-15)


def test_a_wrong_equinox_readout_declaration_is_refused():
    import equinox as eqx

    class NoBlock(eqx.Module):
        a: jax.Array
        readout_block: ClassVar[str] = "b"

        def __call__(self, x):
            return self.a * jnp.sum(x)

        def features(self, X):
            return jnp.sum(X, axis=1, keepdims=True)

    class NoFeatures(eqx.Module):
        a: jax.Array
        readout_block: ClassVar[str] = "a"

        def __call__(self, x):
            return self.a * jnp.sum(x)

    class WrongShape(NoBlock):
        readout_block: ClassVar[str] = "a"

        def features(self, X):
            return jnp.stack([jnp.sum(X, axis=1)] * 2, axis=1)  # r = 2, but a has K = 3 entries

    with pytest.raises(NqfError, match="readout_block 'b' is not a parameter block"):
        nqf.from_equinox(NoBlock(jnp.zeros(3)), (4,), 3)
    with pytest.raises(NqfError, match=r"must define features\(self, X\)"):
        nqf.from_equinox(NoFeatures(jnp.zeros(3)), (4,), 3)
    with pytest.raises(NqfError, match=r"features\(X\) must return \(N, r\)"):
        nqf.from_equinox(WrongShape(jnp.zeros(3)), (4,), 3)


@pytest.mark.parametrize(
    ("task", "options", "optimizer"),
    [
        ("tokens", {}, "adam"),
        ("experts", {}, "gd"),
        ("experts", {"routing": "topk", "top_k": 2}, "adam"),
    ],
)
def test_attention_and_moe_train_through_the_readout_as_through_the_unit(task, options, optimizer):
    spec = nqf.get_task(task)
    X, Y = spec.generate(0)
    name, natural = spec.natural_architecture()
    arch = nqf.get_architecture(name, **{**natural, **options})
    assert arch.readout is not None
    width = arch.router.units if arch.router is not None else 8
    config = nqf.TrainConfig(
        optimizer=optimizer, lr=0.05 if optimizer == "gd" else 0.01, steps=150, width=width, sigma0=0.1, checkpoints=10
    )
    fast = nqf.train(arch, X, Y, config)
    slow = nqf.train(_generic(arch), X, Y, config)
    assert not fast.diverged
    assert fast.loss[-1] < fast.loss[0]
    assert_allclose(fast.loss, slow.loss, rtol=1e-12, atol=1e-15)
    assert_allclose(fast.W_final, slow.W_final, rtol=1e-10, atol=1e-13)
