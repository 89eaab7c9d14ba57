"""A unit without a closed form (Equinox, Flax, a plain function) gets block factors derived by
autodiff on its coupled parameter block pairs (issue 32, item 2): they equal the dense autodiff
A(x) exactly, and the data matrices built from them (per sample and moments) equal dense
einsums over that reference (float64)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.architectures.architecture import Architecture, coupled_pairs, derived_layout, structure
from nqf.architectures.structure import BlockFactors
from nqf.theory.data_matrices.build import data_matrices
from nqf.theory.data_matrices.moments import choose_route, moment_data_matrices, term_shapes

from .conftest import assert_allclose

D, K = 5, 3
RTOL, ATOL = 1e-12, 1e-13  # float64: the derived and dense routes sum the same products


class Gated(eqx.Module):
    """a (u.x) sigmoid(g.x): the gate's weights enter A(x) at third order only."""

    a: jax.Array
    u: jax.Array
    g: jax.Array

    def __call__(self, x):
        return self.a * jnp.dot(self.u, x) * jax.nn.sigmoid(jnp.dot(self.g, x))


class HiddenGelu(eqx.Module):
    """a @ gelu(V x), a (K, 2), V (2, D): one coupled pair, (a, V)."""

    a: jax.Array
    v: jax.Array

    def __call__(self, x):
        return self.a @ jax.nn.gelu(self.v @ x)


class Coupled(eqx.Module):
    """Diagonal blocks (a a, b's through sin), a bias and three off-diagonal pairs."""

    a: jax.Array
    v: jax.Array
    b: jax.Array

    def __call__(self, x):
        hidden = self.v @ x + self.b
        return self.a @ jnp.tanh(hidden) + jnp.sin(self.v @ x).sum() * self.b.sum() + (self.a**2).sum(1)


def _plain_function() -> Architecture:
    """A unit written as a function of a dict of parameters, one of them a scalar."""

    def unit(w, x):
        return w["scale"] * jnp.tanh(w["v"] @ x) + w["c"] * jnp.cos(x[:K]) * w["scale"]

    template = {"scale": jnp.zeros(()), "v": jnp.zeros((K, D)), "c": jnp.zeros(K)}
    return Architecture("plain", unit, template, (D,), K)


def _architectures() -> dict[str, Architecture]:
    return {
        "gated": nqf.from_equinox(Gated(jnp.zeros(K), jnp.zeros(D), jnp.zeros(D)), D, K),
        "gelu2": nqf.from_equinox(HiddenGelu(jnp.zeros((K, 2)), jnp.zeros((2, D))), D, K),
        "coupled": nqf.from_equinox(Coupled(jnp.zeros((K, 4)), jnp.zeros((4, D)), jnp.zeros(4)), D, K),
        "plain": _plain_function(),
    }


ARCHS = _architectures()
PAIRS = {  # by block name: what each unit's second derivatives at w = 0 couple
    "gated": [("a", "u")],
    "gelu2": [("a", "v")],
    "coupled": [("a", "a"), ("a", "v"), ("a", "b"), ("v", "b")],
    "plain": [("c", "scale"), ("scale", "v")],  # a dict's leaves in key order
}


def _data(arch, N=12):
    rng = np.random.default_rng(3)
    return rng.standard_normal((N, *arch.input_shape)), rng.standard_normal((N, arch.outputs))


# per term: (rank, whether R JVPs give every output's rows); both routes of _derived_terms are tested
LAYOUTS = {
    "gated": [(1, True)],  # Z_c = e_c x^T / 2: one row per output, a readout
    "gelu2": [(2, True)],  # a (K, 2): output c's rows a[c, 0], a[c, 1]
    # (a, a), (a, v): rows a[c, :]; (a, b), (v, b): b on the left (4 entries), every output's rows the same
    "coupled": [(4, True), (4, True), (4, False), (4, False)],
    "plain": [(1, False), (1, False)],  # the scalar scale on the left, shared by the outputs
}


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_the_coupled_pairs_are_the_units_own(name):
    arch = ARCHS[name]
    names = [b.name for b in arch.blocks]
    assert [(names[i], names[j]) for i, j in coupled_pairs(arch)] == PAIRS[name]
    assert [(t.rank, t.compressed) for t in derived_layout(arch)] == LAYOUTS[name]


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_derived_factors_equal_the_dense_hessians(name):
    arch = ARCHS[name]
    X, _ = _data(arch)
    derived = structure(arch, X)
    assert isinstance(derived, BlockFactors)  # no N x K x d x d stack
    reference = structure(arch, X, method="autodiff").dense()
    assert_allclose(derived.dense(), reference, rtol=RTOL, atol=ATOL)
    assert float(jnp.max(jnp.abs(reference))) > 0.1  # a real comparison, not of zeros
    # the factors hold fewer numbers than the dense stack whenever a block pair is uncoupled
    held = sum(t.left.size + t.right.size for t in derived.terms)
    assert held < reference.size or name == "coupled"


