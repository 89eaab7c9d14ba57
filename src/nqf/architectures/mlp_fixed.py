r"""Perceptron with a fixed readout (the "quadratic network" unit).

    phi(w, x) = sigma(v . x),     w = v in R^D,  one output.

With sigma'(0) = 0 and sigma''(0) != 0 (e.g. z^2/2 or 1 - cos z) the closed form is
A(x) = (sigma''(0)/2) x x^T, and the leading model is f = x^T M x (docs/theory.md section 1).

No :class:`~nqf.architectures.architecture.Readout` is declared: the output weight is fixed
(1), not a parameter block, so phi = R(w) g(w, x) has no trainable R; with one output the
unit-by-unit layer already forms only the (N, n) matrix sigma(X V), nothing to save.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nqf.architectures.activations import activation_derivatives, get_activation
from nqf.architectures.architecture import Architecture, ClosedTerm

from .option_checks import positive_int


def mlp_fixed(inputs: int = 8, activation: str = "square") -> Architecture:
    """Fixed-readout units phi = sigma(v.x), x: (inputs,), one output."""
    inputs = positive_int("mlp-fixed", "inputs", inputs)
    sigma = get_activation(activation)
    _, curvature = activation_derivatives(activation)

    def unit(w, x):
        return sigma(jnp.dot(w["v"], x))[None]

    def closed_form(x):
        # 1/2 (l r^T + r l^T) with l = sigma''(0)/2 x, r = x gives sigma''(0)/2 x x^T
        left = (0.5 * curvature * x)[None, None, :]
        right = x[None, None, :]
        return (ClosedTerm("v", "v", left, right),)

    return Architecture(
        name="mlp-fixed",
        unit=unit,
        template={"v": jax.ShapeDtypeStruct((inputs,), jnp.float32)},
        input_shape=(inputs,),
        outputs=1,
        options=(("inputs", inputs), ("activation", activation)),
        closed_form=closed_form,
        closed_form_text=(("v x v", f"A = sigma''(0)/2 x x^T, sigma''(0) = {curvature:.6g}"),),
        description="fixed-readout units (quadratic network), phi = sigma(v.x)",
    )
