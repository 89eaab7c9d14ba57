"""Checks run before any compute (by the CLI and by sweeps): seeds, output paths, memory and time.

Everything here is cheap and allocates nothing large, so a command that cannot succeed
fails in well under a second with one ``error:`` line (exit 2), before JAX builds or
runs anything. Nothing is created on disk by a check (see :func:`check_output_path`).

Memory estimates (float64, 8 bytes a number; d = parameters per unit, n = width,
K = outputs, N = samples, D = numbers per input, S = seeds). They are rough on purpose
(lower bounds of what is held at the peak, no compiler scratch); a run is refused
when its estimate exceeds half of the memory available now (``psutil``).

    structure   A(x) by autodiff at one input, its Hessian and the expansion check:
                6 K d^2
    predict     M-flow state and its d x d matrices (M, G, C, eigenvectors, ...): 12 d^2;
                W0 and M = W W^T from it: 3 d n; the data and their float64 copy:
                2 N (D + K); the data's structure: p^2 on the moments route (S), else
                the per-sample factors N h (h numbers a sample), capped by chunking at
                max(2^26, 16 h)
    compare     the same for the M-flows, plus the data draw (3 N D), plus per
                optimizer run, all S seeds at once: weights, gradients, two optimizer
                slots and W0 (5 S d n) and the per-sample activations of the forward
                and backward pass (S N n (K + 4)); twice that for the quadratic model
                running alongside

Time estimates (printed on stderr, ``note: ...``, when above ~10 s) are rough on
purpose: about 2e9 flops a second on the CPU plus ~1 microsecond a step (measured
for small problems on a 2-core machine).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from nqf.core.errors import NqfError

# Seeds are 32-bit unsigned integers (JAX and NumPy generators take them all; larger
# Python ints overflow JAX's int64 key conversion)
MAX_SEED = 2**32 - 1
# Step counts and checkpoints are int32 inside the compiled loops
MAX_STEPS = 2**31 - 1
BYTES = 8  # float64
FLOPS_PER_SECOND = 2e9
SECONDS_PER_STEP = 1e-6
ANNOUNCE_AFTER_S = 10.0


def check_seed(option: str, value: int, count: int = 1) -> int:
    """``value`` if ``value .. value + count - 1`` are all seeds in [0, MAX_SEED]; else NqfError."""
    if value < 0 or value + count - 1 > MAX_SEED:
        span = "" if count == 1 else f" (with {count} seeds, up to {MAX_SEED - count + 1})"
        raise NqfError(f"{option} must be an integer in [0, {MAX_SEED}]{span}, got {value}")
    return value


def check_output_path(option: str, path: Path) -> Path:
    """NqfError unless ``path`` can be written as a file; creates nothing that stays.

    The folder must exist and be writable, and ``path`` must not be a folder (or a file
    that cannot be replaced). ``os.access`` answers for the permission bits; as root it
    says yes to everything but a read-only mount, so root also probes the folder with an
    empty temporary file, removed at once (pseudo file systems such as /proc refuse it).
    """
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


def available_bytes() -> int:
    """Memory available now (psutil), else the physical memory (sysconf)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError, AttributeError, RuntimeError):  # psutil missing or unsupported platform
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _size(nbytes: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes / 2**10:.3g} KiB"


def check_memory(what: str, needed: float, advice: str) -> None:
    """NqfError when ``needed`` bytes exceed half of the memory available now."""
    available = available_bytes()
    if needed > available / 2:
        raise NqfError(
            f"{what} needs about {_size(needed)} of memory (rough estimate), more than half of the "
            f"{_size(available)} available; {advice}"
        )


def announce(what: str, seconds: float, bound: bool = False) -> None:
    """One ``note:`` line on stderr when a run will take long (a rough estimate; ``bound``: at most)."""
    if seconds > ANNOUNCE_AFTER_S:
        if seconds < 120:
            span = f"{seconds:.0f} s"
        elif seconds < 7200:
            span = f"{seconds / 60:.0f} min"
        else:
            span = f"{seconds / 3600:.1f} h"
        print(
            f"note: {what}: {'up to ' if bound else ''}roughly {span} (rough estimate; interrupt with Ctrl-C)",
            file=sys.stderr,
            flush=True,
        )


