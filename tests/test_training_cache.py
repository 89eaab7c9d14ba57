"""``train`` and ``train_grid`` reuse compiled runs: equal shapes and static settings compile once."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nqf.architectures import get_architecture
from nqf.architectures.architecture import Architecture, init_weights
from nqf.core.sampling import minibatch_indices
from nqf.training.config import TrainConfig, checkpoint_steps, make_optimizer
from nqf.training.grid import train_grid
from nqf.training.runs import _build_run, _clear_compiled, _trace_count, loss_function, train, training_keys
from nqf.training.tasks import get_task
from tests.conftest import assert_allclose

STAIRCASE = get_task("staircase")
X, Y = STAIRCASE.generate(0, "float64")
BASIS = np.asarray(STAIRCASE.mode_basis(0))
CONFIG = TrainConfig(optimizer="gd", lr=0.05, steps=30, width=8, sigma0=1e-2, dtype="float64", checkpoints=10)

_BACKEND_COMPILES = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **_: (
        _BACKEND_COMPILES.append(duration) if event == "/jax/core/compile/backend_compile_duration" else None
    )
)


def old_train(arch, X, Y, config, basis):
    """The pre-cache code path of ``train`` (its ``_build_run``, records trimmed to loss and
    occupations): a fresh closure over data, config and learning rate, jitted per call."""
    dtype = jnp.float64
    X = jnp.asarray(X, dtype)
    N = X.shape[0]
    Y = jnp.asarray(Y, dtype)
    Q = jnp.asarray(basis, dtype)
    loss = loss_function(arch, X, Y, config.model)
    opt = make_optimizer(config)
    ckpts = checkpoint_steps(config.steps, config.checkpoints)
    segments = jnp.asarray(np.diff(ckpts), dtype=jnp.int32)
    minibatch = config.batch_size is not None and config.batch_size < N

    def record(W):
        proj = Q.T @ W
        return loss(W), jnp.sum(proj * proj, axis=1)

    def run(W0, batch_key):
        batches = minibatch_indices(batch_key, N, config.batch_size, config.steps) if minibatch else None

        def step(t, carry):
            W, state, diverged_at = carry
            value, grad = jax.value_and_grad(loss)(W, batches[t] if minibatch else None)
            bad = ~(jnp.isfinite(value) & jnp.all(jnp.isfinite(grad)))
            diverged_at = jnp.where((diverged_at < 0) & bad, t, diverged_at)
            updates, new_state = opt.update(grad, state, W)
            keep = lambda old, new: jnp.where(diverged_at >= 0, old, new)  # noqa: E731
            return keep(W, optax.apply_updates(W, updates)), jax.tree_util.tree_map(keep, state, new_state), diverged_at

        def segment(carry, length):
            t0 = carry[0]
            W, state, div = jax.lax.fori_loop(t0, t0 + length, step, carry[1:])
            return (t0 + length, W, state, div), record(W)

        carry0 = (jnp.asarray(0, jnp.int32), W0, opt.init(W0), jnp.asarray(-1, jnp.int32))
        (_, W, _, _), recs = jax.lax.scan(segment, carry0, segments)
        return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), record(W0), recs), W

    init_key, batch_key = training_keys(config.seed)
    W0 = init_weights(arch, init_key, config.width, config.sigma0, dtype)
    (losses, occupations), W = jax.jit(run)(W0, batch_key)
    return np.asarray(losses), np.asarray(occupations), np.asarray(W)


def test_loop_of_train_compiles_once_and_matches_the_uncached_path():
    _clear_compiled()
    runs = [(0, 1e-2, 0.05), (1, 1e-3, 0.04), (7, 3e-2, 0.03)]  # seed, sigma0, lr all vary
    results, traces, compiles = [], [], []
    for seed, sigma0, lr in runs:
        arch = STAIRCASE.architecture()  # a new (identity-compared) Architecture object each call
        before_traces, before_compiles = _trace_count(), len(_BACKEND_COMPILES)
        results.append(train(arch, X, Y, replace(CONFIG, seed=seed, sigma0=sigma0, lr=lr), basis=BASIS))
        traces.append(_trace_count() - before_traces)
        compiles.append(len(_BACKEND_COMPILES) - before_compiles)
    assert traces == [1, 0, 0]
    assert compiles[1:] == [0, 0]  # nothing at all compiles after the first call, eager steps included
    for (seed, sigma0, lr), result in zip(runs, results, strict=True):
        config = replace(CONFIG, seed=seed, sigma0=sigma0, lr=lr)
        losses, occupations, W = old_train(STAIRCASE.architecture(), X, Y, config, BASIS)
        assert_allclose(result.loss, losses, rtol=1e-14)
        assert_allclose(result.occupations, occupations, rtol=1e-14)
        assert_allclose(result.W_final, W, rtol=1e-14)
        assert result.config == config and np.array_equal(result.steps, checkpoint_steps(30, 10))
    # the runs really differ (seed, sigma0 and lr were not frozen into the first compile)
    assert not np.allclose(results[0].loss, results[1].loss) and not np.allclose(results[1].loss, results[2].loss)


def test_loop_of_train_equals_train_grid():
    seeds, sigma0s = [0, 3, 4], [1e-2, 1e-4]
    sweep = train_grid(STAIRCASE.architecture(), X, Y, CONFIG, sigma0s, seeds, basis=BASIS)
    for i, sigma0 in enumerate(sigma0s):
        for j, seed in enumerate(seeds):
            single = train(STAIRCASE.architecture(), X, Y, replace(CONFIG, sigma0=sigma0, seed=seed), basis=BASIS)
            for name in ("loss", "occupations", "weight_norm", "block_norms", "W_final"):
                assert_allclose(getattr(single, name), getattr(sweep.run(i, j), name), rtol=1e-12, err_msg=name)


def test_private_build_run_still_matches_train():
    config = replace(CONFIG, optimizer="momentum", model="quadratic", seed=2)
    run, ckpts, names = _build_run(STAIRCASE.architecture(), X, Y, config, BASIS, jnp.float64)
    init_key, batch_key = training_keys(2)
    W0 = init_weights(STAIRCASE.architecture(), init_key, config.width, config.sigma0, jnp.float64)
    (losses, occupations, _, _), div, W = jax.jit(run)(W0, batch_key)
    result = train(STAIRCASE.architecture(), X, Y, config, basis=BASIS)
    assert_allclose(result.loss, losses, rtol=1e-14)
    assert_allclose(result.occupations, occupations, rtol=1e-14)
    assert int(div) == -1 and names == ("a", "v") and np.array_equal(ckpts, result.steps)


def _traces_of(call) -> int:
    before = _trace_count()
    call()
    return _trace_count() - before


@pytest.mark.slow  # heavy for the dev loop (make test-fast); CI runs it
def test_static_settings_compile_again_traced_values_do_not():
    _clear_compiled()
    arch = STAIRCASE.architecture()
    first = _traces_of(lambda: train(arch, X, Y, CONFIG, basis=BASIS))
    assert first == 1
    # traced: seed, sigma0, lr, W0, data values, a fresh equal architecture, beta spelled out as its default
    W0 = np.full((arch.dim, CONFIG.width), 1e-3)
    same = [
        lambda: train(arch, X, Y, replace(CONFIG, seed=5, sigma0=0.1, lr=0.01), basis=BASIS),
        lambda: train(arch, X, Y, CONFIG, basis=BASIS, W0=W0),
        lambda: train(arch, 2 * X, Y + 1, CONFIG, basis=-BASIS),
        lambda: train(STAIRCASE.architecture(), X, Y, CONFIG, basis=BASIS),
    ]
    assert [_traces_of(call) for call in same] == [0, 0, 0, 0]
    momentum = replace(CONFIG, optimizer="momentum")
    assert _traces_of(lambda: train(arch, X, Y, momentum, basis=BASIS)) == 1
    assert _traces_of(lambda: train(arch, X, Y, replace(momentum, beta=0.9), basis=BASIS)) == 0
    # static: steps, optimizer, checkpoints, model, batch size, beta; and shapes (width, samples)
    changed = [
        replace(CONFIG, steps=31),
        replace(CONFIG, optimizer="adam"),
        replace(CONFIG, checkpoints=None),
        replace(CONFIG, model="quadratic"),
        replace(CONFIG, optimizer="sgd", batch_size=32),
        replace(momentum, beta=0.5),
        replace(CONFIG, width=9),
    ]
    assert [_traces_of(lambda c=c: train(arch, X, Y, c, basis=BASIS)) for c in changed] == [1] * len(changed)
    assert _traces_of(lambda: train(arch, X[:100], Y[:100], CONFIG, basis=BASIS)) == 1
    # another architecture option is another compiled run
    gelu = get_architecture("mlp", **{**dict(arch.options), "activation": "gelu"})
    assert _traces_of(lambda: train(gelu, X, Y, CONFIG, basis=BASIS)) == 1


def test_user_architectures_with_different_units_do_not_share_a_compiled_run():
    """Architecture compares by identity; two user units with the same name and options are different runs."""
    D = 3
    template = {"a": jax.ShapeDtypeStruct((1,), jnp.float32), "v": jax.ShapeDtypeStruct((D,), jnp.float32)}

    def make(scale):
        def unit(w, x):
            return w["a"] * jnp.tanh(scale * jnp.dot(w["v"], x))

        return Architecture(name="user", unit=unit, template=template, input_shape=(D,), outputs=1)

    rng = np.random.default_rng(0)
    Xu, Yu = rng.normal(size=(20, D)), rng.normal(size=(20, 1))
    config = TrainConfig(lr=0.05, steps=10, width=4, sigma0=0.3, dtype="float64")
    one, two = make(1.0), make(2.0)
    before = _trace_count()
    r1, r2 = train(one, Xu, Yu, config), train(two, Xu, Yu, config)
    assert _trace_count() - before == 2
    assert not np.allclose(r1.loss[1:], r2.loss[1:])
    assert _traces_of(lambda: train(one, Xu, Yu, replace(config, seed=1))) == 0  # same object: reused


def test_train_grid_twice_compiles_once():
    _clear_compiled()
    config = replace(CONFIG, model="quadratic")
    traces = [
        _traces_of(lambda: train_grid(STAIRCASE.architecture(), X, Y, config, [1e-2, 1e-3], [0, 1], basis=BASIS)),
        _traces_of(
            lambda: train_grid(
                STAIRCASE.architecture(), X, Y, replace(config, lr=0.02), [1e-1, 1e-4], [5, 6], basis=BASIS
            )
        ),
    ]
    assert traces == [1, 0]
    before = len(_BACKEND_COMPILES)
    second = train_grid(STAIRCASE.architecture(), X, Y, replace(config, lr=0.02), [1e-1, 1e-4], [5, 6], basis=BASIS)
    assert len(_BACKEND_COMPILES) == before
    single = train(STAIRCASE.architecture(), X, Y, replace(config, lr=0.02, sigma0=1e-4, seed=6), basis=BASIS)
    assert_allclose(second.run(1, 1).loss, single.loss, rtol=1e-12)
    # a different number of seeds runs the same compiled run (train_grid shares train's): no compile
    assert _traces_of(lambda: train_grid(STAIRCASE.architecture(), X, Y, config, [1e-2], [0, 1, 2], basis=BASIS)) == 0
    assert _traces_of(lambda: train(STAIRCASE.architecture(), X, Y, config, basis=BASIS)) == 0


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_traced_learning_rate_matches_the_uncached_path(optimizer):
    config = replace(CONFIG, optimizer=optimizer, lr=0.01, seed=3)
    train(STAIRCASE.architecture(), X, Y, replace(config, lr=0.02), basis=BASIS)  # compile with another lr first
    result = train(STAIRCASE.architecture(), X, Y, config, basis=BASIS)
    losses, occupations, W = old_train(STAIRCASE.architecture(), X, Y, config, BASIS)
    assert_allclose(result.loss, losses, rtol=1e-14)
    assert_allclose(result.W_final, W, rtol=1e-14)
