"""What a prediction holds and costs, estimated before any of it is built: the M-flow's state and
the data's structure (:func:`flow_cost`), W0 and M from it (:func:`predict_bytes`), and the one-line
refusal of ``nqf.predict`` and ``nqf.predict_grid`` when it cannot fit (:func:`check_predict_memory`).

The numbers and their measurements are documented in ``nqf.theory.costs`` (whose checks for
the command line and the sweeps read them from here). JAX-free until an estimate is asked for.
"""

from __future__ import annotations

from typing import Any

from nqf.core.arguments import real_array
from nqf.core.errors import NqfError
from nqf.core.memory import BYTES, check_memory


def numbers_in(shape) -> int:
    """How many numbers an array of ``shape`` holds."""
    total = 1
    for s in shape:
        total *= int(s)
    return total


def _held_per_sample(arch) -> int:
    from nqf.theory.data_matrices.moments import term_shapes

    shapes = term_shapes(arch, "float64")
    return sum(K * R * (dl + dr) for K, R, dl, dr in shapes)


def flow_cost(arch, samples: int, loss: str = "squared", route: str = "auto", minibatches: bool = False):
    """(bytes, flops a step) of the M-flow on ``samples`` samples (``nqf.theory.costs``'s docstring)."""
    from nqf.theory.data_matrices.moments import MAX_HELD_STRUCTURE, choose_route

    d = arch.dim
    try:
        choice = choose_route(arch, samples, loss, route=route, minibatches=minibatches, dtype="float64")
    except NqfError:
        choice = choose_route(arch, samples, loss, route="auto", minibatches=minibatches, dtype="float64")
    held = _held_per_sample(arch)
    if choice.route == "moments":
        structure, flops = float(choice.packed_size or 0) ** 2, choice.moments_flops or 0.0
    else:
        structure = float(min(samples * held, max(MAX_HELD_STRUCTURE, 16 * held)))
        flops = choice.samples_flops or 0.0
    data = 2.0 * samples * (numbers_in(arch.input_shape) + arch.outputs)
    return BYTES * (12.0 * d * d + structure + data), float(flops) + 2.0 * d**3 / 100


def predict_bytes(arch, samples: int, width: int, loss: str, route: str, minibatches: bool) -> float:
    """Memory of one prediction: the M-flow's (:func:`flow_cost`) and W0 (d, n) with M = W0 W0^T from it."""
    nbytes, _ = flow_cost(arch, samples, loss, route, minibatches)
    return nbytes + BYTES * 3.0 * arch.dim * width


def sample_count(X: Any, data: Any) -> int:
    """N of the samples a prediction reads: 0 when data matrices are given (what they hold is held
    already) or there are no samples; else the rows of X (NqfError when X is no array of numbers)."""
    if data is not None or X is None:
        return 0
    shape = real_array("inputs X", X).shape
    return int(shape[0]) if shape else 0


def check_predict_memory(arch, samples: int, width: int, loss: str, route: str, minibatches: bool) -> None:
    """NqfError (one line: the estimate and the memory available) when a prediction of ``width``
    units on ``samples`` samples cannot fit; before anything of it is allocated."""
    check_memory(
        f"predict with d = {arch.dim}, width {width}, {samples} samples",
        predict_bytes(arch, samples, width, loss, route, minibatches),
        "use a smaller width, fewer samples or a smaller architecture",
    )
