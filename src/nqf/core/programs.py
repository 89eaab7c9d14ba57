"""Fewer compiled programs: host arrays moved to the device without compiling, lengths
padded to a few bucket sizes so that a new horizon reuses a compiled program, and the
in-process caches of compiled programs, traces and verdicts (:class:`LruCache`).

In jax 0.10, ``jnp.asarray(numpy_array)`` stages a copy through a small compiled program, one
per new shape and dtype (about 20-40 ms each on the CPU); a first prediction made eleven of
them. ``jax.device_put`` transfers the buffer without compiling anything. A scan whose length
is a static argument compiles once per length: padded to :func:`bucket_length`, 800 and 900
steps share one program.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import jax
import numpy as np


def to_device(x, dtype=None) -> jax.Array:
    """``jnp.asarray(x, dtype)`` for host data (numpy arrays, scalars, lists) without a compile.

    The value is first made a numpy array of ``dtype`` (default: x's own dtype, with Python
    floats as JAX's default float), then transferred.
    """
    if dtype is None and isinstance(x, float):
        dtype = jax.numpy.result_type(float)
    return jax.device_put(np.asarray(x, dtype=dtype))


def bucket_length(n: int, floor: int = 64, cap: int | None = None) -> int:
    """The length a compiled loop runs for n items: the next power of two >= max(n, floor),
    at most ``cap`` (when n <= cap). The caller computes that many and keeps the first n."""
    size = 1 << max(int(n) - 1, floor - 1, 0).bit_length()
    return size if cap is None else min(size, max(int(cap), int(n)))


class LruCache:
    """``build()``'s value per key, the ``size`` most recently used kept: the process's caches of
    compiled runs, closed-form programs, jaxpr traces and expansion verdicts."""

    def __init__(self, size: int):
        self.size = size
        self.entries: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The value kept for ``key``, else ``build()`` kept (the least recently used beyond ``size`` dropped)."""
        if key in self.entries:
            self.entries.move_to_end(key)
            return self.entries[key]
        value = self.entries[key] = build()
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return value

    def clear(self) -> None:
        self.entries.clear()
