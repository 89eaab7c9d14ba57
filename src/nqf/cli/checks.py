"""The command line's own checks before any compute: ``nqf structure``'s memory and
``--departure``'s (``nqf predict``, ``nqf compare``) memory and time, refused in one ``error:``
line or announced in one ``note:`` line on stderr. The estimates are ``nqf.theory.costs``'s, the
refusal ``nqf.core.memory``'s, the note ``nqf.comparison.checks``' (shared with the library and the sweeps).
"""

from __future__ import annotations

from nqf.comparison.checks import announce
from nqf.core.memory import check_memory
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
    total, seconds = departure_total_cost(arch, samples, width, steps, loss, route, optimizer, runs)
    used = min(int(samples), 2048)
    check_memory(
        f"the departure (--departure) with d = {arch.dim}, width {width}, {used} samples",
        total,
        "use a smaller --width, fewer samples or leave out --departure",
    )
    announce("departure (--departure)", seconds, bound=True)
