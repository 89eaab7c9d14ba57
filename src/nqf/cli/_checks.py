"""The command line's own checks before any compute: ``nqf structure``'s memory and
``--departure``'s (``nqf predict``, ``nqf compare``) memory and time, refused in one ``error:``
line or announced in one ``note:`` line on stderr. The estimates are ``nqf.theory.costs``'s; the
refusal and the note are ``nqf.comparison.checks``' (shared with the library and the sweeps).
"""

from __future__ import annotations

import sys

from nqf.comparison.checks import ANNOUNCE_AFTER_S, announce, check_memory
from nqf.theory.costs import departure_total_cost, structure_bytes


def check_structure(arch) -> None:
    """Refuse ``nqf structure`` of an architecture whose A(x), Hessian and expansion check cannot fit."""
    check_memory(
        f"structure of {arch.name} (d = {arch.dim}, K = {arch.outputs})",
        structure_bytes(arch),
        "choose smaller sizes (inputs, dims, kernel, ...)",
    )


def check_departure(
    arch, samples: int, width: int, steps: int, loss: str, route: str, optimizer: str = "gd", runs: int = 1
) -> None:
    """Refuse a departure (``predict --departure``) that cannot fit with its prediction; announce a long one.
    ``runs``: how many departures the command computes one after another (``compare``: one per
    M-flow and seed); the memory is one's, the time all of theirs."""
    total, seconds, path = departure_total_cost(arch, samples, width, steps, loss, route, optimizer, runs)
    used = min(int(samples), 2048)
    check_memory(
        f"the departure (--departure) with d = {arch.dim}, width {width}, {used} samples",
        total,
        "use a smaller --width, fewer samples or leave out --departure",
    )
    maps = "" if path == "none" else f"; the unlearned rows' maps {path.replace('_', '-')}, d n = {arch.dim * width}"
    if path in ("none", "factored"):  # the benchmarked paths (benchmarks/bench_departure.py: 0.76-0.96 of measured)
        announce(f"departure (--departure{maps})", seconds, bound=True)
    elif seconds > ANNOUNCE_AFTER_S:  # a gated unit on 16 components of digits: 13 min estimated, over 34 measured
        print(
            f"note: departure (--departure{maps}): its time is not estimated on this path (only the factored "
            "path's estimate is checked against measurements); it may take many minutes (interrupt with Ctrl-C)",
            file=sys.stderr,
            flush=True,
        )
