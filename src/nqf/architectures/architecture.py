r"""Architectures as unit functions, and the quadratic form they reduce to.

An architecture is one unit function ``phi(w, x) -> R^K`` plus the unit's parameter
template (a PyTree). The layer is the sum over n interchangeable units,

    f(x; W) = sum_{i=1..n} phi(w_i, x),      W = [w_1 ... w_n] in R^{d x n},

where each column w_i is the unit's parameter PyTree flattened in template leaf order
(``Architecture.blocks`` lists the order). A mixture of experts additionally routes
with a gate across units: f = sum_i g_i(x) phi(w_i, x), g = route(gate logits); at
w = 0 the softmax gate is uniform (g_i = 1/n).

A unit whose output is a trainable readout of features, phi(w, x) = R(w) g(w, x), may
declare it (:class:`Readout`); ``network_batch`` then evaluates the layer on a batch as
matrix products, f(X) = sum_i R_i g_i(X). Built-in units that declare it: mlp, attention
(R = W_O, g = the head's attended value), linear-attention (R = w_OV), moe (R = a, weighted
by the gate) and conv1d/conv2d (R = a); mlp-fixed has no trainable readout.

Near w = 0 the layer is the quadratic form (docs/theory.md section 1)

    f_c(x; W) ~= Tr[W W^T A_c(x)] = <M, A_c(x)>,   A_c(x) = (1/2) Hessian_w (g0 phi_c)(0, x),

with M = W W^T. ``structure_matrix`` computes A by autodiff (the generic route, any
unit function); built-in architectures also carry a hand-derived closed form in
low-rank block-factor form (``closed_form``) that downstream code uses. A unit without
one (Equinox, Flax, ``--unit``) gets its block factors by autodiff on the parameter block
pairs that couple (``coupled_pairs``, ``structure(..., method="derived")``): the moments
and maps then work on those blocks only, as they do for a closed form.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import math
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, no_type_check

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from nqf.architectures.structure import BlockFactors, BlockTerm, DenseStructure, Structure
from nqf.core.arguments import check_count, is_integer
from nqf.core.errors import NqfError
from nqf.core.host_eval import host_or_compiled
from nqf.core.programs import LruCache, to_device
from nqf.core.sampling import standard_normal


# A pytree: JAX rebuilds it with other leaves than arrays (ShapeDtypeStruct under eval_shape, ...),
# so jaxtyping's test-time checks (tests/conftest.py) skip it.
@no_type_check
@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ClosedTerm:
    """One block coupling of a closed-form A(x) for a single input x.

    A_c(x) gets 1/2 sum_r (E_L^T left[c, r] right[c, r]^T E_R + transpose), with
    left: (K, R, d_L) on template leaf ``left_block`` and right: (K, R, d_R) on
    ``right_block``. When left_block == right_block the term is a diagonal block.
    """

    left_block: str = field(metadata=dict(static=True))
    right_block: str = field(metadata=dict(static=True))
    left: jax.Array
    right: jax.Array


@dataclass(frozen=True)
class Router:
    """A gate across units: f = sum_i route(logits)_i phi(w_i, x), logits_i = gate_logit(w_i, x).

    ``units`` is the number of units (experts) the gate is defined over; ``route`` maps
    the (n,) logits to (n,) nonnegative weights.
    """

    units: int
    gate_logit: Callable[[Any, jax.Array], jax.Array]
    route: Callable[[jax.Array], jax.Array]


@dataclass(frozen=True)
class Readout:
    """A unit that ends in a readout: phi(w, x) = R(w) g(w, x), with R the parameter block
    ``block`` read as a (K, r) matrix and g the unit's r features, ``features(w, X) -> (N, r)``
    for one unit's parameters and a batch X (N, *input_shape), computed for the whole batch
    at once (matrix products over X, not the unit called sample by sample).

    ``transposed``: the block holds R^T, an (r, K) output matrix that multiplies the features
    on the right, phi = g^T R^T (attention's W_O, a per-position convolution readout (P, K)).
    Both are read row-major from the flat W, as ``Architecture.unravel`` does.

    The layer is then f(X) = sum_i R_i g_i(X), one contraction over the units, instead of the
    (N, n, K) outputs of every unit (:func:`network_batch`). A declaration, not a second
    definition: the tests check it against ``unit`` for every architecture that has one.
    """

    block: str
    features: Callable[[Any, jax.Array], jax.Array]
    transposed: bool = False


class Block(NamedTuple):
    """A parameter leaf of the unit: its name, shape and [start, stop) in the flat vector."""

    name: str
    shape: tuple[int, ...]
    start: int
    stop: int


def leaf_name(path) -> str:
    parts = []
    for key in path:
        for attr in ("key", "name", "idx"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
    return ".".join(parts) if parts else "w"


@dataclass(frozen=True, eq=False)
class Architecture:
    """A unit function, its parameter template, and what is known about its structure.

    Attributes:
        name: registry name (``mlp``, ``attention``, ...) or a user's label.
        unit: ``phi(w, x) -> (K,)`` for one unit's parameter PyTree ``w`` and one input ``x``.
        template: PyTree of arrays / ``jax.ShapeDtypeStruct`` giving the unit's parameter shapes.
        input_shape: shape of one input x.
        outputs: K, the number of outputs.
        options: the constructor options, for display and for hashing configurations.
        router: optional gate across units (mixture of experts).
        closed_form: optional ``x -> tuple[ClosedTerm, ...]``, the hand-derived A(x).
        closed_form_text: ``((block pair, formula), ...)`` describing that closed form.
        description: one line for ``nqf structure --list``.
        readout: optional :class:`Readout` (phi = R g): the layer as matrix products in training.
    """

    name: str
    unit: Callable[[Any, jax.Array], jax.Array]
    template: Any
    input_shape: tuple[int, ...]
    outputs: int
    options: tuple[tuple[str, Any], ...] = ()
    router: Router | None = None
    closed_form: Callable[[jax.Array], tuple[ClosedTerm, ...]] | None = None
    closed_form_text: tuple[tuple[str, str], ...] = ()
    description: str = ""
    readout: Readout | None = None

    def __post_init__(self):
        leaves = jax.tree_util.tree_leaves(self.template)
        if not leaves:
            raise NqfError(f"architecture {self.name!r}: the parameter template has no leaves")
        for leaf in leaves:
            if not hasattr(leaf, "shape"):
                raise NqfError(
                    f"architecture {self.name!r}: template leaves must be arrays or jax.ShapeDtypeStruct, got "
                    f"{type(leaf).__name__}"
                )
        shape = self.input_shape
        if not isinstance(shape, (tuple, list)) or not all(is_integer(s) and int(s) >= 1 for s in shape):
            raise NqfError(
                f"architecture {self.name!r}: input_shape must be a tuple of positive integers, got {shape!r}"
            )
        if not is_integer(self.outputs) or self.outputs < 1:
            raise NqfError(f"architecture {self.name!r}: outputs must be a positive integer, got {self.outputs!r}")
        self._check_unit_output()
        if self.readout is not None:
            block = self.block(self.readout.block)
            size = block.stop - block.start
            if size % self.outputs:
                raise NqfError(
                    f"architecture {self.name!r}: the readout block {self.readout.block!r} has {size} entries, "
                    f"not a multiple of outputs = {self.outputs}, so it is no (K, r) readout"
                )

    def _check_unit_output(self) -> None:
        """NqfError when the unit returns other than ``outputs`` numbers for one input (traced for
        shapes only: milliseconds). A unit that cannot be traced here fails where it is first used."""
        x = jax.ShapeDtypeStruct(tuple(self.input_shape), jnp.result_type(float))
        try:
            out = jax.eval_shape(self.unit, self.template, x)
        except Exception:  # noqa: BLE001 (the user's function: its own error, where it is called)
            return
        shape = getattr(out, "shape", None)
        if shape is not None and math.prod(shape) != self.outputs:  # what effective_unit reshapes to (K,)
            raise NqfError(
                f"architecture {self.name!r}: the unit returns shape {tuple(shape)} for one input of shape "
                f"{tuple(self.input_shape)}, but outputs = {self.outputs} asks for shape ({self.outputs},)"
            )

    # -- parameter layout -------------------------------------------------------------
    @property
    def blocks(self) -> tuple[Block, ...]:
        """The unit's parameter leaves in flattening order (the documented W layout)."""
        leaves, _ = jax.tree_util.tree_flatten_with_path(self.template)
        out, start = [], 0
        for path, leaf in leaves:
            size = int(math.prod(leaf.shape))
            out.append(Block(leaf_name(path), tuple(leaf.shape), start, start + size))
            start += size
        return tuple(out)

    @property
    def dim(self) -> int:
        """d, the number of parameters of one unit."""
        return self.blocks[-1].stop

    def block(self, name: str) -> Block:
        for b in self.blocks:
            if b.name == name:
                return b
        raise NqfError(f"architecture {self.name!r} has no parameter block {name!r}")

    def unravel(self, w: jax.Array) -> Any:
        """Flat (d,) vector -> the unit's parameter PyTree (template order)."""
        treedef = jax.tree_util.tree_structure(self.template)
        leaves = [w[b.start : b.stop].reshape(b.shape) for b in self.blocks]
        return jax.tree_util.tree_unflatten(treedef, leaves)

    def ravel(self, params: Any) -> jax.Array:
        """The unit's parameter PyTree -> flat (d,) vector (template order)."""
        leaves = jax.tree_util.tree_leaves(params)
        return jnp.concatenate([jnp.ravel(leaf) for leaf in leaves])

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)

    # -- the unit seen by the quadratic form ---------------------------------------------
    def zero_gate_weight(self) -> float:
        """g0, the gate weight of one unit at W = 0 (1 without a router)."""
        if self.router is None:
            return 1.0
        return float(route_at_zero(self.router.route, self.router.units)[0])

    def effective_unit(self, w: jax.Array, x: jax.Array) -> jax.Array:
        """g0 * phi(w, x) for a flat w: the unit's contribution at leading order, (K,)."""
        out = self.unit(self.unravel(w), x)
        return self.zero_gate_weight() * jnp.reshape(out, (self.outputs,))


