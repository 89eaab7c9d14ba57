"""Toy experiments for the reproduce/report tests: no numerics, just known numbers.

Run ``r<i>`` of experiment T1 records value = scale * (i + 1) (+ a seed-dependent
integer that is zero for seed 0) and a short curve; the claim "sum of values equals
scale * n(n+1)/2" is exact, so it is confirmed unless ``wrong_by`` shifts the
prediction. If ``NQF_TOY_MARKERS`` names a file, every run appends "start <exp>/<run>"
and "end <exp>/<run>" lines to it, so tests can count what was (re)computed.

``python -m tests._toy_experiments OUT [--jobs J] [--sleep S]`` runs ``reproduce`` on
these experiments (used by the interrupt test, which kills that process).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from nqf.core.errors import NqfError
from nqf_paper import Claim, Experiment, ExperimentResult, RunSpec, Tolerance


@dataclass(frozen=True)
class ToyConfig:
    runs: int = 3
    scale: float = 2.0
    seed: int = 0
    sleep: float = 0.0
    wrong_by: float = 0.0
    fail_run: int = -1
    crash_run: int = -1
    kind: Literal["plain", "squared"] = "plain"
    sizes: tuple[int, ...] = (1, 2)
    cutoff: float | None = None
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise NqfError(f"runs must be >= 1, got {self.runs}")

    @classmethod
    def quick(cls) -> ToyConfig:
        return cls()

    @classmethod
    def full(cls) -> ToyConfig:
        return cls(runs=5)


def _mark(line: str) -> None:
    path = os.environ.get("NQF_TOY_MARKERS")
    if path:
        with open(path, "a") as handle:
            handle.write(line + "\n")
            handle.flush()


def toy_run(config: dict) -> dict:
    name = f"{config['experiment']}/r{config['index']}"
    _mark(f"start {name}")
    if config["index"] == config["fail_run"]:
        raise RuntimeError(f"toy run {name} fails on purpose")
    if config["index"] == config["crash_run"]:
        os._exit(3)  # the worker process dies, as when killed for memory
    time.sleep(config["sleep"])
    value = config["scale"] * (config["index"] + 1) + 0 * config["seed"]
    if config["kind"] == "squared":
        value = value**2
    curve = config["scale"] * np.linspace(0.0, 1.0, 5) * (config["index"] + 1)
    _mark(f"end {name}")
    return {"value": value, "curve": curve, "steps": np.arange(5)}


def _runs_for(experiment: str):
    def runs(config: ToyConfig) -> list[RunSpec]:
        shared = {
            "experiment": experiment,
            "scale": config.scale,
            "seed": config.seed,
            "sleep": config.sleep,
            "fail_run": config.fail_run,
            "crash_run": config.crash_run,
            "kind": config.kind,
        }
        return [RunSpec(f"r{i}", {**shared, "index": i}, toy_run) for i in range(config.runs)]

    return runs


def toy_summarise(config: ToyConfig, records: dict) -> ExperimentResult:
    n = config.runs
    values = [records[f"r{i}"]["value"] for i in range(n)]
    predicted = config.scale * n * (n + 1) / 2 + config.wrong_by
    if config.kind == "squared":
        predicted = None
    claims = (
        Claim(
            claim="the values sum to scale·n(n+1)/2",
            measured_what="sum of the runs' values",
            predicted=predicted,
            measured=float(sum(values)),
            tolerance=Tolerance("relative", 1e-12),
            why_missing="no closed form for the squared toy" if predicted is None else "",
        ),
        Claim(
            claim="the last value is at least scale",
            measured_what="value of the last run",
            predicted=config.scale,
            measured=values[-1],
            tolerance=Tolerance("at_least", 0.0),
        ),
        Claim(
            claim="a mode that never switches on",
            measured_what="switch-on step",
            predicted=10.0,
            measured=None,
            tolerance=Tolerance("absolute", 1.0),
            why_missing="the mode never reached half its fixed point",
            unit="steps",
        ),
    )
    curves = {name: records[name]["curve"] for name in sorted(records)}
    return ExperimentResult(claims, text="A toy with <known> numbers.\n\nSecond paragraph.", data={"curves": curves})


def toy_plot(result: ExperimentResult, figure_dir: Path):
    from nqf.report import axis_label, curve, new_figure, save_figure, setup_axes

    fig, ax = new_figure()
    for index, (name, values) in enumerate(result.data["curves"].items()):
        ax.plot(np.arange(len(values)), values, **curve("network", index, f"GD, {name}"))
    ax.plot([0, 4], [0, 0], **curve("limit", 0, "zero"))
    setup_axes(ax, axis_label("training step", "steps"), axis_label("value", "1"))
    ax.legend()
    return [save_figure(fig, figure_dir, "T1_curves", "Toy curves, one per run.")]


def broken_plot(result: ExperimentResult, figure_dir: Path):
    raise RuntimeError("this plot is broken on purpose")


def make_registry() -> dict[str, Experiment]:
    return {
        "T1": Experiment(
            "T1", "toy sum", ToyConfig, _runs_for("T1"), toy_summarise, figures="tests._toy_experiments:toy_plot"
        ),
        "T2": Experiment("T2", "second toy", ToyConfig, _runs_for("T2"), toy_summarise, description="No figures."),
    }


def register() -> None:
    """Put the toy experiments into nqf's registry (for CLI subprocesses)."""
    from nqf_paper import EXPERIMENTS

    EXPERIMENTS.clear()
    EXPERIMENTS.update(make_registry())


if __name__ == "__main__":
    from nqf_paper.reproduce import reproduce

    out = sys.argv[1]
    args = dict(zip(sys.argv[2::2], sys.argv[3::2], strict=True))
    overrides = [f"T1.sleep={args.get('--sleep', '0')}", f"T2.sleep={args.get('--sleep', '0')}"]
    reproduce(out, jobs=int(args.get("--jobs", "1")), overrides=overrides, experiments=make_registry())
    print("finished")
