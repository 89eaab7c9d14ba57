"""Measure nqf's departure curve (docs/departure.md, part (a)).

    .venv/bin/python docs/departure_measure.py

The tanh perceptron on the staircase (n = 32, sigma0 1e-6, lr 0.05, GD, 1000 steps, init
seed 0), data seeds 0-4: the relative gap ||f_net - f_quad|| / ||f_quad|| at W_t = P(t) W0
on all 256 samples, at a few steps. Prints a markdown table; float64.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import nqf  # noqa: E402

GAP_STEPS = (50, 90, 100, 133, 150, 200, 250, 300, 500, 1000)


def staircase(seeds=(0, 1, 2, 3, 4)) -> None:
    arch = nqf.get_architecture("mlp", inputs=8, outputs=4, activation="tanh")
    task = nqf.get_task("staircase")
    print("| data seed | " + " | ".join(f"t={s}" for s in GAP_STEPS) + " |")
    print("|---" * (len(GAP_STEPS) + 1) + "|")
    for seed in seeds:
        X, Y = task.generate(seed, dtype=np.float64)
        config = nqf.PredictConfig(width=32, sigma0=1e-6, lr=0.05, steps=1000, network=False, departure=True)
        found = nqf.predict(arch, X, Y, config).departure
        at = {s: found.relative_gap[np.searchsorted(found.steps, s)] for s in GAP_STEPS}
        print(f"| {seed} | " + " | ".join(f"{100 * at[s]:.1f}%" for s in GAP_STEPS) + " |")


if __name__ == "__main__":
    staircase()