def route_at_zero(route: Callable, units: int) -> np.ndarray:
    """The gate weights route(0) of ``units`` units (E,), a constant even while tracing (jit/vmap of
    structure_matrix): its jaxpr evaluated in numpy (``host_or_compiled``); run eagerly, a softmax
    would compile several small programs at each call site."""
    zeros = np.zeros((units,), dtype=jnp.result_type(float))
    with jax.ensure_compile_time_eval():
        weights, _ = host_or_compiled(route, zeros)
    return np.asarray(weights)


def check_width(arch: Architecture, n: int) -> None:
    """NqfError unless ``n`` units is a width ``arch`` can take: a positive integer, the number of
    experts of a gate across units."""
    check_count("width", n)
    if arch.router is not None and n != arch.router.units:
        raise NqfError(
            f"{arch.name}: the gate is defined over {arch.router.units} experts, so the width must be "
            f"{arch.router.units} (got {n})"
        )


def _check_weights(arch: Architecture, W) -> None:
    if W.ndim != 2 or W.shape[0] != arch.dim:
        raise NqfError(f"{arch.name}: W must have shape (d={arch.dim}, n), got {tuple(W.shape)}")
    check_width(arch, W.shape[1])


def network(
    arch: Architecture, W: Float[Array | np.ndarray, "d n"], x: Float[ArrayLike, "*input"]
) -> Float[Array, " K"] | Float[Array, "N K"]:
    """The full layer f(x; W) = sum_i g_i phi(w_i, x). W: (d, n); x: one input (input_shape),
    giving (K,), or a batch (N, *input_shape), giving (N, K) (:func:`network_batch`)."""
    _check_weights(arch, W)
    shape, expected = tuple(jnp.shape(x)), tuple(arch.input_shape)
    if shape != expected:
        if shape[1:] == expected and len(shape) == len(expected) + 1:
            return network_batch(arch, W, jnp.asarray(x))
        batch = ", ".join(("N", *map(str, expected)))
        raise NqfError(f"{arch.name}: network takes one input of shape {expected} or a batch ({batch}); got {shape}")
    # mypy reads jax.vmap(f) as f itself; the mapped function is handed JAX arrays (W and x may be numpy)
    params = jax.vmap(arch.unravel, in_axes=1)(W)  # type: ignore[arg-type]
    values = jax.vmap(arch.unit, in_axes=(0, None))(params, x).reshape(W.shape[1], arch.outputs)  # type: ignore[arg-type]
    if arch.router is None:
        return values.sum(axis=0)
    logits = jax.vmap(arch.router.gate_logit, in_axes=(0, None))(params, x).reshape(W.shape[1])  # type: ignore[arg-type]
    return arch.router.route(logits) @ values


