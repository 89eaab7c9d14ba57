"""Named scalar activations sigma(z) used by the built-in architectures.

Derivatives at 0 are never hard-coded: closed forms read sigma'(0) and sigma''(0)
from autodiff (``activation_derivatives``), so adding an activation is one line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from nqf.core.errors import NqfError
from nqf.core.host_eval import host_or_compiled

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "gelu": lambda z: jax.nn.gelu(z, approximate=False),
    "sin": jnp.sin,
    "silu": jax.nn.silu,
    "linear": lambda z: z,
    "square": lambda z: 0.5 * z**2,  # quadratic-network unit z^2/2
    "one_minus_cos": lambda z: 1.0 - jnp.cos(z),
    "relu": jax.nn.relu,
    "abs": jnp.abs,
    "softplus": jax.nn.softplus,
    "sigmoid": jax.nn.sigmoid,
}


def get_activation(name: str) -> Callable[[jax.Array], jax.Array]:
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise NqfError(f"unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}") from None


def activation_derivatives(name: str) -> tuple[float, float]:
    """(sigma'(0), sigma''(0)) by autodiff, as Python floats, in the default float precision:
    the derivatives' jaxpr evaluated in numpy (``nqf.core.host_eval``; compiled for an
    activation it cannot interpret), once per activation, precision and process."""
    get_activation(name)  # an unknown name is one line
    return _derivatives_at_zero(name, str(jnp.result_type(float)))


@functools.cache
def _derivatives_at_zero(name: str, dtype: str) -> tuple[float, float]:
    d1 = jax.grad(get_activation(name))
    (first, second), _ = host_or_compiled(lambda z: (d1(z), jax.grad(d1)(z)), np.zeros((), dtype=dtype))
    return float(first), float(second)
