r"""Adaptive stepping of the M maps: jump the stretches where the map is linear, step the rest.

Far from a switch-on the exact map is nearly affine in its state. Write the state as the
Gram matrix Gamma of the propagated factors (GD: Gamma = M = F F^T; with a momentum buffer:
Gamma = [F; V][F; V]^T = [[M, P], [P^T, Q]]) and the map as Gamma+ = Phi(Gamma)
(:func:`gram_map`, derived from the optimizer's own step). Around the current state Gamma_t,

    Phi(Gamma_t + x) = Gamma_t + r + J x + O(x^2),   r = Phi(Gamma_t) - Gamma_t,  J = dPhi(Gamma_t),

so j steps of the affine model give x_j = sum_{i<j} J^i r (from repeated squares of the
augmented matrix [[J, r], [0, 1]]). Near M = 0 this is M+ = P M P^T (P = I - 2 lr G(0)); near a
fixed point it is the linearisation there; in both the model is exact up to the neglected
O(x^2) terms. A jump of j steps is accepted when, at its landing point, the true one-step
increment Phi(Gamma_t + x_j) - (Gamma_t + x_j) agrees with the model's, J^j r, to
``JUMP_RTOL`` relative (plus ``JUMP_ATOL`` of |Gamma|): the neglected terms are then that
small over the whole jump. Otherwise the map steps, and tries again later. Jump lengths
double after each accepted jump, so a horizon T costs O(log T) jumps past the last
switch-on. Recorded steps inside a jump are evaluated from the affine model.

Only used when records are sparse (every step recorded means every step is computed
anyway); SGD always steps (each step has its own minibatch).

Beyond MAX_JUMP_STATE entries (d > 39 for GD) J is not formed: the affine model lives in the
Krylov space of J from r (:class:`KrylovModel`, Arnoldi with KRYLOV_DIM products J v, each a
JVP of one step: J V_m = V_m H_m + h e_m^T, so J^i r ~ |r| V_m H_m^i e_1). Its powers are those
of the small H_m; the landing check is the same, so an inexact Krylov model is refused like an
inexact linearisation. Past the switch-ons r lies in the few directions the flow still moves,
so a few dozen products carry it; a jump of j steps then costs about KRYLOV_DIM steps' work.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from nqf.core.memory import MAX_JUMP_STATE, MAX_KRYLOV_STATE
from nqf.optimizers import AbstractClosedOptimizer
from nqf.theory.data_matrices.protocol import AbstractDataMatrices

# The accepted mismatch between the true and the affine one-step increment at a landing point.
JUMP_RTOL = 1e-9
JUMP_ATOL = 1e-15
# Jumps need powers of J (s x s, s = D(D+1)/2): not beyond MAX_JUMP_STATE (nqf.core.memory, where the
# command line's time estimates read it without importing JAX).
FIRST_JUMP = 64
MIN_JUMP = 16
# Products J v of the Krylov model (states beyond MAX_JUMP_STATE); at most MAX_KRYLOV_STATE entries
# (nqf.core.memory): its basis holds KRYLOV_DIM of them.
KRYLOV_DIM = 64


def _unpack_sym(v, idx, D):
    U = jnp.zeros((D, D), dtype=v.dtype).at[idx].set(v)
    return U + jnp.triu(U, 1).T


def gram_map(optimizer: AbstractClosedOptimizer, data: AbstractDataMatrices, hyper, Gamma):
    """One step of ``optimizer``'s map on the Gram matrix Gamma of its stacked carry (k blocks of
    d rows: the factor and its buffers). With G = G(M) frozen at M = Gamma's first block the step is
    linear in the carry, C+ = T C (T kd x kd: the optimizer's own step applied to the identity's
    row blocks), so Gamma+ = T Gamma T^T. GD: T = I - 2 lr G; heavy ball: [[I - 2 lr G, -lr beta
    I], [2 G, beta I]]."""
    lr, beta, _ = hyper
    k = 1 + optimizer.buffers
    d = Gamma.shape[0] // k
    G = data.gradient_matrix(Gamma[:d, :d])
    identity = jnp.eye(k * d, dtype=Gamma.dtype)
    blocks = tuple(identity[i * d : (i + 1) * d] for i in range(k))
    T = jnp.concatenate(optimizer.flow_step(2 * G @ blocks[0], blocks, lr, beta), axis=0)
    return T @ Gamma @ T.T


def _packed_map(optimizer, data: AbstractDataMatrices, hyper, Gamma):
    """(the map Phi on packed states, the upper triangle of a D x D Gram matrix as a vector (s,); Gamma packed)."""
    D = Gamma.shape[0]
    idx = np.triu_indices(D)

    def packed(v):
        return gram_map(optimizer, data, hyper, _unpack_sym(v, idx, D))[idx]

    return packed, Gamma[idx]


@partial(jax.jit, static_argnames=("optimizer",))
def _linearise(optimizer, data: AbstractDataMatrices, hyper, Gamma):
    """(r, J) of the packed map at Gamma: r = Phi(Gamma) - Gamma (s,), J (s, s)."""
    packed, v0 = _packed_map(optimizer, data, hyper, Gamma)
    r = packed(v0) - v0
    s = v0.shape[0]
    columns = jax.lax.map(
        lambda e: jax.jvp(packed, (v0,), (e,))[1], jnp.eye(s, dtype=Gamma.dtype), batch_size=min(s, 32)
    )
    return r, columns.T


@partial(jax.jit, static_argnames=("optimizer",))
def _directional(optimizer, data: AbstractDataMatrices, hyper, Gamma, direction):
    """J v of the packed map at Gamma for one packed direction v (s,): one JVP of a step."""
    packed, v0 = _packed_map(optimizer, data, hyper, Gamma)
    return jax.jvp(packed, (v0,), (direction,))[1]


@partial(jax.jit, static_argnames=("optimizer",))
def _increment(optimizer, data: AbstractDataMatrices, hyper, Gamma):
    return (gram_map(optimizer, data, hyper, Gamma) - Gamma)[np.triu_indices(Gamma.shape[0])]


class AffineModel:
    """The affine model x+ = r + J x of the map at one state, as powers of A = [[J, r], [0, 1]].

    A^j [0; 1] = [x_j; 1] with x_j = sum_{i<j} J^i r, and A^j [r; 0] = [J^j r; 0]. Powers come
    from the repeated squares A^(2^k) (real arithmetic only, O(s^3 log j); an eigendecomposition
    would need complex products, and it is ill-conditioned where J is not normal).
    """

    def __init__(self, r: np.ndarray, J: np.ndarray):
        s = r.size
        A = np.zeros((s + 1, s + 1))
        A[:s, :s], A[:s, s], A[s, s] = J, r, 1.0
        self.size = s
        self.r = r
        self.squares = [A]
        self.ok = bool(np.all(np.isfinite(A)))

    def _apply_power(self, j: int, v: np.ndarray) -> np.ndarray:
        """A^j v."""
        k = 0
        while j:
            while len(self.squares) <= k:
                self.squares.append(self.squares[-1] @ self.squares[-1])
            if j & 1:
                v = self.squares[k] @ v
            j >>= 1
            k += 1
        return v

    def displacement(self, offsets) -> np.ndarray:
        """x_j for increasing steps j (R,): (s, R)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        out = np.empty((self.size, offsets.size))
        v = np.zeros(self.size + 1)
        v[-1] = 1.0
        done = 0
        for n, j in enumerate(offsets):
            v = self._apply_power(int(j) - done, v)
            done = int(j)
            out[:, n] = v[:-1]
        return out

    def increment_at(self, j: int) -> np.ndarray:
        """J^j r, the model's one-step increment j steps on: (s,)."""
        return self._apply_power(int(j), np.append(self.r, 0.0))[:-1]


