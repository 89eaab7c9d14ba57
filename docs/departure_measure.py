"""Measure nqf's departure curve and network-corrected switch-on steps (docs/departure.md).

    .venv/bin/python docs/departure_measure.py [staircase] [e5] [momentum]

staircase: the tanh perceptron on the staircase (n = 32, sigma0 1e-6, lr 0.05, GD, 1000 steps,
init seed 0), data seeds 0-4: the departure curve, and per mode the M-flow's, the corrected
(``linearised`` and ``near_zero``) and the trained network's switch-on steps (``nqf.compare``).
e5: E5's perceptron and mixture-of-experts cases (their configs), plateau losses as well.
momentum: heavy-ball momentum (beta 0.9, lr 0.05) on the staircase, data seeds 0-4.
Prints markdown tables; float64.
"""

from __future__ import annotations

import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np

import nqf
from nqf.theory.departure.estimate import departure

GAP_STEPS = (50, 90, 100, 133, 150, 200, 250, 300, 500, 1000)


def pct(a, b):
    return "n/a" if not (np.isfinite(a) and np.isfinite(b)) else f"{100 * (a - b) / b:+.1f}%"


def run_case(task, arch, config: nqf.CompareConfig, label: str):
    """compare() (network switch steps, plateaus) and departure() on its first-seed GD prediction."""
    arch = task.architecture() if arch is None else arch
    t0 = time.perf_counter()
    comp = nqf.compare(task, arch, config)
    t_compare = time.perf_counter() - t0
    p = comp.prediction
    X, Y = task.generate(config.data_seed, dtype=np.float64)
    t0 = time.perf_counter()
    dep = departure(arch, X, Y, p)
    t_dep = time.perf_counter() - t0
    return comp, dep, t_compare, t_dep


def staircase(seeds=(0, 1, 2, 3, 4)):
    arch = nqf.architectures.mlp(inputs=8, outputs=4, activation="tanh")
    task = nqf.get_task("staircase")
    rows, gaps, plateaus = [], [], []
    for d in seeds:
        config = nqf.CompareConfig(
            width=32, sigma0=1e-6, lr=0.05, steps=1000, data_seed=d, include_quadratic=False, closure=False
        )
        comp, dep, tc, td = run_case(task, arch, config, f"staircase d{d}")
        p = comp.prediction
        net = comp.network_switch["gd"][0]
        lin = dep.corrected_switch_steps["linearised"]
        nz = dep.corrected_switch_steps["near_zero"]
        for k in range(p.num_growing):
            rows.append((d, k + 1, p.mflow_switch_steps[k], lin[k], nz[k], net[k]))
        at = {s: dep.relative_gap[np.searchsorted(dep.steps, s)] for s in GAP_STEPS}
        gaps.append((d, at, dep.seconds, tc, td))
        plateaus.append((d, comp.plateau_network["gd"][0], comp.plateau_predicted["mflow"][0], dep.plateau_losses))
    print("\n### (a) departure gap ||f_net - f_quad|| / ||f_quad|| at W_t = P(t) W0 (all 256 samples)\n")
    print("| data seed | " + " | ".join(f"t={s}" for s in GAP_STEPS) + " |")
    print("|---" * (len(GAP_STEPS) + 1) + "|")
    for d, at, *_ in gaps:
        print(f"| {d} | " + " | ".join(f"{100 * at[s]:.1f}%" for s in GAP_STEPS) + " |")
    print("\n### (b) switch-on steps: M-flow, corrected, trained network (relative to the M-flow)\n")
    print("| data seed | mode | M-flow | corrected (linearised) | corrected (near_zero) | network |")
    print("|---|---|---|---|---|---|")
    for d, k, m, l, z, n in rows:
        print(f"| {d} | {k} | {m:.0f} | {l:.1f} ({pct(l, m)}) | {z:.1f} ({pct(z, m)}) | {n:.0f} ({pct(n, m)}) |")
    print("\n### network minus corrected, relative to the network's step\n")
    print("| data seed | mode | M-flow error | linearised error | near_zero error |")
    print("|---|---|---|---|---|")
    for d, k, m, l, z, n in rows:
        print(f"| {d} | {k} | {pct(m, n)} | {pct(l, n)} | {pct(z, n)} |")
    print("\n### plateau losses after mode k: network measured, M-flow, network plateau state (restricted minimum)\n")
    print("| data seed | mode | network (trained) | M-flow | restricted min, network | restricted min, quadratic |")
    print("|---|---|---|---|---|---|")
    for d, pn, pm, pl in plateaus:
        for k in range(len(pn)):
            print(f"| {d} | {k + 1} | {pn[k]:.4g} | {pm[k]:.4g} | {pl['network'][k]:.4g} | {pl['quadratic'][k]:.4g} |")
    print("\n### cost (s)\n")
    for d, _, sec, tc, td in gaps:
        print(f"- data seed {d}: departure {td:.1f} s (path {sec['path']:.2f}, curve {sec['curve']:.2f}, "
              f"corrections {sec.get('corrections', 0):.1f}); compare {tc:.1f} s")


