"""What a run costs, estimated from its sizes before any compute: memory (bytes) and time (seconds)
of ``nqf structure``, a comparison and a departure. Pure functions of the sizes; the checks that
refuse or announce a run with them are ``nqf.comparison.checks`` (the library's and the sweeps')
and ``nqf.cli.checks`` (the command line's own). A prediction's cost (the M-flow's state, W0 and
M) is ``nqf.theory.predict.sizes``, training's ``nqf.training.runs.check_train_memory``.
JAX-free until a departure's cost is asked for.

Memory estimates (float64, 8 bytes a number; d = parameters per unit, n = width,
K = outputs, N = samples, D = numbers per input, S = seeds). They are rough on purpose
(lower bounds of what is held at the peak, no compiler scratch); a run is refused
when its estimate exceeds half of the memory available now (``psutil``). The mechanism
is ``nqf.core.memory``; the library refuses with the same estimates, before it allocates:
``nqf.predict`` and ``nqf.predict_grid`` predict's (``nqf.theory.predict.sizes``), ``nqf.compare``
compare's (:func:`compare_bytes`, ``nqf.comparison.checks.check_compare_memory``), ``nqf.train``
and ``nqf.train_grid`` train's (``nqf.training.runs.check_train_memory``).

    structure   A(x) by autodiff at one input, its Hessian and the expansion check:
                6 K d^2
    predict     M-flow state and its d x d matrices (M, G, C, eigenvectors, ...): 12 d^2;
                W0 and M = W W^T from it: 3 d n; the data and their float64 copy:
                2 N (D + K); the data's structure: p^2 on the moments route (S), else
                the per-sample factors N h (h numbers a sample), capped by chunking at
                max(2^26, 16 h)
    train       per run, the records at R checkpoints (loss, ||W||, m occupations, B
                block norms; on the device and on the host): 2 R (2 + m + B), R = steps + 1
                unless ``checkpoints`` asks for fewer; weights, gradient, two optimizer
                slots and W0 (5 d n); the activations N n (K + 4)
    compare     the same for the M-flows, plus the data draw (3 N D), plus per
                optimizer run, all S seeds at once: weights, gradients, two optimizer
                slots and W0 (5 S d n) and the per-sample activations of the forward
                and backward pass (S N n (K + 4)); twice that for the quadratic model
                running alongside
    departure   predict's, plus (N: at most 2048 samples, P <= 1000 evaluated steps) the
                samples 3 N (D + K), the path's weights and velocities 2 P d n, and the
                curve (8 steps at once: 8 N n (K + 4)). And the process itself (Python, JAX,
                XLA and compiled programs): RUNTIME_BYTES, and DEPARTURE_RUNTIME_BYTES for the
                departure's own programs

Time estimates (printed on stderr, ``note: ...``, when above ~10 s) are rough on
purpose: about 2e9 flops a second on the CPU plus ~1 microsecond a step (measured
for small problems on a 2-core machine); training through a declared readout (matrix
products) about 1.5e10, plus ~2 s of compilation a run: within 2x of `compare`'s wall time
at 4000-100000 steps on the staircase; a lower bound ("at least") for other units.
``nqf.predict_grid`` steps every point through every step: steps x (points x the M-flow's
flops a step / 2e9 + ``GRID_SECONDS_PER_STEP``, 10 microseconds, measured), refused above an
hour (``MAX_GRID_SECONDS``), where ``nqf.predict`` jumps the linear stretches.
The departure curve: the quadratic path stepped one step at a time, the network and its
quadratic form at P evaluated steps (about 10 (K + d) flops a sample and unit each), and
DEPARTURE_COMPILE_S of compiling.
"""

from __future__ import annotations

from nqf.core.memory import BYTES, FLOPS_PER_SECOND, SECONDS_PER_STEP
from nqf.optimizers import optimizer_record
from nqf.theory.predict.sizes import flow_cost
from nqf.theory.predict.sizes import numbers_in as _numbers

# nqf.train of a unit with a declared readout runs as matrix products: measured about 1.5e10 to
# 3e10 flops a second on the 2-core machine (staircase, width 64, 4000-100000 steps); plus its
# compilation, about 2 s a run (each optimizer, the quadratic model)
MATMUL_FLOPS_PER_SECOND = 1.5e10
COMPILE_SECONDS_PER_RUN = 2.0
# What the process holds besides its arrays (Python, JAX, XLA's CPU client and the compiled
# programs): the peak RSS of a small ``nqf predict`` (iris, staircase: 0.27-0.29 GiB), and what the
# departure's programs add (their compiling and code: 0.2-0.24 GiB more on both, its arrays ~0.05)
RUNTIME_BYTES = 0.3 * 2**30
DEPARTURE_RUNTIME_BYTES = 0.2 * 2**30
# Compiling the departure's programs (the path and the curve): a fresh `nqf predict --departure`
# of the staircase (width 32, 1000 steps) took 0.95 s more than without it, nearly all compiling
DEPARTURE_COMPILE_S = 1.0