class KrylovModel:
    """The affine model x+ = r + J x in the Krylov space of J from r (module docstring), with the
    interface of :class:`AffineModel`: Arnoldi (modified Gram-Schmidt, applied twice) builds V_m
    (s, m) and H_m (m, m); the model is ``AffineModel(|r| e_1, H_m)`` mapped back by V_m. A
    breakdown (the space invariant under J) stops early, where the model is exact."""

    def __init__(self, r: np.ndarray, apply, dim: int = KRYLOV_DIM):
        s = r.size
        norm = float(np.linalg.norm(r))
        self.size, self.r = s, r
        self.ok = bool(np.isfinite(norm)) and norm > 0
        basis: list[np.ndarray] = []
        H = np.zeros((dim + 1, dim))
        if self.ok:
            basis.append(r / norm)
            for k in range(min(dim, s)):
                w = np.asarray(apply(basis[k]), dtype=np.float64)
                if not np.all(np.isfinite(w)):
                    self.ok = False
                    break
                for _ in range(2):  # twice: orthogonal to rounding
                    for i, v in enumerate(basis):
                        coefficient = float(v @ w)
                        H[i, k] += coefficient
                        w = w - coefficient * v
                H[k + 1, k] = float(np.linalg.norm(w))
                if H[k + 1, k] <= 1e-14 * max(float(np.abs(H[: k + 2, : k + 1]).max()), 1e-300):
                    break  # invariant: the model on these k + 1 vectors is exact
                basis.append(w / H[k + 1, k])
        m = max(min(len(basis), dim), 1)
        self.V = np.stack(basis[:m], axis=1) if basis else np.zeros((s, 1))
        start = np.zeros(m)
        start[0] = norm if self.ok else 0.0
        self.small = AffineModel(start, H[:m, :m])
        self.ok = self.ok and self.small.ok

    def displacement(self, offsets) -> np.ndarray:
        """x_j for increasing steps j (R,): (s, R)."""
        return self.V @ self.small.displacement(offsets)

    def increment_at(self, j: int) -> np.ndarray:
        """J^j r, the model's one-step increment j steps on: (s,)."""
        return self.V @ self.small.increment_at(j)


