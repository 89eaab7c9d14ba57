"""A Flax module (linen or NNX) that declares its readout, phi(w, x) = R(w) g(w, x), is
trained as matrix products (``network_batch``: f(X) = sum_i R_i g_i(X)), like an Equinox
module (tests/test_readout.py). The same module class without the declaration is the
reference (phi vmapped over units and samples): the layer's outputs agree to 1e-12 of
max |f| at O(1) weights, and ``nqf.train`` (GD, float64) gives the same losses to 1e-12
relative. A wrong declaration is one NqfError line from ``nqf.from_flax``, before any
training. Skipped without Flax."""

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.architectures.architecture import network, network_batch
from nqf.core.errors import NqfError

from .conftest import assert_allclose

pytest.importorskip("flax")

from flax import linen as nn  # noqa: E402  (after the skip: Flax is optional)
from flax import nnx  # noqa: E402

D, K, R = 8, 4, 3  # the staircase's inputs and outputs; r, the readout's features


# -- the units: each a class without the declaration and a subclass that adds it ---------------


class LinenPerceptron(nn.Module):
    """phi = a tanh(v x), a: (K, r), v: (r, D); the parameters from setup(), so features sees them."""

    def setup(self):
        self.a = self.param("a", nn.initializers.zeros, (K, R))
        self.v = self.param("v", nn.initializers.zeros, (R, D))

    def __call__(self, x):
        return self.a @ jnp.tanh(self.v @ x)

    def features(self, X):  # X (N, D) -> g (N, r)
        return jnp.tanh(X @ self.v.T)


class LinenPerceptronDeclared(LinenPerceptron):
    readout_block: ClassVar[str] = "a"


class LinenDense(nn.Module):
    """phi = out(sin(hidden(x))) with two nn.Dense: out.kernel is (r, K), R^T (transposed)."""

    def setup(self):
        self.hidden = nn.Dense(R)
        self.out = nn.Dense(K, use_bias=False)

    def __call__(self, x):
        return self.out(self.features(x))

    def features(self, X):  # (N, D) -> (N, r); also one x (D,) -> (r,)
        return jnp.sin(self.hidden(X))


class LinenDenseDeclared(LinenDense):
    readout_block: ClassVar[str] = "out.kernel"
    readout_transposed: ClassVar[bool] = True


class NnxPerceptron(nnx.Module):
    """The linen perceptron as an NNX module: nnx.Param a (K, r) and v (r, D)."""

    def __init__(self):
        self.a = nnx.Param(jnp.zeros((K, R)))
        self.v = nnx.Param(jnp.zeros((R, D)))

    def __call__(self, x):
        return self.a[...] @ jnp.tanh(self.v[...] @ x)

    def features(self, X):
        return jnp.tanh(X @ self.v[...].T)


class NnxPerceptronDeclared(NnxPerceptron):
    readout_block: ClassVar[str] = "a"


class NnxLinear(nnx.Module):
    """phi = out(tanh(hidden(x))) with nnx.Linear: out.kernel is (r, K), R^T (transposed)."""

    def __init__(self):
        self.hidden = nnx.Linear(D, R, rngs=nnx.Rngs(0))
        self.out = nnx.Linear(R, K, use_bias=False, rngs=nnx.Rngs(1))

    def __call__(self, x):
        return self.out(self.features(x))

    def features(self, X):
        return jnp.tanh(self.hidden(X))


class NnxLinearDeclared(NnxLinear):
    readout_block: ClassVar[str] = "out.kernel"
    readout_transposed: ClassVar[bool] = True


# kind: (the module without the declaration, the one with it, the block, transposed)
UNITS = {
    "linen": (LinenPerceptron, LinenPerceptronDeclared, "a", False),
    "linen-dense": (LinenDense, LinenDenseDeclared, "out.kernel", True),
    "nnx": (NnxPerceptron, NnxPerceptronDeclared, "a", False),
    "nnx-linear": (NnxLinear, NnxLinearDeclared, "out.kernel", True),
}


def _pair(kind):
    """(declared, generic) Architectures of the same unit, the same parameter layout."""
    plain, declared, _, _ = UNITS[kind]
    fast, slow = nqf.from_flax(declared(), (D,), K), nqf.from_flax(plain(), (D,), K)
    assert slow.readout is None
    assert [(b.name, b.shape) for b in fast.blocks] == [(b.name, b.shape) for b in slow.blocks]
    return fast, slow


@pytest.fixture(scope="module")
def staircase():
    X, Y = nqf.get_task("staircase").generate(0)
    assert X.shape[1:] == (D,) and Y.shape[1:] == (K,)
    return jnp.asarray(X), jnp.asarray(Y)


