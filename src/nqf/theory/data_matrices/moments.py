r"""The moments route: the data matrices of a squared loss as sufficient statistics, no N per step.

Every structured A_c(x) couples parameter blocks through terms (``nqf.architectures.structure``):
on the pair of blocks (L, R) of term t, A_c(x) carries Z_t,c(x)/2 = (1/2) sum_r l_cr r_cr^T
(d_L x d_R) and its transpose. So the quadratic model is linear in the packed block entries
m = (vec M_LR over terms) in R^p, p = sum_t d_L d_R, with per-sample features
z_c(x) = (vec Z_t,c(x) over terms):

    f_c(x) = <M, A_c(x)> = z_c(x) . m.

For the squared loss l = (1/2) |f - y|^2 everything the M-flow needs is then

    S = E[sum_c z_c z_c^T]  (p, p),   u = E[sum_c y_c z_c]  (p,),   L0 = (1/2) E|y|^2,
    C = unpack(u),   K[M] = unpack(S m),   G(M) = unpack(S m - u),
    L(M) = L_res + (1/2) (m - m_hat)^T S (m - m_hat),   S m_hat = u,   L_res = L(m_hat),

where unpack puts U_t/2 on block (L, R) and its transpose on (R, L). Writing the loss
and G through delta = m - m_hat keeps them accurate near the optimum (no cancellation of
L0 against u . m). A step costs O(p^2 + d^2 r) (r the factor's columns) and no sample.
S is built once in chunks of samples, O(N K p^2) in general; when a term's left
factors l_cr do not depend on x (the readout e_c of a perceptron, the identity of
linear attention) only the second moments of the right factors are accumulated,
O(N K R^2 d_R^2). Memory: the chunk's factors, S and u; never all samples' factors.

Beyond FACTORED_FROM entries, S of a single rank-one term whose left factors are shared and mutually
orthogonal (the perceptron: l_c = sigma'(0) e_c, r_c = x) is kept factored,
S = sum_c (l_c l_c^T) (x) E[r_c r_c^T] (:class:`FactoredSecond`): at D = 784 inputs and K = 10
outputs p = 7840, and S m costs 2 K D^2 ~ 1.3e7 flops on a 784 x 784 block instead of 2 p^2 ~ 1.2e8
on 490 MB (issue 24). The maps then take G(F F^T) F from the coupled blocks alone
(:meth:`MomentDataMatrices.gradient_times`).

:func:`choose_route` compares the two routes' arithmetic per step and picks one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture, derived_rows, structure
from nqf.architectures.structure import BlockFactors, DenseStructure
from nqf.core.errors import NqfError
from nqf.core.host_eval import host_or_compiled, traced
from nqf.core.names import ROUTES as ROUTES
from nqf.core.programs import bucket_length, to_device
from nqf.theory.data_matrices.protocol import AbstractDataMatrices

# S is p x p: the moments route is offered only while S stays this small (entries).
MAX_MOMENT_ENTRIES = 2**24  # 128 MiB in float64
# From this many entries of S (8 MiB in float64, beyond the CPU's caches) a structure that allows it
# keeps S factored (:class:`FactoredSecond`): a dense S is then read from memory at every step.
# Measured (E4's trained setting: the tanh perceptron on 64 whitened inputs and 64 outputs, p = 4096,
# 64 samples, 2164 steps, 2-core Intel Xeon): the first predict 37 s with S dense (8.5 s to build S,
# 26 s of M-flow: 12 ms a step for S's 128 MiB), 14 s on the per-sample route, 4.1-5.4 s with S
# factored (0.5 s to build it, 1.8 s of M-flow); the same switch-on steps, the losses to 4e-15.
FACTORED_FROM = 2**20
# The per-sample route holds every sample's structure up to this many numbers (512 MiB in
# float64); beyond, it rebuilds the structure chunk by chunk (``nqf.theory.data_matrices.chunked``).
MAX_HELD_STRUCTURE = 2**26
# The residual loss is read from the moments (no pass over the samples) when it is at least this
# fraction of the targets' energy (``_with_residual``).
RESIDUAL_FROM_MOMENTS = 1e-3
# Samples per chunk when accumulating moments (the chunk's factors are the working memory).
DEFAULT_CHUNK = 4096
# A factored S (:class:`FactoredSecond`) holds K blocks of d_R x d_R: at most this many numbers.
MAX_FACTORED_ENTRIES = 2**26  # 512 MiB in float64


@dataclass(frozen=True)
class TermLayout:
    """Where term t's packed entries live: block slices and its offset in m."""

    left: tuple[int, int]
    right: tuple[int, int]
    offset: int

    @property
    def rows(self) -> slice:
        return slice(*self.left)

    @property
    def cols(self) -> slice:
        return slice(*self.right)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.left[1] - self.left[0], self.right[1] - self.right[0])

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def half_block(self, v):
        """V_t/2 (d_L, d_R): the term's entries of the packed v (p,), halved (``unpack``)."""
        return 0.5 * v[self.offset : self.offset + self.size].reshape(self.shape)