def order_parameter(W: Float[Array, "d n"]) -> Float[Array, "d d"]:
    """M = W W^T, (d, d); invariant under W -> W O for orthogonal O."""
    return W @ W.T


def init_weights(
    arch: Architecture, key: jax.Array, n: int, sigma0: float | Float[Array, ""], dtype=None
) -> Float[Array, "d n"]:
    """W0 with i.i.d. N(0, sigma0^2) entries, shape (d, n); E[M(0)] = n sigma0^2 I.

    ``sigma0 * jax.random.normal(key, (d, n), dtype)``; for a concrete key and a Python number
    sigma0 (weakly typed: the product stays in ``dtype``) the bits are drawn on the host and the
    product taken in numpy (one IEEE product, rounded the same), so that only the bits'
    transform compiles (``nqf.core.sampling``)."""
    check_width(arch, n)
    dtype = dtype or jnp.result_type(float)
    normal = standard_normal(key, (arch.dim, n), dtype)
    if isinstance(sigma0, float | int) and not isinstance(sigma0, bool) and not isinstance(normal, jax.core.Tracer):
        return to_device(np.asarray(sigma0, dtype=dtype) * np.asarray(normal))
    return sigma0 * normal


def network_batch(
    arch: Architecture, W: Float[Array | np.ndarray, "d n"], X: Float[Array, " N *input"]
) -> Float[Array, "N K"]:
    """The layer on a batch, (N, K): ``network`` for every sample, or, for a unit that declares
    its :class:`Readout`, f = sum_i R_i g_i(X) as contractions over the units: the features of
    every unit (N, r, n) and one product with the readouts (K, r, n). With a router the
    features are first weighted by the gate, G[N, i] = route(logits(x_N))_i, so the layer is
    f = sum_i G[:, i] R_i g_i(X); the (N, n, K) outputs of every unit are never formed."""
    readout = arch.readout
    if readout is None:
        return jax.vmap(lambda x: network(arch, W, x))(X)
    _check_weights(arch, W)
    n = W.shape[1]
    params = jax.vmap(arch.unravel, in_axes=1)(W)  # type: ignore[arg-type]  # see network
    # units on the last axis: (N, r, n), so the contraction over (r, n) is one (N, r n) matrix product
    features = jax.vmap(readout.features, in_axes=(0, None), out_axes=-1)(params, X)
    if arch.router is not None:
        router = arch.router
        per_sample = jax.vmap(router.gate_logit, in_axes=(None, 0))  # one unit, the batch: (N,)
        logits = jax.vmap(per_sample, in_axes=(0, None), out_axes=-1)(params, X).reshape(X.shape[0], n)
        gates = jax.vmap(router.route)(logits)  # (N, n)
        features = features * gates[:, None, :]
    block = arch.block(readout.block)
    flat = W[block.start : block.stop]
    if readout.transposed:
        R = flat.reshape(-1, arch.outputs, n)  # (r, K, n)
        return jnp.einsum("rkn,Nrn->Nk", R, features)
    R = flat.reshape(arch.outputs, -1, n)  # (K, r, n)
    return jnp.einsum("krn,Nrn->Nk", R, features)