def e5():
    """E5's perceptron (staircase, n 16, lr 0.05, 700 steps) and mixture of experts (E = 2, 4, 8, lr 0.1, 1200 steps)."""
    cases = [("perceptron", nqf.get_task("staircase"), 16, 0.05, 700)]
    cases += [(f"moe-E{e}", nqf.get_task("experts", experts=e), e, 0.1, 1200) for e in (2, 4, 8)]
    print("\n### E5 cases: switch-on steps (relative to the M-flow) and plateau losses\n")
    print("| case | mode | M-flow | corrected (linearised) | corrected (near_zero) | network "
          "| plateau: network (trained) | M-flow | restricted min, network | restricted min, quadratic |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    costs = []
    for label, task, width, lr, steps in cases:
        config = nqf.CompareConfig(
            width=width, sigma0=1e-6, lr=lr, steps=steps, data_seed=0, include_quadratic=False, closure=False
        )
        comp, dep, _tc, td = run_case(task, None, config, label)
        p = comp.prediction
        m = p.mflow_switch_steps
        lin, nz = dep.corrected_switch_steps["linearised"], dep.corrected_switch_steps["near_zero"]
        net = comp.network_switch["gd"][0]
        pn, pm = comp.plateau_network["gd"][0], comp.plateau_predicted["mflow"][0]
        pl = dep.plateau_losses
        for k in range(p.num_growing):
            print(f"| {label} | {k + 1} | {m[k]:.0f} | {lin[k]:.1f} ({pct(lin[k], m[k])}) | {nz[k]:.1f} ({pct(nz[k], m[k])}) "
                  f"| {net[k]:.0f} ({pct(net[k], m[k])}) | {pn[k]:.4g} | {pm[k]:.4g} ({pct(pm[k], pn[k])}) "
                  f"| {pl['network'][k]:.4g} ({pct(pl['network'][k], pn[k])}) | {pl['quadratic'][k]:.4g} |")
        at = {s: dep.relative_gap[min(np.searchsorted(dep.steps, s), dep.steps.size - 1)] for s in (100, 200, 400, steps)}
        costs.append((label, td, dep.seconds, at))
    print()
    for label, td, sec, at in costs:
        gaps = ", ".join(f"t={s}: {100 * v:.1f}%" for s, v in at.items())
        print(f"- {label}: departure {td:.1f} s (corrections {sec.get('corrections', 0):.1f} s); gap {gaps}")


def momentum(seeds=(0, 1, 2, 3, 4)):
    """Heavy-ball momentum (beta 0.9, lr 0.05, E6's settings) on the staircase, 400 steps."""
    arch = nqf.architectures.mlp(inputs=8, outputs=4, activation="tanh")
    task = nqf.get_task("staircase")
    print("\n### momentum 0.9, lr 0.05: switch-on steps (relative to the M-flow)\n")
    print("| data seed | mode | M-flow | corrected (linearised) | corrected (near_zero) | network |")
    print("|---|---|---|---|---|---|")
    for d in seeds:
        config = nqf.CompareConfig(
            width=32, sigma0=1e-6, lr=0.05, steps=400, data_seed=d, optimizers=("momentum",),
            include_quadratic=False, closure=False,
        )
        comp = nqf.compare(task, arch, config)
        p = comp.predictions["momentum"][0]
        X, Y = task.generate(d, dtype=np.float64)
        dep = departure(arch, X, Y, p)
        m, net = p.mflow_switch_steps, comp.network_switch["momentum"][0]
        lin, nz = dep.corrected_switch_steps["linearised"], dep.corrected_switch_steps["near_zero"]
        for k in range(p.num_growing):
            print(f"| {d} | {k + 1} | {m[k]:.0f} | {lin[k]:.1f} ({pct(lin[k], m[k])}) | {nz[k]:.1f} ({pct(nz[k], m[k])}) "
                  f"| {net[k]:.0f} ({pct(net[k], m[k])}) |")


if __name__ == "__main__":
    which = sys.argv[1:] or ["staircase"]
    if "staircase" in which:
        staircase()
    if "e5" in which:
        e5()
    if "momentum" in which:
        momentum()