def test_the_pattern_is_the_same_under_a_trace():
    """Computed under jit or eval_shape (another Architecture object: no cached pattern), the same."""
    arch = nqf.from_equinox(Gated(jnp.zeros(K), jnp.zeros(D), jnp.zeros(D)), D, K)
    X, _ = _data(arch)
    dense = jax.jit(lambda x: structure(arch, x).dense())(X)
    assert_allclose(dense, structure(arch, X, method="autodiff").dense(), rtol=RTOL, atol=ATOL)
    assert coupled_pairs(arch) == ((0, 1),)


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_data_matrices_of_a_derived_unit_equal_dense_einsums(name):
    arch = ARCHS[name]
    X, Y = _data(arch)
    A = np.asarray(structure(arch, X, method="autodiff").dense())
    rng = np.random.default_rng(4)
    B = rng.standard_normal((arch.dim, arch.dim))
    M = 0.3 * B @ B.T / arch.dim
    N = X.shape[0]
    F = np.einsum("nkij,ij->nk", A, M)
    C = np.einsum("nk,nkij->ij", Y, A) / N
    G = np.einsum("nk,nkij->ij", F - Y, A) / N
    L = 0.5 * np.mean(np.sum((F - Y) ** 2, axis=1))
    per_sample = data_matrices(arch, X, Y)
    moments = moment_data_matrices(arch, X, Y, jnp.float64)
    for data in (per_sample, moments):
        assert_allclose(data.C, C, rtol=RTOL, atol=ATOL)
        assert_allclose(data.gradient_matrix(jnp.asarray(M)), G, rtol=RTOL, atol=ATOL)
        assert_allclose(data.loss(jnp.asarray(M)), L, rtol=RTOL, atol=ATOL)


def test_the_route_counts_the_coupled_blocks_only():
    """The gated unit on 64 inputs and 10 outputs: d = 138, one coupled pair (a: 10, u: 64) with one
    row per output (Z_c = e_c x^T / 2: rank one, as the perceptron's closed form), so S is 640 x 640
    (the dense A would make it 19044 x 19044 and force the per-sample route)."""
    arch = nqf.from_equinox(Gated(jnp.zeros(10), jnp.zeros(64), jnp.zeros(64)), 64, 10)
    assert term_shapes(arch, "float64") == [(10, 1, 10, 64)]
    choice = choose_route(arch, 1797, "squared")
    assert (choice.route, choice.packed_size) == ("moments", 640)


def test_a_unit_with_no_quadratic_term_has_a_zero_structure():
    """phi = a b c is cubic: A(x) = 0 (the expansion check refuses it), and the structure says so."""

    def unit(w, x):
        return w["a"] * w["b"] * w["c"] * jnp.sum(x) * jnp.ones(1)

    arch = Architecture("cubic", unit, {"a": jnp.zeros(()), "b": jnp.zeros(()), "c": jnp.zeros(())}, (2,), 1)
    assert coupled_pairs(arch) == ()
    X = np.ones((3, 2))
    np.testing.assert_array_equal(structure(arch, X).dense(), np.zeros((3, 1, 3, 3)))


def test_even_chunks_run_in_numpy_where_padded_ones_would_be_compiled(monkeypatch):
    """200 samples: the padded chunk (256) is over the host interpreter's size and 200 are not
    (the limit set between the two here), so the moments take one unpadded chunk in numpy; they
    equal the compiled padded chunk's to 1e-12."""
    from nqf.core import host_eval
    from nqf.theory.data_matrices import moments

    arch = nqf.from_equinox(Gated(jnp.zeros(K), jnp.zeros(D), jnp.zeros(D)), D, K)
    X, Y = _data(arch, N=200)
    shared = moments._chunk_functions(arch)[0]
    sizes = [host_eval.traced(shared, *next(moments._chunks(X, Y, n, np.float64))).elements for n in (200, 256)]
    assert sizes[0] < sizes[1]
    padded = moment_data_matrices(arch, X, Y, jnp.float64)  # the default limit: numpy either way
    monkeypatch.setattr(host_eval, "HOST_MAX_ELEMENTS", (sizes[0] + sizes[1]) // 2)
    even = moment_data_matrices(arch, X, Y, jnp.float64)
    assert even.evaluated == "numpy"
    assert_allclose(even.second, padded.second, rtol=RTOL, atol=ATOL)
    assert_allclose(even.cross, padded.cross, rtol=RTOL, atol=ATOL)
    monkeypatch.setattr(host_eval, "HOST_MAX_ELEMENTS", sizes[0] - 1)  # neither fits: compiled, padded
    assert moment_data_matrices(arch, X, Y, jnp.float64).evaluated == "compiled"
