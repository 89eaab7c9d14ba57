"""Built-in architectures: closed-form A(x) against autodiff, block-factor contractions,
the order of the quadratic expansion, symmetries, and architecture-specific claims
of docs/theory.md section 1.

Every per-variant quantity is computed once by one jitted function (``_report``), so
each variant compiles once; the tests read from that cache.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.architectures import ARCHITECTURES, get_architecture
from nqf.architectures.architecture import (
    Architecture,
    closed_form_structure,
    init_weights,
    network,
    quadratic_model,
    structure,
    structure_matrix,
)
from nqf.architectures.structure import BlockFactors, DenseStructure
from nqf.core.errors import NqfError
from tests.conftest import assert_allclose

EPSILONS = np.logspace(-1, -3, 5)
SAMPLES = 3

# id: (registry name, options, width n, expansion: "smooth" (remainder O(eps^3) or
# smaller), "exact" (the unit is a quadratic form), or None (not smooth: top-k))
VARIANTS = {
    "mlp-tanh": ("mlp", dict(inputs=3, outputs=2, activation="tanh"), 3, "smooth"),
    "mlp-gelu": ("mlp", dict(inputs=3, outputs=2, activation="gelu"), 3, "smooth"),
    "mlp-sin": ("mlp", dict(inputs=3, outputs=2, activation="sin"), 3, "smooth"),
    "mlp-silu": ("mlp", dict(inputs=3, outputs=2, activation="silu"), 3, "smooth"),
    "mlp-fixed-square": ("mlp-fixed", dict(inputs=4, activation="square"), 3, "exact"),
    "mlp-fixed-one_minus_cos": ("mlp-fixed", dict(inputs=4, activation="one_minus_cos"), 3, "smooth"),
    "attention-last": (
        "attention",
        dict(tokens=4, dim=3, key_dim=2, value_dim=2, outputs=2, readout="last"),
        3,
        "smooth",
    ),
    "attention-pool": (
        "attention",
        dict(tokens=4, dim=3, key_dim=2, value_dim=3, outputs=2, readout="pool"),
        3,
        "smooth",
    ),
    "linear-attention": ("linear-attention", dict(dim=2, context=5), 3, "exact"),
    "moe-softmax-tanh": ("moe", dict(inputs=3, outputs=2, experts=3, activation="tanh"), 3, "smooth"),
    "moe-softmax-gelu": ("moe", dict(inputs=3, outputs=2, experts=3, activation="gelu"), 3, "smooth"),
    "moe-topk": ("moe", dict(inputs=3, outputs=2, experts=3, routing="topk", top_k=2), 3, None),
    "conv1d-circular-global": ("conv1d", dict(length=6, kernel=3, outputs=2), 2, "smooth"),
    "conv1d-circular-position": (
        "conv1d",
        dict(length=6, kernel=3, readout="position", outputs=2, activation="silu"),
        2,
        "smooth",
    ),
    "conv1d-valid-global": (
        "conv1d",
        dict(length=6, kernel=3, padding="valid", outputs=2, activation="gelu"),
        2,
        "smooth",
    ),
    "conv1d-valid-position": ("conv1d", dict(length=6, kernel=2, padding="valid", readout="position"), 2, "smooth"),
    "conv2d-circular-position": (
        "conv2d",
        dict(rows=3, columns=4, kernel=2, readout="position", outputs=2),
        2,
        "smooth",
    ),
    "conv2d-valid-global": (
        "conv2d",
        dict(rows=4, columns=3, kernel=2, padding="valid", activation="sin"),
        2,
        "smooth",
    ),
}
SMOOTH = [v for v, spec in VARIANTS.items() if spec[3] is not None]


def _arch(variant: str) -> Architecture:
    name, options, _, _ = VARIANTS[variant]
    return get_architecture(name, **options)


@functools.cache
def _report(variant: str) -> dict[str, np.ndarray]:
    """Everything the generic tests compare, for one variant, in one compilation."""
    arch = _arch(variant)
    n = VARIANTS[variant][2]
    seed = sum(map(ord, variant))
    rng = np.random.default_rng(seed)
    X = jnp.asarray(rng.normal(size=(SAMPLES, *arch.input_shape)))
    W = jnp.asarray(rng.normal(size=(arch.dim, n)))
    O = jnp.asarray(np.linalg.qr(rng.normal(size=(n, n)))[0])
    perm = rng.permutation(n)
    B = rng.normal(size=(arch.dim, arch.dim))
    sym = jnp.asarray(B + B.T)
    weights = jnp.asarray(rng.normal(size=(SAMPLES, arch.outputs)))
    Q = jnp.asarray(rng.normal(size=(arch.dim, 2)))
    eps = jnp.asarray(EPSILONS)

    def compute(X, W, O, sym, weights, Q, eps):
        auto = jax.vmap(lambda x: structure_matrix(arch, x))(X)
        factors = structure(arch, X, method="closed")
        scaled = eps[:, None, None] * W[None]  # (E, d, n)
        net = jax.vmap(lambda Ws: jax.vmap(lambda x: network(arch, Ws, x))(X))(scaled)  # (E, N, K)
        quad = jax.vmap(lambda Ws: jax.vmap(lambda x: quadratic_model(arch, Ws @ Ws.T, x))(X))(scaled)
        rotated = W @ O
        return dict(
            auto=auto,
            closed=factors.dense(),
            forms=factors.forms(sym),
            contract=factors.contract(weights),
            quad=factors.quad(Q),
            net=net,
            quad_model=quad,
            model=factors.forms(W @ W.T),
            model_rotated=factors.forms(rotated @ rotated.T),
            unit_sum=factors.quad(W).sum(-1),
            unit_sum_rotated=factors.quad(rotated).sum(-1),
            unit_sum_permuted=factors.quad(W[:, perm]).sum(-1),
            network=jax.vmap(lambda x: network(arch, W, x))(X),
            network_permuted=jax.vmap(lambda x: network(arch, W[:, perm], x))(X),
        )

    out = jax.jit(compute)(X, W, O, sym, weights, Q, eps)
    out = {k: np.asarray(v) for k, v in out.items()}
    out.update(X=np.asarray(X), sym=np.asarray(sym), weights=np.asarray(weights), Q=np.asarray(Q))
    return out


def _relative(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# -- generic checks, every built-in architecture ------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_closed_form_matches_autodiff(variant):
    r = _report(variant)
    assert r["auto"].shape == r["closed"].shape
    assert np.max(np.abs(r["auto"])) > 0
    assert _relative(r["closed"], r["auto"]) <= 1e-10


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_block_factors_agree_with_dense_stack(variant):
    r = _report(variant)
    dense = r["auto"]  # the autodiff stack, independent of the block factors
    assert_allclose(r["forms"], np.einsum("nkij,ij->nk", dense, r["sym"]), rtol=1e-12, atol=1e-13)
    contract = np.einsum("nk,nkij->ij", r["weights"], dense) / SAMPLES
    assert_allclose(r["contract"], contract, rtol=1e-12, atol=1e-13)
    assert_allclose(r["quad"], np.einsum("nkij,im,jm->nkm", dense, r["Q"], r["Q"]), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_shared_left_factors_give_the_same_forms_and_contractions(variant):
    """Terms whose left factors every sample shares (``BlockFactors.with_shared_left``: the
    per-sample route's data) take them once: the same forms and contractions as the dense stack."""
    arch, r = _arch(variant), _report(variant)
    factors = structure(arch, jnp.asarray(r["X"]), method="closed")
    if not isinstance(factors, BlockFactors):
        return
    shared = factors.with_shared_left()
    marked = [t.shared_left for t in shared.terms]
    for t, mark, marked_t in zip(factors.terms, marked, shared.terms, strict=True):
        left, right = np.asarray(t.left), np.asarray(t.right)
        assert mark == bool(np.all(left == left[:1]))  # marked exactly where every sample's left is the first's
        # and right-shared exactly where, besides, every output's right factors are the first output's
        assert marked_t.shared_right == (mark and bool(np.all(right == right[:, :1])))
    if VARIANTS[variant][0] == "mlp":  # the readout a_c: e_c for every sample, with x_n for every c
        assert any(marked) and any(t.shared_right for t in shared.terms)
    dense = r["auto"]
    forms, contracted = jax.jit(lambda s, M, w: (s.forms(M), s.contract(w)))(
        shared, jnp.asarray(r["sym"]), jnp.asarray(r["weights"])
    )  # one program
    assert_allclose(forms, np.einsum("nkij,ij->nk", dense, r["sym"]), rtol=1e-12, atol=1e-13)
    contract = np.einsum("nk,nkij->ij", r["weights"], dense) / SAMPLES
    assert_allclose(contracted, contract, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("variant", SMOOTH)
def test_quadratic_model_error_shrinks_like_eps_cubed(variant):
    """network(eps W) - quadratic_model((eps W)(eps W)^T) = O(eps^3) (fitted log-log slope >= 2.8)."""
    r = _report(variant)
    remainder = np.max(np.abs(r["net"] - r["quad_model"]), axis=(1, 2))
    size = np.max(np.abs(r["quad_model"]), axis=(1, 2))
    assert np.all(size > 0)
    if VARIANTS[variant][3] == "exact":
        assert np.all(remainder <= 1e-12 * size)
    else:
        slope = np.polyfit(np.log(EPSILONS), np.log(remainder), 1)[0]
        assert slope >= 2.8, f"remainder slope {slope:.3f}"
        # the ratio to eps^2 falls (about) linearly: by >= 50x over the 100x range of eps
        assert remainder[-1] / EPSILONS[-1] ** 2 < 2e-2 * remainder[0] / EPSILONS[0] ** 2


def test_top_k_remainder_does_not_shrink():
    """Top-k routing is not smooth at w = 0: the remainder stays O(eps^2) (docs/theory.md section 1)."""
    r = _report("moe-topk")
    ratio = np.max(np.abs(r["net"] - r["quad_model"]), axis=(1, 2)) / EPSILONS**2
    assert ratio[-1] > 0.5 * ratio[0] > 0


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_symmetries(variant):
    """Quadratic model: invariant under W -> W O and unit permutations; network: under permutations."""
    r = _report(variant)
    assert_allclose(r["model_rotated"], r["model"], rtol=1e-12, atol=1e-12)
    assert_allclose(r["unit_sum"], r["model"], rtol=1e-12, atol=1e-12)
    assert_allclose(r["unit_sum_rotated"], r["unit_sum"], rtol=1e-12, atol=1e-12)
    assert_allclose(r["unit_sum_permuted"], r["unit_sum"], rtol=1e-12, atol=1e-12)
    assert_allclose(r["network_permuted"], r["network"], rtol=1e-12, atol=1e-12)


def test_every_registered_architecture_builds_with_a_closed_form():
    assert set(ARCHITECTURES) == {"mlp", "mlp-fixed", "attention", "linear-attention", "moe", "conv1d", "conv2d"}
    assert {spec[0] for spec in VARIANTS.values()} == set(ARCHITECTURES)
    for name in ARCHITECTURES:
        arch = get_architecture(name)
        assert arch.closed_form is not None and arch.closed_form_text, name
        assert arch.name == name


# -- attention --------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["attention-last", "attention-pool"])
def test_attention_only_value_output_block(variant):
    arch, r = _arch(variant), _report(variant)
    D, dv, K = arch.option("dim"), arch.option("value_dim"), arch.outputs
    for x, A in zip(r["X"], r["auto"], strict=True):
        for name in ("W_Q", "W_K"):
            b = arch.block(name)
            assert np.all(A[:, b.start : b.stop, :] == 0.0) and np.all(A[:, :, b.start : b.stop] == 0.0)
        V, O = arch.block("W_V"), arch.block("W_O")
        assert np.all(A[:, V.start : V.stop, V.start : V.stop] == 0.0)
        assert np.all(A[:, O.start : O.stop, O.start : O.stop] == 0.0)
        xbar = x.mean(axis=0)
        expected = 0.5 * np.einsum("a,be,cf->cabef", xbar, np.eye(dv), np.eye(K)).reshape(K, D * dv, dv * K)
        assert_allclose(A[:, V.start : V.stop, O.start : O.stop], expected, rtol=1e-12, atol=1e-15)


def test_attention_unit_against_reference():
    """The head output, computed independently with numpy, for both readouts."""
    rng = np.random.default_rng(3)
    T, D, dk, dv, K = 4, 3, 2, 2, 2
    x = rng.normal(size=(T, D))
    w = {
        "W_Q": rng.normal(size=(D, dk)),
        "W_K": rng.normal(size=(D, dk)),
        "W_V": rng.normal(size=(D, dv)),
        "W_O": rng.normal(size=(dv, K)),
    }
    scores = (x @ w["W_Q"]) @ (x @ w["W_K"]).T / math.sqrt(dk)
    alpha = np.exp(scores - scores.max(axis=1, keepdims=True))
    alpha /= alpha.sum(axis=1, keepdims=True)
    outputs = alpha @ x @ w["W_V"] @ w["W_O"]  # (T, K)
    for readout, expected in (("last", outputs[-1]), ("pool", outputs.mean(axis=0))):
        arch = nqf.get_architecture("attention", tokens=T, dim=D, key_dim=dk, value_dim=dv, outputs=K, readout=readout)
        assert_allclose(jax.jit(arch.unit)(w, jnp.asarray(x)), expected, rtol=1e-12)


# -- linear attention -------------------------------------------------------------------


def test_linear_attention_quadratic_model_is_exact_at_any_scale():
    arch = get_architecture("linear-attention", dim=2, context=5)
    rng = np.random.default_rng(4)
    X = jnp.asarray(rng.normal(size=(4, *arch.input_shape)))
    W = rng.normal(size=(arch.dim, 3))

    @jax.jit
    def both(W):
        net = jax.vmap(lambda x: network(arch, W, x))(X)
        return net, structure(arch, X).forms(W @ W.T)

    for scale in (1e-3, 1.0, 1e3):
        net, model = both(jnp.asarray(scale * W))
        assert_allclose(model, net, rtol=1e-12)


def test_linear_attention_closed_form_is_S_times_query():
    """A[w_OV_a, W_KQ_bc] = S_ab zq_c / 2 with S the context second moment (independent numpy)."""
    arch = get_architecture("linear-attention", dim=2, context=5)
    x = np.random.default_rng(5).normal(size=arch.input_shape)
    S = x[:5].T @ x[:5] / 5
    A = np.asarray(jax.jit(lambda x: closed_form_structure(arch, x))(jnp.asarray(x)))[0]
    w, kq = arch.block("w_OV"), arch.block("W_KQ")
    expected = 0.5 * np.einsum("ab,c->abc", S, x[5]).reshape(3, 9)
    assert_allclose(A[w.start : w.stop, kq.start : kq.stop], expected, rtol=1e-13)
    assert np.all(A[kq.start : kq.stop, kq.start : kq.stop] == 0) and np.all(A[w.start : w.stop, w.start : w.stop] == 0)


# -- mixture of experts -----------------------------------------------------------------


def test_moe_is_perceptron_over_experts():
    r = _report("moe-softmax-tanh")
    arch = _arch("moe-softmax-tanh")
    E = arch.router.units
    mlp_arch = get_architecture("mlp", inputs=3, outputs=2, activation="tanh")
    a, u, v = arch.block("a"), arch.block("u"), arch.block("v")
    keep = np.r_[a.start : a.stop, v.start : v.stop]
    mlp_structure = np.asarray(jax.jit(jax.vmap(lambda x: structure_matrix(mlp_arch, x)))(r["X"]))
    for A, mlp_A in zip(r["auto"], mlp_structure, strict=True):
        assert_allclose(A[:, keep][:, :, keep], mlp_A / E, rtol=1e-12)
        assert np.all(A[:, u.start : u.stop, :] == 0.0) and np.all(A[:, :, u.start : u.stop] == 0.0)


def test_moe_width_must_equal_experts():
    arch = get_architecture("moe", inputs=3, outputs=2, experts=3)
    with pytest.raises(NqfError, match="width must be 3"):
        network(arch, jnp.zeros((arch.dim, 4)), jnp.zeros(3))
    with pytest.raises(NqfError, match="width must be 3"):
        init_weights(arch, jax.random.PRNGKey(0), 2, 0.1)


def test_moe_top_k_routes_deterministically():
    arch = get_architecture("moe", inputs=3, outputs=2, experts=4, routing="topk", top_k=2)
    # ties at w = 0 go to the lowest indices
    assert_allclose(arch.router.route(jnp.zeros(4)), [0.5, 0.5, 0.0, 0.0], rtol=0, atol=0)
    logits = jnp.asarray([0.3, -1.0, 2.0, 0.1])
    expected = np.zeros(4)
    expected[[2, 0]] = np.exp([2.0, 0.3]) / np.exp([2.0, 0.3]).sum()
    assert_allclose(arch.router.route(logits), expected, rtol=1e-14)
    W = jnp.asarray(np.random.default_rng(6).normal(size=(arch.dim, 4)))
    out = network(arch, W, jnp.ones(3))
    assert out.shape == (2,) and np.all(np.isfinite(out))


# -- convolution ------------------------------------------------------------------------


def _conv_reference(x, k, padding):
    """Cross-correlation by explicit loops (1D or 2D), (positions,) flattened row-major."""
    x = np.atleast_2d(x)
    k = np.atleast_2d(k)
    (H, W), s_h, s_w = x.shape, k.shape[0], k.shape[1]
    rows = range(H) if padding == "circular" else range(H - s_h + 1)
    cols = range(W) if padding == "circular" else range(W - s_w + 1)
    out = []
    for p in rows:
        for q in cols:
            out.append(sum(k[i, j] * x[(p + i) % H, (q + j) % W] for i in range(s_h) for j in range(s_w)))
    return np.asarray(out)


@pytest.mark.parametrize(
    "name, options",
    [
        ("conv1d", dict(length=6, kernel=3, padding="circular", readout="position", outputs=2)),
        ("conv1d", dict(length=6, kernel=3, padding="valid", readout="global", outputs=2)),
        ("conv2d", dict(rows=3, columns=4, kernel=2, padding="circular", readout="global")),
        ("conv2d", dict(rows=4, columns=3, kernel=2, padding="valid", readout="position", outputs=2)),
    ],
)
def test_conv_unit_against_loops(name, options):
    arch = get_architecture(name, **options)
    rng = np.random.default_rng(7)
    x = rng.normal(size=arch.input_shape)
    a_shape, k_shape = arch.block("a").shape, arch.block("k").shape
    w = {"a": rng.normal(size=a_shape), "k": rng.normal(size=k_shape)}
    hidden = np.tanh(_conv_reference(x, w["k"], options["padding"]))
    if options["readout"] == "global":
        expected = w["a"] * hidden.sum()
    else:
        assert a_shape[0] == hidden.size
        expected = hidden @ w["a"]
    assert_allclose(jax.jit(arch.unit)(w, jnp.asarray(x)), expected, rtol=1e-12)


def test_conv_circular_global_sees_only_the_sum():
    """Global pooling with circular padding: every summed-patch entry is sum_i x_i (one mode)."""
    arch = get_architecture("conv2d", rows=3, columns=4, kernel=2, outputs=2)
    x = np.random.default_rng(8).normal(size=(3, 4))
    (term,) = arch.closed_form(jnp.asarray(x))
    assert_allclose(term.right, np.full((2, 1, 4), x.sum()), rtol=1e-13)
    assert_allclose(term.left, np.eye(2)[:, None, :], rtol=0)  # tanh'(0) = 1


def test_conv_position_readout_full_kernel_is_circular_hankel_with_fourier_spectrum():
    """s = L, circular, per-position readout: 2/sigma'(0) A[a_p, k_j] = x_{(p+j) mod L},
    whose singular values are |fft(x)| (docs/theory.md section 1)."""
    L = 8
    arch = get_architecture("conv1d", length=L, kernel=L, readout="position", activation="sin")
    x = np.random.default_rng(9).normal(size=L)
    A = np.asarray(jax.jit(lambda x: closed_form_structure(arch, x))(jnp.asarray(x)))[0]
    a, k = arch.block("a"), arch.block("k")
    hankel = 2.0 * A[a.start : a.stop, k.start : k.stop]
    p, j = np.meshgrid(np.arange(L), np.arange(L), indexing="ij")
    assert_allclose(hankel, x[(p + j) % L], rtol=1e-13)
    singular = np.linalg.svd(hankel, compute_uv=False)
    assert_allclose(np.sort(singular), np.sort(np.abs(np.fft.fft(x))), rtol=1e-10)


# -- a user-written unit function -------------------------------------------------------


def test_user_unit_with_nested_template_goes_through_the_generic_route():
    """phi_c = dec_c sin(enc.v . x), template {"dec": (K,), "enc": {"v": (D,)}}: the mlp closed form."""
    D, K = 3, 2

    def unit(w, x):
        return w["dec"] * jnp.sin(jnp.dot(w["enc"]["v"], x))

    template = {"enc": {"v": jax.ShapeDtypeStruct((D,), jnp.float64)}, "dec": jax.ShapeDtypeStruct((K,), jnp.float64)}
    arch = Architecture(name="user", unit=unit, template=template, input_shape=(D,), outputs=K)
    assert [(b.name, b.shape) for b in arch.blocks] == [("dec", (K,)), ("enc.v", (D,))]
    rng = np.random.default_rng(10)
    X = rng.normal(size=(3, D))
    expected = np.zeros((3, K, K + D, K + D))
    for n in range(3):
        for c in range(K):
            expected[n, c, c, K:] = expected[n, c, K:, c] = X[n] / 2
    auto = structure(arch, jnp.asarray(X), method="autodiff")
    assert isinstance(auto, DenseStructure)
    assert_allclose(auto.dense(), expected, rtol=1e-14, atol=1e-15)
    derived = structure(arch, jnp.asarray(X))  # the default: factors on the one coupled pair (dec, enc.v)
    assert isinstance(derived, BlockFactors) and [(t.left_slice, t.right_slice) for t in derived.terms] == [
        ((0, K), (K, K + D))
    ]
    assert_allclose(derived.dense(), expected, rtol=1e-14, atol=1e-15)
    assert_allclose(jax.jit(lambda x: structure_matrix(arch, x))(X[0]), expected[0], rtol=1e-14, atol=1e-15)
    W = rng.normal(size=(K + D, 4))
    net = np.sum([W[:K, i] * np.sin(W[K:, i] @ X[0]) for i in range(4)], axis=0)
    assert_allclose(jax.jit(lambda W: network(arch, W, X[0]))(W), net, rtol=1e-13)
    model = jax.jit(lambda M: quadratic_model(arch, M, X[0]))(W @ W.T)
    assert_allclose(model, (W[:K] @ W[K:].T) @ X[0], rtol=1e-13)
    with pytest.raises(NqfError, match="no closed form"):
        closed_form_structure(arch, jnp.asarray(X[0]))


def test_block_factors_type_for_builtins():
    assert isinstance(structure(_arch("conv1d-valid-global"), jnp.ones((2, 6))), BlockFactors)


# -- option validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("mlp", dict(inputs=-1), "inputs must be >= 1"),
        ("mlp", dict(activation="swish"), "unknown activation"),
        ("mlp-fixed", dict(inputs=0), "inputs must be >= 1"),
        ("attention", dict(key_dim=0), "key_dim must be >= 1"),
        ("attention", dict(tokens=2.5), "tokens must be a positive integer"),
        ("attention", dict(readout="first"), "unknown readout 'first'"),
        ("linear-attention", dict(context=0), "context must be >= 1"),
        ("linear-attention", dict(dim=-3), "dim must be >= 1"),
        ("moe", dict(experts=0), "experts must be >= 1"),
        ("moe", dict(routing="hash"), "unknown routing 'hash'"),
        ("moe", dict(experts=3, routing="topk", top_k=4), "top_k must be <= experts"),
        ("moe", dict(top_k=0), "top_k must be >= 1"),
        ("conv1d", dict(length=4, kernel=5, padding="valid"), "kernel size 5 is larger than the signal"),
        ("conv1d", dict(length=4, kernel=5), "larger than the signal"),
        ("conv1d", dict(padding="same"), "unknown padding 'same'"),
        ("conv1d", dict(readout="max"), "unknown readout 'max'"),
        ("conv1d", dict(kernel=-2), "kernel must be >= 1"),
        ("conv2d", dict(rows=0), "rows must be >= 1"),
        ("conv2d", dict(rows=2, columns=5, kernel=3), "larger than the signal"),
        ("conv2d", dict(outputs=0), "outputs must be >= 1"),
    ],
)
def test_bad_options_raise(name, options, message):
    with pytest.raises(NqfError, match=message):
        get_architecture(name, **options)


