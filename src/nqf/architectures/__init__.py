"""Built-in architectures, one module each, and the registry used by the CLI and configs.

Each factory takes keyword options with defaults and returns an :class:`nqf.Architecture`.
``get_architecture("mlp", activation="gelu")`` builds one by name; ``ARCHITECTURES``
maps the CLI/config names to the factories.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from nqf.architectures.architecture import Architecture
from nqf.core.errors import NqfError

from .attention import attention as attention
from .conv import conv1d as conv1d
from .conv import conv2d as conv2d
from .linear_attention import linear_attention as linear_attention
from .mlp import mlp as mlp
from .mlp_fixed import mlp_fixed as mlp_fixed
from .moe import moe as moe

ARCHITECTURES: dict[str, Callable[..., Architecture]] = {
    "mlp": mlp,
    "mlp-fixed": mlp_fixed,
    "attention": attention,
    "linear-attention": linear_attention,
    "moe": moe,
    "conv1d": conv1d,
    "conv2d": conv2d,
}


def architecture_options(name: str) -> dict[str, Any]:
    """The options of a built-in architecture with their defaults."""
    factory = _factory(name)
    return {p.name: p.default for p in inspect.signature(factory).parameters.values()}


def _factory(name: str) -> Callable[..., Architecture]:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise NqfError(f"unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)}") from None


def architecture_for_data(name: str, X: Any = None, Y: Any = None) -> Architecture:
    """The built-in architecture ``name`` for samples X (N, D) and targets Y (N, K): its default
    options, with ``inputs = D`` and ``outputs = K`` where it has those options (X two-dimensional,
    Y two-dimensional; anything else keeps the defaults, and the caller's shape checks say what
    does not fit). What ``nqf.predict`` does with an architecture's name."""
    known = architecture_options(name)  # raises for an unknown name
    options: dict[str, Any] = {}
    x_shape, y_shape = (None if a is None else tuple(getattr(a, "shape", ())) for a in (X, Y))
    if "inputs" in known and x_shape is not None and len(x_shape) == 2:
        options["inputs"] = int(x_shape[1])
    if "outputs" in known and y_shape is not None and len(y_shape) == 2:
        options["outputs"] = int(y_shape[1])
    return get_architecture(name, **options)


def get_architecture(name: str, **options: Any) -> Architecture:
    """Build a built-in architecture by name; unknown options raise NqfError."""
    factory = _factory(name)
    known = architecture_options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise NqfError(f"architecture {name!r} has no option {', '.join(unknown)}; its options are {', '.join(known)}")
    return factory(**options)