@pytest.mark.parametrize("kind", sorted(UNITS))
def test_a_flax_module_declares_its_readout(kind, staircase):
    _, _, block, transposed = UNITS[kind]
    fast, slow = _pair(kind)
    assert fast.readout is not None
    assert (fast.readout.block, fast.readout.transposed) == (block, transposed)
    X, _ = staircase
    rng = np.random.default_rng(3)
    W = jnp.asarray(rng.standard_normal((fast.dim, 6)))  # O(1) weights, far from w = 0
    expected = jax.vmap(lambda x: network(slow, W, x))(X)
    assert float(jnp.abs(expected).max()) > 0.1
    atol = 1e-12 * float(jnp.abs(expected).max())
    assert_allclose(network_batch(fast, W, X), expected, rtol=0, atol=atol)
    assert_allclose(network_batch(slow, W, X), expected, rtol=0, atol=atol)


@pytest.mark.parametrize("kind", sorted(UNITS))
def test_a_flax_module_trains_through_its_readout_as_without_it(kind, staircase):
    fast, slow = _pair(kind)
    X, Y = staircase
    config = nqf.TrainConfig(optimizer="gd", lr=0.05, steps=40, width=8, sigma0=0.1, checkpoints=10)
    got, expected = nqf.train(fast, X, Y, config), nqf.train(slow, X, Y, config)
    assert np.asarray(got.W_final).dtype == np.float64
    assert not got.diverged
    assert got.loss[-1] < got.loss[0]
    assert_allclose(got.loss, expected.loss, rtol=1e-12, atol=0)
    assert_allclose(got.W_final, expected.W_final, rtol=1e-10, atol=1e-14)
    # the trained layers: the readout path against the unit vmapped over units and samples
    f_slow = network_batch(slow, expected.W_final, X)
    assert_allclose(network_batch(fast, got.W_final, X), f_slow, rtol=0, atol=1e-12 * float(jnp.abs(f_slow).max()))


# -- wrong declarations: one NqfError line from from_flax, before anything is trained ----------


class LinenNoBlock(LinenPerceptron):
    readout_block: ClassVar[str] = "b"


class LinenWrongShape(LinenPerceptron):
    readout_block: ClassVar[str] = "a"

    def features(self, X):  # r = 2 features, but a holds K r = 12 entries
        return jnp.tanh(X @ self.v[:2].T)


class LinenOneSample(LinenPerceptron):
    readout_block: ClassVar[str] = "a"

    def features(self, X):  # g for one x (r,), not for the batch (N, r)
        return jnp.tanh(self.v @ X[0])


class LinenCompact(nn.Module):
    """Parameters made in a compact __call__: features cannot reach them (use setup)."""

    readout_block: ClassVar[str] = "a"

    @nn.compact
    def __call__(self, x):
        a = self.param("a", nn.initializers.zeros, (K, R))
        v = self.param("v", nn.initializers.zeros, (R, D))
        return a @ jnp.tanh(v @ x)

    def features(self, X):
        return jnp.tanh(X @ self.v.T)


class LinenNoFeatures(nn.Module):
    readout_block: ClassVar[str] = "a"

    @nn.compact
    def __call__(self, x):
        return self.param("a", nn.initializers.zeros, (K,)) * jnp.sum(x)


class LinenWidthField(LinenNoFeatures):
    features: int = 16  # Flax's usual name for a width, a field here and not the method


class NnxNoBlock(NnxPerceptron):
    readout_block: ClassVar[str] = "v.value"


class NnxWrongShape(NnxPerceptron):
    readout_block: ClassVar[str] = "a"

    def features(self, X):
        return jnp.tanh(X @ self.v[...].T)[:, :, None]  # (N, r, 1)


class NnxNotAString(NnxPerceptron):
    readout_block: ClassVar[int] = 0  # type: ignore[assignment]


WRONG = [
    (LinenNoBlock, r"readout_block 'b' is not a parameter block of the module; its blocks are a, v"),
    (LinenWrongShape, r"features\(X\) must return \(N, r\) with outputs x r = 12 .* got shape \(2, 2\)"),
    (LinenOneSample, r"features\(X\) must return \(N, r\) .* got shape \(3,\) for a batch of shape \(2, 8\)"),
    (LinenCompact, r"features on a batch of shape \(2, 8\) raised AttributeError"),
    (LinenNoFeatures, r"must define features\(self, X\) -> \(N, r\)$"),
    (LinenWidthField, r"must define features\(self, X\) -> \(N, r\); its features is of type int, not a method"),
    (NnxNoBlock, r"readout_block 'v.value' is not a parameter block of the module; its blocks are a, v"),
    (NnxWrongShape, r"got shape \(2, 3, 1\)"),
    (NnxNotAString, r"readout_block must be the name of a parameter block \(a str\), got 0"),
]


@pytest.mark.parametrize(("module", "message"), WRONG, ids=[m.__name__ for m, _ in WRONG])
def test_a_wrong_flax_readout_declaration_is_refused(module, message):
    with pytest.raises(NqfError, match=message) as caught:
        nqf.from_flax(module(), (D,), K)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"{module.__name__}: ")


def test_a_width_field_named_features_without_a_declaration_is_no_readout():
    class WidthOnly(nn.Module):  # no readout_block: a field named features is the module's own business
        features: int = 16

        @nn.compact
        def __call__(self, x):
            return nn.Dense(K)(jnp.tanh(nn.Dense(self.features)(x)))

    arch = nqf.from_flax(WidthOnly(), (D,), K)
    assert arch.readout is None