def _numbers(shape) -> int:
    total = 1
    for s in shape:
        total *= int(s)
    return total


def structure_bytes(arch) -> float:
    """Memory of ``nqf structure`` (module docstring)."""
    return BYTES * (6.0 * arch.outputs * arch.dim**2 + 4.0 * _numbers(arch.input_shape))


def _held_per_sample(arch) -> int:
    from nqf.theory.moments import _term_shapes

    shapes = _term_shapes(arch, "float64")
    if shapes is None:
        return arch.outputs * arch.dim**2
    return sum(K * R * (dl + dr) for K, R, dl, dr in shapes)


def flow_cost(arch, samples: int, loss: str = "squared", route: str = "auto", minibatches: bool = False):
    """(bytes, flops a step) of the M-flow on ``samples`` samples (module docstring)."""
    from nqf.theory.moments import MAX_HELD_STRUCTURE, choose_route

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
    data = 2.0 * samples * (_numbers(arch.input_shape) + arch.outputs)
    return BYTES * (12.0 * d * d + structure + data), float(flops) + 2.0 * d**3 / 100


def check_structure(arch) -> None:
    check_memory(
        f"structure of {arch.name} (d = {arch.dim}, K = {arch.outputs})",
        structure_bytes(arch),
        "choose smaller sizes (inputs, dims, kernel, ...)",
    )


def check_predict(
    arch, samples: int, width: int, steps: int, loss: str, route: str, minibatches: bool, adaptive: bool = False
) -> None:
    """Refuse a prediction that cannot fit; announce a long one."""
    nbytes, flops = flow_cost(arch, samples, loss, route, minibatches)
    nbytes += BYTES * 3.0 * arch.dim * width
    check_memory(
        f"predict with d = {arch.dim}, width {width}, {samples} samples",
        nbytes,
        "use a smaller --width, fewer samples or a smaller architecture",
    )
    what = f"M-flow of {steps} steps at ~{flops:.2g} flops a step"
    if adaptive:
        what += " (adaptive stepping usually jumps most of them)"
    announce(what, steps * (flops / FLOPS_PER_SECOND + SECONDS_PER_STEP), bound=adaptive)


def task_samples(task) -> int:
    """N of a task, read from its options (the npz task reads its file's header)."""
    if task.name == "npz":
        return int(task.load()[0].shape[0])
    for option in ("samples", "prompts"):
        value = getattr(task, option, None)
        if value is not None:
            return int(value)
    return 1797  # digits: the whole data set


def check_compare(task, arch, width: int, steps: int, seeds: int, optimizers: tuple[str, ...]) -> None:
    """Refuse a comparison that cannot fit; announce a long one."""
    N, d, K = task_samples(task), arch.dim, arch.outputs
    D = _numbers(arch.input_shape)
    flow_bytes, flow_flops = flow_cost(arch, N)
    per_run = 5.0 * seeds * d * width + seeds * N * width * (K + 4.0)
    nbytes = flow_bytes + BYTES * (3.0 * N * D + 2.0 * per_run)
    check_memory(
        f"compare with d = {arch.dim}, width {width}, {N} samples, {seeds} seed(s)",
        nbytes,
        "use a smaller --width, fewer --seeds, fewer samples or a smaller architecture",
    )
    runs = len(optimizers) + 1  # each optimizer and the quadratic model
    train_flops = 6.0 * N * d * width * seeds * runs
    flows = len(set(optimizers) | {"gd"})
    seconds = steps * (
        (train_flops + flows * seeds * flow_flops) / FLOPS_PER_SECOND + (runs + flows) * SECONDS_PER_STEP
    )
    announce(f"training {steps} steps x {runs} run(s) x {seeds} seed(s) on {N} samples", seconds)
