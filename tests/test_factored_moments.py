"""Issue 24 (D = 784): S kept factored beyond MAX_MOMENT_ENTRIES (``nqf.theory.data_matrices.moments.FactoredSecond``)
equals the dense S; the M-flow on it (``MomentDataMatrices.gradient_times``) predicts what the dense
moments route predicts; and adaptive stepping above the jump cap steps (the same as ``every``)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.architectures.architecture import structure
from nqf.core.memory import MAX_JUMP_STATE
from nqf.theory.data_matrices import moments
from nqf.theory.data_matrices.build import checked_samples
from nqf.theory.data_matrices.moments import FactoredSecond, MomentDataMatrices, choose_route, moment_data_matrices
from nqf.theory.flow.maps import gd_map, optimizer_map, square_factor

from .conftest import assert_allclose


def _staircase():
    X, Y = nqf.get_task("staircase").generate(0)
    return nqf.get_architecture("mlp", activation="tanh"), X, Y


def _both(arch, X, Y, chunk=64):
    X, T, dtype = checked_samples(arch, X, Y)
    dense = moment_data_matrices(arch, X, T, dtype)
    shape = jax.eval_shape(lambda x: structure(arch, x), jax.ShapeDtypeStruct((1, *X.shape[1:]), dtype))
    factored = moments._factored_moments(arch, X, T, dtype, moments._layout_of(shape), shape, chunk)
    return dense, factored


def test_factored_second_equals_the_dense_one():
    dense, factored = _both(*_staircase())
    assert isinstance(factored.second, FactoredSecond) and factored.second.blocks.shape[0] == 1
    assert factored.size == dense.size
    assert_allclose(factored.second.dense(), dense.second, rtol=1e-12, atol=1e-15)
    assert_allclose(factored.cross, dense.cross, rtol=1e-12, atol=1e-15)
    assert_allclose(factored.optimum, dense.optimum, rtol=1e-9, atol=1e-12)
    assert_allclose(factored.residual, dense.residual, rtol=1e-9, atol=1e-14)
    rng = np.random.default_rng(1)
    F = jnp.asarray(rng.standard_normal((dense.dim, 5)) * 0.3)
    M = F @ F.T
    assert_allclose(factored.gradient_matrix(M), dense.gradient_matrix(M), rtol=1e-11, atol=1e-14)
    assert_allclose(factored.gradient_times(F), dense.gradient_matrix(M) @ F, rtol=1e-11, atol=1e-14)
    assert_allclose(factored.loss(M), dense.loss(M), rtol=1e-12)
    Q = jnp.asarray(np.linalg.qr(rng.standard_normal((dense.dim, 4)))[0])
    assert_allclose(factored.mode_interactions(Q), dense.mode_interactions(Q), rtol=1e-11, atol=1e-14)
    host = factored.on_host()
    assert isinstance(host.second, FactoredSecond) and isinstance(host.second.blocks, np.ndarray)
    assert_allclose(host.gradient_matrix(np.asarray(M)), dense.gradient_matrix(M), rtol=1e-11, atol=1e-14)
    V = rng.standard_normal((dense.size, 3))
    assert_allclose(np.asarray(V.T) @ host.second, (np.asarray(dense.second) @ V).T, rtol=1e-11, atol=1e-14)


def test_per_output_blocks_when_the_right_factor_depends_on_the_output(monkeypatch):
    """Sigma_k per output when r_k differs between outputs (a second pass)."""
    arch, X, Y = _staircase()
    dense, _ = _both(arch, X, Y)
    X, T, dtype = checked_samples(arch, X, Y)
    shape = jax.eval_shape(lambda x: structure(arch, x), jax.ShapeDtypeStruct((1, *X.shape[1:]), dtype))
    one, each = moments._factored_functions(arch)

    def differs(Xc, Yc, w):  # as ``one`` but reporting right factors that differ between outputs
        return (*one(Xc, Yc, w)[:4], jnp.asarray(False))

    monkeypatch.setattr(moments, "_factored_functions", lambda a: (differs, each))
    factored = moments._factored_moments(arch, X, T, dtype, moments._layout_of(shape), shape, 64)
    assert factored.second.blocks.shape[0] == arch.outputs
    assert_allclose(factored.second.dense(), dense.second, rtol=1e-12, atol=1e-15)
    assert_allclose(factored.optimum, dense.optimum, rtol=1e-9, atol=1e-12)


def test_route_keeps_S_factored_beyond_the_dense_limit():
    arch = nqf.get_architecture("mlp", activation="tanh", inputs=784, outputs=10)
    choice = choose_route(arch, 10000, "squared")
    assert choice.route == "moments" and "factored" in choice.reason
    assert choice.moments_flops < 1e8 < choice.samples_flops
    # an architecture whose left factors depend on the input is not factored: per-sample as before
    fixed = nqf.get_architecture("mlp-fixed", inputs=100)
    assert choose_route(fixed, 10000, "squared").route == "samples"


def test_route_keeps_S_factored_where_a_dense_S_would_outgrow_the_caches():
    """64 inputs and 64 outputs (E4's trained setting): p = 4096, S would be 128 MiB, within the dense
    limit but read from memory at every step; kept factored from FACTORED_FROM entries on."""
    arch = nqf.get_architecture("mlp", activation="tanh", inputs=64, outputs=64)
    assert moments.FACTORED_FROM < 4096**2 <= moments.MAX_MOMENT_ENTRIES
    choice = choose_route(arch, 64, "squared")
    assert choice.route == "moments" and "factored" in choice.reason and choice.moments_flops < 2e6
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
    assert isinstance(moment_data_matrices(arch, *checked_samples(arch, X, Y)).second, FactoredSecond)
    # below it, S is dense as before
    small = nqf.get_architecture("mlp", activation="tanh", inputs=16, outputs=4)
    assert "factored" not in choose_route(small, 64, "squared").reason


@pytest.mark.parametrize("engine", ["compiled", "numpy"])
def test_factored_route_predicts_as_the_dense_route(monkeypatch, engine):
    arch, X, Y = _staircase()
    cfg = nqf.PredictConfig(width=32, lr=0.05, steps=1500, sigma0=1e-6, engine=engine)
    dense = nqf.predict(arch, X, Y, cfg)
    monkeypatch.setattr(moments, "FACTORED_FROM", 16)  # p = 32 here: S is now kept factored
    factored = nqf.predict(arch, X, Y, cfg)
    assert factored.route == "moments" and "factored" in factored.route_reason
    np.testing.assert_array_equal(factored.mflow_switch_steps, dense.mflow_switch_steps)
    assert_allclose(factored.flow.loss, dense.flow.loss, rtol=1e-10, atol=1e-14)


def test_blockwise_maps_equal_the_dense_maps():
    """gd_map and optimizer_map (heavy ball) step with gradient_times on factored S: the dense maps' numbers."""
    dense, factored = _both(*_staircase())
    rng = np.random.default_rng(2)
    F0 = square_factor(W0=rng.standard_normal((dense.dim, 16)) * 1e-3)
    for run in (
        lambda d: gd_map(d, None, 0.05, 600, record_every=50, factor=F0),
        lambda d: optimizer_map(d, None, 0.02, 300, "momentum", beta=0.9, record_every=50, factor=F0),
    ):
        a, b = run(dense), run(factored)
        assert_allclose(b.loss, a.loss, rtol=1e-10, atol=1e-14)
        assert_allclose(b.final, a.final, rtol=1e-8, atol=1e-13)


def test_above_the_dense_jump_state_adaptive_jumps_by_its_krylov_model():
    """Above MAX_JUMP_STATE (d = 43 here: 946 packed entries) the jumps' affine model is a Krylov
    one (``nqf.theory.flow.jumps.KrylovModel``): it jumps, and the losses at the recorded steps
    equal the step-by-step map's to 1e-8 relative (floor 1e-12 L(0))."""
    rng = np.random.default_rng(3)
    D, K, N = 40, 3, 200
    X = rng.standard_normal((N, D))
    Y = X[:, :K] * np.array([1.0, 0.5, 0.25])
    arch = nqf.get_architecture("mlp", activation="tanh", inputs=D, outputs=K)
    data = moment_data_matrices(arch, *checked_samples(arch, X, Y))
    assert isinstance(data, MomentDataMatrices) and data.dim * (data.dim + 1) // 2 > MAX_JUMP_STATE
    F0 = square_factor(W0=rng.standard_normal((data.dim, 8)) * 1e-3)
    every = gd_map(data, None, 0.1, 4000, record_every=100, factor=F0, stepping="every")
    adaptive = gd_map(data, None, 0.1, 4000, record_every=100, factor=F0, stepping="adaptive")
    stats = dict(adaptive.stats)
    assert stats["jumped"] > 0 and stats["jumped"] + stats["stepped"] == 4000, stats
    reference = np.asarray(every.loss)
    assert_allclose(np.asarray(adaptive.loss), reference, rtol=1e-8, atol=1e-12 * reference[0])


def test_the_krylov_model_equals_the_dense_affine_model():
    """r in a 5-dimensional invariant subspace of J (s = 200), as past the switch-ons: the Krylov
    model's displacements x_j = sum_{i<j} J^i r and increments J^j r equal the dense model's to
    1e-12 relative, for jumps of 1 to 1000 steps."""
    from nqf.theory.flow.jumps import KRYLOV_DIM, AffineModel, KrylovModel

    rng = np.random.default_rng(0)
    s, k = 200, 5
    basis, _ = np.linalg.qr(rng.standard_normal((s, s)))
    J = basis @ np.diag(np.concatenate([rng.uniform(0.5, 0.99, k), rng.uniform(-0.9, 0.9, s - k)])) @ basis.T
    r = basis[:, :k] @ rng.standard_normal(k)
    krylov = KrylovModel(r, lambda v: J @ v)
    dense = AffineModel(r, J)
    assert krylov.ok and krylov.V.shape[1] <= KRYLOV_DIM
    offsets = np.array([1, 7, 64, 1000])
    want = dense.displacement(offsets)
    assert_allclose(krylov.displacement(offsets), want, rtol=0, atol=1e-12 * np.abs(want).max())
    increment = dense.increment_at(300)
    assert_allclose(krylov.increment_at(300), increment, rtol=0, atol=1e-12 * np.abs(increment).max())


@pytest.mark.slow  # 3.4-5.9 s
def test_staircase_adaptive_equals_every():
    """The stepping decision leaves the staircase's jumps as they were: same switch-ons, losses 1e-10."""
    arch, X, Y = _staircase()
    cfg = nqf.PredictConfig(width=8, lr=0.05, steps=30000, sigma0=1e-8, engine="compiled")
    every = nqf.predict(arch, X, Y, dataclasses.replace(cfg, stepping="every"))
    adaptive = nqf.predict(arch, X, Y, cfg)
    assert adaptive.flow_stats["jumped"] > 0 and every.flow_stats["jumped"] == 0
    np.testing.assert_array_equal(adaptive.mflow_switch_steps, every.mflow_switch_steps)
    a, b = np.asarray(adaptive.flow.loss), np.asarray(every.flow.loss)
    assert_allclose(a, b, rtol=1e-10, atol=1e-12 * b[0])
