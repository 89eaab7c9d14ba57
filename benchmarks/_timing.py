"""Timing helpers shared by the benchmark modules (``run.py`` and ``bench_*.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import numpy as np

# -- timing ----------------------------------------------------------------------------


@dataclass
class Timing:
    """Wall times in seconds: ``first`` call (compilation included where there is one),
    then ``repeats`` further calls."""

    first: float
    runs: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.runs)

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    def as_dict(self) -> dict:
        return {"first_s": self.first, "best_s": self.best, "median_s": self.median, "runs_s": self.runs}


_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
_compile_seconds = [0.0]


def _on_duration(event: str, duration: float, **_) -> None:
    if event in _COMPILE_EVENTS:
        _compile_seconds[0] += duration


jax.monitoring.register_event_duration_secs_listener(_on_duration)


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - start, out


def timed_with_compile(fn: Callable[[], object]) -> tuple[float, float, object]:
    """(wall s, of which JAX tracing + lowering + compiling s, output), the compile part as
    reported by ``jax.monitoring`` for every jit compiled during the call."""
    before = _compile_seconds[0]
    elapsed, out = _timed(fn)
    return elapsed, _compile_seconds[0] - before, out


def time_calls(fn: Callable[[], object], repeats: int, min_total_s: float = 1.0, max_calls: int = 200):
    """Call ``fn`` once (warm-up, compiles), then at least ``repeats`` more times and until
    the timed calls add up to ``min_total_s`` (at most ``max_calls``): short calls get many
    samples. Returns (Timing, the last output)."""
    first, out = _timed(fn)
    runs: list[float] = []
    while len(runs) < repeats or (sum(runs) < min_total_s and len(runs) < max_calls):
        elapsed, out = _timed(fn)
        runs.append(elapsed)
    return Timing(first, runs), out


# -- benchmarks ------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a benchmark reports: table rows, a summary and named targets (name -> met?)."""

    params: dict
    rows: list[dict]
    summary: dict
    targets: dict[str, bool]
    notes: list[str] = field(default_factory=list)


# -- fresh processes --------------------------------------------------------------------


def median_run(runs: list[dict], key: str = "call_s") -> dict:
    """The run whose ``key`` is the median of ``runs`` (the lower one for an even count: a run that
    happened, not an average of two)."""
    return sorted(runs, key=lambda run: run[key])[(len(runs) - 1) // 2]


def fresh_process(code: str, args: list[str], cache, timeout: float = 1800) -> dict:
    """``python -c code *args`` in a new process on the CPU with its own compilation cache
    directory ``cache`` (empty the first time): the JSON of its last line of stdout."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, JAX_PLATFORMS="cpu", NQF_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"child {args} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- output: one format for run.py and the stand-alone bench_*.py scripts ----------------


def _format(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if v == 0 or 1e-3 <= abs(v) < 1e5:
            return f"{v:.4g}" if abs(v) < 1 else f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
        return f"{v:.2g}"
    return str(value)


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_format(row.get(col, "")) for col in columns) + " |" for row in rows]
    return "\n".join(lines)


def print_outcome(outcome: Outcome, columns: list[str]) -> bool:
    """Print an outcome's table, targets and notes (markdown); True when every target is met."""
    print(markdown_table(outcome.rows, columns))
    for target, met in outcome.targets.items():
        print(f"- target: {target}: {'met' if met else 'MISSED'}")
    for note in outcome.notes:
        print(f"- note: {note}")
    return all(outcome.targets.values())