def _added(out, index, V):
    """``out`` with V added at ``index``: in place for a numpy array, a new JAX array otherwise."""
    if isinstance(out, np.ndarray):
        out[index] += V
        return out
    return out.at[index].add(V)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class FactoredSecond:
    r"""S = sum_k (l_k l_k^T) (x) Sigma_k without the p x p matrix (p = d_L d_R).

    For one term of rank one whose left factors l_k (k over the K outputs) are the same for every
    sample, S[(a, b), (c, e)] = sum_k l_k[a] l_k[c] Sigma_k[b, e] with Sigma_k = E[r_k r_k^T], so

        S m = vec(sum_k l_k (Sigma_k (m^T l_k))^T)    (m as d_L x d_R),

    2 K d_R^2 + 4 K d_L d_R flops instead of 2 p^2, and K d_R^2 numbers (one block when the right
    factors do not depend on k, as x for the perceptron) instead of p^2. Acts as a symmetric
    (p, p) matrix under ``@`` from either side, on JAX or numpy arrays (whichever it holds).

    Attributes:
        lefts: (K, d_L) the shared left factors.  blocks: (K or 1, d_R, d_R) the Sigma_k.
    """

    lefts: Any
    blocks: Any

    __array_ufunc__ = None  # numpy: ``Z @ S`` defers to __rmatmul__

    @property
    def shape(self) -> tuple[int, int]:
        p = self.lefts.shape[1] * self.blocks.shape[-1]
        return (p, p)

    @property
    def dtype(self):
        return self.blocks.dtype

    ndim = 2

    def _xp(self):
        return np if isinstance(self.blocks, np.ndarray) else jnp

    def __matmul__(self, v):
        """S v for v (p,) or (p, m)."""
        xp = self._xp()
        dl, dr = self.lefts.shape[1], self.blocks.shape[-1]
        V = v.reshape(dl, dr, *v.shape[1:])
        t = xp.einsum("ka,ab...->kb...", self.lefts, V)  # m^T l_k: (K, d_R, ...)
        if self.blocks.shape[0] == 1:
            U = xp.einsum("be,ke...->kb...", self.blocks[0], t)
        else:
            U = xp.einsum("kbe,ke...->kb...", self.blocks, t)
        return xp.einsum("ka,kb...->ab...", self.lefts, U).reshape(v.shape)

    def __rmatmul__(self, Z):
        """Z S for Z (m, p): (S Z^T)^T, S being symmetric."""
        return (self @ Z.T).T

    def dense(self):
        """The explicit (p, p) matrix (tests and small inspections only)."""
        xp = self._xp()
        K = self.lefts.shape[0]
        blocks = xp.broadcast_to(self.blocks, (K, *self.blocks.shape[1:]))
        p = self.shape[0]
        return xp.einsum("ka,kc,kbe->abce", self.lefts, self.lefts, blocks).reshape(p, p)

    def on_host(self) -> FactoredSecond:
        return FactoredSecond(np.asarray(self.lefts), np.asarray(self.blocks))


