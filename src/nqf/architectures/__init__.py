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
    if name not in ARCHITECTURES:
        raise NqfError(f"unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)}")
    return {p.name: p.default for p in inspect.signature(ARCHITECTURES[name]).parameters.values()}


def outputs_for_targets(Y: Any, loss: str = "squared") -> int:
    """The number of outputs K that targets Y ask for: Y (N, K) gives K; integer (or boolean)
    labels (N,) the largest label + 1 (one-hot classes; at least 2 for cross-entropy; NqfError for a
    negative label); other Y (N,) one output. The one rule of ``nqf.predict``, ``nqf.train`` and the CLI."""
    import numpy as np

    if np.ndim(Y) >= 2:
        return int(np.shape(Y)[1])
    Y = np.asarray(Y)
    if (np.issubdtype(Y.dtype, np.integer) or np.issubdtype(Y.dtype, np.bool_)) and Y.size:
        if int(Y.min()) < 0:  # labels are 0 .. K-1: a negative one is no class (nor read as a number)
            raise NqfError(
                f"targets Y of shape {Y.shape} hold integer class labels, but the smallest is {int(Y.min())}: "
                "labels are 0, 1, ..., K-1 (for one real-valued output give float targets)"
            )
        return max(int(Y.max()) + 1, 2 if loss == "cross_entropy" else 1)
    return 1


def architecture_for_data(name: str, X: Any = None, Y: Any = None, loss: str = "squared") -> Architecture:
    """The built-in architecture ``name`` for samples X (N, D) and targets Y: its default options,
    with ``inputs = D`` where it has that option and X is two-dimensional, and ``outputs`` from Y
    (:func:`outputs_for_targets`: Y (N, K) gives K, integer labels (N,) the largest label + 1)
    where it has that option and Y is (N, K) or a non-empty (N,). Lists are read as the arrays
    they become; anything else keeps the defaults, and the caller's checks say what does not
    fit. What ``nqf.predict`` and ``nqf.train`` do with an architecture's name."""
    known = architecture_options(name)  # raises for an unknown name
    options: dict[str, Any] = {}
    X, Y = _as_array(X), _as_array(Y)
    if "inputs" in known and X is not None and X.ndim == 2:
        options["inputs"] = int(X.shape[1])
    if "outputs" in known and Y is not None and (Y.ndim == 2 or (Y.ndim == 1 and Y.size)):
        options["outputs"] = outputs_for_targets(Y, loss)
    return get_architecture(name, **options)


def _as_array(value: Any) -> Any:
    """An array as it is (a JAX array is not copied), a list or a number as the NumPy array it
    becomes, and None for None or for what is no array (a ragged nesting, which the data
    checks then refuse in one line)."""
    if value is None or (hasattr(value, "shape") and hasattr(value, "ndim")):
        return value
    import warnings

    import numpy as np

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's warning for ragged input, before its error
            return np.asarray(value)
    except (ValueError, TypeError):
        return None


def get_architecture(name: str, **options: Any) -> Architecture:
    """Build a built-in architecture by name; unknown options raise NqfError."""
    known = architecture_options(name)  # raises for an unknown name
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise NqfError(f"architecture {name!r} has no option {', '.join(unknown)}; its options are {', '.join(known)}")
    return ARCHITECTURES[name](**options)
