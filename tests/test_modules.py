"""A user's Equinox or Flax module as the unit (``nqf.from_equinox``, ``nqf.from_flax``):
the tanh perceptron written as a module gives the built-in ``mlp``'s A(x) and predictions;
a ReLU module is refused by the expansion check; bad modules are one-line errors."""

from __future__ import annotations

import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.architectures.architecture import closed_form_structure, network, structure_matrix
from nqf.theory.predict.pipeline import PredictConfig, predict
from tests.conftest import assert_allclose

D, K = 4, 3  # inputs, outputs of the small staircase


class Perceptron(eqx.Module):
    """phi(w, x) = a tanh(v . x), w = (a in R^K, v in R^D): the built-in mlp's unit."""

    a: jax.Array
    v: jax.Array
    activation: object = eqx.field(static=True, default=jnp.tanh)

    def __call__(self, x):
        return self.a * self.activation(jnp.dot(self.v, x))


class Empty(eqx.Module):
    """No floating-point array at all: an integer array and a Python number."""

    index: jax.Array
    scale: int = 2

    def __call__(self, x):
        return x * self.scale


def equinox_perceptron(activation=jnp.tanh) -> nqf.Architecture:
    return nqf.from_equinox(Perceptron(jnp.zeros(K), jnp.zeros(D), activation), (D,), K)


def _flax():
    return pytest.importorskip("flax")


def flax_linen_perceptron() -> nqf.Architecture:
    _flax()
    from flax import linen as nn

    class LinenPerceptron(nn.Module):
        @nn.compact
        def __call__(self, x):
            a = self.param("a", nn.initializers.normal(), (K,))
            v = self.param("v", nn.initializers.normal(), (D,))
            return a * jnp.tanh(jnp.dot(v, x))

    return nqf.from_flax(LinenPerceptron(), (D,), K)


def flax_nnx_perceptron() -> nqf.Architecture:
    _flax()
    from flax import nnx

    class NnxPerceptron(nnx.Module):
        def __init__(self):
            self.a = nnx.Param(jnp.zeros(K))
            self.v = nnx.Param(jnp.zeros(D))

        def __call__(self, x):
            return self.a[...] * jnp.tanh(jnp.dot(self.v[...], x))

    return nqf.from_flax(NnxPerceptron(), (D,), K)


MODULES = {"equinox": equinox_perceptron, "flax-linen": flax_linen_perceptron, "flax-nnx": flax_nnx_perceptron}


@pytest.fixture(scope="module")
def staircase():
    task = nqf.get_task("staircase", inputs=D, outputs=K, singular_values=(3.0, 2.0, 1.0), samples=64)
    X, Y = task.generate(0)
    return nqf.get_architecture("mlp", inputs=D, outputs=K), np.asarray(X), np.asarray(Y)


@pytest.mark.parametrize("kind", sorted(MODULES))
def test_module_unit_is_the_mlp_unit(kind, staircase):
    mlp, X, _ = staircase
    arch = MODULES[kind]()
    # the same parameter layout as mlp: w = [a, v]
    assert [(b.name, b.shape) for b in arch.blocks] == [(b.name, b.shape) for b in mlp.blocks]
    assert arch.dim == mlp.dim and arch.closed_form is None
    A = np.asarray(jax.jit(jax.vmap(lambda x: structure_matrix(arch, x)))(X[:4]))
    closed = np.stack([np.asarray(closed_form_structure(mlp, x)) for x in X[:4]])
    assert np.max(np.abs(closed)) > 0.1
    assert_allclose(A, closed, rtol=0, atol=1e-12)
    # through the library's structure (the generic autodiff route), as predict uses it
    dense = nqf.structure(arch, X[:4]).dense()
    assert_allclose(dense, closed, rtol=0, atol=1e-12)
    # the full layer at finite weights is the module's output summed over units
    W = np.random.default_rng(0).standard_normal((arch.dim, 5))
    assert_allclose(network(arch, W, X[0]), network(mlp, W, X[0]), rtol=1e-13, atol=1e-13)
    report = nqf.expansion_check(arch)
    assert report.applies, report.reason


