"""The mechanism of nqf's size checks: a rough estimate of what a run holds (or how long it
takes), compared before anything is allocated or compiled, and refused in one NqfError line
that says the estimate and what is available.

The estimates themselves live with what they estimate and are documented in
``nqf.theory.costs``: the M-flow's and ``predict``'s in ``nqf.theory.predict.sizes``,
training's in ``nqf.training.runs``, a comparison's, a departure's and ``nqf structure``'s in
``nqf.theory.costs``; the checks that refuse with them are ``nqf.comparison.checks`` (the
library's, the sweeps' and the command line's) and ``nqf.cli.checks``. JAX-free.
"""

from __future__ import annotations

import os

from nqf.core.errors import NqfError

BYTES = 8  # float64
# the cost model of the time estimates (measured for small problems on a 2-core machine)
FLOPS_PER_SECOND = 2e9
SECONDS_PER_STEP = 1e-6
# The M-flow's jumps (``nqf.theory.flow.jumps``) take powers of an s x s matrix, s = D (D + 1) / 2
# (D = d times the blocks of the optimizer's carry: 1 for GD, 2 with a momentum buffer), up to
# MAX_JUMP_STATE (d = 39, 27 with a buffer); beyond, of a Krylov model whose basis holds
# KRYLOV_DIM = 64 vectors of the state, up to MAX_KRYLOV_STATE entries (d = 1023 for GD, 256 MiB).
MAX_JUMP_STATE = 800
MAX_KRYLOV_STATE = 1 << 19


def can_jump(d: int, blocks: int) -> bool:
    """Whether the M-flow of d parameters a unit, carried in ``blocks`` factors of d rows (the
    factor and the optimizer's buffers), can jump linear stretches at all."""
    D = blocks * d
    return D * (D + 1) // 2 <= MAX_KRYLOV_STATE


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def available_bytes() -> int:
    """Memory available now (psutil), else the physical memory (sysconf)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError, AttributeError, RuntimeError):  # psutil missing or unsupported platform
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def size_text(nbytes: float) -> str:
    """A number of bytes in words: ``1.5 GiB``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes / 2**10:.3g} KiB"


def check_memory(what: str, needed: float, advice: str, available: int | None = None) -> None:
    """NqfError when ``needed`` bytes exceed half of the memory available now (``available``:
    that number as the caller measured it, else :func:`available_bytes`)."""
    available = available_bytes() if available is None else available
    if needed > available / 2:
        raise NqfError(
            f"{what} needs about {size_text(needed)} of memory (rough estimate), more than half of the "
            f"{size_text(available)} available; {advice}"
        )


def duration_text(seconds: float) -> str:
    """A duration in words: ``40 s``, ``12 min``, ``3.1 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def check_time(what: str, seconds: float, limit: float, advice: str) -> None:
    """NqfError when a run's estimated ``seconds`` exceed ``limit`` (for a computation that has a
    faster way to the same answer, which ``advice`` names)."""
    if seconds > limit:
        raise NqfError(
            f"{what} would take roughly {duration_text(seconds)} (rough estimate), more than the "
            f"{duration_text(limit)} allowed; {advice}"
        )