def structure_matrix(arch: Architecture, x: Float[ArrayLike, "*input"]) -> Float[Array, "K d d"]:
    """A(x) by the generic route: (1/2) Hessian of g0 phi at w = 0. Returns (K, d, d)."""
    x = jnp.asarray(x)
    if tuple(x.shape) != tuple(arch.input_shape):  # one input, not a batch (``structure`` takes those)
        raise NqfError(
            f"{arch.name}: structure_matrix takes one input x of shape {tuple(arch.input_shape)}, got {tuple(x.shape)}"
        )
    zero = jnp.zeros((arch.dim,), dtype=jnp.result_type(x.dtype, float))
    return 0.5 * jax.hessian(arch.effective_unit)(zero, x)


def closed_form_structure(arch: Architecture, x: Float[ArrayLike, "*input"]) -> Float[Array, "K d d"]:
    """A(x) from the architecture's hand-derived closed form, (K, d, d)."""
    if arch.closed_form is None:
        raise NqfError(f"{arch.name}: no closed form is known; use structure_matrix (autodiff)")
    return structure(arch, jnp.asarray(x)[None], method="closed").dense()[0]


# the closed form vmapped over samples and compiled (run eagerly, it would compile a small program
# per operation), per computation (arch_key): a new Architecture object of the same unit (every
# get_architecture call) reuses the program
_CLOSED_PROGRAMS = LruCache(32)


def _closed_terms(arch: Architecture, X: jax.Array) -> BlockFactors:
    """Every sample's closed-form terms as block factors, from one program (inlined where it is traced)."""
    closed_form = arch.closed_form
    assert closed_form is not None  # structure checks first
    terms = []
    for term in _CLOSED_PROGRAMS.get(arch_key(arch), lambda: jax.jit(jax.vmap(closed_form)))(X):
        lb, rb = arch.block(term.left_block), arch.block(term.right_block)
        terms.append(BlockTerm(term.left, term.right, (lb.start, lb.stop), (rb.start, rb.stop)))
    return BlockFactors(tuple(terms), arch.dim)