@pytest.mark.parametrize("kind", ["equinox", "flax-linen"])
def test_module_unit_predicts_like_mlp(kind, staircase):
    mlp, X, Y = staircase
    arch = MODULES[kind]()
    config = PredictConfig(width=16, lr=0.05, steps=600, sigma0=1e-6)
    expected = predict(mlp, X, Y, config)
    got = predict(arch, X, Y, config)
    steps = np.asarray(expected.mflow_switch_steps)
    assert np.all(np.isfinite(steps)) and len(steps) == 3
    assert_allclose(got.mflow_switch_steps, steps, rtol=1e-9)
    assert_allclose(got.lv_switch_steps, expected.lv_switch_steps, rtol=1e-9)


def test_relu_module_is_not_smooth_and_predict_refuses(staircase):
    _, X, Y = staircase
    arch = equinox_perceptron(jax.nn.relu)
    report = nqf.expansion_check(arch)
    assert not report.applies and report.kind == "not smooth"
    assert report.reason.startswith("not smooth at w = 0")
    with pytest.raises(nqf.TheoryDoesNotApply, match="Perceptron.*not smooth at w = 0"):
        predict(arch, X, Y, PredictConfig(width=4, lr=0.05, steps=10, sigma0=1e-6))


def test_module_without_arrays_is_one_line_error():
    with pytest.raises(nqf.NqfError, match="no trainable") as err:
        nqf.from_equinox(Empty(jnp.arange(3)), (D,), K)
    assert "\n" not in str(err.value) and "Empty" in str(err.value)


def test_bad_module_shapes_are_one_line_errors():
    module = Perceptron(jnp.zeros(K), jnp.zeros(D))
    with pytest.raises(nqf.NqfError, match=r"returns shape \(3,\).*outputs = 2"):
        nqf.from_equinox(module, (D,), 2)
    with pytest.raises(nqf.NqfError, match=r"shape \(5,\) raised TypeError") as err:
        nqf.from_equinox(module, 5, K)
    assert "\n" not in str(err.value)
    with pytest.raises(nqf.NqfError, match="input_shape must be"):
        nqf.from_equinox(module, (0,), K)
    with pytest.raises(nqf.NqfError, match="equinox.Module"):
        nqf.from_equinox(object(), (D,), K)
    _flax()
    with pytest.raises(nqf.NqfError, match="flax.linen.Module or a flax.nnx.Module"):
        nqf.from_flax(module, (D,), K)


def test_flax_missing_is_a_clear_error(monkeypatch):
    for name in [m for m in sys.modules if m == "flax" or m.startswith("flax.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "flax", None)  # `import flax` now raises ImportError
    with pytest.raises(nqf.NqfError, match=r"install 'nqf\[flax\]'"):
        nqf.from_flax(object(), (D,), K)


@pytest.mark.slow  # a second Python process
def test_importing_nqf_does_not_import_flax():
    code = "import sys, nqf; nqf.from_flax; nqf.from_equinox; assert 'flax' not in sys.modules, 'flax'; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_flax_linen_keeps_other_collections_fixed(staircase):
    """A non-parameter collection is part of the unit, at the values given: scale 2 doubles A."""
    _flax()
    from flax import linen as nn

    class Scaled(nn.Module):
        @nn.compact
        def __call__(self, x):
            scale = self.variable("constants", "scale", lambda: jnp.ones(()))
            a = self.param("a", nn.initializers.normal(), (K,))
            v = self.param("v", nn.initializers.normal(), (D,))
            return scale.value * a * jnp.tanh(jnp.dot(v, x))

    mlp, X, _ = staircase
    variables = {"params": {"a": jnp.zeros(K), "v": jnp.zeros(D)}, "constants": {"scale": jnp.asarray(2.0)}}
    arch = nqf.from_flax(Scaled(), (D,), K, variables=variables)
    assert [b.name for b in arch.blocks] == ["a", "v"]  # the constants are not parameters
    A = np.asarray(jax.jit(lambda x: structure_matrix(arch, x))(X[0]))
    assert_allclose(A, 2 * np.asarray(closed_form_structure(mlp, X[0])), rtol=0, atol=1e-12)