@dataclass(frozen=True)
class _PackedForms(AbstractDataMatrices):
    """What the moments route computes from S, u, m_hat and L_res through ``pack`` and ``unpack``
    (module docstring): the same fields and formulas for :class:`MomentDataMatrices` (JAX arrays)
    and :class:`HostMoments` (numpy arrays); ``_xp`` is the array module of each.

    Attributes:
        second: S (p, p), or a :class:`FactoredSecond` beyond FACTORED_FROM entries.  cross: u (p,).
        optimum: m_hat (p,) with S m_hat = u.
        residual: L_res, the loss at m_hat (>= 0).  target_energy: L0 = (1/2) E|y|^2.
        layout: the terms' block slices (static).  dimension: d (``dim``).  outputs: K.  samples: N.
    """

    second: Any
    cross: Any
    optimum: Any
    residual: Any
    target_energy: Any
    layout: tuple[TermLayout, ...] = field(metadata=dict(static=True))
    dimension: int = field(metadata=dict(static=True))
    outputs: int = field(metadata=dict(static=True))
    samples: int = field(metadata=dict(static=True))
    loss_type: str = field(default="squared", metadata=dict(static=True))

    _xp: ClassVar[Any]

    def pack(self, M):
        """m = (vec M[L, R] over terms), (p,)."""
        return self._xp.concatenate([M[t.rows, t.cols].ravel() for t in self.layout])

    def unpack(self, v):
        """sum_t (V_t/2 on block (L, R) + V_t^T/2 on (R, L)), (d, d) symmetric."""
        out = self._xp.zeros((self.dim, self.dim), dtype=v.dtype)
        for t in self.layout:
            V = t.half_block(v)
            out = _added(out, (t.rows, t.cols), V)
            out = _added(out, (t.cols, t.rows), V.T)
        return out

    @property
    def dim(self) -> int:
        """d, the size of M."""
        return self.dimension

    @property
    def outputs_count(self) -> int:
        return self.outputs

    @property
    def num_samples(self) -> int:
        return self.samples

    @property
    def dtype(self):
        return self.second.dtype

    @property
    def size(self) -> int:
        """p, the number of packed block entries."""
        return int(self.second.shape[0])

    def _delta(self, M):
        return self.pack(M) - self.optimum

    def loss(self, M):
        """L(M) = L_res + (1/2) delta^T S delta, delta = m - m_hat."""
        delta = self._delta(M)
        return self.residual + 0.5 * delta @ (self.second @ delta)

    def gradient_matrix(self, M):
        """G(M) = K[M] - C = unpack(S delta)."""
        return self.unpack(self.second @ self._delta(M))

    def loss_and_gradient(self, M):
        delta = self._delta(M)
        Sd = self.second @ delta
        return self.residual + 0.5 * delta @ Sd, self.unpack(Sd)

    @property
    def C(self):
        """C = E[sum_c y_c A_c(x)] = unpack(u), (d, d)."""
        return self.unpack(self.cross)

    def K_apply(self, M):
        """K[M] = unpack(S pack(M)), (d, d)."""
        return self.unpack(self.second @ self.pack(M))


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class MomentDataMatrices(_PackedForms):
    """Squared-loss data matrices from moments (module docstring); the interface of ``DataMatrices``
    for everything the M-flow, the mode basis and the stability check use (no minibatches). The
    fields are :class:`_PackedForms`', JAX arrays, and

    Attributes:
        evaluated: how the per-sample statistics were computed, ``numpy`` (the chunk functions'
            jaxprs interpreted, nothing compiled: ``nqf.core.host_eval``) or ``compiled``.
    """

    evaluated: str = field(default="compiled", metadata=dict(static=True))

    _xp: ClassVar[Any] = jnp

    def _pack_factor(self, F: jax.Array) -> jax.Array:
        """pack(F F^T) from the terms' blocks F_L F_R^T alone (2 p r flops): (p,)."""
        return jnp.concatenate([(F[t.rows] @ F[t.cols].T).ravel() for t in self.layout])

    def loss_of_factor(self, F: jax.Array) -> jax.Array:
        """L(F F^T) without the d x d product."""
        delta = self._pack_factor(F) - self.optimum
        return self.residual + 0.5 * delta @ (self.second @ delta)

    def gradient_times(self, F: jax.Array) -> jax.Array:
        """G(F F^T) F (d, r) from the terms' blocks alone: M's blocks F_L F_R^T, then G's blocks
        (unpack) applied to F's rows, 4 p r flops a term instead of 4 d^2 r for F F^T and G F."""
        v = self.second @ (self._pack_factor(F) - self.optimum)
        out = jnp.zeros_like(F)
        for t in self.layout:
            V = t.half_block(v)
            out = out.at[t.rows].add(V @ F[t.cols])
            out = out.at[t.cols].add(V.T @ F[t.rows])
        return out

    def on_host(self) -> HostMoments:
        """The same data matrices as numpy arrays, computed without compiling (:class:`HostMoments`)."""
        return HostMoments(
            second=self.second.on_host() if isinstance(self.second, FactoredSecond) else np.asarray(self.second),
            cross=np.asarray(self.cross),
            optimum=np.asarray(self.optimum),
            residual=np.asarray(self.residual),
            target_energy=np.asarray(self.target_energy),
            layout=self.layout,
            dimension=self.dim,
            outputs=self.outputs,
            samples=self.samples,
        )


@dataclass(frozen=True)
class HostMoments(_PackedForms):
    """:class:`MomentDataMatrices` in numpy: the same S, u, m_hat, L_res and the same formulas
    (``_PackedForms``, in the same order of operations), evaluated without compiling anything (a
    first prediction on a small problem spends seconds compiling programs whose arithmetic takes
    microseconds; ``nqf.theory.flow.host``). ``tests/test_host_path.py`` checks the two against
    each other on every built-in architecture. Arrays are numpy arrays of the working dtype.
    """

    _xp: ClassVar[Any] = np


# -- building the moments ----------------------------------------------------------------


def _layout_of(s) -> tuple[TermLayout, ...]:
    if isinstance(s, DenseStructure):
        return (TermLayout((0, s.dim), (0, s.dim), 0),)
    out, offset = [], 0
    for t in s.terms:
        lay = TermLayout(tuple(t.left_slice), tuple(t.right_slice), offset)
        out.append(lay)
        offset += lay.size
    return tuple(out)


def _features(s) -> jax.Array:
    """z_c(x_n) for a chunk: (B, K, p)."""
    if isinstance(s, DenseStructure):
        B, K, d, _ = s.matrices.shape
        return s.matrices.reshape(B, K, d * d)
    parts = [
        jnp.einsum("bkri,bkrj->bkij", t.left, t.right).reshape(t.left.shape[0], t.left.shape[1], -1) for t in s.terms
    ]
    return jnp.concatenate(parts, axis=2)


