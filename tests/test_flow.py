"""The maps on M against training of the quadratic model on W (float64).

The quadratic model here is built from the autodiff structure matrices (the generic
route), while the maps use the architecture's closed form through DataMatrices, so the
comparison also crosses the two routes to A.
"""

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nqf.architectures import ARCHITECTURES, architecture_options, get_architecture
from nqf.architectures.architecture import structure
from nqf.core.errors import NqfError
from nqf.core.sampling import minibatch_indices
from nqf.theory.data_matrices.build import data_matrices
from nqf.theory.flow import FlowResult, continuous_flow, gd_map, optimizer_map, sgd_map, stable_lr_bound

SMALL = {
    "inputs": 3,
    "outputs": 2,
    "tokens": 3,
    "dim": 3,
    "key_dim": 2,
    "value_dim": 2,
    "context": 3,
    "length": 5,
    "kernel": 3,
    "rows": 3,
    "columns": 3,  # image columns of conv2d
}
MAP_RTOL = 1e-10


def small_arch(name, n=3):
    known = architecture_options(name)
    options = {k: v for k, v in SMALL.items() if k in known}
    if "experts" in known:  # a gate over experts fixes the width
        options["experts"] = n
    return get_architecture(name, **options)


def problem(arch, seed=0, N=12):
    kx, ky = jax.random.split(jax.random.PRNGKey(seed))
    X = jax.random.normal(kx, (N, *arch.input_shape))
    Y = jax.random.normal(ky, (N, arch.outputs))
    return X, Y


def quad_loss(W, A, Y, loss="squared"):
    """Loss of the quadratic model f_c(x_n) = <W W^T, A_c(x_n)> with dense A (N, K, d, d)."""
    F = jnp.einsum("nkij,ij->nk", A, W @ W.T)
    if loss == "squared":
        return 0.5 * jnp.mean(jnp.sum((F - Y) ** 2, axis=1))
    return jnp.mean(jax.nn.logsumexp(F, axis=1) - jnp.sum(Y * F, axis=1))


def rel(actual, desired):
    actual, desired = np.asarray(actual), np.asarray(desired)
    return float(np.max(np.abs(actual - desired)) / np.max(np.abs(desired)))


def lr_for(data, A, M0):
    """A learning rate that moves M substantially in a few tens of steps and stays stable.

    0.1 / max(|C|, |K| |M0|): the Hessian of W -> L near M0 is about 2 G + 4 K M0 in size.
    """
    flat = np.asarray(A).reshape(A.shape[0] * A.shape[1], -1)
    top_K = np.linalg.eigvalsh(flat @ flat.T / A.shape[0])[-1]  # K = flat^T flat / N shares it
    scale = max(np.abs(np.linalg.eigvalsh(np.asarray(data.C))).max(), top_K * np.linalg.norm(M0, 2))
    return 0.1 / float(scale)


quad_grad = jax.jit(jax.grad(quad_loss), static_argnames="loss")


@functools.cache
def case(name, n=3, seed=0, N=12):
    """(arch, X, Y, dense autodiff A) for a small problem; cached across widths."""
    arch = small_arch(name, n)
    X, Y = problem(arch, seed, N)
    return arch, X, Y, structure(arch, X, method="autodiff").dense()


def gd_on_w(W, A, Y, lr, steps, loss="squared", record_every=1):
    grad = quad_grad
    Ms = [W @ W.T]
    for t in range(1, steps + 1):
        W = W - lr * grad(W, A, Y, loss=loss)
        if t % record_every == 0:
            Ms.append(W @ W.T)
    return np.stack(Ms)


@pytest.mark.parametrize(
    ("name", "n"),
    [
        pytest.param(name, n, marks=pytest.mark.slow) if (name, n) == ("attention", 3) else (name, n)
        for n in (3, 17)
        for name in sorted(ARCHITECTURES)
    ],
)  # attention with n = 3: the heaviest (3.4-5.9 s)
def test_gd_map_equals_gd_on_quadratic_model(name, n):
    arch, X, Y, A = case(name, n if "experts" in architecture_options(name) else 3)
    data = data_matrices(arch, X, Y)
    W0 = 0.5 / np.sqrt(n) * jax.random.normal(jax.random.PRNGKey(1), (arch.dim, n))
    lr, steps = lr_for(data, A, W0 @ W0.T), 60
    expected = gd_on_w(W0, A, Y, lr, steps, record_every=15)
    result = gd_map(data, W0 @ W0.T, lr, steps, record_every=15)
    assert isinstance(result, FlowResult)
    np.testing.assert_array_equal(result.steps, [0, 15, 30, 45, 60])
    # the trajectory must leave the neighbourhood of M0 for the comparison to mean anything
    assert rel(expected[-1], expected[0]) > 1e-3  # >> MAP_RTOL
    assert rel(result.M, expected) <= MAP_RTOL
    assert rel(result.final, expected[-1]) <= MAP_RTOL
    F = jnp.einsum("nkij,rij->rnk", A, expected)
    np.testing.assert_allclose(result.loss, 0.5 * jnp.mean(jnp.sum((F - Y) ** 2, axis=2), axis=1), rtol=1e-10)