def structure_bytes(arch) -> float:
    """Memory of ``nqf structure`` (module docstring)."""
    return BYTES * (6.0 * arch.outputs * arch.dim**2 + 4.0 * _numbers(arch.input_shape))


def flow_seconds(steps: int, flops: float) -> float:
    """Time of ``steps`` M-flow steps at ``flops`` a step, every step counted (module docstring)."""
    return steps * (flops / FLOPS_PER_SECOND + SECONDS_PER_STEP)


def compare_bytes(arch, samples: int, width: int, seeds: int) -> float:
    """Memory of a comparison on ``samples`` samples (module docstring)."""
    N, d, K = samples, arch.dim, arch.outputs
    flow_bytes, _ = flow_cost(arch, N)
    per_run = 5.0 * seeds * d * width + seeds * N * width * (K + 4.0)
    return flow_bytes + BYTES * (3.0 * N * _numbers(arch.input_shape) + 2.0 * per_run)


def compare_seconds(
    arch, samples: int, width: int, steps: int, seeds: int, optimizers: tuple[str, ...]
) -> tuple[float, bool]:
    """(seconds, calibrated) of a comparison on ``samples`` samples: training each optimizer and
    the quadratic model, and the M-flows beside them (module docstring). ``calibrated``: the
    estimate is within 2x of the measured time (perceptron-like units on the matrix-product path:
    a vector input, a declared readout, no gate); for other units (attention over tokens,
    convolutions, experts) a unit costs more than its parameter count says: a lower bound."""
    N, d = samples, arch.dim
    _, flow_flops = flow_cost(arch, N)
    runs = len(optimizers) + 1  # each optimizer and the quadratic model
    train_flops = 6.0 * N * d * width * seeds * runs
    calibrated = arch.readout is not None and arch.router is None and len(arch.input_shape) == 1
    flows = len(set(optimizers) | {"gd"})
    seconds = runs * COMPILE_SECONDS_PER_RUN + steps * (
        train_flops / MATMUL_FLOPS_PER_SECOND
        + flows * seeds * flow_flops / FLOPS_PER_SECOND
        + (runs + flows) * SECONDS_PER_STEP
    )
    return seconds, calibrated


def departure_cost(arch, samples: int, width: int, steps: int) -> tuple[float, float]:
    """(bytes, seconds) of ``nqf.theory.departure.estimate`` (the departure curve) on ``samples``
    samples, on top of the prediction and the runtime (module docstring)."""
    from nqf.theory.departure.path import DEFAULT_SAMPLES

    N, d, n, K = min(int(samples), DEFAULT_SAMPLES), arch.dim, int(width), arch.outputs
    points = min(int(steps) + 1, 1000)  # at most nqf.theory.departure.estimate.DEFAULT_POINTS evaluated steps
    held = BYTES * (3.0 * N * (_numbers(arch.input_shape) + K) + 2.0 * points * d * n)
    curve = BYTES * 8.0 * N * n * (K + 4.0)
    curve_flops = points * N * n * 10.0 * (K + d)
    return held + curve, DEPARTURE_COMPILE_S + curve_flops / FLOPS_PER_SECOND


def departure_total_cost(
    arch, samples: int, width: int, steps: int, loss: str, route: str, optimizer: str = "gd", runs: int = 1
) -> tuple[float, float]:
    """(bytes, seconds) of ``predict --departure``: the departure (:func:`departure_cost`) with
    its prediction's M-flow, W0 and M (3 d n) and the runtime; the seconds add the quadratic path,
    run step by step, and count ``runs`` departures one after another (``compare``: one per M-flow
    and seed), the bytes one's."""
    record = optimizer_record(optimizer)
    flow_bytes, flow_flops = flow_cost(arch, samples, loss, route, record.minibatches)
    nbytes, seconds = departure_cost(arch, samples, width, steps)
    total = RUNTIME_BYTES + DEPARTURE_RUNTIME_BYTES + flow_bytes + BYTES * 3.0 * arch.dim * width + nbytes
    seconds += flow_seconds(steps, flow_flops)  # the quadratic path, run step by step (the curve's weights)
    seconds *= max(1, int(runs))
    return total, seconds