# The coupling pattern of a unit without a closed form: which parameter block pairs its A(x)
# couples, from second derivatives at probe inputs. An entry that vanishes at all of them is taken
# to vanish everywhere: a structural zero of the unit (a gate's weights enter A(x) at third order,
# a hidden layer's weights only through the readout), not an accident of the input. The probes are
# Gaussian draws and positive draws (a unit that branches on the sign of an input sees both).
PATTERN_PROBES = 4  # inputs of each kind
_PATTERNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _unit_of_blocks(arch: Architecture, x: jax.Array) -> Callable[[dict[int, jax.Array]], jax.Array]:
    """g0 phi(., x) as a function of some parameter blocks ({block index: flat values}), zeros in the
    others: the unit is called on its parameter tree (no flat w to slice or scatter into, so the
    host interpreter takes the program, and it holds only those blocks' numbers)."""
    blocks = arch.blocks
    dtype = jnp.result_type(x.dtype, float)
    treedef = jax.tree_util.tree_structure(arch.template)
    scale = arch.zero_gate_weight()

    def unit(values: dict[int, jax.Array]) -> jax.Array:
        leaves = [
            values[k].reshape(b.shape) if k in values else jnp.zeros(b.shape, dtype) for k, b in enumerate(blocks)
        ]
        out = arch.unit(jax.tree_util.tree_unflatten(treedef, leaves), x)
        return scale * jnp.reshape(out, (arch.outputs,))

    return unit


def _pair_block(arch: Architecture, i: int, j: int, x: jax.Array) -> jax.Array:
    """(K, d_i, d_j): the second derivative of g0 phi at w = 0 in blocks i and j (A's block is half of it)."""
    unit = _unit_of_blocks(arch, x)
    dtype = jnp.result_type(x.dtype, float)
    bi, bj = arch.blocks[i], arch.blocks[j]
    zi, zj = jnp.zeros((bi.stop - bi.start,), dtype), jnp.zeros((bj.stop - bj.start,), dtype)
    if i == j:
        return jax.hessian(lambda v: unit({i: v}))(zi)
    # forward mode over the smaller block (its width of JVPs), reverse over the other
    if zj.size <= zi.size:
        return jax.jacfwd(jax.jacrev(lambda u, v: unit({i: u, j: v}), 0), 1)(zi, zj)
    return jnp.swapaxes(jax.jacfwd(jax.jacrev(lambda u, v: unit({i: u, j: v}), 1), 0)(zi, zj), -1, -2)


def _compressed_rows(arch: Architecture, term: DerivedTerm, x: jax.Array, directions: jax.Array) -> jax.Array:
    """(K, R, d_R): row rows[c][r] of Z_c(x) for every output c and rank r, from R JVPs (one per rank)
    along directions[r] = sum_c e_{rows[c][r]}: exact when no output's rows hold another output's
    row of the same rank (``DerivedTerm.compressed``), as for a readout (R = 1: one JVP, not d_L)."""
    unit = _unit_of_blocks(arch, x)
    dtype = jnp.result_type(x.dtype, float)
    lb, rb = arch.blocks[term.left], arch.blocks[term.right]
    zl, zr = jnp.zeros((lb.stop - lb.start,), dtype), jnp.zeros((rb.stop - rb.start,), dtype)
    if term.left == term.right:  # Z = A_LL = H / 2, rows H u_r: the gradient's derivative along u_r

        def along(u):
            return 0.5 * jax.jacrev(lambda v: jax.jvp(lambda w: unit({term.left: w}), (v,), (u,))[1])(zl)
    else:  # Z = 2 A_LR = H_LR

        def along(u):
            return jax.jacrev(lambda v: jax.jvp(lambda w: unit({term.left: w, term.right: v}), (zl,), (u,))[1])(zr)

    return jnp.swapaxes(jax.vmap(along)(directions), 0, 1)


def _probe_inputs(arch: Architecture) -> np.ndarray:
    rng = np.random.default_rng(0)
    shape = (PATTERN_PROBES, *arch.input_shape)
    return np.concatenate([rng.standard_normal(shape), rng.uniform(0.1, 1.0, shape)])


@dataclass(frozen=True)
class DerivedTerm:
    """One coupled block pair of a unit without a closed form (see :func:`derived_layout`).

    ``left``, ``right``: block indices in ``Architecture.blocks`` (the left one carries the rows);
    ``rows``: per output c, the rows of Z_c on the left block that are not zero (padded to the
    longest with -1, a zero factor)."""

    left: int
    right: int
    rows: tuple[tuple[int, ...], ...]

    @property
    def rank(self) -> int:
        return len(self.rows[0])

    @property
    def compressed(self) -> bool:
        """Whether one JVP per rank gives every output's row: no output's rows hold the row another
        output has at the same rank (then a direction summing them over the outputs mixes nothing)."""
        own = [set(chosen) - {-1} for chosen in self.rows]
        return all(
            self.rows[other][r] not in own[c]
            for c in range(len(self.rows))
            for other in range(len(self.rows))
            if other != c
            for r in range(self.rank)
        )


