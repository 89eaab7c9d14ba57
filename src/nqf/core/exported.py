r"""Traced programs kept across processes: ``jax.export`` artifacts beside the compilation cache.

JAX's persistent compilation cache (``nqf.core.cache``) skips compiling, but its key is the
lowered program, so every new process still traces the Python function. For a few
programs whose tracing dominates a warm ``nqf predict`` (diffrax's implicit ODE solve),
:func:`call_exported` also keeps the traced and lowered program: it serialises
``jax.export.export(fn)`` for the argument shapes into ``<cache dir>/exported/`` and later
processes deserialise and call it. Active only while the compilation cache is on; any
failure (no cache, a program with host callbacks, an unreadable or foreign artifact)
falls back to calling ``fn`` directly, so the result never depends on the cache.

The artifact's name hashes the function's name, the argument shapes and dtypes, the
static arguments, the versions of jax and jaxlib and the source of the module that
defines ``fn``: a changed line there traces afresh.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import tempfile
from pathlib import Path

import jax

from nqf.core.precision import jax_option


def _artifact_path(fn, args, statics: dict) -> Path | None:
    directory = jax_option("jax_compilation_cache_dir")
    if not directory:
        return None
    import jaxlib

    module = inspect.getmodule(fn)
    try:
        source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        return None
    key = repr(
        (
            fn.__module__,
            fn.__qualname__,
            [(tuple(a.shape), str(a.dtype)) for a in jax.tree_util.tree_leaves(args)],
            sorted(statics.items()),
            jax.__version__,
            jaxlib.__version__,
            jax_option("jax_enable_x64"),
            os.environ.get("EQX_ON_ERROR", ""),
            hashlib.sha256(source.encode()).hexdigest(),
        )
    )
    name = f"{fn.__name__}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.jaxexport"
    return Path(directory) / "exported" / name


def call_exported(fn, *args, **statics):
    """fn(*args, **statics) through a stored ``jax.export`` artifact (module docstring).

    args: arrays (a pytree); statics: hashable keyword arguments fixed at tracing.
    """
    path = _artifact_path(fn, args, statics)
    if path is None:
        return fn(*args, **statics)
    exported = None
    try:
        exported = jax.export.deserialize(bytearray(path.read_bytes()))
    except Exception:  # missing, truncated or foreign: trace again below
        exported = None
    if exported is None:
        try:
            jitted = jax.jit(lambda *a: fn(*a, **statics))
            exported = jax.export.export(jitted)(*args)
            _write_atomically(path, exported.serialize())
        except Exception:  # host callbacks, an unwritable folder: no artifact, same result
            return fn(*args, **statics)
    return exported.call(*args)


def _write_atomically(path: Path, data: bytes | bytearray) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except OSError:
        pass
