"""Jaxprs interpreted in numpy (``nqf.core.host_eval``) against the same functions compiled.

Required (issue 20): the host path and the compiled path give the same numbers to 1e-12 on every
built-in architecture: the expansion probe's evaluations, the data's moments, and the verdicts;
the primitives one by one on awkward parameters (negative and interior padding, batched
products, selects)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.architectures.activations import ACTIVATIONS
from nqf.architectures.expansion import EPS_FLOAT64, draw_samples, expansion_check, probe_unit, unit_functions
from nqf.core import host_eval
from nqf.theory.data_matrices.moments import moment_data_matrices

from .conftest import assert_allclose

CASES = [(name, {}) for name in sorted(nqf.ARCHITECTURES)] + [
    ("mlp", {"activation": a}) for a in sorted(ACTIVATIONS) if a != "tanh"
]


def _close(host, compiled, what, rel=1e-12):
    for a, b in zip(jax.tree.leaves(host), jax.tree.leaves(compiled), strict=True):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        assert a.shape == b.shape, what
        assert_allclose(a, b, rtol=0, atol=rel * max(float(np.max(np.abs(b), initial=0.0)), 1e-300), err_msg=what)


@pytest.mark.parametrize(("name", "options"), CASES, ids=[f"{n}-{o.get('activation', '')}" for n, o in CASES])
def test_probe_on_host_equals_compiled(name, options, monkeypatch):
    arch = nqf.get_architecture(name, **options)
    samples = draw_samples(arch, jax.random.key(0), 8, jnp.float64)
    fns = unit_functions(arch, jnp.float64)
    host = probe_unit(fns, samples, EPS_FLOAT64, jnp.float64)
    monkeypatch.setattr(host_eval, "HOST_MAX_ELEMENTS", -1)
    compiled = probe_unit(fns, samples, EPS_FLOAT64, jnp.float64)
    _close(dataclasses.astuple(host), dataclasses.astuple(compiled), f"{name} {options}")


@pytest.mark.slow  # the whole check twice per case; the probe's test above is its fast sibling
@pytest.mark.parametrize(("name", "options"), CASES, ids=[f"{n}-{o.get('activation', '')}" for n, o in CASES])
def test_expansion_verdict_on_host_equals_compiled(name, options, monkeypatch):
    arch = nqf.get_architecture(name, **options)
    host = expansion_check(arch)
    monkeypatch.setattr(host_eval, "HOST_MAX_ELEMENTS", -1)
    compiled = expansion_check(arch)
    assert (host.applies, host.kind, host.reason) == (compiled.applies, compiled.kind, compiled.reason)
    # the fitted orders read ratios near rounding level: equal to 1e-6 (a slope; 0 for relu's
    # remainder, which does not fall), not to the last bits
    for field in ("remainder_order", "layer_order", "leading_order"):
        a, b = getattr(host, field), getattr(compiled, field)
        assert (np.isnan(a) and np.isnan(b)) or a == b or abs(a - b) <= 1e-6 * max(abs(b), 1.0), (field, a, b)


@pytest.mark.parametrize("name", sorted(nqf.ARCHITECTURES))
def test_moments_on_host_equal_compiled(name, monkeypatch):
    arch = nqf.get_architecture(name)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((100, *arch.input_shape))
    Y = rng.standard_normal((100, arch.outputs))
    host = moment_data_matrices(arch, X, Y, jnp.float64)
    monkeypatch.setattr(host_eval, "HOST_MAX_ELEMENTS", -1)
    compiled = moment_data_matrices(arch, X, Y, jnp.float64)
    expected_path = "compiled" if name.startswith("conv") else "numpy"  # conv's unit gathers patches
    assert (host.evaluated, compiled.evaluated) == (expected_path, "compiled")
    for field in ("second", "cross", "optimum", "target_energy"):
        _close(getattr(host, field), getattr(compiled, field), f"{name}: {field}")
    # the residual is a sum of squares at the optimum: relative to the target energy
    _close(host.residual, compiled.residual, f"{name}: residual", rel=1e-12 * float(compiled.target_energy))


def test_predict_says_the_moments_ran_on_host():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 4))
    Y = X @ rng.standard_normal((4, 2))
    arch = nqf.get_architecture("mlp", inputs=4, outputs=2)
    p = nqf.predict(arch, X, Y, nqf.PredictConfig(width=8, steps=50, sigma0=1e-3, lr=0.05))
    assert "moments computed in numpy (nothing compiled)" in p.route_reason


def test_activation_derivatives_on_host_equal_compiled():
    from nqf.architectures.activations import _derivatives_at_zero, get_activation

    for name in ACTIVATIONS:
        first, second = _derivatives_at_zero(name, "float64")
        d1 = jax.grad(get_activation(name))
        expected = jax.jit(lambda z, d1=d1: (d1(z), jax.grad(d1)(z)))(jnp.zeros((), jnp.float64))
        assert (first, second) == tuple(float(v) for v in expected), name


def _random(shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


PRIMITIVE_CASES = {
    "pad_negative_and_interior": (
        lambda x: jax.lax.pad(x, 0.5, [(2, -1, 1), (-1, 3, 0)]),
        (_random((4, 5)),),
    ),
    "dot_general_batched": (
        lambda a, b: jax.lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))),
        (_random((3, 4, 5)), _random((3, 5, 6), seed=1)),
    ),
    "dot_general_batch_not_leading": (
        lambda a, b: jax.lax.dot_general(a, b, (((0,), (2,)), ((2,), (0,)))),
        (_random((5, 4, 3)), _random((3, 6, 5), seed=1)),
    ),
    "select_and_compare": (
        lambda a, b: jnp.where(a > b, jnp.tanh(a), jnp.exp(-(b**2))),
        (_random((7,)), _random((7,), seed=1)),
    ),
    "reductions_slices_iota": (
        lambda a: (jnp.max(a, axis=0), jnp.sum(a[1:, ::2], axis=1), a.T @ jnp.arange(4.0), jnp.split(a, [1, 3])[1]),
        (_random((4, 6)),),
    ),
    "float32_stays_float32": (
        lambda a: (a * 0.1 + jnp.float32(2.0), jnp.linalg.norm(a, axis=-1)),
        (_random((3, 4), np.float32),),
    ),
    "grad_of_a_unit": (
        jax.grad(lambda w, x: jnp.sum(jax.nn.gelu(w @ x, approximate=False) ** 2)),
        (_random((3, 4)), _random((4,), seed=2)),
    ),
}


@pytest.mark.parametrize("case", sorted(PRIMITIVE_CASES))
def test_primitives_equal_compiled(case):
    fn, args = PRIMITIVE_CASES[case]
    host = host_eval.evaluate_on_host(fn, *args)
    compiled = jax.jit(fn)(*args)
    for a, b in zip(jax.tree.leaves(host), jax.tree.leaves(compiled), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
    _close(host, compiled, case, rel=1e-6 if case.startswith("float32") else 1e-13)


def test_unsupported_primitives_compile_instead():
    fn = lambda x: jnp.cumsum(x)  # noqa: E731  (cumsum: not in the table)
    with pytest.raises(host_eval.NotOnHost):
        host_eval.evaluate_on_host(fn, np.arange(5.0))
    out, on_host = host_eval.host_or_compiled(fn, np.arange(5.0))
    assert not on_host and np.array_equal(out, np.cumsum(np.arange(5.0)))
    small, on_host = host_eval.host_or_compiled(jnp.tanh, np.arange(5.0))
    assert on_host and np.allclose(small, np.tanh(np.arange(5.0)))
    # too much work for the host: compiled
    _, on_host = host_eval.host_or_compiled(jnp.tanh, np.zeros(16), calls=host_eval.HOST_MAX_ELEMENTS)
    assert not on_host