def test_gd_map_cross_entropy_equals_gd_on_quadratic_model():
    arch = small_arch("mlp")
    X, _ = problem(arch)
    labels = np.array([0, 1] * 6)
    data = data_matrices(arch, X, labels, loss="cross_entropy")
    A = structure(arch, X, method="autodiff").dense()
    W0 = 0.3 * jax.random.normal(jax.random.PRNGKey(2), (arch.dim, 4))
    expected = gd_on_w(W0, A, jnp.eye(2)[labels], 0.5, 60, loss="cross_entropy")
    result = gd_map(data, W0 @ W0.T, 0.5, 60)
    assert rel(expected[-1], expected[0]) > 0.1
    assert rel(result.M, expected) <= MAP_RTOL


def test_sgd_map_equals_minibatch_sgd_on_quadratic_model():
    arch, X, Y, A = case("attention")
    data = data_matrices(arch, X, Y)
    W0 = 0.3 * jax.random.normal(jax.random.PRNGKey(3), (arch.dim, 5))
    lr, steps, batch = lr_for(data, A, W0 @ W0.T), 30, 4
    key = jax.random.PRNGKey(7)
    batches = np.asarray(minibatch_indices(key, X.shape[0], batch, steps))
    grad = quad_grad
    A, Y = np.asarray(A), np.asarray(Y)
    W, Ms = W0, [W0 @ W0.T]
    for t in range(steps):
        W = W - lr * grad(W, A[batches[t]], Y[batches[t]])
        Ms.append(W @ W.T)
    result = sgd_map(data, W0 @ W0.T, lr, steps, batch, key)
    full = gd_map(data, W0 @ W0.T, lr, steps)
    assert rel(result.M, np.stack(Ms)) <= MAP_RTOL
    # minibatches matter: the SGD trajectory is not the full-batch one
    assert rel(result.final, full.final) > 1e-3


@pytest.mark.parametrize("name", ["mlp", "moe"])
def test_momentum_map_equals_optax_sgd_momentum(name):
    n, beta, steps = 6, 0.9, 50
    arch, X, Y, A = case(name, n if name == "moe" else 3)
    data = data_matrices(arch, X, Y)
    W = 0.3 * jax.random.normal(jax.random.PRNGKey(4), (arch.dim, n))
    lr = 0.3 * lr_for(data, A, W @ W.T)
    M0 = W @ W.T
    optimizer = optax.sgd(lr, momentum=beta)
    state = optimizer.init(W)
    grad = quad_grad
    Ms = [M0]
    for _ in range(steps):
        updates, state = optimizer.update(grad(W, A, Y), state)
        W = optax.apply_updates(W, updates)
        Ms.append(W @ W.T)
    velocity = state[0].trace
    result = optimizer_map(data, M0, lr, steps, "momentum", beta=beta)
    assert rel(Ms[-1], Ms[0]) > 0.1
    assert rel(result.M, np.stack(Ms)) <= MAP_RTOL
    P, Q = result.state
    assert rel(P, W @ velocity.T) <= MAP_RTOL
    assert rel(Q, velocity @ velocity.T) <= MAP_RTOL
    # beta = 0 is plain GD
    assert rel(optimizer_map(data, M0, lr, 10, "momentum", beta=0.0).M, gd_map(data, M0, lr, 10).M) <= 1e-12


