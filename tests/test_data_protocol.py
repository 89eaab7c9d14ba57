"""Every data-matrix implementation against the protocol (nqf.AbstractDataMatrices) and against each other.

The same exactness checks for each implementation: G(M) is the derivative of L(M) (central
differences along a symmetric direction, exact up to rounding for the squared loss: 1e-8
relative; 1e-6 for the cross-entropy), G = K[M] - C for the squared loss and K linear (1e-12),
``loss_and_gradient`` equal to its two parts, the mode quantities equal to their definitions
(c_k = q_k^T C q_k, K_kj = q_k^T K[q_j q_j^T] q_k: the base class's defaults, 1e-12), and for
sample data the per-sample losses, minibatches and subsets consistent. Then the sample
implementations (all samples, chunked, moments, moments in numpy) built from the same samples
give the same L, G, C, K[M] and mode quantities to 1e-12, and a user's own implementation,
written here with only the abstract members, runs through ``mode_basis`` and ``gd_map`` and
gives what ``DataMatrices`` gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.theory.data_matrices.checks import checked_samples
from nqf.theory.data_matrices.chunked import chunked_data_matrices
from nqf.theory.data_matrices.moments import moment_data_matrices
from nqf.theory.data_matrices.protocol import AbstractDataMatrices, AbstractSampleDataMatrices

N, CHUNK = 40, 16


def _samples(loss="squared", name="mlp"):
    arch = nqf.get_architecture(name)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, *arch.input_shape))
    Y = rng.integers(0, arch.outputs, N) if loss == "cross_entropy" else rng.standard_normal((N, arch.outputs))
    return arch, X, Y


def _build(kind: str, loss: str = "squared"):
    arch, X, Y = _samples(loss)
    Xc, targets, dtype = checked_samples(arch, X, Y, loss, jnp.float64)
    if kind == "samples":
        return nqf.data_matrices(arch, X, Y, loss=loss, dtype=jnp.float64)
    if kind == "chunked":
        return chunked_data_matrices(arch, Xc, targets, loss, dtype, CHUNK)
    if kind == "moments":
        return moment_data_matrices(arch, Xc, targets, dtype)
    if kind == "host":
        return moment_data_matrices(arch, Xc, targets, dtype).on_host()
    if kind == "population":
        rng = np.random.default_rng(1)
        A = rng.standard_normal((arch.input_shape[0], arch.input_shape[0]))
        return nqf.population_data_matrices(arch, A @ A.T / arch.input_shape[0], rng.standard_normal((4, 8)))
    if kind == "own":
        return _DenseStack.of(nqf.data_matrices(arch, X, Y, loss=loss, dtype=jnp.float64))
    raise AssertionError(kind)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class _DenseStack(AbstractDataMatrices):
    """A user's implementation with only the abstract members: the dense stack A (N, K, d, d)."""

    A: jax.Array
    Y: jax.Array
    loss_type: str = field(default="squared", metadata=dict(static=True))

    @classmethod
    def of(cls, data):
        d, K = data.dim, data.outputs_count
        basis = jnp.eye(d * d).reshape(d * d, d, d)
        A = jax.vmap(data.outputs)(basis)  # (d*d, N, K): <E_ij, A_c(x_n)>
        A = jnp.transpose(A.reshape(d, d, data.num_samples, K), (2, 3, 0, 1))
        # the structure reads only the symmetric part of M: symmetrise to get A_c(x_n) itself
        return cls(0.5 * (A + jnp.swapaxes(A, -1, -2)), data.targets)

    @property
    def dim(self) -> int:
        return self.A.shape[-1]

    @property
    def outputs_count(self) -> int:
        return self.A.shape[1]

    @property
    def dtype(self):
        return self.A.dtype

    @property
    def C(self):
        return jnp.einsum("nc,ncij->ij", self.Y, self.A) / self.A.shape[0]

    def K_apply(self, M):
        return jnp.einsum("ncij,nc->ij", self.A, jnp.einsum("ncij,ij->nc", self.A, M)) / self.A.shape[0]

    def loss(self, M):
        F = jnp.einsum("ncij,ij->nc", self.A, M)
        return 0.5 * jnp.mean(jnp.sum((F - self.Y) ** 2, axis=1))

    def gradient_matrix(self, M):
        return self.K_apply(M) - self.C


KINDS = ["samples", "chunked", "moments", "host", "population", "own"]


def _symmetric(d, seed, scale=1.0):
    B = np.random.default_rng(seed).standard_normal((d, d))
    return scale * (B + B.T) / 2


