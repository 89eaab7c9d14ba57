"""JAX's persistent compilation cache for nqf: compiled programs are kept on disk, so a
second run of the same computation loads them instead of compiling them again.

It is on by default, for the command line and the library alike: importing nqf changes no
global JAX setting, but the first ``predict``, ``train``, ``train_grid`` or ``compare`` of a
process calls :func:`ensure_default_cache`, which switches the cache on at :func:`cache_dir`
unless ``NQF_CACHE_DIR`` is set and empty (the switch the command line's ``--no-cache``
sets too) or JAX already has a cache directory of the user's own (then that one is used and
nothing is changed). :func:`enable_compilation_cache` puts it elsewhere, at any time. A
first prediction compiles about fifteen small programs; with the cache, a later process
loads them from disk instead (``benchmarks/README.md``, ``first_call``).

Location (:func:`cache_dir`): ``$NQF_CACHE_DIR`` if set (an empty value switches the
cache off), else ``$XDG_CACHE_HOME/nqf/jax`` if XDG_CACHE_HOME is set to an absolute
path, else ``~/.cache/nqf/jax``.

A location that cannot be created or written only leaves the cache off; an unreadable
entry (truncated, garbage) is a cache miss that JAX recompiles (and reports as a
warning, which the command line silences). :func:`prune_unreadable_entries` removes
such entries so that the next run stores them afresh.

What is not cached: JAX does not store programs that call back into Python. Equinox's
runtime checks (used inside diffrax's ODE solves) are such callbacks unless the
environment variable ``EQX_ON_ERROR`` is ``nan`` or ``off`` when equinox is first
imported; the command line sets ``EQX_ON_ERROR=nan`` (unless already set) while the
cache is on.

The cache is trusted code: anyone who can write into the directory can make nqf run
arbitrary programs, so it is created private to the user (mode 0700).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

__all__ = ["cache_dir", "enable_compilation_cache", "ensure_default_cache", "prune_unreadable_entries"]

ENV_VAR = "NQF_CACHE_DIR"
# JAX's wording when reading or writing an entry fails (jax._src.compiler._cache_read/_cache_write)
CACHE_WARNING = re.compile(r"Error (reading|writing) persistent compilation cache entry")
_ENTRY_SUFFIX = "-cache"  # jax._src.lru_cache: entries are files KEY-cache


def cache_dir() -> Path | None:
    """Where the compilation cache lives; None when ``NQF_CACHE_DIR`` is set but empty.

    ``$NQF_CACHE_DIR``, else ``$XDG_CACHE_HOME/nqf/jax`` (XDG_CACHE_HOME absolute), else
    ``~/.cache/nqf/jax``; None also when no home directory can be determined.
    """
    explicit = os.environ.get(ENV_VAR)
    if explicit is not None:
        return Path(explicit).expanduser() if explicit.strip() else None
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):  # the XDG spec says relative values are to be ignored
        return Path(xdg) / "nqf" / "jax"
    try:
        return Path.home() / ".cache" / "nqf" / "jax"
    except (RuntimeError, KeyError, OSError):  # no HOME and no password entry
        return None


def _writable_directory(path: Path) -> bool:
    """Create ``path`` (private to the user) if needed and check that files can be written in it."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.is_dir():
            return False
        fd, probe = tempfile.mkstemp(prefix=".nqf-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
        return True
    except (OSError, ValueError):  # read-only, a file in the way, permissions, a NUL in the name
        return False


def enable_compilation_cache(path: str | os.PathLike[str] | None = None) -> Path | None:
    """Switch JAX's persistent compilation cache on, at ``path`` (default :func:`cache_dir`).

    Every compiled program is stored, however small or quick to compile (the minimum
    compile time and entry size are set to 0 and -1). Call it before the computations
    whose compilation should be cached; calling it again with another path moves the
    cache there. Sets JAX configuration (``jax_compilation_cache_dir``,
    ``jax_persistent_cache_min_compile_time_secs``,
    ``jax_persistent_cache_min_entry_size_bytes``), which is why nqf never calls it on
    import.

    Returns the directory in use, or None (cache left as it was) when the location is
    switched off (``NQF_CACHE_DIR=""``, or ``path=""``), or cannot be created or written.
    Never raises for a bad location.
    """
    if path is None:
        target = cache_dir()
    else:
        text = os.fspath(path)
        target = Path(text).expanduser() if str(text).strip() else None
    if target is None or not _writable_directory(target):
        return None
    target = target.resolve()

    import jax

    jax.config.update("jax_compilation_cache_dir", str(target))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no size floor, no override
    try:
        # JAX decides once per process whether (and where) it caches; forget that decision
        # so that this call also takes effect after earlier compilations
        from jax.experimental.compilation_cache import compilation_cache

        compilation_cache.reset_cache()
    except Exception:  # noqa: BLE001 - an older/newer JAX without it: the config update still applies
        pass
    return target


_default_decided = False


def ensure_default_cache() -> None:
    """Switch the persistent cache on at :func:`cache_dir`, once per process, unless it is
    switched off (``NQF_CACHE_DIR=""``) or JAX already has a cache directory (the user's own,
    or one :func:`enable_compilation_cache` set): the library's default (module docstring).
    Never raises: a location that cannot be written leaves the cache off."""
    global _default_decided
    if _default_decided:
        return
    _default_decided = True
    from nqf.core.precision import jax_option

    if jax_option("jax_compilation_cache_dir"):
        return
    enable_compilation_cache()


def prune_unreadable_entries(path: str | os.PathLike[str]) -> int:
    """Delete the cache entries in ``path`` that cannot be decompressed; returns how many.

    JAX never overwrites an entry, so a damaged one (garbage bytes, a truncated write)
    would be recompiled on every run; removing it lets the next run store it again.
    Entries that decompress are kept. Errors (unreadable directory, races with another
    process) are ignored.
    """
    try:
        from jax._src import compilation_cache as jax_cache  # the (de)compression JAX uses for entries

        decompress = jax_cache.decompress_executable
    except Exception:  # noqa: BLE001 - JAX internals moved: nothing to compare against, prune nothing
        return 0
    removed = 0
    try:
        entries = [p for p in Path(path).iterdir() if p.name.endswith(_ENTRY_SUFFIX)]
    except OSError:
        return 0
    for entry in entries:
        try:
            decompress(entry.read_bytes())
        except OSError:
            continue
        except Exception:  # noqa: BLE001 - zlib.error, ZstdError, ...: the entry is damaged
            try:
                entry.unlink()
                removed += 1
            except OSError:
                pass
    return removed
