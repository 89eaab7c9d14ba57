r"""Linear attention with merged key-query and value-output matrices (in-context regression).

Input x: (N+1, D+1): N context tokens z_i = (x_i, y_i) followed by the query token
z_q = (x_q, 0). One unit (head) has parameters

    w = {"W_KQ": (D+1, D+1), "w_OV": (D+1,)},

flattened as [W_KQ (row-major), w_OV] (JAX's sorted-key order), d = (D+1)^2 + D+1, and

    phi(w, x) = w_OV . (1/N) sum_{i<=N} z_i (z_i^T W_KQ z_q) = w_OV^T S W_KQ z_q,
    S = (1/N) sum_{i<=N} z_i z_i^T                                     (one output).

The unit is bilinear in (w_OV, W_KQ), so the quadratic form is exact at every scale:

    A(x) = (1/2) [[0, B^T], [B, 0]] in the [W_KQ, w_OV] layout,   B[a, (b, c)] = S_ab (z_q)_c,

B: (D+1) x (D+1)^2 couples w_OV (rows) with W_KQ (columns); its entries are cubic in
the tokens. docs/theory.md section 1. Readout (``network_batch``): R = w_OV (1 x (D+1)),
g = S W_KQ z_q.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nqf.architectures.architecture import Architecture, ClosedTerm, Readout

from .option_checks import positive_int


def linear_attention(dim: int = 4, context: int = 16) -> Architecture:
    """Merged linear-attention heads as units; x: (context+1, dim+1), one output."""
    name = "linear-attention"
    D = positive_int(name, "dim", dim)
    N = positive_int(name, "context", context)
    D1 = D + 1

    def unit(w, x):
        context_tokens, query = x[:N], x[N]
        scores = context_tokens @ (w["W_KQ"] @ query)  # (N,): z_i^T W_KQ z_q
        return (w["w_OV"] @ (context_tokens.T @ scores) / N)[None]

    def features(w, X):  # phi = w_OV . g, g = S W_KQ z_q: (N, D+1); S does not depend on w (one for all units)
        context_tokens, queries = X[:, :N], X[:, N]
        S = jnp.einsum("bia,bic->bac", context_tokens, context_tokens) / N  # (B, D+1, D+1)
        return jnp.einsum("bac,bc->ba", S, queries @ w["W_KQ"].T)

    def closed_form(x):
        context_tokens, query = x[:N], x[N]
        S = context_tokens.T @ context_tokens / N
        # term r = a: left = e_a on w_OV, right = vec(S[a] z_q^T) on W_KQ
        left = jnp.eye(D1, dtype=x.dtype)[None]
        right = jnp.einsum("ab,c->abc", S, query).reshape(1, D1, D1 * D1)
        return (ClosedTerm("w_OV", "W_KQ", left, right),)

    template = {
        "W_KQ": jax.ShapeDtypeStruct((D1, D1), jnp.float32),
        "w_OV": jax.ShapeDtypeStruct((D1,), jnp.float32),
    }
    return Architecture(
        name=name,
        unit=unit,
        template=template,
        input_shape=(N + 1, D1),
        outputs=1,
        options=(("dim", D), ("context", N)),
        closed_form=closed_form,
        closed_form_text=(
            ("w_OV x W_KQ", "A[w_a, W_bc] = S_ab (z_q)_c / 2, S = (1/N) sum_i z_i z_i^T (exact: the unit is bilinear)"),
        ),
        description="linear attention with merged W_KQ and w_OV (in-context regression), phi = w_OV^T S W_KQ z_q",
        readout=Readout("w_OV", features),
    )