@pytest.mark.slow  # heavy for the dev loop (make test-fast); CI runs it
def test_continuous_flow_is_the_small_lr_limit_of_gd():
    """At fixed lr * t the GD map differs from the flow by O(lr): fitted order 1 +- 0.15."""
    arch = small_arch("mlp")
    X, Y = problem(arch, N=16)
    data = data_matrices(arch, X, Y)
    W0 = 0.2 * jax.random.normal(jax.random.PRNGKey(5), (arch.dim, 3))
    tau = 3.0 / float(np.max(np.abs(np.linalg.eigvalsh(np.asarray(data.C)))))  # lr * steps
    lrs, errors = [], []
    for steps in (50, 100, 200, 400):
        lr = tau / steps
        flow = continuous_flow(data, W0 @ W0.T, lr, float(steps), saveat=[0.0, steps / 2, float(steps)])
        gd = gd_map(data, W0 @ W0.T, lr, steps, checkpoints=[0, steps // 2, steps])
        np.testing.assert_allclose(flow.steps, gd.steps)
        np.testing.assert_allclose(flow.M[-1], flow.final, rtol=1e-12)
        lrs.append(lr)
        errors.append(rel(gd.M, flow.M))
    assert rel(gd.M[-1], gd.M[0]) > 0.5
    slope = np.polyfit(np.log(lrs), np.log(errors), 1)[0]
    assert 0.85 <= slope <= 1.15, (slope, errors)
    assert errors[-1] < 1e-2


def test_flow_depends_on_width_only_through_M0():
    """Widths 3 and 17 with the same M0 train identically; the maps take M0, never W."""
    arch, X, Y, A = case("conv1d")
    data = data_matrices(arch, X, Y)
    W3 = 0.3 * jax.random.normal(jax.random.PRNGKey(6), (arch.dim, 3))
    rows, _ = np.linalg.qr(np.asarray(jax.random.normal(jax.random.PRNGKey(8), (17, 3))))
    W17 = W3 @ rows.T  # (d, 17) with W17 W17^T = W3 W3^T
    np.testing.assert_allclose(W17 @ W17.T, W3 @ W3.T, rtol=1e-13)
    lr = lr_for(data, A, W3 @ W3.T)
    on_w3, on_w17 = gd_on_w(W3, A, Y, lr, 20), gd_on_w(W17, A, Y, lr, 20)
    assert rel(on_w17, on_w3) <= 1e-11
    result = gd_map(data, W3 @ W3.T, lr, 20)
    assert rel(result.M, on_w3) <= MAP_RTOL
    for fn in (gd_map, sgd_map, optimizer_map, continuous_flow):
        assert "M0" in inspect.signature(fn).parameters
        assert not {"W", "W0", "width", "n"} & set(inspect.signature(fn).parameters)
    # every array the map returns is built from d, never from n
    shapes = [leaf.shape for leaf in jax.tree_util.tree_leaves(result)]
    assert all(17 not in s and 3 not in s[1:] for s in shapes), shapes


def test_occupations_in_a_basis():
    arch = small_arch("mlp")
    X, Y = problem(arch)
    data = data_matrices(arch, X, Y)
    _, Q = np.linalg.eigh(np.asarray(data.C))
    W0 = 0.3 * jax.random.normal(jax.random.PRNGKey(9), (arch.dim, 3))
    lr = 0.1 / np.abs(np.linalg.eigvalsh(np.asarray(data.C))).max()
    full = gd_map(data, W0 @ W0.T, lr, 25)
    projected = gd_map(data, W0 @ W0.T, lr, 25, basis=Q)
    assert projected.M is None
    np.testing.assert_allclose(projected.occupations, np.einsum("im,rij,jm->rm", Q, full.M, Q), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(projected.final, full.final, rtol=1e-12)


@pytest.mark.slow  # 2.8-5.7 s
def test_stable_lr_bound_whitened_two_layer_network():
    """Linear teacher, whitened inputs, tanh (s = 1): C has eigenvalues +-s_k/2.

    At M = 0 the decaying modes (-s_k/2) set lr < 2 / s_1; at the balanced minimum the
    Hessian's top eigenvalue is 2 s_1 (= 4 c_1), so lr < 1 / s_1. GD just below the
    bound converges to the minimum, just above it does not.
    """
    D, K, N = 3, 2, 60
    arch = get_architecture("mlp", inputs=D, outputs=K)
    Z = np.random.default_rng(10).normal(size=(N, D))
    Z -= Z.mean(axis=0)
    X = Z @ np.linalg.inv(np.linalg.cholesky(Z.T @ Z / N)).T  # E[x x^T] = I exactly
    s = np.array([2.0, 1.0])
    teacher = np.linalg.qr(np.random.default_rng(0).normal(size=(K, K)))[0] @ np.diag(s) @ np.eye(K, D)
    data = data_matrices(arch, X, X @ teacher.T)
    spectrum = np.sort(np.linalg.eigvalsh(np.asarray(data.C)))
    np.testing.assert_allclose(spectrum[[0, 1, -2, -1]], [-1, -0.5, 0.5, 1], atol=1e-12)
    at_start = stable_lr_bound(data)
    np.testing.assert_allclose(at_start.curvature_start, s[0], rtol=1e-12)
    np.testing.assert_allclose(at_start.bound, 2 / s[0], rtol=1e-12)

    M0 = 1e-4 * np.eye(arch.dim)
    end = continuous_flow(data, M0, 0.05, 2000.0, saveat=[2000.0]).final
    bound = stable_lr_bound(data, end)
    np.testing.assert_allclose(bound.curvature, 2 * s[0], rtol=1e-6)
    np.testing.assert_allclose(float(bound), 1 / s[0], rtol=1e-6)
    assert bound.worst_point == 0
    np.testing.assert_allclose(stable_lr_bound(data, end, 0.9, "momentum").bound, 1.9 / s[0], rtol=1e-6)
    # Nesterov: stable while lr lambda < 2 (1 + beta) / (1 + 2 beta)
    np.testing.assert_allclose(stable_lr_bound(data, end, 0.9, "nesterov").bound, 1.9 / 2.8 / s[0], rtol=1e-6)

    below = gd_map(data, M0, 0.95 * bound.bound, 1500, record_every=1500)
    above = gd_map(data, M0, 1.05 * bound.bound, 1500, record_every=1500)
    assert rel(below.final, end) < 1e-6
    assert below.loss[-1] < 1e-20
    # above the bound GD ends on an oscillation (measured: a period-2 orbit at loss 0.07)
    assert not np.all(np.isfinite(above.final)) or (rel(above.final, end) > 1e-2 and above.loss[-1] > 1e-2)


@pytest.mark.slow  # heavy for the dev loop (make test-fast); CI runs it
@pytest.mark.no_shape_checks  # ends with sgd_map on population data
def test_maps_accept_population_data_matrices():
    """The population closed form drives the same maps; samples whose empirical covariance
    equals Sigma exactly have the same data matrices, hence the same trajectories."""
    from nqf.theory.data_matrices.build import population_data_matrices

    D, K, N = 3, 2, 40
    arch = get_architecture("mlp", inputs=D, outputs=K)
    rng = np.random.default_rng(11)
    B = rng.normal(size=(D, D))
    Sigma, T = B @ B.T / D + 0.5 * np.eye(D), rng.normal(size=(K, D))
    Z = rng.normal(size=(N, D))
    Z = Z @ np.linalg.inv(np.linalg.cholesky(Z.T @ Z / N)).T
    X = Z @ np.linalg.cholesky(Sigma).T
    population, samples = population_data_matrices(arch, Sigma, T), data_matrices(arch, X, X @ T.T)
    W0 = 0.1 * rng.normal(size=(arch.dim, 4))
    M0, lr = W0 @ W0.T, 0.05
    assert rel(gd_map(population, M0, lr, 50).M, gd_map(samples, M0, lr, 50).M) <= MAP_RTOL
    assert (
        rel(
            optimizer_map(population, M0, lr, 50, "momentum", beta=0.5).M,
            optimizer_map(samples, M0, lr, 50, "momentum", beta=0.5).M,
        )
        <= MAP_RTOL
    )
    np.testing.assert_allclose(
        continuous_flow(population, M0, lr, 50.0).M, continuous_flow(samples, M0, lr, 50.0).M, rtol=1e-8, atol=1e-12
    )
    with pytest.raises(NqfError, match="population has no minibatches"):
        sgd_map(population, M0, lr, 5, 2, jax.random.PRNGKey(0))


@pytest.mark.no_shape_checks  # steps=2.5
def test_map_input_errors():
    arch = small_arch("mlp")
    X, Y = problem(arch)
    data = data_matrices(arch, X, Y)
    d = arch.dim
    good = np.eye(d)
    with pytest.raises(NqfError, match="M0 must have shape"):
        gd_map(data, np.eye(d + 1), 0.1, 3)
    with pytest.raises(NqfError, match="non-finite"):
        gd_map(data, np.full((d, d), np.nan), 0.1, 3)
    with pytest.raises(NqfError, match="symmetric"):
        gd_map(data, np.triu(np.ones((d, d))), 0.1, 3)
    with pytest.raises(NqfError, match="positive semidefinite"):
        gd_map(data, -np.eye(d), 0.1, 3)
    with pytest.raises(NqfError, match="lr must be a positive"):
        gd_map(data, good, -0.1, 3)
    with pytest.raises(NqfError, match="steps must be"):
        gd_map(data, good, 0.1, 2.5)
    with pytest.raises(NqfError, match="checkpoints"):
        gd_map(data, good, 0.1, 3, checkpoints=[0, 5])
    with pytest.raises(NqfError, match="basis"):
        gd_map(data, good, 0.1, 3, basis=np.eye(d + 1))
    with pytest.raises(NqfError, match="batch size"):
        sgd_map(data, good, 0.1, 3, batch_size=100, key=jax.random.PRNGKey(0))
    with pytest.raises(NqfError, match="beta"):
        optimizer_map(data, good, 0.1, 3, "momentum", beta=1.0)
    with pytest.raises(NqfError, match="saveat"):
        continuous_flow(data, good, 0.1, 5.0, saveat=[0.0, 6.0])
    with pytest.raises(NqfError, match="points"):
        stable_lr_bound(data, np.eye(d + 1))