def _magnitudes(arch: Architecture) -> np.ndarray:
    """|A_c(x)| summed over the probe inputs, (K, d, d), numpy."""
    from nqf.core.memory import BYTES, check_memory

    d, K = arch.dim, arch.outputs
    check_memory(
        f"{arch.name}: the coupling pattern of A(x) ({K} x {d} x {d} second derivatives)",
        4.0 * K * d * d * BYTES,
        "a unit this large needs a closed form (see CONTRIBUTING.md, adding an architecture)",
    )

    def magnitude(x):
        return jnp.abs(structure_matrix(arch, x))

    def magnitudes() -> np.ndarray:
        # one small program, interpreted in numpy when that is quicker than compiling (milliseconds)
        total = np.zeros((K, d, d))
        compiled = jax.jit(magnitude)
        for x in _probe_inputs(arch).astype(jnp.result_type(float)):
            part, _ = host_or_compiled(magnitude, x, compiled=compiled, calls=2 * PATTERN_PROBES)
            total += np.asarray(part)
        return total

    if isinstance(jnp.zeros(()), jax.core.Tracer):
        # called under a trace (jit, eval_shape): the pattern is a constant of the unit, computed
        # outside it, in a thread of its own (JAX's trace state is per thread)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(magnitudes).result()
    return magnitudes()


def derived_layout(arch: Architecture) -> tuple[DerivedTerm, ...]:
    """The block factors' layout of a unit without a closed form: one term per coupled block pair.

    Read from the second derivatives of g0 phi at w = 0 at 2 ``PATTERN_PROBES`` inputs (Gaussian
    and positive draws, seed 0): an entry that vanishes at every probe is a structural zero.
    A pair (i, j) with a non-zero entry is a term; its rows, per output, are those of Z_c (the
    pair's block of A_c, doubled off the diagonal) that are not zero, on whichever block needs
    fewer of them (the readout of a perceptron-like unit: one row per output, a rank-one term).
    Computed once per Architecture object (milliseconds: one small program, interpreted in numpy
    when that is quicker; memory K d^2 numbers, estimated first); also under a trace.
    """
    cached = _PATTERNS.get(arch)
    if cached is not None:
        return cached
    total = _magnitudes(arch)
    blocks = arch.blocks
    terms = []
    for i, bi in enumerate(blocks):
        for j in range(i, len(blocks)):
            bj = blocks[j]
            part = total[:, bi.start : bi.stop, bj.start : bj.stop] > 0  # (K, d_i, d_j)
            if not part.any():
                continue
            if i == j:
                part = part | np.swapaxes(part, 1, 2)
            row_sets = [tuple(np.flatnonzero(c.any(axis=1))) for c in part]
            col_sets = [tuple(np.flatnonzero(c.any(axis=0))) for c in part]
            by_rows, by_cols = max(map(len, row_sets)), max(map(len, col_sets))
            if i != j and (by_cols, bj.stop - bj.start) < (by_rows, bi.stop - bi.start):
                left, right, sets, rank = j, i, col_sets, by_cols
            else:
                left, right, sets, rank = i, j, row_sets, by_rows
            rows = tuple(tuple(int(r) for r in chosen) + (-1,) * (rank - len(chosen)) for chosen in sets)
            terms.append(DerivedTerm(left, right, rows))
    layout = tuple(terms)
    _PATTERNS[arch] = layout
    return layout


def coupled_pairs(arch: Architecture) -> tuple[tuple[int, int], ...]:
    """The parameter block pairs (i, j), i <= j in ``arch.blocks`` order, on which A(x) is not zero
    (:func:`derived_layout`)."""
    return tuple(sorted((min(t.left, t.right), max(t.left, t.right)) for t in derived_layout(arch)))


_DERIVED_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _selections(term: DerivedTerm, size: int, dtype) -> np.ndarray:
    """(K, R, d_L): row r of output c picks entry rows[c][r] of the left block (zero for padding)."""
    out = np.zeros((len(term.rows), term.rank, size), dtype=dtype)
    for c, chosen in enumerate(term.rows):
        for r, index in enumerate(chosen):
            if index >= 0:
                out[c, r, index] = 1.0
    return out


