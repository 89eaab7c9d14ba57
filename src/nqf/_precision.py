"""Floating-point dtypes asked for by name, checked against what JAX will actually give.

The library never enables float64 itself (tests do it in conftest.py, applications at start);
asking for ``float64`` while JAX runs in 32-bit mode is an error rather than a silent
downcast.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._errors import NqfError

_NAMES = {"float32": jnp.float32, "float64": jnp.float64}


def resolve_dtype(dtype=None) -> np.dtype:
    """The floating dtype for ``dtype`` (None: JAX's default float; ``"float32"``/``"float64"``/a dtype)."""
    if dtype is None:
        return np.dtype(jnp.result_type(float))
    try:
        resolved = np.dtype(_NAMES.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    except TypeError:
        raise NqfError(f"unknown dtype {dtype!r}; choose float32 or float64") from None
    if resolved not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise NqfError(f"unsupported dtype {resolved}; choose float32 or float64")
    if resolved == np.float64 and not jax.config.jax_enable_x64:
        raise NqfError(
            "float64 was asked for but JAX runs in 32-bit mode; enable it first with "
            "jax.config.update('jax_enable_x64', True)"
        )
    return resolved


def dtype_name(dtype) -> str:
    """``"float32"`` or ``"float64"``."""
    return np.dtype(dtype).name
