r"""Convolution with a single input channel, one output channel per unit.

Input x: (L,) for ``conv1d`` or (H, W) for ``conv2d``. A channel has a kernel k of
size s (``conv1d``: (s,), ``conv2d``: (s, s); S = s or s^2 entries) and a readout a:

    pre_p(x) = k . patch_p(x),        p = 1..P (positions)
    readout "global":    a: (K,)       phi_c = a_c sum_p sigma(pre_p)       (global sum pooling)
    readout "position":  a: (P, K)     phi_c = sum_p a_{pc} sigma(pre_p)

Parameters flatten as [a, k] (sorted keys, row-major), d = |a| + S. Patches
(cross-correlation, as in deep-learning convolutions):
``circular``: P = L, patch_p[j] = x[(p + j) mod L] (2D: x[(p+i) mod H, (q+j) mod W]);
``valid``: P = L - s + 1, patch_p[j] = x[p + j] (2D: P = (H-s+1)(W-s+1)); 2D
positions are flattened row-major. The patch matrix P(x): (P, S) is im2col.

Closed form (docs/theory.md section 1): only the a x k block is nonzero,

    global:    A_c[a_c', k_j]      = sigma'(0)/2 delta_cc' sum_p P(x)_pj
    position:  A_c[a_{pc'}, k_j]   = sigma'(0)/2 delta_cc' P(x)_pj.

With circular padding the summed patches are all sum_i x_i: at leading order the
global readout sees only the mean of x. With a per-position readout, circular padding
and a kernel spanning the signal (s = L), P(x)_pj = x_{(p+j) mod L} is a circular
Hankel matrix: its singular values are |fft(x)|, its singular vectors Fourier modes.

Readout (``network_batch``): the channel's readout a times its features, g = sum_p
sigma(pre_p) (global, R = a: (K, 1)) or g_p = sigma(pre_p) (position, a: (P, K) is R^T),
with the patches of the whole batch gathered once (X[:, P(x) index] @ k).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.activations import activation_derivatives, get_activation
from nqf.architectures.architecture import Architecture, ClosedTerm, Readout
from nqf.core.errors import NqfError

from .option_checks import one_of, positive_int

PADDINGS = ("circular", "valid")
READOUTS = ("global", "position")


def _offsets(size: int, kernel: int, padding: str) -> np.ndarray:
    """Index of patch entry j at position p along one axis: (P_axis, s)."""
    positions = size if padding == "circular" else size - kernel + 1
    index = np.arange(positions)[:, None] + np.arange(kernel)[None, :]
    return index % size if padding == "circular" else index


def patch_indices(shape: tuple[int, ...], kernel: int, padding: str) -> np.ndarray:
    """im2col gather indices into x.ravel(): (P, S), positions and kernel entries row-major."""
    if len(shape) == 1:
        return _offsets(shape[0], kernel, padding)
    rows = _offsets(shape[0], kernel, padding)  # (Ph, s)
    cols = _offsets(shape[1], kernel, padding)  # (Pw, s)
    flat = rows[:, None, :, None] * shape[1] + cols[None, :, None, :]  # (Ph, Pw, s, s)
    return flat.reshape(rows.shape[0] * cols.shape[0], kernel * kernel)


def _conv(
    name: str,
    shape: tuple[int, ...],
    kernel: int,
    padding: str,
    readout: str,
    outputs: int,
    activation: str,
) -> Architecture:
    one_of(name, "padding", padding, PADDINGS)
    one_of(name, "readout", readout, READOUTS)
    K = positive_int(name, "outputs", outputs)
    smallest = min(shape)
    if kernel > smallest:
        raise NqfError(f"{name}: kernel size {kernel} is larger than the signal (size {smallest})")
    sigma = get_activation(activation)
    slope, _ = activation_derivatives(activation)
    index = patch_indices(shape, kernel, padding)
    P, S = index.shape
    kernel_shape = (kernel,) * len(shape)

    def patches(x):
        return jnp.ravel(x)[index]  # (P, S)

    def activations(w, X):  # sigma(pre_p) for a batch X: (N, P)
        return sigma(X.reshape(X.shape[0], -1)[:, index] @ jnp.ravel(w["k"]))

    if readout == "global":

        def unit(w, x):
            return w["a"] * jnp.sum(sigma(patches(x) @ jnp.ravel(w["k"])))

        def features(w, X):  # phi = a g, g = sum_p sigma(pre_p): R = a (K, 1)
            return jnp.sum(activations(w, X), axis=1, keepdims=True)

        def closed_form(x):
            left = slope * jnp.eye(K, dtype=x.dtype)[:, None, :]  # (K, 1, K): sigma'(0) e_c
            right = jnp.broadcast_to(jnp.sum(patches(x), axis=0), (K, 1, S))
            return (ClosedTerm("a", "k", left, right),)

        readout_shape: tuple[int, ...] = (K,)
        declared = Readout("a", features)
    else:

        def unit(w, x):
            return sigma(patches(x) @ jnp.ravel(w["k"])) @ w["a"]

        def closed_form(x):
            # term r = j: left = sigma'(0) vec(P[:, j] e_c^T) on a, right = e_j on k
            eye_k = jnp.eye(K, dtype=x.dtype)
            left = slope * jnp.einsum("pj,cd->cjpd", patches(x), eye_k).reshape(K, S, P * K)
            right = jnp.broadcast_to(jnp.eye(S, dtype=x.dtype), (K, S, S))
            return (ClosedTerm("a", "k", left, right),)

        readout_shape = (P, K)
        declared = Readout("a", activations, transposed=True)  # phi = g^T a, g_p = sigma(pre_p): a (P, K) is R^T

    sizes = (("length", shape[0]),) if len(shape) == 1 else (("rows", shape[0]), ("columns", shape[1]))
    pooled = "sum_p P(x)_pj" if readout == "global" else "P(x)_pj"
    a_index = "a_c'" if readout == "global" else "a_pc'"
    return Architecture(
        name=name,
        unit=unit,
        template={
            "a": jax.ShapeDtypeStruct(readout_shape, jnp.float32),
            "k": jax.ShapeDtypeStruct(kernel_shape, jnp.float32),
        },
        input_shape=shape,
        outputs=K,
        options=sizes
        + (("kernel", kernel), ("padding", padding), ("readout", readout), ("outputs", K), ("activation", activation)),
        closed_form=closed_form,
        closed_form_text=(
            (
                "a x k",
                f"A_c[{a_index}, k_j] = sigma'(0)/2 delta_cc' {pooled}, P(x) = im2col patches ({P} x {S}), "
                f"sigma'(0) = {slope:.6g}",
            ),
        ),
        description=f"convolution channels as units ({padding} padding, {readout} readout), phi = a . sigma(P(x) k)",
        readout=declared,
    )


def conv1d(
    length: int = 16,
    kernel: int = 3,
    padding: str = "circular",
    readout: str = "global",
    outputs: int = 1,
    activation: str = "tanh",
) -> Architecture:
    """1D convolution channels as units; x: (length,), kernel (kernel,), f: (outputs,). See the module docstring."""
    name = "conv1d"
    L = positive_int(name, "length", length)
    s = positive_int(name, "kernel", kernel)
    return _conv(name, (L,), s, padding, readout, outputs, activation)


def conv2d(
    rows: int = 8,
    columns: int = 8,
    kernel: int = 3,
    padding: str = "circular",
    readout: str = "global",
    outputs: int = 1,
    activation: str = "tanh",
) -> Architecture:
    """2D convolution channels as units; x: (rows, columns), kernel (kernel, kernel), f: (outputs,).

    The image size is ``rows`` x ``columns`` (not height/width: ``--width`` is the number of
    units everywhere in the CLI)."""
    name = "conv2d"
    H = positive_int(name, "rows", rows)
    W = positive_int(name, "columns", columns)
    s = positive_int(name, "kernel", kernel)
    return _conv(name, (H, W), s, padding, readout, outputs, activation)
