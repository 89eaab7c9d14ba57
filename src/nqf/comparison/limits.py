"""Checks run before any compute (by the CLI and by sweeps): seeds, output paths, memory and time.

Everything here is cheap and allocates nothing large, so a command that cannot succeed
fails in well under a second with one ``error:`` line (exit 2), before JAX builds or
runs anything. Nothing is created on disk by a check (see :func:`check_output_path`).

Memory estimates (float64, 8 bytes a number; d = parameters per unit, n = width,
K = outputs, N = samples, D = numbers per input, S = seeds). They are rough on purpose
(lower bounds of what is held at the peak, no compiler scratch); a run is refused
when its estimate exceeds half of the memory available now (``psutil``). The mechanism
is ``nqf.core.memory``; the library refuses with the same estimates, before it allocates:
``nqf.predict`` and ``nqf.predict_grid`` predict's (``nqf.theory.predict.sizes``), ``nqf.compare``
compare's (:func:`check_compare_memory`), ``nqf.train`` and ``nqf.train_sweep`` train's
(``nqf.training.runs.check_train_memory``).

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
                larger of the curve (8 steps at once: 8 N n (K + 4)) and the corrections:
                the unlearned rows' maps, pushing c basis directions of D at a time through
                the linearised gradient (where the layer is no sum over units: a mixture
                of experts' network; else the units' Jacobians, a chunk of samples at a
                time within the same budget: ``factored``), N n (h + c e) with (h, e) = (15, 14 K + 3) for the
                quadratic model's ``linearised`` map (``nqf.theory.departure.plateaus.map_numbers``,
                measured from XLA's buffer sizes on mlp units), c as many as fit
                ``nqf.theory.departure.plateaus.MAP_BYTES`` (32 MiB, one direction at least; all d n
                when they fit: ``choose_path``), plus the maps' matrices J (d n x d n):
                4 (d n)^2 held at once, 3 more for the lowest curvature up to 1024 weights;
                beyond 4096 weights no J, one direction a step. And the process itself
                (Python, JAX, XLA and compiled programs): RUNTIME_BYTES, and
                DEPARTURE_RUNTIME_BYTES for the departure's own programs. Measured peak
                RSS of ``nqf predict --departure`` against this estimate: iris (width 64,
                3000 steps) 0.48 GiB against 0.54, the staircase (width 32, 600 steps) 0.52
                against 0.54, 569 samples, 6 inputs, 10 outputs (width 64, 600 steps) 0.60
                against 0.61

Time estimates (printed on stderr, ``note: ...``, when above ~10 s) are rough on
purpose: about 2e9 flops a second on the CPU plus ~1 microsecond a step (measured
for small problems on a 2-core machine); training through a declared readout (matrix
products) about 1.5e10, plus ~2 s of compilation a run: within 2x of `compare`'s wall time
at 4000-100000 steps on the staircase; a lower bound ("at least") for other units.
``nqf.predict_grid`` steps every point through every step: steps x (points x the M-flow's
flops a step / 2e9 + ``GRID_SECONDS_PER_STEP``, 10 microseconds, measured), refused above an
hour (``MAX_GRID_SECONDS``), where ``nqf.predict`` jumps the linear stretches.
The departure's corrections: per plateau (up to
min(K, d / 2) of them) the maps' matrices: from the units' own derivatives where the layer is a
sum over units (``factored``: N n Jacobians of one unit and the Gauss-Newton sum N K (d n)^2,
a matrix product, at 1.5e10 flops a second), else d n directions each, about N n (90 K + 10)
flops a direction over a model's two maps; their steps ((d n)^2 a step, eight runs over the
horizon, matrix-vector products), and ~5 s of compiling; `benchmarks/bench_departure.py`
compares the estimate with the first call's wall time.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from nqf.core import memory
from nqf.core.arguments import MAX_SEED as MAX_SEED
from nqf.core.arguments import MAX_STEPS as MAX_STEPS
from nqf.core.arguments import check_seed as check_seed
from nqf.core.errors import NqfError
from nqf.core.memory import BYTES, FLOPS_PER_SECOND, SECONDS_PER_STEP, can_jump, duration_text
from nqf.core.memory import check_memory as _check_memory
from nqf.core.optimizers import optimizer_record
from nqf.theory.predict.sizes import flow_cost as flow_cost
from nqf.theory.predict.sizes import numbers_in as _numbers
from nqf.theory.predict.sizes import predict_bytes

# nqf.train of a unit with a declared readout runs as matrix products: measured about 1.5e10 to
# 3e10 flops a second on the 2-core machine (staircase, width 64, 4000-100000 steps); plus its
# compilation, about 2 s a run (each optimizer, the quadratic model)
MATMUL_FLOPS_PER_SECOND = 1.5e10
COMPILE_SECONDS_PER_RUN = 2.0
ANNOUNCE_AFTER_S = 10.0
# What the process holds besides its arrays (Python, JAX, XLA's CPU client and the compiled
# programs): the peak RSS of a small ``nqf predict`` (iris, staircase: 0.27-0.29 GiB), and what the
# departure's programs add (their compiling and code: 0.2-0.24 GiB more on both, its arrays ~0.05)
RUNTIME_BYTES = 0.3 * 2**30
DEPARTURE_RUNTIME_BYTES = 0.2 * 2**30
# Compiling the departure's programs (the path, the curve, the plateau states and four maps):
# 4-8 s measured with the factored maps (benchmarks/bench_departure.py's first calls)
DEPARTURE_COMPILE_S = 5.0


def check_output_path(option: str, path: Path) -> Path:
    """NqfError unless ``path`` can be written as a file; creates nothing that stays.

    The folder must exist and be writable, and ``path`` must not be a folder (or a file
    that cannot be replaced). ``os.access`` answers for the permission bits; as root it
    says yes to everything but a read-only mount, so root also probes the folder with an
    empty temporary file, removed at once (pseudo file systems such as /proc refuse it).
    A name the OS cannot take (too long, a NUL byte) is one line too.
    """
    return one_line_path_errors(option, Path(path), _check_output_path)


def one_line_path_errors(option: str, path: Path, check) -> Path:
    """``check(option, path)``, with what the OS says of an impossible name (ENAMETOOLONG from
    stat, "embedded null byte") as one NqfError line naming ``option``."""
    try:
        return check(option, path)
    except NqfError:
        raise
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise NqfError(f"{option} {shown_path(path)}: {reason}") from None


def shown_path(path: str | os.PathLike, limit: int = 120) -> str:
    """``path`` for an error line: whole when short, else its start and end around an ellipsis."""
    text = os.fspath(path)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]} ({len(text)} characters)"


def _check_output_path(option: str, path: Path) -> Path:
    if len(path.name.encode()) > _name_max(path.parent):
        raise NqfError(f"{option} {shown_path(path)}: the file name is longer than the file system allows")
    if path.is_dir():
        raise NqfError(f"{option} {path} is a folder; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise NqfError(f"{option} {path}: folder {parent} does not exist")
    if not parent.is_dir():
        raise NqfError(f"{option} {path}: {parent} is not a folder")
    if path.exists() and not path.is_file():
        raise NqfError(f"{option} {path} exists and is not a regular file")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise NqfError(f"{option} {path}: cannot write in folder {parent} (permission denied)")
    try:
        if os.statvfs(parent).f_flag & os.ST_RDONLY:
            raise NqfError(f"{option} {path}: folder {parent} is on a read-only file system")
    except OSError:
        pass
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        try:
            fd, probe = tempfile.mkstemp(dir=parent, prefix=".nqf-probe-", suffix=path.suffix)
        except OSError as err:
            raise NqfError(f"{option} {path}: cannot write in folder {parent} ({err.strerror})") from None
        os.close(fd)
        os.unlink(probe)
    return path


def check_output_folder_path(option: str, path: Path) -> Path:
    """NqfError unless ``path`` is a writable folder, or can be made one; creates nothing that
    stays (as root, which ``os.access`` answers yes for, a temporary folder is made in the
    nearest existing folder and removed at once: pseudo file systems such as /proc refuse it)."""
    return one_line_path_errors(option, Path(path), _check_output_folder_path)


def _check_output_folder_path(option: str, path: Path) -> Path:
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe != path and not probe.is_dir():
        raise NqfError(f"{option} {shown_path(path)}: {shown_path(probe)} is not a folder")
    if path.exists() and not path.is_dir():
        raise NqfError(f"{option} {shown_path(path)} exists and is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise NqfError(f"{option} {shown_path(path)}: cannot write in {shown_path(probe)} (permission denied)")
    longest = _name_max(probe)
    for part in path.parts:
        if len(part.encode()) > longest:
            raise NqfError(f"{option} {shown_path(path)}: a folder name is longer than the file system allows")
    try:
        if os.statvfs(probe).f_flag & os.ST_RDONLY:
            raise NqfError(f"{option} {shown_path(path)}: {shown_path(probe)} is on a read-only file system")
    except OSError:
        pass
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        try:
            os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".nqf-probe-"))
        except OSError as err:
            raise NqfError(
                f"{option} {shown_path(path)}: cannot be written ({err.strerror} in {shown_path(probe)})"
            ) from None
    return path


def _name_max(folder: Path) -> int:
    """The longest file name the file system under ``folder`` takes (255 where it cannot say)."""
    probe = folder if str(folder) else Path(".")
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return os.pathconf(probe, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def available_bytes() -> int:
    """Memory available now (``nqf.core.memory.available_bytes``, looked up at each call)."""
    return memory.available_bytes()


def check_memory(what: str, needed: float, advice: str) -> None:
    """NqfError when ``needed`` bytes exceed half of the memory available now (``nqf.core.memory``;
    :func:`available_bytes` read here, so that a test can set it)."""
    _check_memory(what, needed, advice, available=available_bytes())


def announce(what: str, seconds: float, bound: bool = False, at_least: bool = False) -> None:
    """One ``note:`` line on stderr when a run will take long (a rough estimate; ``bound``: at
    most; ``at_least``: a lower bound, where the cost model is not calibrated)."""
    if seconds > ANNOUNCE_AFTER_S:
        span = duration_text(seconds)
        print(
            f"note: {what}: {'up to ' if bound else 'at least ' if at_least else ''}roughly {span} "
            "(rough estimate; interrupt with Ctrl-C)",
            file=sys.stderr,
            flush=True,
        )


def structure_bytes(arch) -> float:
    """Memory of ``nqf structure`` (module docstring)."""
    return BYTES * (6.0 * arch.outputs * arch.dim**2 + 4.0 * _numbers(arch.input_shape))


def check_structure(arch) -> None:
    check_memory(
        f"structure of {arch.name} (d = {arch.dim}, K = {arch.outputs})",
        structure_bytes(arch),
        "choose smaller sizes (inputs, dims, kernel, ...)",
    )


def check_predict(
    arch,
    samples: int,
    width: int,
    steps: int,
    loss: str,
    route: str,
    minibatches: bool,
    adaptive: bool = False,
    momentum: bool = False,
) -> None:
    """Refuse a prediction that cannot fit; announce a long one. ``adaptive``: the stepping may
    jump linear stretches, which it can only where the jump's state is small enough
    (``nqf.core.memory.can_jump``; ``momentum`` doubles it); elsewhere every step is counted."""
    _, flops = flow_cost(arch, samples, loss, route, minibatches)
    nbytes = predict_bytes(arch, samples, width, loss, route, minibatches)
    check_memory(
        f"predict with d = {arch.dim}, width {width}, {samples} samples",
        nbytes,
        "use a smaller --width, fewer samples or a smaller architecture",
    )
    what = f"M-flow of {steps} steps at ~{flops:.2g} flops a step"
    jumps = adaptive and can_jump(arch.dim, momentum)
    if jumps:
        what += " (adaptive stepping usually jumps most of them)"
    elif adaptive:
        what += f" (every one of them: no jump at d = {arch.dim})"
    announce(what, steps * (flops / FLOPS_PER_SECOND + SECONDS_PER_STEP), bound=jumps)


def task_samples(task) -> int:
    """N of a task, read from its options (the npz task reads its file's header)."""
    if task.name == "npz":
        return int(task.load()[0].shape[0])
    for option in ("samples", "prompts"):
        value = getattr(task, option, None)
        if value is not None:
            return int(value)
    return 1797  # digits: the whole data set


def compare_bytes(arch, samples: int, width: int, seeds: int) -> float:
    """Memory of a comparison on ``samples`` samples (module docstring)."""
    N, d, K = samples, arch.dim, arch.outputs
    flow_bytes, _ = flow_cost(arch, N)
    per_run = 5.0 * seeds * d * width + seeds * N * width * (K + 4.0)
    return flow_bytes + BYTES * (3.0 * N * _numbers(arch.input_shape) + 2.0 * per_run)


def check_compare_memory(
    task,
    arch,
    width: int,
    seeds: int,
    advice: str = "use a smaller width, fewer seeds, fewer samples or a smaller architecture",
) -> None:
    """Refuse a comparison that cannot fit (``nqf.compare`` itself, before the theory gate)."""
    N = task_samples(task)
    check_memory(
        f"compare with d = {arch.dim}, width {width}, {N} samples, {seeds} seed(s)",
        compare_bytes(arch, N, width, seeds),
        advice,
    )


def check_compare(task, arch, width: int, steps: int, seeds: int, optimizers: tuple[str, ...]) -> None:
    """Refuse a comparison that cannot fit; announce a long one."""
    check_compare_memory(
        task, arch, width, seeds, "use a smaller --width, fewer --seeds, fewer samples or a smaller architecture"
    )
    N, d = task_samples(task), arch.dim
    _, flow_flops = flow_cost(arch, N)
    runs = len(optimizers) + 1  # each optimizer and the quadratic model
    train_flops = 6.0 * N * d * width * seeds * runs
    # calibrated (within 2x of the measured time) for perceptron-like units on the matrix-product
    # path: a vector input, a declared readout, no gate; for other units (attention over tokens,
    # convolutions, experts) a unit costs more than its parameter count says: a lower bound
    calibrated = arch.readout is not None and arch.router is None and len(arch.input_shape) == 1
    flows = len(set(optimizers) | {"gd"})
    seconds = runs * COMPILE_SECONDS_PER_RUN + steps * (
        train_flops / MATMUL_FLOPS_PER_SECOND
        + flows * seeds * flow_flops / FLOPS_PER_SECOND
        + (runs + flows) * SECONDS_PER_STEP
    )
    announce(
        f"training {steps} steps x {runs} run(s) x {seeds} seed(s) on {N} samples", seconds, at_least=not calibrated
    )


def departure_cost(arch, samples: int, width: int, steps: int, corrections: bool = True) -> tuple[float, float, str]:
    """(bytes, seconds, path) of ``nqf.theory.departure.estimate`` on ``samples`` samples, on top of the
    prediction and the runtime (module docstring); ``corrections``: with the corrected switch-on
    steps (gd and momentum). ``path``: how the unlearned rows' maps are built (``factored``,
    ``dense``, ``chunked`` or ``matrix_free``: ``nqf.theory.departure.plateaus.choose_path`` for
    the network, the quadratic model being factored whenever the network's map is a matrix;
    ``none`` without corrections)."""
    from nqf.theory.departure.path import DEFAULT_SAMPLES
    from nqf.theory.departure.plateaus import EIGEN_LIMIT, choose_path, held_directions, map_bytes

    N, d, n, K = min(int(samples), DEFAULT_SAMPLES), arch.dim, int(width), arch.outputs
    size = d * n
    points = min(int(steps) + 1, 1000)  # at most nqf.theory.departure.estimate.DEFAULT_POINTS evaluated steps
    held = BYTES * (3.0 * N * (_numbers(arch.input_shape) + K) + 2.0 * points * size)
    curve = BYTES * 8.0 * N * n * (K + 4.0)
    curve_flops = points * N * n * 10.0 * (K + d)
    if not corrections:
        return held + curve, curve_flops / FLOPS_PER_SECOND, "none"
    paths = {model: choose_path(arch, N, n, model=model) for model in ("network", "quadratic")}
    path = paths["network"][0]
    matrices = 0.0 if path == "matrix_free" else BYTES * size * size * (4.0 + (3.0 if size <= EIGEN_LIMIT else 0.0))
    maps, flops, matmul_flops = 0.0, 0.0, 0.0
    for model, (model_path, chunk) in paths.items():
        if model_path == "factored":
            # the Jacobians of one chunk of samples (4 n K d + n d numbers a sample), then per
            # construction: N n Jacobians of one unit (d passes of ~10 (K + d) flops), the
            # Gauss-Newton sum N K (d n)^2 (matrix products), the units' Hessians
            maps = max(maps, BYTES * chunk * n * (4.0 * K * d + d))
            flops += 2.0 * N * n * d * 10.0 * (K + d) * (1.0 + d)
            matmul_flops += 2.0 * N * K * float(size) ** 2
        elif model_path == "matrix_free":  # one direction a step, four runs over the horizon
            flops += 4.0 * steps * N * n * (90.0 * K + 10.0)
        else:  # d n directions pushed through the whole layer, two constructions
            maps = max(
                maps,
                *(map_bytes(arch, model, c, N, n, held_directions(size, chunk)) for c in ("linearised", "near_zero")),
            )
            flops += size * N * n * (90.0 * K + 10.0)
    if path != "matrix_free":  # the maps' steps: (d n)^2 a step, eight runs over the horizon
        matmul_flops += 8.0 * steps * float(size) ** 2
    plateaus = max(1, min(K, d // 2))
    work = plateaus * (flops / FLOPS_PER_SECOND + matmul_flops / MATMUL_FLOPS_PER_SECOND)
    seconds = DEPARTURE_COMPILE_S + work + curve_flops / FLOPS_PER_SECOND
    shown = "factored" if all(p == "factored" for p, _ in paths.values()) else path
    return held + max(curve, maps + matrices), seconds, shown


def check_departure(
    arch, samples: int, width: int, steps: int, loss: str, route: str, optimizer: str = "gd", runs: int = 1
) -> None:
    """Refuse a departure (``predict --departure``) that cannot fit with its prediction; announce a long one.
    ``runs``: how many departures the command computes one after another (``compare``: one per
    M-flow and seed); the memory is one's, the time all of theirs."""
    record = optimizer_record(optimizer)
    flow_bytes, flow_flops = flow_cost(arch, samples, loss, route, record.minibatches)
    nbytes, seconds, path = departure_cost(arch, samples, width, steps, corrections=record.deterministic_flow)
    total = RUNTIME_BYTES + DEPARTURE_RUNTIME_BYTES + flow_bytes + BYTES * 3.0 * arch.dim * width + nbytes
    used = min(int(samples), 2048)
    check_memory(
        f"the departure (--departure) with d = {arch.dim}, width {width}, {used} samples",
        total,
        "use a smaller --width, fewer samples or leave out --departure",
    )
    # the quadratic path is run step by step (the curve's weights and the corrections' start)
    seconds += 2.0 * steps * (flow_flops / FLOPS_PER_SECOND + SECONDS_PER_STEP)
    seconds *= max(1, int(runs))
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