def _forms_packed(s, m: jax.Array) -> jax.Array:
    """z_c(x_n) . m for a chunk, (B, K), without building the (B, K, p) features."""
    if isinstance(s, DenseStructure):
        d = s.dim
        return jnp.einsum("bkij,ij->bk", s.matrices, m.reshape(d, d))
    out: jax.Array | float = 0.0  # an array once the first term is added
    offset = 0
    for t in s.terms:
        dl, dr = t.left.shape[-1], t.right.shape[-1]
        block = m[offset : offset + dl * dr].reshape(dl, dr)
        out = out + jnp.einsum("bkrj,bkrj->bk", jnp.einsum("bkri,ij->bkrj", t.left, block), t.right)
        offset += dl * dr
    return jnp.asarray(out)


def _chunk_size(layout, outputs: int, ranks: int, requested: int) -> int:
    """Samples per chunk so that a chunk's features (B K p, or B K R (d_L + d_R)) stay near 2^22 numbers."""
    p = sum(t.size for t in layout)
    per_sample = outputs * max(p, ranks * max(sum(t.shape) for t in layout))
    return max(16, min(int(requested), (1 << 22) // max(per_sample, 1)))


@functools.lru_cache(maxsize=16)
def _chunk_functions(arch: Architecture):
    """Per-chunk statistics of one architecture, (shared, general, residual) (cached per Architecture object).

    Each takes a chunk X (B, *input_shape), targets Y (B, K) and weights w (B,) (0 for the
    padding of the last chunk), so every chunk has one shape: traced once, then interpreted in
    numpy for small problems or compiled once (:func:`_run_chunk`).
    """

    def shared(X, Y, w):
        # called only for block factors (a dense structure has no shared lefts)
        if arch.closed_form is None:  # derived factors: their lefts are constants (nothing to compare)
            constant, raw, _ = derived_rows(arch, X)
            lefts: Any = (tuple(jnp.asarray(left) for left in constant), jnp.asarray(True))
        else:  # the first sample's left factors (K, R, d_L), and whether every sample has them
            s = cast(BlockFactors, structure(arch, X))
            raw = tuple(t.right for t in s.terms)
            same = jnp.all(jnp.stack([jnp.all(t.left == t.left[:1]) for t in s.terms]))
            lefts = (tuple(t.left[0] for t in s.terms), same)
        rights = [right * w[:, None, None, None] for right in raw]
        cross = tuple(jnp.einsum("bk,bkrj->krj", Y, r) for r in rights)
        pairs = tuple(
            tuple(jnp.einsum("bkri,bksj->krsij", rights[i], raw[j]) for j in range(i + 1)) for i in range(len(rights))
        )
        return pairs, cross, lefts

    def general(X, Y, w):
        Z = _features(structure(arch, X)) * w[:, None, None]
        return jnp.einsum("bkp,bkq->pq", Z, Z), jnp.einsum("bk,bkp->p", Y, Z)

    def residual(X, Y, w, m_hat):
        F = _forms_packed(structure(arch, X), m_hat)
        return 0.5 * jnp.sum(w[:, None] * (F - Y) ** 2)

    return shared, general, residual


@functools.lru_cache(maxsize=16)
def _compiled_chunk_functions(arch: Architecture):
    """:func:`_chunk_functions` jitted (each compiles once per chunk shape)."""
    return tuple(jax.jit(fn) for fn in _chunk_functions(arch))


def _run_chunk(arch: Architecture, which: int, args: tuple, calls: int) -> tuple[Any, bool]:
    """(outputs as numpy arrays, whether they were computed in numpy) of chunk function ``which``
    (0 shared, 1 general, 2 residual) on ``args``: interpreted on the host when ``calls`` calls
    are small work (``nqf.core.host_eval``: tracing costs milliseconds, compiling 0.1-0.3 s),
    else compiled."""
    fn, compiled = _chunk_functions(arch)[which], _compiled_chunk_functions(arch)[which]
    return host_or_compiled(fn, *args, compiled=compiled, calls=calls)


def _balanced_on_host(arch: Architecture, X, Y, dtype, chunk: int) -> int:
    """The chunk size: ``chunk``, or the N samples split evenly into as many chunks (no padding)
    when that makes the chunk programs small enough for the host interpreter and ``chunk`` does
    not (padding only buys the reuse of a compiled program; one interpreted in numpy is not
    compiled). The traces are the ones :func:`_run_chunk` reuses."""
    shared, N = _chunk_functions(arch)[0], X.shape[0]
    calls = _chunk_count(N, chunk)
    balanced = -(-N // calls)
    if balanced == chunk or traced(shared, *next(_chunks(X, Y, chunk, dtype))).fits(calls):
        return chunk
    return balanced if traced(shared, *next(_chunks(X, Y, balanced, dtype))).fits(calls) else chunk


def _chunk_count(N: int, chunk: int) -> int:
    return -(-N // chunk)


def _chunks(X, Y, chunk: int, dtype):
    """(X chunk, Y chunk, weights) of equal shapes, numpy arrays of ``dtype``; the last chunk padded
    with its first row, weight 0."""
    N = X.shape[0]
    for start in range(0, N, chunk):
        stop = min(start + chunk, N)
        Xc, Yc = np.asarray(X[start:stop]), np.asarray(Y[start:stop])
        w = np.ones(stop - start)
        if stop - start < chunk:
            pad = chunk - (stop - start)
            Xc = np.concatenate([Xc, np.repeat(Xc[:1], pad, axis=0)])
            Yc = np.concatenate([Yc, np.repeat(Yc[:1], pad, axis=0)])
            w = np.concatenate([w, np.zeros(pad)])
        yield np.asarray(Xc, dtype=dtype), np.asarray(Yc, dtype=dtype), np.asarray(w, dtype=dtype)


def moment_data_matrices(
    arch: Architecture, X: np.ndarray, targets: np.ndarray, dtype, chunk: int = DEFAULT_CHUNK
) -> MomentDataMatrices:
    """Moments of checked samples X (N, *input_shape) and targets (N, K) (see ``data_matrices``).

    Works through the samples ``chunk`` at a time: only one chunk's structure is ever held.
    """
    N = X.shape[0]
    shape = jax.eval_shape(lambda x: structure(arch, x), jax.ShapeDtypeStruct((1, *X.shape[1:]), dtype))
    layout = _layout_of(shape)
    ranks = 1 if isinstance(shape, DenseStructure) else max(t.left.shape[2] for t in shape.terms)
    # a data set smaller than a chunk is padded (zero weights) to a power of two: another data
    # set of a size in the same bucket reuses the compiled chunk programs (persistent cache);
    # unless even chunks without padding run in numpy where padded ones would be compiled
    chunk = max(1, min(_chunk_size(layout, arch.outputs, ranks, chunk), bucket_length(N, floor=16)))
    if isinstance(shape, BlockFactors):
        chunk = _balanced_on_host(arch, X, targets, dtype, chunk)
    p = sum(t.size for t in layout)
    factored = None
    if p * p > FACTORED_FROM and _factorable(shape) is not None:
        factored = _factored_moments(arch, X, targets, dtype, layout, shape, chunk)
    if factored is not None:
        return factored
    if p * p > MAX_MOMENT_ENTRIES:
        raise NqfError(
            f"{arch.name}: the moments route needs a {p} x {p} matrix, and this structure cannot be kept factored "
            "(one rank-one term whose left factors every sample shares, mutually orthogonal); use the per-sample route"
        )
    Y = np.asarray(targets)
    calls = _chunk_count(N, chunk)
    host = []  # whether each chunk call ran in numpy
    energy = 0.5 * float(np.sum(np.square(Y, dtype=np.float64))) / N
    # The sums and the assembly run in numpy, in the working dtype: as eager JAX every slice,
    # einsum and scatter of a new shape compiles a program of its own (20 of them on the staircase).
    S = u = None
    if isinstance(shape, BlockFactors):  # left factors shared by every sample? (the first chunk's)
        lefts, pairs, cross = None, None, None
        for Xc, Yc, w in _chunks(X, Y, chunk, dtype):
            (p_c, c_c, (l_c, same)), on_host = _run_chunk(arch, 0, (Xc, Yc, w), calls)
            host.append(on_host)
            lefts = l_c if lefts is None else lefts
            if not (bool(same) and all(np.array_equal(a, b) for a, b in zip(l_c, lefts, strict=True))):
                pairs = None  # a left factor depends on the sample after all: general features
                break
            pairs = p_c if pairs is None else jax.tree_util.tree_map(np.add, pairs, p_c)
            cross = c_c if cross is None else jax.tree_util.tree_map(np.add, cross, c_c)
        if pairs is not None:
            S, u = _assemble_shared(layout, lefts, pairs, cross, p, dtype)
    if S is None:
        S = np.zeros((p, p), dtype=dtype)
        u = np.zeros((p,), dtype=dtype)
        for Xc, Yc, w in _chunks(X, Y, chunk, dtype):
            (S_c, u_c), on_host = _run_chunk(arch, 1, (Xc, Yc, w), calls)
            host.append(on_host)
            S, u = S + S_c, u + u_c
    return _finish(X, Y, dtype, chunk, layout, S / N, u / N, energy, arch, all(host))


def _assemble_shared(layout, lefts, pairs, cross_parts, p, dtype):
    """S and u (not yet divided by N), numpy (p, p) and (p,), from shared left factors and
    right-factor moments (numpy arrays)."""
    S = np.zeros((p, p), dtype=dtype)
    u = np.zeros((p,), dtype=dtype)
    for i, ti in enumerate(layout):
        u[ti.offset : ti.offset + ti.size] = np.einsum("kri,krj->ij", lefts[i], cross_parts[i]).ravel()
        for j in range(i + 1):
            tj = layout[j]
            # S[(a, b), (c, e)] = sum_{k, r, s} l_i[k, r, a] l_j[k, s, c] E[r_i[k, r, b] r_j[k, s, e]]
            block = np.einsum("kra,ksc,krsbe->abce", lefts[i], lefts[j], pairs[i][j], optimize=True)
            block = block.reshape(ti.size, tj.size)
            S[ti.offset : ti.offset + ti.size, tj.offset : tj.offset + tj.size] = block
            if j != i:
                S[tj.offset : tj.offset + tj.size, ti.offset : ti.offset + ti.size] = block.T
    return S, u


def _finish(X, Y, dtype, chunk, layout, S, u, energy, arch, host: bool) -> MomentDataMatrices:
    """m_hat = S^+ u and the residual loss at it (``_with_residual``)."""
    S = 0.5 * (S + S.T)  # numpy (p, p), in the working dtype
    values, vectors = np.linalg.eigh(np.asarray(S, dtype=np.float64))
    keep = values > 1e-14 * max(float(values[-1]), 1e-300)
    coef = (vectors[:, keep].T @ np.asarray(u, dtype=np.float64)) / values[keep]
    m_hat = jnp.asarray(vectors[:, keep] @ coef, dtype=dtype)
    second = jnp.asarray(S, dtype=dtype)
    cross = jnp.asarray(u, dtype=dtype)
    return _with_residual(X, Y, dtype, chunk, layout, second, cross, m_hat, energy, arch, host)


def _with_residual(X, Y, dtype, chunk, layout, second, cross, m_hat, energy, arch, host: bool) -> MomentDataMatrices:
    """The moments (S, u, m_hat) with the residual loss at m_hat, L_res = (1/2) E|y - z . m_hat|^2:
    from the moments when that is accurate (float64, L_res >= RESIDUAL_FROM_MOMENTS L0), else by one
    more pass over the samples, exact even when the data are realisable (L_res ~ 0).
    ``host``: whether the moments were computed in numpy (so far)."""
    N = X.shape[0]
    calls = _chunk_count(N, chunk)
    m = np.asarray(m_hat, dtype=np.float64)
    # S m_hat = u, so L_res = L0 - u . m_hat / 2 from the moments; its rounding, ~eps L0, is
    # relative eps L0 / L_res: below 1e-12 when L_res >= RESIDUAL_FROM_MOMENTS L0 in float64
    # (classification data: L_res ~ L0 / 10). Else (realisable data, float32) the pass.
    from_moments = energy - 0.5 * float(np.asarray(cross, dtype=np.float64) @ m)
    if np.dtype(dtype) == np.float64 and from_moments >= RESIDUAL_FROM_MOMENTS * energy > 0:
        total = from_moments * N
    else:
        total = 0.0
        for Xc, Yc, w in _chunks(X, Y, chunk, dtype):
            part, on_host = _run_chunk(arch, 2, (Xc, Yc, w, np.asarray(m_hat)), calls)
            total += float(part)
            host = host and on_host
    return MomentDataMatrices(
        second=second,
        cross=cross,
        optimum=m_hat,
        residual=to_device(np.asarray(total / N, dtype=dtype)),  # jnp.asarray of a float compiles a conversion
        target_energy=to_device(np.asarray(energy, dtype=dtype)),
        layout=layout,
        dimension=arch.dim,
        outputs=arch.outputs,
        samples=N,
        evaluated="numpy" if host else "compiled",
    )


# -- S factored: one rank-one term with shared, orthogonal left factors ------------------


def _factorable(shape) -> tuple[int, int, int] | None:
    """(K, d_L, d_R) when the structure (or its eval_shape) has the form :class:`FactoredSecond`
    needs (block factors, one term, rank one, K d_R^2 <= MAX_FACTORED_ENTRIES); else None. That the
    left factors are shared and orthogonal is checked on the data (:func:`_factored_moments`)."""
    if not isinstance(shape, BlockFactors) or len(shape.terms) != 1:
        return None
    t = shape.terms[0]
    _, K, R, dl = t.left.shape
    dr = t.right.shape[3]
    if R != 1 or K * dr * dr > MAX_FACTORED_ENTRIES:
        return None
    return K, dl, dr


def _orthogonal_rows(lefts: np.ndarray) -> bool:
    """Whether the rows l_k of (K, d_L) are nonzero and mutually orthogonal (to 1e-12 relative)."""
    gram = np.asarray(lefts, dtype=np.float64) @ np.asarray(lefts, dtype=np.float64).T
    norms = np.diag(gram)
    if norms.size == 0 or norms.min() <= 0:
        return False
    return bool(np.all(np.abs(gram - np.diag(norms)) <= 1e-12 * norms.max()))


@functools.lru_cache(maxsize=16)
def _factored_functions(arch: Architecture):
    """Jitted per-chunk statistics for :class:`FactoredSecond`: (Sigma (1 or K, d_R, d_R), the cross
    moments E[y_k r_k] (K, d_R), the first sample's left factors (K, d_L), whether every sample has
    them, whether r_k is the same for every k). ``one`` accumulates Sigma of r_0 alone (right factors
    independent of k), ``each`` one Sigma_k per output."""

    def moments(X, Y, w, per_output):
        t = cast(BlockFactors, structure(arch, X)).terms[0]
        right = t.right[:, :, 0, :]  # (B, K, d_R)
        weighted = right * w[:, None, None]
        cross = jnp.einsum("bk,bkj->kj", Y, weighted)
        if per_output:
            sigma = jnp.einsum("bki,bkj->kij", weighted, right)
        else:
            sigma = jnp.einsum("bi,bj->ij", weighted[:, 0], right[:, 0])[None]
        same_left = jnp.all(t.left == t.left[:1])
        same_right = jnp.all(right == right[:, :1])
        return sigma, cross, t.left[0, :, 0, :], same_left, same_right

    return (
        jax.jit(functools.partial(moments, per_output=False)),
        jax.jit(functools.partial(moments, per_output=True)),
    )


def _factored_moments(arch, X, Y, dtype, layout, shape, requested: int) -> MomentDataMatrices | None:
    """The moments of a structure that :func:`_factorable` accepts, S kept as a FactoredSecond; None
    when the samples' left factors are not shared and orthogonal (S cannot be kept factored).

    Reads the samples in chunks of about 2^22 numbers of factors (K (d_L + d_R) per sample); one
    pass for Sigma and u (one Sigma when the right factors do not depend on the output, else a second
    pass for K of them), one for the residual. m_hat = S^+ u from the eigenpairs of the Sigma_k, with
    the dense route's cut (eigenvalues of S above 1e-14 of the largest).
    """
    K, dl, dr = cast(tuple[int, int, int], _factorable(shape))
    N = X.shape[0]
    chunk = max(16, min(int(requested), (1 << 22) // max(K * (dl + dr), 1)))
    chunk = max(1, min(chunk, bucket_length(N, floor=16)))
    Y = np.asarray(Y)
    energy = 0.5 * float(np.sum(np.square(Y, dtype=np.float64))) / N
    one, each = _factored_functions(arch)

    def accumulate(fn):
        """(lefts, Sigma, cross, same_right); lefts None when the left factors differ between samples."""
        lefts = sigma = cross = None
        same_right = True
        for Xc, Yc, w in _chunks(X, Y, chunk, dtype):
            sg, cr, lc, same_l, same_r = (np.asarray(a) for a in fn(Xc, Yc, w))
            lefts = lc if lefts is None else lefts
            if not (bool(same_l) and np.array_equal(lc, lefts)):
                return None, None, None, False
            same_right = same_right and bool(same_r)
            if not same_right and fn is one:
                return lefts, None, None, False
            sigma = sg if sigma is None else sigma + sg
            cross = cr if cross is None else cross + cr
        return lefts, sigma, cross, same_right

    lefts, sigma, cross, same_right = accumulate(one)
    if lefts is not None and not same_right:
        lefts, sigma, cross, _ = accumulate(each)
    if lefts is None or not _orthogonal_rows(lefts):
        return None
    sigma = sigma / N
    sigma = 0.5 * (sigma + np.swapaxes(sigma, 1, 2))
    U = np.einsum("ka,kb->ab", lefts, cross / N)  # u as d_L x d_R
    # S = sum_k (q_k q_k^T) (x) (n_k Sigma_k), q_k = l_k / |l_k| orthonormal: its eigenpairs are
    # (n_k lambda, q_k (x) v) for the eigenpairs (lambda, v) of Sigma_k
    L64 = np.asarray(lefts, dtype=np.float64)
    norms = np.einsum("ka,ka->k", L64, L64)
    q = L64 / np.sqrt(norms)[:, None]
    values, vectors = np.linalg.eigh(np.asarray(sigma, dtype=np.float64))
    pick = np.zeros(K, dtype=int) if sigma.shape[0] == 1 else np.arange(K)
    top = max(float(np.max(norms[:, None] * values[pick])), 1e-300)
    U64 = np.asarray(U, dtype=np.float64)
    M_hat = np.zeros((dl, dr))
    for k in range(K):
        lam = norms[k] * values[pick[k]]
        keep = lam > 1e-14 * top
        V = vectors[pick[k]][:, keep]
        M_hat += np.outer(q[k], V @ ((V.T @ (U64.T @ q[k])) / lam[keep]))
    m_hat = jnp.asarray(M_hat.ravel(), dtype=dtype)
    second = FactoredSecond(jnp.asarray(lefts, dtype=dtype), jnp.asarray(sigma, dtype=dtype))
    cross = jnp.asarray(np.asarray(U, dtype=dtype).ravel())
    return _with_residual(X, Y, dtype, chunk, layout, second, cross, m_hat, energy, arch, False)


def _factored_probe(arch: Architecture, dtype) -> tuple[int, int, int] | None:
    """(K, d_L, d_R) when S of ``arch`` can be kept factored: :func:`_factorable`, and the left
    factors of two random inputs equal and orthogonal (the samples are checked when S is built)."""
    x = jax.ShapeDtypeStruct((1, *arch.input_shape), dtype)
    dims = _factorable(jax.eval_shape(lambda z: structure(arch, z), x))
    if dims is None:
        return None
    rng = np.random.default_rng(0)
    probes = [jnp.asarray(rng.standard_normal((1, *arch.input_shape)), dtype=dtype) for _ in range(2)]
    lefts = [np.asarray(cast(BlockFactors, structure(arch, z)).terms[0].left[0, :, 0, :]) for z in probes]
    if not (np.array_equal(lefts[0], lefts[1]) and _orthogonal_rows(lefts[0])):
        return None
    return dims


# -- choosing the route ------------------------------------------------------------------


@dataclass(frozen=True)
class RouteChoice:
    """Which data route the M-flow uses and why.

    Attributes:
        route: ``moments`` or ``samples``.
        reason: one sentence for a reader.
        packed_size: p (entries of the coupled blocks), or None when unknown.
        moments_flops, samples_flops: the arithmetic of one step on each route (estimates).
        chunk: for the per-sample route, the samples per chunk when every sample's structure
            would not fit in memory (``nqf.theory.data_matrices.chunked``); None when it is held whole.
    """

    route: str
    reason: str
    packed_size: int | None = None
    moments_flops: float | None = None
    samples_flops: float | None = None
    chunk: int | None = None


def term_shapes(arch: Architecture, dtype) -> list[tuple[int, int, int, int]]:
    """(K, R, d_L, d_R) per term of ``arch``'s block factors (its closed form, else the ones derived
    on its coupled block pairs), without evaluating on data."""
    x = jax.ShapeDtypeStruct((1, *arch.input_shape), dtype)
    shape = cast(BlockFactors, jax.eval_shape(lambda z: structure(arch, z), x))
    return [(t.left.shape[1], t.left.shape[2], t.left.shape[3], t.right.shape[3]) for t in shape.terms]


def choose_route(
    arch: Architecture, num_samples: int, loss: str, route: str = "auto", minibatches: bool = False, dtype=None
) -> RouteChoice:
    """Pick the data route of the M-flow: ``moments`` when it is allowed and its step is cheaper.

    Per step the per-sample route costs about 2 N sum_t K R (d_L d_R + d_R) flops (forms and
    contraction), the moments route 2 p^2 (one product with S); the moments route needs the
    squared loss, full batches and p^2 <= MAX_MOMENT_ENTRIES.
    """
    if route not in ROUTES:
        raise NqfError(f"unknown data route {route!r}; choose one of {', '.join(ROUTES)}")
    dtype = dtype or jnp.result_type(float)
    shapes = term_shapes(arch, dtype)
    p = sum(dl * dr for _, _, dl, dr in shapes)
    per_sample = 2.0 * num_samples * sum(K * R * (dl * dr + dr) for K, R, dl, dr in shapes)
    held = sum(K * R * (dl + dr) for K, R, dl, dr in shapes)  # numbers of structure per sample
    moments = 2.0 * p * p
    described = f"S ({p} x {p})"
    factored = None
    if p * p > FACTORED_FROM:
        factored = _factored_probe(arch, dtype)
    if factored is not None:  # S m costs 2 K d_R^2 + 4 K d_L d_R (FactoredSecond)
        K_, dl_, dr_ = factored
        moments = 2.0 * K_ * dr_ * dr_ + 4.0 * K_ * dl_ * dr_
        described = f"S ({p} x {p}, factored: {K_} x {dl_} left factors, {dr_} x {dr_} blocks)"
    blockers = []
    if loss != "squared":
        blockers.append(f"the {loss} loss is not quadratic in M")
    if minibatches:
        blockers.append("SGD needs the samples of each minibatch")
    if p * p > MAX_MOMENT_ENTRIES and factored is None:
        blockers.append(f"S would be {p} x {p}")
    if route == "moments" and blockers:
        raise NqfError(f"the moments route does not apply here: {'; '.join(blockers)}")
    chunk = None
    if num_samples * held > MAX_HELD_STRUCTURE:
        chunk = max(16, (1 << 22) // max(held, 1))
    chunked = (
        ""
        if chunk is None
        else f", in chunks of {chunk} samples (all {num_samples} would need {num_samples * held:.2g} numbers)"
    )

    def samples(reason):
        return RouteChoice("samples", reason + chunked, p, moments, per_sample, chunk)

    if route == "samples":
        return samples("per-sample route (asked for)")
    if route == "moments":
        return RouteChoice("moments", f"moments route (asked for): S is {p} x {p}", p, moments, per_sample)
    if blockers:
        return samples(f"per-sample route: {'; '.join(blockers)}")
    if moments < per_sample:
        return RouteChoice(
            "moments",
            f"moments route: a step costs ~{moments:.2g} flops with {described} against ~{per_sample:.2g} over "
            f"{num_samples} samples",
            p,
            moments,
            per_sample,
        )
    return samples(
        f"per-sample route: a step costs ~{per_sample:.2g} flops over {num_samples} samples against ~{moments:.2g} "
        f"with {described}"
    )
