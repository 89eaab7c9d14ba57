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

import concurrent.futures
import functools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import jax
import numpy as np

from nqf.core.memory import usable_cores


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


_PROGRAMS = LruCache(16)


@functools.cache
def _threads(workers: int, name: str) -> concurrent.futures.ThreadPoolExecutor:
    """The process's pool of ``workers`` threads called ``name`` (made on first use)."""
    return concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=name)


def background_compile(jitted, static: tuple, shapes: tuple) -> concurrent.futures.Future:
    """The future of ``jitted`` compiled for its leading ``static`` arguments and the
    ``shapes`` (jax.ShapeDtypeStruct, or pytrees of them) of the rest; call its result with the
    arrays alone.

    Traced and lowered here, in the caller's thread (with the caller's JAX configuration),
    compiled in one worker thread (XLA releases the GIL while it compiles), so the caller
    goes on meanwhile: ``predict`` compiles the network's particle flow while its quadratic
    stages run. Kept per (function, static arguments, shapes, dtypes, float width, backend,
    default device), the 16 most recently used: a second call with the same compiles nothing;
    a compile that failed is tried again. (jit's own cache does not see these programs: the callers use the
    compiled program they get here, always.) Under ``jax.disable_jit()`` the future holds the
    function itself, run eagerly, as jit runs it there.
    """
    if jax.config.jax_disable_jit:  # type: ignore[attr-defined]  # jax.disable_jit(): the function, run eagerly
        eager: concurrent.futures.Future = concurrent.futures.Future()
        eager.set_result(functools.partial(jitted, *static))
        return eager
    key = (
        jitted,
        static,
        jax.tree.structure(shapes),  # shapes may hold pytrees of them
        tuple((s.shape, str(s.dtype)) for s in jax.tree.leaves(shapes)),
        # the float and integer widths the caller's configuration gives (jax.enable_x64 included)
        str(jax.numpy.result_type(float)),
        str(jax.numpy.result_type(int)),
        jax.default_backend(),
        str(jax.config.jax_default_device),  # type: ignore[attr-defined]  # jax.default_device(...) included
    )
    kept = _PROGRAMS.entries.get(key)
    if kept is not None and kept.done() and kept.exception() is not None:
        del _PROGRAMS.entries[key]

    def submit() -> concurrent.futures.Future:
        lowered = jitted.lower(*static, *shapes)
        return _threads(1, "nqf-compile").submit(lowered.compile)

    return _PROGRAMS.get(key, submit)


def background_calls(calls: Sequence[Callable[[], Any]]) -> list[concurrent.futures.Future]:
    """The futures of ``calls``, each submitted to the process's pool of as many threads as it has
    cores (``nqf.core.memory.usable_cores``): compiled programs release the GIL while they run, so
    on the CPU independent programs of one core each run side by side, and beside the caller.
    Under ``jax.disable_jit()`` (a setting of the caller's thread, as ``jax.enable_x64(...)`` is)
    the calls run here, in turn, and the futures come back done."""
    if jax.config.jax_disable_jit:  # type: ignore[attr-defined]
        done = []
        for call in calls:
            future: concurrent.futures.Future = concurrent.futures.Future()
            try:
                future.set_result(call())
            except Exception as error:  # kept in the future, raised by its result()
                future.set_exception(error)
            done.append(future)
        return done
    pool = _threads(usable_cores(), "nqf-run")
    return [pool.submit(call) for call in calls]
