r"""Mixture of experts, one expert per unit, with a gate across the experts.

Input x: (D,). Expert e has parameters

    w_e = {"a": (K,), "u": (D,), "v": (D,)},   flattened as [a, u, v] (sorted keys), d = K + 2D,

an output h_e(x) = a_e sigma(v_e . x) and a gate logit u_e . x. The layer is

    f(x; W) = sum_{e=1..E} g_e(x) h_e(x),   g = route(u_1 . x, ..., u_E . x),

with route = softmax ("softmax", dense) or the softmax over the top_k largest logits,
zero elsewhere ("topk"; ties broken towards the lower index by ``lax.top_k``). The width
must equal the number of experts E.

Closed form (docs/theory.md section 1). At w = 0 the softmax gate is uniform, g_e = 1/E,
and g_e - 1/E is linear in the gate weights, so the gate enters f at third order
(times a sigma'(0) v.x): to second order the layer is (1/E) times a perceptron,

    A_c(x) = (sigma'(0) / 2E) [[0, 0, e_c x^T], [0, 0, 0], [x e_c^T, 0, 0]]   on [a, u, v],

with a zero gate block. Top-k is not smooth at w = 0 (the selected set depends on the
direction of U, not its scale), so no quadratic form holds; the closed form given for
it is only the formal one with g0 = route(0)_0 = 1/top_k that the autodiff route also
computes, and the expansion check rejects the architecture.

Readout (``network_batch``): h_e = a_e sigma(v_e . x), R = a, one feature sigma(v_e . x)
weighted by g_e(x), so f(X) = sum_e (g_e(X) sigma(X v_e)) a_e^T as matrix products.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nqf.architectures.activations import activation_derivatives, get_activation
from nqf.architectures.architecture import Architecture, Readout, Router, route_at_zero
from nqf.core.errors import NqfError

from .mlp import perceptron
from .option_checks import one_of, positive_int

ROUTINGS = ("softmax", "topk")


def _top_k_softmax(k: int):
    def route(logits):
        top, index = jax.lax.top_k(logits, k)
        return jnp.zeros_like(logits).at[index].set(jax.nn.softmax(top))

    return route


def moe(
    inputs: int = 8,
    outputs: int = 4,
    experts: int = 4,
    activation: str = "tanh",
    routing: str = "softmax",
    top_k: int = 2,
) -> Architecture:
    """Experts h = a sigma(v.x) as units with gate logits u.x; x: (inputs,), f: (outputs,)."""
    name = "moe"
    D = positive_int(name, "inputs", inputs)
    K = positive_int(name, "outputs", outputs)
    E = positive_int(name, "experts", experts)
    one_of(name, "routing", routing, ROUTINGS)
    k = positive_int(name, "top_k", top_k)
    if routing == "topk" and k > E:
        raise NqfError(f"{name}: top_k must be <= experts ({E}), got {k}")
    sigma = get_activation(activation)
    slope, _ = activation_derivatives(activation)
    route = jax.nn.softmax if routing == "softmax" else _top_k_softmax(k)
    gate_at_zero = float(route_at_zero(route, E)[0])  # 1/E (softmax) or 1/top_k (top-k, unit 0)

    # the expert is the perceptron; its features are weighted by the gate g_e per sample
    unit, features, closed_form = perceptron(D, K, sigma, gate_at_zero * slope)

    def gate_logit(w, x):
        return jnp.dot(w["u"], x)

    f32 = jnp.float32
    template = {
        "a": jax.ShapeDtypeStruct((K,), f32),
        "u": jax.ShapeDtypeStruct((D,), f32),
        "v": jax.ShapeDtypeStruct((D,), f32),
    }
    options = [("inputs", D), ("outputs", K), ("experts", E), ("activation", activation), ("routing", routing)]
    if routing == "topk":
        options.append(("top_k", k))
    return Architecture(
        name=name,
        unit=unit,
        template=template,
        input_shape=(D,),
        outputs=K,
        options=tuple(options),
        router=Router(units=E, gate_logit=gate_logit, route=route),
        closed_form=closed_form,
        closed_form_text=(
            ("a x v", f"A_c = g0 sigma'(0)/2 (e_c x^T + x e_c^T), g0 = {gate_at_zero:.6g}, sigma'(0) = {slope:.6g}"),
            ("u", "0 (the gate enters at third order)" if routing == "softmax" else "top-k is not smooth at w = 0"),
        ),
        description=f"mixture of {E} experts ({routing} gate), f = sum_e g_e(u.x) a_e sigma(v_e.x)",
        readout=Readout("a", features),
    )