def derived_rows(
    arch: Architecture, X: jax.Array
) -> tuple[tuple[np.ndarray, ...], tuple[jax.Array, ...], tuple[tuple[tuple[int, int], tuple[int, int]], ...]]:
    """The block factors of a unit without a closed form, by autodiff on its coupled block pairs:
    (lefts, rights, slices) per term of :func:`derived_layout`, lefts (K, R, d_L) the same for
    every sample (numpy), rights (N, K, R, d_R), slices ((L start, stop), (R start, stop)).

    Term (L, R) carries Z_c(x) = A_c(x)[L, L] on a diagonal pair and 2 A_c(x)[L, R] off it, as
    rows: l_cr = e_{rows[c][r]}, r_cr = that row of Z_c(x), over the rows :func:`derived_layout`
    found not zero. Costs per sample R JVPs of the unit's K-output gradient per term when the
    outputs' rows do not mix (``DerivedTerm.compressed``: one for a readout), else one per entry
    of the pair's smaller block; d for the dense Hessian. Holds K R (d_L + d_R) numbers per term
    and sample against K d^2. A(x) = 0 (the expansion check refuses such a unit): one zero term.
    """
    blocks = arch.blocks
    layout = derived_layout(arch)
    dtype = jnp.result_type(X.dtype, float)
    if not layout:
        size = blocks[0].stop - blocks[0].start
        zero_left = np.zeros((arch.outputs, 1, size), dtype=np.dtype(dtype))
        return (zero_left,), (jnp.zeros((X.shape[0], arch.outputs, 1, size), dtype=dtype),), (((0, size), (0, size)),)
    lefts = tuple(_selections(t, blocks[t.left].stop - blocks[t.left].start, np.dtype(dtype)) for t in layout)

    def per_sample(x, selections):
        out = []
        for term, select in zip(layout, selections, strict=True):
            if term.compressed:  # R JVPs
                out.append(_compressed_rows(arch, term, x, jnp.sum(select, axis=0)))
                continue
            i, j = sorted((term.left, term.right))  # the pair's whole block, then its rows
            H = _pair_block(arch, i, j, x)
            Z = 0.5 * H if i == j else H
            Z = jnp.swapaxes(Z, -1, -2) if term.left != i else Z  # rows on the left block
            out.append(jnp.einsum("krl,klj->krj", select, Z))
        return tuple(out)

    program = _DERIVED_PROGRAMS.get(arch)
    if program is None:  # one program per unit (and input shape), not one per operation when called eagerly
        program = _DERIVED_PROGRAMS[arch] = jax.jit(jax.vmap(per_sample, in_axes=(0, None)))
    rights = program(X, tuple(jnp.asarray(left) for left in lefts))
    slices = tuple(
        ((blocks[t.left].start, blocks[t.left].stop), (blocks[t.right].start, blocks[t.right].stop)) for t in layout
    )
    return lefts, tuple(rights), slices


def _derived_terms(arch: Architecture, X: jax.Array) -> BlockFactors:
    """:func:`derived_rows` as BlockFactors (the left factors repeated for every sample)."""
    lefts, rights, slices = derived_rows(arch, X)
    terms = []
    for left, right, (left_slice, right_slice) in zip(lefts, rights, slices, strict=True):
        every = jnp.broadcast_to(jnp.asarray(left), (X.shape[0], *left.shape))
        terms.append(BlockTerm(every, right, left_slice, right_slice))
    return BlockFactors(tuple(terms), arch.dim)


def structure(
    arch: Architecture, X: Float[ArrayLike, " N *input"], method: str = "auto", batch_size: int = 256
) -> Structure:
    """Structure matrices of the samples X: (N, *input_shape), in structured form.

    method: ``closed`` (block factors from the closed form), ``derived`` (block factors by
    autodiff on the coupled block pairs, ``coupled_pairs``), ``autodiff`` (dense Hessians, the
    reference, built in batches of ``batch_size``, a positive integer), or ``auto`` (closed when
    known, else derived).
    """
    batch_size = check_count("batch_size", batch_size)
    X = jnp.asarray(X)
    if X.shape[1:] != tuple(arch.input_shape):
        raise NqfError(
            f"{arch.name}: inputs must have shape (N, {', '.join(map(str, arch.input_shape))}), got {tuple(X.shape)}"
        )
    if method == "auto":
        method = "closed" if arch.closed_form is not None else "derived"
    if method == "derived":
        return _derived_terms(arch, X)
    if method == "closed":
        if arch.closed_form is None:
            raise NqfError(f"{arch.name}: no closed form is known; use method='autodiff'")
        return _closed_terms(arch, X)
    if method == "autodiff":
        mats = jax.lax.map(lambda x: structure_matrix(arch, x), X, batch_size=min(batch_size, X.shape[0]))
        return DenseStructure(mats)
    raise NqfError(f"unknown structure method {method!r}; choose auto, closed, derived or autodiff")


def quadratic_model(arch: Architecture, M: Float[Array, "d d"], x: Float[ArrayLike, "*input"]) -> Float[Array, " K"]:
    """The quadratic model f_c(x) = <M, A_c(x)> for one input; M: (d, d) (use M = W W^T). Returns (K,)."""
    return structure(arch, jnp.asarray(x)[None]).forms(M)[0]


