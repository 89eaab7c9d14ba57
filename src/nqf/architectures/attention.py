r"""Softmax attention, one head per unit.

Input x: (T, D), T tokens of dimension D. One unit (head) has parameters

    w = {"W_Q": (D, dk), "W_K": (D, dk), "W_V": (D, dv), "W_O": (dv, K)},

flattened in JAX's sorted-key order [W_K, W_O, W_Q, W_V] (each leaf row-major), so
d = 2 D dk + D dv + dv K. With queries q_t = x_t W_Q, keys k_t = x_t W_K, values
v_t = x_t W_V and attention alpha_{t t'} = softmax_{t'}(q_t . k_{t'} / sqrt(dk)) (no mask),

    head output at query t:  o_t = sum_{t'} alpha_{t t'} v_{t'} W_O          in R^K
    readout "last":          phi(w, x) = o_{T-1}      (the last token is the query)
    readout "pool":          phi(w, x) = (1/T) sum_t o_t

Closed form (docs/theory.md section 1). At w = 0 the scores vanish and attention is
uniform, alpha = 1/T; the scores are quadratic in (W_Q, W_K), so they change the
output only at fourth order. To second order both readouts are the bilinear map
phi_c = sum_{a,b} xbar_a (W_V)_{ab} (W_O)_{bc}, xbar = (1/T) sum_t x_t:

    A_c[(W_V)_{ab}, (W_O)_{b'c'}] = xbar_a delta_{bb'} delta_{cc'} / 2,

and every block involving W_Q or W_K is exactly zero. The head is a perceptron on the
mean token with a linear activation and a dv-dimensional hidden layer. The remainder
phi(eps w) - eps^2 w^T A w is O(eps^4).

Readout (``network_batch``): phi = g^T W_O with g = mean_q sum_{t'} alpha_{q t'} x_{t'} W_V
(dv,), the head's attended value at the read position(s); W_O (dv, K) is R^T.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from nqf.architectures.architecture import Architecture, ClosedTerm, Readout

from .option_checks import one_of, positive_int

READOUTS = ("last", "pool")


def attention(
    tokens: int = 8, dim: int = 8, key_dim: int = 4, value_dim: int = 4, outputs: int = 4, readout: str = "last"
) -> Architecture:
    """Softmax attention heads as units; x: (tokens, dim), f: (outputs,). See the module docstring."""
    name = "attention"
    T = positive_int(name, "tokens", tokens)
    D = positive_int(name, "dim", dim)
    dk = positive_int(name, "key_dim", key_dim)
    dv = positive_int(name, "value_dim", value_dim)
    K = positive_int(name, "outputs", outputs)
    one_of(name, "readout", readout, READOUTS)
    scale = 1.0 / math.sqrt(dk)

    def unit(w, x):
        queries = x[-1:] if readout == "last" else x  # (Tq, D)
        scores = (queries @ w["W_Q"]) @ (x @ w["W_K"]).T * scale  # (Tq, T)
        alpha = jax.nn.softmax(scores, axis=-1)
        heads = alpha @ (x @ w["W_V"]) @ w["W_O"]  # (Tq, K)
        return jnp.mean(heads, axis=0)

    # the scores q k^T = x_q (W_Q W_K^T) x_t^T through the merged (D, D) matrix when that is
    # cheaper than the keys (multiply-adds per sample, the readout's queries Tq = 1 or T)
    Tq = 1 if readout == "last" else T
    merged = Tq * D * D + Tq * T * D < (Tq + T) * D * dk + Tq * T * dk

    def features(w, X):  # phi = g^T W_O, g = mean_q alpha_q (x W_V): the attended value, (N, dv)
        queries = X[:, -1:] if readout == "last" else X  # (N, Tq, D)
        if merged:
            scores = jnp.einsum("nqd,ntd->nqt", queries @ (w["W_Q"] @ w["W_K"].T), X)
        else:
            scores = jnp.einsum("nqk,ntk->nqt", queries @ w["W_Q"], X @ w["W_K"])
        weights = jnp.mean(jax.nn.softmax(scores * scale, axis=-1), axis=1)  # (N, T): mean over the queries
        return jnp.einsum("nt,ntd->nd", weights, X) @ w["W_V"]

    def closed_form(x):
        xbar = jnp.mean(x, axis=0)
        eye_v = jnp.eye(dv, dtype=x.dtype)
        # term r = b: left = vec(xbar e_b^T) on W_V, right = vec(e_b e_c^T) on W_O
        left = jnp.einsum("a,be->bae", xbar, eye_v).reshape(dv, D * dv)
        left = jnp.broadcast_to(left, (K, dv, D * dv))
        right = jnp.einsum("be,cf->cbef", eye_v, jnp.eye(K, dtype=x.dtype)).reshape(K, dv, dv * K)
        return (ClosedTerm("W_V", "W_O", left, right),)

    f32 = jnp.float32
    template = {
        "W_Q": jax.ShapeDtypeStruct((D, dk), f32),
        "W_K": jax.ShapeDtypeStruct((D, dk), f32),
        "W_V": jax.ShapeDtypeStruct((D, dv), f32),
        "W_O": jax.ShapeDtypeStruct((dv, K), f32),
    }
    return Architecture(
        name=name,
        unit=unit,
        template=template,
        input_shape=(T, D),
        outputs=K,
        options=(
            ("tokens", T),
            ("dim", D),
            ("key_dim", dk),
            ("value_dim", dv),
            ("outputs", K),
            ("readout", readout),
        ),
        closed_form=closed_form,
        closed_form_text=(
            ("W_V x W_O", "A_c[V_ab, O_b'c'] = xbar_a delta_bb' delta_cc' / 2, xbar = mean token (uniform attention)"),
            ("W_Q, W_K", "0 (scores enter at fourth order)"),
        ),
        description=f"softmax attention heads as units ({readout} readout), phi = softmax(q k^T/sqrt(dk)) x W_V W_O",
        readout=Readout("W_O", features, transposed=True),
    )
