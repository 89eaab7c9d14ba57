r"""Two-layer perceptron with a trainable readout, one hidden unit per unit.

    phi_c(w, x) = a_c sigma(v . x),     w = (a in R^K, v in R^D), flattened as [a, v].

Closed form (docs/theory.md section 1):  A_c(x) = (sigma'(0)/2) [[0, e_c x^T], [x e_c^T, 0]],
so the leading model is the linear two-layer network f = sigma'(0) (sum_i a_i v_i^T) x.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from nqf.architectures.activations import activation_derivatives, get_activation
from nqf.architectures.architecture import Architecture, ClosedTerm, Readout

from .option_checks import positive_int


def perceptron(inputs: int, outputs: int, sigma: Callable, coefficient: float) -> tuple[Callable, Callable, Callable]:
    """The unit phi = a sigma(v.x), its readout's features and its closed form A_c = coefficient/2
    (e_c x^T + x e_c^T) on [a, v] (coefficient sigma'(0); a mixture of experts' times g0)."""

    def unit(w, x):
        return w["a"] * sigma(jnp.dot(w["v"], x))

    def features(w, X):  # the readout's one feature per sample: phi = a sigma(v.x) = R g, R = a (K, 1)
        return sigma(X @ w["v"])[:, None]

    def closed_form(x):
        left = coefficient * jnp.eye(outputs, dtype=x.dtype)[:, None, :]  # (K, 1, K): coefficient e_c
        right = jnp.broadcast_to(x, (outputs, 1, inputs))  # (K, 1, D): x
        return (ClosedTerm("a", "v", left, right),)

    return unit, features, closed_form


def mlp(inputs: int = 8, outputs: int = 4, activation: str = "tanh") -> Architecture:
    """Perceptron units with trainable readout: phi = a sigma(v.x). x: (inputs,), f: (outputs,)."""
    inputs = positive_int("mlp", "inputs", inputs)
    outputs = positive_int("mlp", "outputs", outputs)
    slope, _ = activation_derivatives(activation)
    unit, features, closed_form = perceptron(inputs, outputs, get_activation(activation), slope)
    template = {"a": jax.ShapeDtypeStruct((outputs,), jnp.float32), "v": jax.ShapeDtypeStruct((inputs,), jnp.float32)}
    return Architecture(
        name="mlp",
        unit=unit,
        template=template,
        input_shape=(inputs,),
        outputs=outputs,
        options=(("inputs", inputs), ("outputs", outputs), ("activation", activation)),
        closed_form=closed_form,
        closed_form_text=(("a x v", f"A_c = sigma'(0)/2 (e_c x^T + x e_c^T), sigma'(0) = {slope:.6g}"),),
        description="perceptron units with trainable readout, phi = a sigma(v.x)",
        readout=Readout("a", features),
    )