def describe_blocks(arch: Architecture, A: jax.Array | np.ndarray, atol: float = 0.0) -> list[dict]:
    """Which parameter blocks of A (K x d x d) couple, with the Frobenius norm of each pair.

    Returns a list of {"rows", "cols", "norm"} for pairs (rows <= cols in block order)
    whose norm exceeds atol, in block order.
    """
    A = np.asarray(A)
    out: list[dict[str, Any]] = []
    blocks = arch.blocks
    for i, bi in enumerate(blocks):
        for bj in blocks[i:]:
            norm = float(np.linalg.norm(A[:, bi.start : bi.stop, bj.start : bj.stop]))
            if norm > atol:
                out.append({"rows": bi.name, "cols": bj.name, "norm": norm})
    return out


# -- what determines an architecture's results -----------------------------------------
# Caches of compiled runs and of expansion verdicts are keyed by what the architecture
# computes, not by the names of its functions: two Equinox modules of one class, a --unit
# file edited between runs, or an activation registered under a name another script used,
# differ only in what their functions compute. That is the jaxpr of the unit and of every
# other function the architecture carries, traced for its shapes (milliseconds, once per
# Architecture object). The unit and the router's functions are traced through their JVP,
# so a custom_jvp rule (printed by name only in the primal jaxpr) is part of the key.
_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")  # an object's address, printed in a repr


def _computation(arch: Architecture) -> Callable:
    """One function of (w, x, X, logits) returning everything ``arch``'s functions compute."""
    router, readout = arch.router, arch.readout

    def computation(w, x, X, logits):
        out: dict[str, Any] = {"unit": jax.jvp(lambda v: arch.unit(v, x), (w,), (w,))}
        if arch.closed_form is not None:
            out["closed_form"] = arch.closed_form(x)
        if router is not None:
            out["gate"] = jax.jvp(lambda v: router.gate_logit(v, x), (w,), (w,))
            out["route"] = jax.jvp(router.route, (logits,), (logits,))
        if readout is not None:
            out["features"] = readout.features(w, X)
        return out

    return computation


def _fingerprint(arch: Architecture) -> str | None:
    """SHA-256 of the jaxpr (text, constants, output structure) of every function of ``arch``, or
    None when tracing fails or the text names an object by its address (not stable)."""
    float_dtype = jnp.result_type(float)
    w = jax.tree_util.tree_map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), arch.template)
    x = jax.ShapeDtypeStruct(tuple(arch.input_shape), float_dtype)
    X = jax.ShapeDtypeStruct((2, *arch.input_shape), float_dtype)
    logits = jax.ShapeDtypeStruct((arch.router.units if arch.router is not None else 1,), float_dtype)
    try:
        closed, shapes = jax.make_jaxpr(_computation(arch), return_shape=True)(w, x, X, logits)
    except Exception:  # noqa: BLE001 (a user's function that cannot be traced here: keyed by identity)
        return None
    text = f"{closed}\n{jax.tree_util.tree_structure(shapes)}"
    if _ADDRESS.search(text):  # an object's address: not the same in another process
        return None
    digest = hashlib.sha256(text.encode())
    for const in closed.consts:
        array = np.ascontiguousarray(np.asarray(const))
        digest.update(f"{array.shape}{array.dtype.str}".encode() + array.tobytes())
    return digest.hexdigest()


def fingerprint(arch: Architecture) -> str | None:
    """What ``arch`` computes, as a hex SHA-256 stable across processes (None: not stable, see
    :func:`arch_key`); remembered per Architecture object and float precision."""
    dtype = str(jnp.result_type(float))
    known = _FINGERPRINTS.setdefault(arch, {})
    if dtype not in known:
        known[dtype] = _fingerprint(arch)
    return known[dtype]


def arch_key(arch: Architecture) -> Any:
    """A hashable key for everything that determines ``arch``'s results: name, options, shapes,
    the template's structure, and the :func:`fingerprint` of what its functions compute.

    Equal keys mean equal computations (the traced jaxprs are equal). When the fingerprint is
    not available (a function that cannot be traced for its shapes, a jaxpr or an option that
    prints an object's address) the key holds the Architecture object itself: equal only to
    itself, and never written to disk (:func:`stable_key`).
    """
    # the template by its leaves (names, shapes, dtypes): its treedef may print a module's static
    # fields by address, and what they do is in the jaxprs
    dtypes = [str(leaf.dtype) for leaf in jax.tree_util.tree_leaves(arch.template)]
    template = tuple((b.name, b.shape, dtype) for b, dtype in zip(arch.blocks, dtypes, strict=True))
    options = repr(arch.options)
    computed = fingerprint(arch)
    stable = computed is not None and not _ADDRESS.search(options)
    return (
        arch.name,
        options,
        tuple(arch.input_shape),
        arch.outputs,
        template,
        ("jaxpr", computed) if stable else ("identity", arch),
    )


def stable_key(key: Any) -> bool:
    """Whether an :func:`arch_key` is the same in every process (it holds no object identity)."""
    return key[-1][0] == "jaxpr"