def test_unknown_option_and_architecture_raise():
    with pytest.raises(NqfError, match="has no option"):
        get_architecture("conv1d", height=3)
    with pytest.raises(NqfError, match="unknown architecture"):
        get_architecture("transformer")


@pytest.mark.parametrize("name", ["mlp", "attention", "conv2d", "moe"])
def test_network_takes_one_input_or_a_batch(name):
    """``nqf.network`` on a batch (N, *input_shape) is every sample's output, (N, K) (it was a raw
    JAX shape error); any other shape is one NqfError naming both shapes it takes."""
    arch = get_architecture(name)
    n = 4 if name == "moe" else 3
    W = np.random.default_rng(0).normal(size=(arch.dim, n))
    X = np.random.default_rng(1).normal(size=(5, *arch.input_shape))
    batch = np.asarray(network(arch, W, X))
    assert batch.shape == (5, arch.outputs)
    assert_allclose(batch, np.stack([np.asarray(network(arch, W, x)) for x in X]), rtol=1e-12, atol=1e-12)
    with pytest.raises(NqfError, match=r"network takes one input of shape .* or a batch \(N, "):
        network(arch, W, X[..., :1])


@pytest.mark.parametrize("routing", [{"routing": "softmax"}, {"routing": "topk", "top_k": 2}])
def test_gate_weights_at_zero_are_the_route_of_zero_logits_even_while_tracing(routing):
    """g0 from the route's jaxpr in numpy (route_at_zero) against the route run by JAX, eagerly
    and inside a jit trace (where structure_matrix asks for it): softmax 1/E, top-k 1/k on its units."""
    from nqf.architectures.architecture import route_at_zero

    arch = get_architecture("moe", experts=4, **routing)
    expected = np.asarray(arch.router.route(jnp.zeros(4)))
    assert_allclose(route_at_zero(arch.router.route, 4), expected, rtol=0, atol=1e-15)
    assert arch.zero_gate_weight() == pytest.approx(0.25 if routing["routing"] == "softmax" else 0.5, abs=1e-15)
    traced = jax.jit(lambda x: arch.zero_gate_weight() * x)(jnp.ones(()))
    assert float(traced) == arch.zero_gate_weight()
