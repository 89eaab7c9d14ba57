#!/usr/bin/env python
"""Where a first prediction's time goes, stage by stage (``benchmarks/README.md``, the first call).

    NQF_CACHE_DIR=$(mktemp -d) .venv/bin/python benchmarks/profile_first_call.py            # the README's five lines
    NQF_CACHE_DIR=$(mktemp -d) .venv/bin/python benchmarks/profile_first_call.py iris.npz 0.05

Run it in a fresh process with an empty cache (a warm cache or an earlier call in the same
process hides the compilation). Each stage of ``nqf.predict`` (``nqf.theory.predict.stages``)
is timed by wrapping it; ``jax.monitoring`` attributes every compilation (tracing, lowering,
XLA) to the stage running at the time. The window includes the data's generation or loading.
"""

from __future__ import annotations

import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import nqf  # noqa: E402
from nqf.theory.predict import pipeline as predict_module  # noqa: E402
from nqf.theory.predict import stages as predict_stages  # noqa: E402

STAGES = (
    "gate",
    "data_route",
    "modes_of",
    "initial_occupations",
    "lv_system",
    "stability",
    "mflow",
    "lv_map",
    "mflow_switches",
    "closed_form",
    "vanishing_init",
    "power_law",
)
current = ["outside the stages"]
wall: dict[str, float] = {}
compile_s: dict[str, float] = {}
programs: dict[str, int] = {}


def timed(module, name: str) -> None:
    inner = getattr(module, name)

    def wrapper(*args, **kwargs):
        previous, current[0] = current[0], name
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            wall[name] = wall.get(name, 0.0) + time.perf_counter() - start
            current[0] = previous

    setattr(module, name, wrapper)


def on_event(event: str, duration: float, **_) -> None:
    if event.startswith("/jax/core/compile/"):
        compile_s[current[0]] = compile_s.get(current[0], 0.0) + duration
    if event == "/jax/core/compile/backend_compile_duration":
        programs[current[0]] = programs.get(current[0], 0) + 1


def main(argv: list[str]) -> None:
    for name in STAGES:
        timed(predict_stages, name)
    timed(predict_module, "initial_weights")
    jax.monitoring.register_event_duration_secs_listener(on_event)
    start = time.perf_counter()
    if argv:
        data = np.load(argv[0])
        X, Y = data["X"], data["Y"]
        arch = nqf.get_architecture("mlp", activation="tanh", inputs=X.shape[1], outputs=Y.shape[1])
        config = nqf.PredictConfig(width=64, lr=float(argv[1]), steps=3000, sigma0=1e-6)
    else:
        X, Y = nqf.get_task("staircase").generate(0)
        arch = nqf.get_architecture("mlp", activation="tanh")
        config = nqf.PredictConfig(width=32, lr=0.05, steps=800, sigma0=1e-6)
    p = nqf.predict(arch, X, Y, config)
    total = time.perf_counter() - start
    print(f"engine {p.engine}: {p.engine_reason}")
    print("| stage | wall s | compile s | programs |\n|---|---|---|---|")
    for name in ("outside the stages", "initial_weights", *STAGES):
        if name in wall or name in compile_s:
            print(f"| {name} | {wall.get(name, 0.0):.3f} | {compile_s.get(name, 0.0):.3f} | {programs.get(name, 0)} |")
    print(
        f"| total (data generation included) | {total:.3f} | {sum(compile_s.values()):.3f} | {sum(programs.values())} |"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
