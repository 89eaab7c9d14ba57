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


def get_architecture(name: str, **options: Any) -> Architecture:
    """Build a built-in architecture by name; unknown options raise NqfError."""
    factory = _factory(name)
    known = architecture_options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise NqfError(f"architecture {name!r} has no option {', '.join(unknown)}; its options are {', '.join(known)}")
    return factory(**options)