def gram_of(carry) -> np.ndarray:
    """The Gram matrix of the stacked factors of a map's carry (F,) or (F, V)."""
    Z = np.concatenate([np.asarray(c, dtype=np.float64) for c in carry], axis=0)
    return Z @ Z.T


def factors_of(Gamma: np.ndarray, parts: int, rank: int, dtype) -> tuple:
    """Factors (each d x rank) whose stacked Gram matrix is Gamma (its top ``rank`` eigenpairs)."""
    values, vectors = np.linalg.eigh(0.5 * (Gamma + Gamma.T))
    Z = vectors[:, -rank:] * np.sqrt(np.clip(values[-rank:], 0.0, None))
    d = Gamma.shape[0] // parts
    return tuple(jnp.asarray(Z[i * d : (i + 1) * d], dtype=dtype) for i in range(parts))


def try_jump(optimizer: AbstractClosedOptimizer, data: AbstractDataMatrices, hyper, carry, length: int):
    """Attempt a jump of ``length`` steps from ``carry``.

    Returns (model, Gamma_t, accepted) where model can evaluate any step inside the jump.
    """
    Gamma = gram_of(carry)
    D = Gamma.shape[0]
    s = D * (D + 1) // 2
    if s > MAX_KRYLOV_STATE:
        return None, Gamma, False
    dtype = carry[0].dtype
    state = jnp.asarray(Gamma, dtype=dtype)
    model: AffineModel | KrylovModel
    if s <= MAX_JUMP_STATE:
        r, J = _linearise(optimizer, data, hyper, state)
        model = AffineModel(np.asarray(r, dtype=np.float64), np.asarray(J, dtype=np.float64))
    else:
        r = np.asarray(_increment(optimizer, data, hyper, state), dtype=np.float64)
        model = KrylovModel(r, lambda v: _directional(optimizer, data, hyper, state, jnp.asarray(v, dtype=dtype)))
    if not model.ok:
        return model, Gamma, False
    landing = states_in_jump(model, Gamma, np.array([length]))[0]
    true = np.asarray(_increment(optimizer, data, hyper, jnp.asarray(landing, dtype=dtype)), dtype=np.float64)
    expected = model.increment_at(length)
    mismatch = np.linalg.norm(true - expected)
    accepted = bool(mismatch <= JUMP_RTOL * np.linalg.norm(expected) + JUMP_ATOL * np.linalg.norm(Gamma))
    return model, Gamma, accepted


def states_in_jump(model: AffineModel | KrylovModel, Gamma: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Gamma at the given step offsets (R,) inside an accepted jump: (R, D, D)."""
    D = Gamma.shape[0]
    idx = np.triu_indices(D)
    X = model.displacement(offsets)  # (s, R)
    U = np.zeros((offsets.size, D, D))
    U[:, idx[0], idx[1]] = X.T
    return Gamma[None] + U + np.transpose(np.triu(U, 1), (0, 2, 1))
