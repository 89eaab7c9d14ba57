"""Checks run before any compute (by ``nqf.compare``, the sweeps and the command line): refuse a
prediction or a comparison that cannot fit in memory, and announce a long one on stderr.

Everything here is cheap and allocates nothing large, so a run that cannot succeed fails in well
under a second with one NqfError line (the command line's ``error:`` line, exit 2), before JAX
builds or runs anything. The estimates are the cost models of ``nqf.theory.predict.sizes`` and
``nqf.theory.costs`` (documented there); the refusal is ``nqf.core.memory``'s, against the memory
available now (``nqf.core.memory.available_bytes``, read at each check). The command line's
own checks (``nqf structure``, ``--departure``) are ``nqf.cli.checks``.
"""

from __future__ import annotations

import sys

from nqf.core.memory import can_jump, check_memory, duration_text
from nqf.optimizers import AbstractClosedOptimizer, optimizer_record
from nqf.theory.costs import compare_bytes, compare_seconds, flow_seconds
from nqf.theory.predict.sizes import flow_cost, predict_bytes

ANNOUNCE_AFTER_S = 10.0


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


def check_predict(
    arch,
    samples: int,
    width: int,
    steps: int,
    loss: str,
    route: str,
    optimizer: str = "gd",
    adaptive: bool = False,
) -> None:
    """Refuse a prediction by ``optimizer`` that cannot fit; announce a long one. ``adaptive``:
    the stepping may jump linear stretches, which it can only on the full batch and where the
    jump's state (d rows per block of the optimizer's carry) is small enough
    (``nqf.core.memory.can_jump``); elsewhere every step is counted."""
    record = optimizer_record(optimizer)
    minibatches = record.minibatches
    adaptive = adaptive and not minibatches
    blocks = 1 + record.buffers if isinstance(record, AbstractClosedOptimizer) else 1
    _, flops = flow_cost(arch, samples, loss, route, minibatches)
    nbytes = predict_bytes(arch, samples, width, loss, route, minibatches)
    check_memory(
        f"predict with d = {arch.dim}, width {width}, {samples} samples",
        nbytes,
        "use a smaller --width, fewer samples or a smaller architecture",
    )
    what = f"M-flow of {steps} steps at ~{flops:.2g} flops a step"
    jumps = adaptive and can_jump(arch.dim, blocks)
    if jumps:
        what += " (adaptive stepping usually jumps most of them)"
    elif adaptive:
        what += f" (every one of them: no jump at d = {arch.dim})"
    announce(what, flow_seconds(steps, flops), bound=jumps)


def task_samples(task) -> int:
    """N of a task, read from its options (the npz task reads its file's header)."""
    if task.name == "npz":
        return int(task.load()[0].shape[0])
    for option in ("samples", "prompts"):
        value = getattr(task, option, None)
        if value is not None:
            return int(value)
    return 1797  # digits: the whole data set


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
    """Refuse a comparison that cannot fit; announce a long one (``nqf.theory.costs.compare_seconds``:
    a lower bound, "at least", where its cost model is not calibrated)."""
    check_compare_memory(
        task, arch, width, seeds, "use a smaller --width, fewer --seeds, fewer samples or a smaller architecture"
    )
    N = task_samples(task)
    seconds, calibrated = compare_seconds(arch, N, width, steps, seeds, optimizers)
    runs = len(optimizers) + 1  # each optimizer and the quadratic model
    announce(
        f"training {steps} steps x {runs} run(s) x {seeds} seed(s) on {N} samples", seconds, at_least=not calibrated
    )
