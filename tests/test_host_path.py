"""The numpy engine of predict (nqf.theory.flow.host, HostMoments) against the compiled one.

Both compute the same formulas; the numpy engine only skips compiling. Required: the same
data matrices to 1e-13 on every built-in architecture, and on real cases (the staircase, a
correlated staircase, in-context regression, digits, iris), for every full-batch optimizer, identical
switch-on steps of every source and losses to 1e-10 relative against the compiled
step-by-step map (``stepping="every"``, the reference); the real-valued switch-on times of the
LV flow, the closed form and the singular limit to 1e-12."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.optimizers import PREDICT_OPTIMIZERS, closed_optimizer
from nqf.theory.data_matrices.build import flow_data
from nqf.theory.flow.host import host_hessian_vector_product
from nqf.theory.flow.stability import _hessian_vector_product
from nqf.theory.lotka_volterra.maps import host_lv_block, lv_block

from .conftest import assert_allclose


def _random_samples(arch, n=64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, *arch.input_shape)), rng.standard_normal((n, arch.outputs))


def _close(a, b, what, rel=1e-13):
    a, b = np.asarray(a), np.asarray(b)
    assert_allclose(b, a, rtol=0, atol=rel * max(np.abs(a).max(), 1e-300), err_msg=what)


@pytest.mark.parametrize("name", sorted(nqf.ARCHITECTURES))
def test_host_moments_equal_the_compiled_moments(name):
    """C, K[M], G(M), L(M) and the Hessian-vector product of W -> L(W W^T) agree to 1e-13."""
    arch = nqf.get_architecture(name)
    X, Y = _random_samples(arch)
    moments, choice = flow_data(arch, X, Y, route="moments")
    assert choice.route == "moments"
    host = moments.on_host()
    rng = np.random.default_rng(1)
    W = 0.3 * rng.standard_normal((arch.dim, arch.dim))
    V = rng.standard_normal((arch.dim, arch.dim))
    M = W @ W.T
    _close(moments.C, host.C, f"{name}: C")
    _close(moments.K_apply(jnp.asarray(M)), host.K_apply(M), f"{name}: K[M]")
    _close(moments.gradient_matrix(jnp.asarray(M)), host.gradient_matrix(M), f"{name}: G(M)")
    _close(moments.loss(jnp.asarray(M)), host.loss(M), f"{name}: L(M)")
    _close(moments.loss(jnp.zeros_like(M)), host.loss(np.zeros_like(M)), f"{name}: L(0)")
    compiled_hvp = _hessian_vector_product(moments, jnp.asarray(W), jnp.asarray(V))
    _close(compiled_hvp, host_hessian_vector_product(host, W, V), f"{name}: H V", rel=1e-12)


@pytest.mark.parametrize("name", [n for n in PREDICT_OPTIMIZERS if closed_optimizer(n).deterministic_flow])
def test_host_lv_maps_equal_the_compiled_scans(name):
    optimizer = closed_optimizer(name)
    s = np.array([3.0, 2.0, 1.0, 0.5])
    c = np.concatenate([s / 2, -s / 2])
    K = np.block([[np.eye(4) / 4, -np.eye(4) / 4], [-np.eye(4) / 4, np.eye(4) / 4]]) + 0.01
    lr = 0.05 if optimizer.buffers == 0 else 0.01
    u0 = np.log(np.full(8, 1e-12))
    state = (u0, (np.zeros(8),) * optimizer.buffers)
    compiled = lv_block(
        optimizer,
        *(jnp.asarray(a) for a in (c, K, lr, 0.9)),
        (jnp.asarray(u0), tuple(jnp.asarray(r) for r in state[1])),
        700,
    )
    host = host_lv_block(optimizer, c, K, lr, 0.9, state, 700)
    assert_allclose(host[0], np.asarray(compiled[0]), rtol=1e-11, atol=1e-11)
    for h, ref in zip(host[1], compiled[1], strict=True):  # the buffers' ratios
        ref = np.asarray(ref)
        assert_allclose(h, ref, rtol=1e-9, atol=1e-11 * np.abs(ref).max())


def _iris():
    from sklearn.datasets import load_iris

    X, labels = load_iris(return_X_y=True)
    X = X - X.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov(X, rowvar=False, bias=True))
    return X @ vectors / np.sqrt(values), np.eye(3)[labels]


def _cases():
    tanh = {"name": "mlp", "activation": "tanh"}
    iris_X, iris_Y = _iris()
    digits = nqf.get_task("digits")
    arch_name, options = digits.natural_architecture()
    return {
        "staircase": (nqf.get_task("staircase").generate(0), tanh, 0.05, 1e-8, 800),
        "correlated": (nqf.get_task("staircase", correlation=0.5).generate(0), tanh, 0.05, 1e-6, 800),
        "icl": (
            nqf.get_task("icl", prompts=2000).generate(0),
            {"name": "linear-attention", "dim": 4, "context": 31},
            0.1,
            1e-3,
            600,
        ),
        "digits": (digits.generate(0), {"name": arch_name, **options}, 0.02, 1e-4, 600),
        "iris": ((iris_X, iris_Y), {**tanh, "inputs": 4, "outputs": 3}, 0.05, 1e-6, 3000),
    }


def case_config(name, optimizer):
    """(arch, X, Y, PredictConfig) of a case of ``_cases``: width 16, lr / 5 with a momentum (beta 0.5)."""
    (X, Y), options, lr, sigma0, steps = _cases()[name]
    options = dict(options)
    arch = nqf.get_architecture(options.pop("name"), **options)
    if closed_optimizer(optimizer).buffers:
        lr = lr / 5
    cfg = nqf.PredictConfig(width=16, lr=lr, steps=steps, sigma0=sigma0, optimizer=optimizer, beta=0.5)
    return arch, X, Y, cfg


def _engine_cases():
    """Every optimizer on the staircase and every case with GD in the fast tier; the other
    optimizers on the other cases, and the digits, in the slow tier (the full suite runs all)."""
    for case in ("staircase", "correlated", "icl", "digits", "iris"):
        for optimizer in (n for n in PREDICT_OPTIMIZERS if closed_optimizer(n).deterministic_flow):
            fast = case != "digits" and (case == "staircase" or optimizer == "gd")
            marks = () if fast else pytest.mark.slow
            yield pytest.param(case, optimizer, marks=marks, id=f"{case}-{optimizer}")


@pytest.mark.parametrize(("case", "optimizer"), list(_engine_cases()))
def test_numpy_engine_equals_the_compiled_reference(case, optimizer):
    arch, X, Y, cfg = case_config(case, optimizer)
    host = nqf.predict(arch, X, Y, dataclasses.replace(cfg, engine="numpy"))
    auto = nqf.predict(arch, X, Y, cfg)
    reference = nqf.predict(arch, X, Y, dataclasses.replace(cfg, engine="compiled", stepping="every"))
    assert host.engine == "numpy" and reference.engine == "compiled"
    assert auto.engine == "numpy" and "nothing to compile" in auto.engine_reason
    what = f"{case} {optimizer}"
    for field in ("mflow_switch_steps", "lv_switch_steps"):  # steps of the maps: integers, identical
        np.testing.assert_array_equal(getattr(host, field), getattr(reference, field), err_msg=f"{what}: {field}")
    for field in ("closed_form_switch_steps", "singular_switch_steps", "lv_continuous_switch_steps"):
        # times from c_k, K_kj, whose last digits differ between the engines (measured: 4e-15)
        assert_allclose(getattr(host, field), getattr(reference, field), rtol=1e-12, err_msg=f"{what}: {field}")
    np.testing.assert_array_equal(np.asarray(host.flow.steps), np.asarray(reference.flow.steps))
    for name, a, b in (
        ("M-flow loss", host.flow.loss, reference.flow.loss),
        ("M-flow occupations", host.flow.occupations, reference.flow.occupations),
        ("LV loss", host.lv_loss, reference.lv_loss),
        ("plateau losses", host.lv_plateau_losses, reference.lv_plateau_losses),
    ):
        b = np.asarray(b)
        assert_allclose(a, b, rtol=1e-10, atol=1e-12 * np.abs(b).max(), err_msg=f"{what}: {name}")
    assert_allclose(host.stable_lr, reference.stable_lr, rtol=1e-10)
    assert_allclose(host.modes.growth, reference.modes.growth, rtol=1e-12, atol=1e-14)


def test_numpy_engine_refuses_what_it_cannot_do():
    X, Y = nqf.get_task("staircase").generate(0)
    arch = nqf.get_architecture("mlp", activation="tanh")
    cfg = nqf.PredictConfig(width=8, lr=0.05, steps=300, engine="numpy")
    with pytest.raises(nqf.NqfError, match="numpy engine does not apply.*per-sample"):
        nqf.predict(arch, X, Y, dataclasses.replace(cfg, route="samples"))
    with pytest.raises(nqf.NqfError, match="numpy engine does not apply.*steps"):
        nqf.predict(arch, X, Y, dataclasses.replace(cfg, steps=50000))
    long = nqf.predict(arch, X, Y, dataclasses.replace(cfg, steps=50000, engine="auto"))
    assert long.engine == "compiled" and "steps" in long.engine_reason
    with pytest.raises(nqf.NqfError, match="unknown engine"):
        nqf.PredictConfig(width=8, lr=0.05, steps=300, engine="gpu")


def test_the_numpy_map_steps_full_batch_optimizers_only():
    """host_map steps any full-batch optimizer by its own step; a minibatch one (its M-flow
    replays the batches on the samples) is refused there, and predict sends it to the compiled
    engine with the reason."""
    from nqf.core.errors import NqfError
    from nqf.theory.flow.host import host_map

    with pytest.raises(NqfError, match="full-batch optimizers only, not 'sgd'"):
        host_map(None, closed_optimizer("sgd"), 0.1, 3, np.eye(2), np.eye(2))
    X, Y = nqf.get_task("staircase").generate(0, dtype=np.float64)
    config = nqf.PredictConfig(width=8, lr=0.05, steps=200, sigma0=1e-3, optimizer="sgd", batch_size=16, network=False)
    p = nqf.predict(nqf.get_architecture("mlp"), X, Y, config)
    assert p.engine == "compiled" and "sgd replays minibatches" in p.engine_reason
