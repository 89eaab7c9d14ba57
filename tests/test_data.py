"""Data matrices against dense einsums over autodiff structure matrices, and the
population closed form against sample estimates (float64)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nqf.architectures import ARCHITECTURES, architecture_options, get_architecture
from nqf.architectures.architecture import structure
from nqf.architectures.structure import BlockFactors
from nqf.core.errors import NqfError
from nqf.theory.data_matrices.build import DataMatrices, data_matrices, population_data_matrices

SMALL = {"inputs": 3, "outputs": 2, "tokens": 3, "dim": 3, "key_dim": 2, "value_dim": 2, "context": 3,
         "length": 5, "kernel": 3, "height": 3, "width": 3, "experts": 3}  # fmt: skip
EXACT = dict(rtol=1e-12, atol=1e-13)


@functools.cache
def case(name, N=10):
    known = architecture_options(name)
    arch = get_architecture(name, **{k: v for k, v in SMALL.items() if k in known})
    kx, ky, km, kq = jax.random.split(jax.random.PRNGKey(0), 4)
    X = jax.random.normal(kx, (N, *arch.input_shape))
    Y = jax.random.normal(ky, (N, arch.outputs))
    B = jax.random.normal(km, (arch.dim, arch.dim))
    M = 0.3 * B @ B.T / arch.dim
    Q = jax.random.normal(kq, (arch.dim, 4))
    return arch, X, Y, M, Q, structure(arch, X, method="autodiff").dense()


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in {"attention", "conv2d"} else name
        for name in sorted(ARCHITECTURES)
    ],
)  # attention, conv2d: the heaviest (3.4-5.9 s each)
def test_data_matrices_equal_dense_einsums(name):
    arch, X, Y, M, Q, A = case(name)
    data = data_matrices(arch, X, Y)
    assert isinstance(data.structure, BlockFactors)  # closed form: no N x d x d stack
    idx = jnp.array([1, 4, 4, 7])  # a minibatch (with a repeat)
    q0, q1 = Q[:, 0], Q[:, 1]

    @jax.jit  # one compilation instead of many eager ones
    def library(data, M, Q):
        return dict(
            F=data.outputs(M), C=data.C, K=data.K_apply(M), G=data.gradient_matrix(M), L=data.loss(M),
            Kq=data.mode_interactions(Q), cq=data.mode_growth(Q), K01=q0 @ data.K_apply(jnp.outer(q1, q1)) @ q0,
            G_b=data.gradient_matrix(M, idx), K_b=data.K_apply(M, idx), L_b=data.loss(M, idx),
            both=data.loss_and_gradient(M),
        )  # fmt: skip

    @jax.jit
    def dense(A, Y, M, Q):
        N = A.shape[0]
        F = jnp.einsum("nkij,ij->nk", A, M)
        C = jnp.einsum("nk,nkij->ij", Y, A) / N
        K = jnp.einsum("nkij,nk->ij", A, F) / N
        quad = jnp.einsum("nkij,im,jm->nkm", A, Q, Q)
        Fb, Yb, Ab = F[idx], Y[idx], A[idx]
        return dict(
            F=F, C=C, K=K, G=K - C, L=0.5 * jnp.mean(jnp.sum((F - Y) ** 2, axis=1)),
            Kq=jnp.einsum("nkm,nkj->mj", quad, quad) / N, cq=jnp.diag(Q.T @ C @ Q),
            G_b=jnp.einsum("nk,nkij->ij", Fb - Yb, Ab) / 4, K_b=jnp.einsum("nkij,nk->ij", Ab, Fb) / 4,
            L_b=0.5 * jnp.mean(jnp.sum((Fb - Yb) ** 2, axis=1)),
        )  # fmt: skip

    got, want = library(data, M, Q), dense(A, Y, M, Q)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, **EXACT, err_msg=key)
    np.testing.assert_allclose(got["Kq"][0, 1], got["K01"], **EXACT)  # K_kj = <P_k, K[P_j]>
    np.testing.assert_allclose(got["both"][0], want["L"], **EXACT)
    np.testing.assert_allclose(got["both"][1], want["G"], **EXACT)


@pytest.mark.parametrize("name", ["mlp", "attention", "moe"])
@pytest.mark.parametrize("loss", ["squared", "cross_entropy"])
def test_gradient_matrix_is_the_derivative_of_the_loss_in_M(name, loss):
    """G(M) = sym(dL/dM) with L computed from the dense autodiff A, and grad_W L = 2 G W."""
    arch, X, Y, M, _, A = case(name)
    labels = np.arange(X.shape[0]) % arch.outputs
    targets = labels if loss == "cross_entropy" else Y
    data = data_matrices(arch, X, targets, loss=loss)
    Y1 = jnp.eye(arch.outputs)[labels] if loss == "cross_entropy" else Y

    def loss_of(Mat):
        F = jnp.einsum("nkij,ij->nk", A, Mat)
        if loss == "squared":
            return 0.5 * jnp.mean(jnp.sum((F - Y1) ** 2, axis=1))
        return jnp.mean(jax.nn.logsumexp(F, axis=1) - jnp.sum(Y1 * F, axis=1))

    dL = jax.grad(loss_of)(M)
    np.testing.assert_allclose(data.gradient_matrix(M), 0.5 * (dL + dL.T), **EXACT)
    np.testing.assert_allclose(data.loss(M), loss_of(M), **EXACT)
    W = jax.random.normal(jax.random.PRNGKey(3), (arch.dim, 4)) / arch.dim
    np.testing.assert_allclose(jax.grad(lambda W: loss_of(W @ W.T))(W), 2 * data.gradient_matrix(W @ W.T) @ W, **EXACT)


def test_cross_entropy_accepts_one_hot_and_labels_alike():
    arch, X, _, M, _, _ = case("mlp")
    labels = np.array([0, 1, 1, 0, 1, 0, 0, 1, 1, 1])
    a = data_matrices(arch, X, labels, loss="cross_entropy")
    b = data_matrices(arch, X, np.eye(2)[labels], loss="cross_entropy")
    np.testing.assert_allclose(a.targets, b.targets)
    np.testing.assert_allclose(a.gradient_matrix(M), b.gradient_matrix(M), **EXACT)
    assert a.loss_type == "cross_entropy"


def _population_problem(D=4, K=3, seed=0):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(D, D))
    Sigma = B @ B.T / D + 0.2 * np.eye(D)
    T = rng.normal(size=(K, D))
    arch = get_architecture("mlp", inputs=D, outputs=K, activation="sin")  # slope 1
    d = arch.dim
    Mb = rng.normal(size=(d, d))
    return arch, Sigma, T, 0.2 * Mb @ Mb.T / d, rng.normal(size=(d, 5))


def _compare_population(pop, data, M, Q, rtol, atol=0.0):
    for got, want in [
        (pop.C, data.C),
        (pop.K_apply(M), data.K_apply(M)),
        (pop.gradient_matrix(M), data.gradient_matrix(M)),
        (pop.loss(M), data.loss(M)),
        (pop.mode_interactions(Q), data.mode_interactions(Q)),
        (pop.mode_growth(Q), data.mode_growth(Q)),
    ]:
        got, want = np.asarray(got), np.asarray(want)
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err <= rtol, (err, rtol)


def test_population_equals_samples_with_matched_second_moments():
    """For mlp every quantity is linear in E[x x^T] (A is linear in x, y = T x, and
    q^T A_c q = s a_c (v.x)), so samples whose empirical covariance is exactly Sigma
    reproduce the population values to rounding."""
    arch, Sigma, T, M, Q = _population_problem()
    pop = population_data_matrices(arch, Sigma, T)
    N = 50
    Z = np.random.default_rng(1).normal(size=(N, Sigma.shape[0]))
    Z = Z @ np.linalg.inv(np.linalg.cholesky(Z.T @ Z / N)).T  # E_N[z z^T] = I exactly
    X = Z @ np.linalg.cholesky(Sigma).T  # E_N[x x^T] = Sigma exactly
    data = data_matrices(arch, X, X @ T.T)
    np.testing.assert_allclose(pop.C, data.C, **EXACT)
    np.testing.assert_allclose(pop.K_apply(M), data.K_apply(M), **EXACT)
    np.testing.assert_allclose(pop.gradient_matrix(M), data.gradient_matrix(M), **EXACT)
    np.testing.assert_allclose(pop.loss(M), data.loss(M), **EXACT)
    np.testing.assert_allclose(pop.mode_growth(Q), data.mode_growth(Q), **EXACT)
    np.testing.assert_allclose(pop.mode_interactions(Q), data.mode_interactions(Q), **EXACT)


def test_population_matches_monte_carlo():
    """Against N = 200000 Gaussian samples: relative (Frobenius) error <= 8 / sqrt(N) = 0.018.

    The sample estimates are empirical second moments, off by O(1/sqrt(N)) relative; a
    wrong factor (1/2, s^2, a transpose) would be O(1).
    """
    arch, Sigma, T, M, Q = _population_problem()
    pop = population_data_matrices(arch, Sigma, T)
    N = 200_000
    X = np.random.default_rng(2).multivariate_normal(np.zeros(Sigma.shape[0]), Sigma, size=N)
    data = data_matrices(arch, X, X @ T.T)
    _compare_population(pop, data, M, Q, rtol=8 / np.sqrt(N))


def test_population_slope_and_interface():
    D, K = 3, 2
    arch = get_architecture("mlp", inputs=D, outputs=K, activation="tanh")
    Sigma, T = np.eye(D), np.arange(6.0).reshape(K, D)
    pop = population_data_matrices(arch, Sigma, T)
    np.testing.assert_allclose(pop.slope, 1.0)
    np.testing.assert_allclose(pop.C[:K, K:], 0.5 * T, **EXACT)
    assert pop.dim == K + D and pop.loss_type == "squared"
    np.testing.assert_allclose(pop.loss(np.zeros((K + D, K + D))), 0.5 * np.sum(T**2), **EXACT)


@pytest.mark.no_shape_checks  # Y with fewer rows than X, a non-square covariance
def test_data_input_errors():
    arch, X, Y, _, _, _ = case("mlp")
    X, Y = np.asarray(X), np.asarray(Y)
    with pytest.raises(NqfError, match="inputs X must have shape"):
        data_matrices(arch, X[:, :2], Y)
    with pytest.raises(NqfError, match="targets Y must have 10 rows"):
        data_matrices(arch, X, Y[:4])
    with pytest.raises(NqfError, match=r"targets Y must have shape \(N=10, K=2\)"):
        data_matrices(arch, X, np.ones((10, 3)))
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(NqfError, match="inputs X contains 1 non-finite"):
        data_matrices(arch, bad, Y)
    badY = Y.copy()
    badY[0, 0] = np.inf
    with pytest.raises(NqfError, match="targets Y contains 1 non-finite"):
        data_matrices(arch, X, badY)
    with pytest.raises(NqfError, match="integer labels must lie in"):
        data_matrices(arch, X, np.full(10, 2), loss="cross_entropy")
    with pytest.raises(NqfError, match="one-hot"):
        data_matrices(arch, X, Y, loss="cross_entropy")
    with pytest.raises(NqfError, match="unknown loss"):
        data_matrices(arch, X, Y, loss="hinge")
    fixed = get_architecture("mlp-fixed", inputs=3)
    with pytest.raises(NqfError, match="at least 2 outputs"):
        data_matrices(fixed, X, np.zeros(10, dtype=int), loss="cross_entropy")
    data = data_matrices(arch, X, Y)
    with pytest.raises(NqfError, match="basis Q must have shape"):
        data.mode_interactions(np.ones((4, 2)))
    D, K = 3, 2
    with pytest.raises(NqfError, match="covariance must have shape"):
        population_data_matrices(arch, np.eye(D + 1), np.ones((K, D)))
    with pytest.raises(NqfError, match="teacher must have shape"):
        population_data_matrices(arch, np.eye(D), np.ones((K + 1, D)))
    with pytest.raises(NqfError, match="positive semidefinite"):
        population_data_matrices(arch, -np.eye(D), np.ones((K, D)))
    with pytest.raises(NqfError, match="'mlp' architecture only"):
        population_data_matrices(fixed, np.eye(D), np.ones((1, D)))


def test_data_matrices_pass_through_jit():
    arch, X, Y, M, _, _ = case("conv1d")
    data = data_matrices(arch, X, Y)
    assert isinstance(data, DataMatrices)
    np.testing.assert_allclose(jax.jit(lambda d, m: d.gradient_matrix(m))(data, M), data.gradient_matrix(M), **EXACT)
