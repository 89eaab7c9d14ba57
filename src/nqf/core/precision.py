"""Floating-point dtypes asked for by name, checked against what JAX will actually give.

The library never enables float64 itself (tests do it in conftest.py, applications at start);
asking for ``float64`` while JAX runs in 32-bit mode is an error rather than a silent
downcast.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nqf.core.errors import NqfError

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
    if resolved == np.float64 and not x64_enabled():
        raise NqfError(
            "float64 was asked for but JAX runs in 32-bit mode; enable it first with "
            "jax.config.update('jax_enable_x64', True)"
        )
    return resolved


def occupation_floor(dtype) -> float:
    r"""The smallest initial mode occupation m_k(0) = q_k^T W0 W0^T q_k that nqf resolves in ``dtype``.

    floor = tiny / u: the dtype's smallest normal number (2.2e-308 in float64, 1.2e-38 in
    float32) divided by its unit roundoff (2.2e-16, 1.2e-7), i.e. 1.0e-292 (float64) and
    9.9e-32 (float32). Reasoning: while the modes are tiny, M = W W^T and K[M] have entries
    ~ m; every product of such an entry with a coefficient down to the rounding level
    (|coefficient| >= u relative to the O(1) data) must stay a normal number, or it loses
    its relative precision (subnormal) or becomes 0 (the M-flow then never grows that mode,
    and the LV/singular limit, which read m_k(0), see a floored or zero occupation).
    With W0 ~ N(0, sigma0^2), m_k(0) ~ n sigma0^2, so sigma0 >= sqrt(floor / n):
    1.8e-147 (float64) and 5.6e-17 (float32) at n = 32.
    """
    info = np.finfo(np.dtype(dtype))
    return float(info.tiny) / float(info.eps)


def jax_option(name: str) -> Any:
    """The current value of JAX's config option ``name`` (``jax.config.<name>``).

    ``jax.Config`` declares its options at runtime, so its type stub has no attributes for
    them; reading them here keeps that in one place.
    """
    return getattr(jax.config, name)


def x64_enabled() -> bool:
    """Whether JAX may compute in float64 (``jax_enable_x64``)."""
    return bool(jax_option("jax_enable_x64"))


def underflow_remedy(dtype, smallest_sigma0: float | None) -> str:
    """What a user can do when an init underflows ``dtype``: a larger sigma0 and, in float32, float64
    (asking for dtype float64 when JAX has x64 on, else enabling it: the library never does)."""
    larger = f"use sigma0 >= {ceil_text(smallest_sigma0)}" if smallest_sigma0 is not None else "scale W0 up"
    if np.dtype(dtype) == np.float64:
        return larger
    if x64_enabled():  # float32 was asked for explicitly
        return f"use dtype float64 or {larger}"
    return f"enable float64 (jax.config.update('jax_enable_x64', True); the nqf command always does) or {larger}"


def ceil_text(x: float) -> str:
    """x > 0 rounded *up* to two significant digits, as text ('1.9e-147'): a bound to quote."""
    e = math.floor(math.log10(x))
    mantissa = math.ceil(round(x / 10.0 ** (e - 1), 9)) / 10.0  # round(): 1.8000000001 stays 1.8
    if mantissa >= 10.0:
        mantissa, e = mantissa / 10.0, e + 1
    if -3 <= e <= 3:
        return f"{mantissa * 10.0**e:g}"
    return f"{mantissa:.1f}e{e:+d}".replace("e+", "e").replace(".0e", "e")