def _rel(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


# moments, the population and the dense example are squared-loss data matrices; the chunked ones are
# the heaviest (3.4-5.9 s each): slow
CASES = [
    pytest.param(kind, loss, marks=pytest.mark.slow) if kind == "chunked" else (kind, loss)
    for kind, loss in [
        *((kind, "squared") for kind in KINDS),
        ("samples", "cross_entropy"),
        ("chunked", "cross_entropy"),
    ]
]


@pytest.mark.parametrize(("kind", "loss"), CASES)
def test_every_implementation_meets_the_protocol(kind, loss):
    data = _build(kind, loss)
    assert isinstance(data, AbstractDataMatrices) and data.loss_type == loss
    d = data.dim
    W = np.random.default_rng(2).standard_normal((d, 3)) * 0.3
    M, E = W @ W.T, _symmetric(d, 3)
    L, G = data.loss(M), data.gradient_matrix(M)
    assert np.shape(L) == () and np.shape(G) == (d, d) and np.shape(data.C) == (d, d)
    h = 1e-4
    derivative = (float(data.loss(M + h * E)) - float(data.loss(M - h * E))) / (2 * h)
    assert abs(derivative - float(np.sum(np.asarray(G) * E))) <= (1e-8 if loss == "squared" else 1e-6) * max(
        abs(derivative), 1e-3
    )
    both = data.loss_and_gradient(M)
    assert _rel(both[0], L) <= 1e-13 and _rel(both[1], G) <= 1e-13
    K = data.K_apply(M)
    if loss == "squared":
        assert _rel(np.asarray(K) - np.asarray(data.C), G) <= 1e-12
    M2 = _symmetric(d, 4)
    assert _rel(data.K_apply(2.0 * M - 3.0 * M2), 2.0 * np.asarray(K) - 3.0 * np.asarray(data.K_apply(M2))) <= 1e-12
    Q = np.linalg.qr(np.random.default_rng(5).standard_normal((d, 3)))[0]
    assert _rel(data.mode_growth(Q), np.einsum("ik,ij,jk->k", Q, np.asarray(data.C), Q)) <= 1e-12
    if loss == "squared":
        # K_kj = <P_k, K[P_j]> by polarisation of the loss, without K_apply (which the default
        # mode_interactions uses): Q(M) = L(M) - L(0) + <C, M> = <M, K[M]> / 2
        def quadratic_part(M):
            return float(data.loss(M)) - float(data.loss(0 * M)) + float(np.sum(np.asarray(data.C) * M))

        P = [np.outer(q, q) for q in Q.T]
        polarised = np.array([[quadratic_part(a + b) - quadratic_part(a) - quadratic_part(b) for b in P] for a in P])
        assert _rel(data.mode_interactions(Q), polarised) <= 1e-8
    if isinstance(data, AbstractSampleDataMatrices):
        assert data.num_samples == N and np.shape(data.outputs(M)) == (N, data.outputs_count)
        per_sample = np.asarray(data.per_sample_loss(M))
        assert per_sample.shape == (N,) and _rel(per_sample.mean(), L) <= 1e-12
        picked = jnp.array([3, 17, 17, 39])
        assert _rel(data.loss(M, picked), per_sample[np.asarray(picked)].mean()) <= 1e-12
        assert _rel(data.subset(picked).loss(M), data.loss(M, picked)) <= 1e-12
        assert _rel(data.subset(picked).gradient_matrix(M), data.gradient_matrix(M, picked)) <= 1e-12
        assert _rel(data.per_sample_loss(M, picked), per_sample[np.asarray(picked)]) <= 1e-12


@pytest.mark.parametrize("kind", ["chunked", "moments", "host", "own"])
def test_implementations_of_the_same_samples_agree(kind):
    reference, data = _build("samples"), _build(kind)
    d = reference.dim
    W = np.random.default_rng(6).standard_normal((d, 4)) * 0.5
    M = W @ W.T
    Q = np.linalg.qr(np.random.default_rng(7).standard_normal((d, d)))[0]
    for what, ours, theirs in [
        ("L(M)", data.loss(M), reference.loss(M)),
        ("L(0)", data.loss(0 * M), reference.loss(0 * M)),
        ("G(M)", data.gradient_matrix(M), reference.gradient_matrix(M)),
        ("C", data.C, reference.C),
        ("K[M]", data.K_apply(M), reference.K_apply(M)),
        ("c_k", data.mode_growth(Q), reference.mode_growth(Q)),
        ("K_kj", data.mode_interactions(Q), reference.mode_interactions(Q)),
    ]:
        assert _rel(ours, theirs) <= 1e-12, f"{kind}: {what}"


def test_a_users_implementation_runs_through_the_theory():
    reference = _build("samples")
    own = _build("own")
    basis_ref, basis_own = nqf.mode_basis(reference), nqf.mode_basis(own)
    assert _rel(basis_own.growth, basis_ref.growth) <= 1e-12
    assert _rel(basis_own.interactions, basis_ref.interactions) <= 1e-12
    M0 = 1e-6 * np.eye(reference.dim)
    flow_ref = nqf.theory.flow.gd_map(reference, M0, 0.05, 200)
    flow_own = nqf.theory.flow.gd_map(own, M0, 0.05, 200)
    assert _rel(flow_own.loss, flow_ref.loss) <= 1e-12


@pytest.mark.no_shape_checks  # a dict as data
def test_what_is_not_data_matrices_is_refused_in_one_line():
    with pytest.raises(nqf.NqfError, match="expected data matrices .* got dict"):
        nqf.theory.flow.gd_map({"C": 1}, np.eye(2), 0.1, 3)
    with pytest.raises(nqf.NqfError, match="mode_basis needs data matrices, got str"):
        nqf.mode_basis("data")
    with pytest.raises(nqf.NqfError, match="sgd_map needs sample data matrices"):
        nqf.theory.flow.sgd_map(
            _build("moments"), None, 0.1, 3, batch_size=4, key=jax.random.PRNGKey(0), factor=np.eye(12)
        )
    with pytest.raises(TypeError, match="abstract"):
        type("Incomplete", (AbstractDataMatrices,), {})()
