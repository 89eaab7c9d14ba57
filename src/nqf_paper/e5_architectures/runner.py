r"""E5's one runner, shared by every case: the run configs (:func:`case_specs`, in the order of
``CASES``, each family's from its module) and :func:`case_run`, which runs ``compare`` on one
case and records its grouped switch steps, plateaus, block norms, A(x) of a sample and the
case's own checks of A(x).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._base import RunSpec
from .attention import attention_specs
from .attention import structure_extras as attention_extras
from .common import CASES, NOT_COMPUTED, _autodiff_structure, group_switch_steps
from .config import ArchitecturesConfig
from .conv import conv_specs, frequency_extras
from .linear_attention import icl_specs
from .mlp import fixed_readout_specs, perceptron_specs
from .moe import moe_specs
from .moe import structure_extras as moe_extras

# The run configs of each case, {run name: run config}; the mixture of experts gives one run per E.
FAMILY_SPECS = {
    "perceptron": perceptron_specs,
    "fixed-readout": fixed_readout_specs,
    "attention": attention_specs,
    "linear-attention": icl_specs,
    "moe": moe_specs,
    "conv": conv_specs,
}


def case_specs(c: ArchitecturesConfig) -> dict[str, dict[str, Any]]:
    """{run name: run config} of every case in ``c.cases`` (the mixture of experts gives one run per E)."""
    specs: dict[str, dict[str, Any]] = {}
    for case in CASES:
        if case in c.cases:
            specs.update(FAMILY_SPECS[case](c))
    return specs


def runs(c: ArchitecturesConfig) -> list[RunSpec]:
    specs = case_specs(c)
    for name, spec in specs.items():
        _check_case(name, spec)
    return [RunSpec(name, spec, case_run) for name, spec in specs.items()]


def _check_case(name: str, spec: dict[str, Any]) -> None:
    """The run's task and architecture built once (their factories' checks, milliseconds), so that
    a config they refuse (a ``--set`` of an option that does not fit) fails before any run computes."""
    from nqf.architectures import get_architecture
    from nqf.core.errors import NqfError
    from nqf.training.tasks import get_task

    try:
        get_task(spec["task"][0], **spec["task"][1])
        if spec["arch"] is not None:
            get_architecture(spec["arch"][0], **spec["arch"][1])
    except NqfError as err:
        raise NqfError(f"E5 run {name}: {err}") from None


def case_run(run: dict[str, Any]) -> dict[str, Any]:
    """One case: ``compare`` (GD) plus the grouped switch steps, plateaus, block norms and A(x) of a sample."""
    with jax.enable_x64(True):
        task, comparison, sample = _compare(run)
        A = _autodiff_structure(comparison.arch, sample)
        groups = [list(group) for group in comparison.prediction.groups]
        curves = _grouped_curves(comparison, groups, float(run["compare"]["steps"]))
        record = _case_record(run, comparison, A, sample, groups, curves)
        if run["case"] == "conv":
            record["extras"].update(frequency_extras(comparison.arch, comparison, task, groups))
        return record


def _compare(run: dict[str, Any]):
    """The case's task, its ``compare`` result (GD, no closure check) and the first input sample.

    Call under ``jax.enable_x64(True)``.
    """
    from nqf.architectures import get_architecture
    from nqf.comparison.compare import CompareConfig, compare
    from nqf.training.tasks import get_task

    task_name, task_options = run["task"]
    task = get_task(task_name, **task_options)
    arch = None if run["arch"] is None else get_architecture(run["arch"][0], **run["arch"][1])
    cc = run["compare"]
    config = CompareConfig(
        width=cc["width"],
        sigma0=cc["sigma0"],
        lr=cc["lr"],
        steps=cc["steps"],
        seed=cc["seed"],
        data_seed=cc["data_seed"],
        network_budget=cc["network_budget"],
        closure=False,
    )
    comparison = compare(task, arch, config)
    X, _ = task.generate(cc["data_seed"], dtype="float64")
    return task, comparison, X[0]


def _grouped_curves(comparison, groups: list[list[int]], horizon: float) -> dict[str, dict[str, Any]]:
    """{"switch", "plateau", "steps", "loss"}: {source: values} for the network, quadratic model and
    M-flow, and the mean-field flow (``mean_field``) where predict computed it.

    Switch steps are per group of modes (:func:`group_switch_steps`); the plateau after a
    group is read at the log-time midpoint of the source's own switch steps.
    """
    from nqf.comparison.compare import measured_plateau_losses

    g = comparison.prediction.num_growing  # per mode: the comparison's own rows are the groups
    thresholds = comparison.prediction.thresholds
    net = comparison.network["gd"]
    quad = comparison.quadratic
    flow = comparison.prediction.flow
    curves = {
        "network": (np.asarray(net.steps), np.asarray(net.loss[0, 0]), np.asarray(net.occupations[0, 0])),
        "quadratic": (np.asarray(quad.steps), np.asarray(quad.loss[0, 0]), np.asarray(quad.occupations[0, 0])),
        "mflow": (np.asarray(flow.steps), np.asarray(flow.loss), np.asarray(flow.occupations)),
    }
    own = comparison.prediction.network  # the network's own prediction: the mean-field flow of its units
    if own is not None:
        curves["mean_field"] = (np.asarray(own.steps), np.asarray(own.loss), np.asarray(own.occupations))
    switch, plateau, loss, steps = {}, {}, {}, {}
    for source, (s, l, occ) in curves.items():
        switch[source] = group_switch_steps(s, occ[:, :g], thresholds, groups)
        plateau[source] = measured_plateau_losses(s, l, switch[source], horizon)
        loss[source], steps[source] = l, s
    return {"switch": switch, "plateau": plateau, "steps": steps, "loss": loss}


def _case_record(run: dict[str, Any], comparison, A: np.ndarray, sample, groups, curves) -> dict[str, Any]:
    """The case's record: architecture, A(x) of the sample, modes and groups, curves, the comparison."""
    arch = comparison.arch
    net = comparison.network["gd"]
    thresholds = comparison.prediction.thresholds
    growth = comparison.prediction.modes.growth[: comparison.prediction.num_growing]
    return {
        "case": run["case"],
        "task": run["task"][0],
        "arch": arch.name,
        "arch_options": {k: v for k, v in arch.options},
        "width": run["compare"]["width"],
        "blocks": [[b.name, b.start, b.stop] for b in arch.blocks],
        "structure_abs": np.abs(A[0]),
        "outputs": int(arch.outputs),
        "growth": growth,
        "groups": groups,
        "group_growth": np.array([growth[idx[0]] for idx in groups]),
        "group_threshold": np.array([thresholds[idx].sum() for idx in groups]),
        "switch": curves["switch"],
        "plateau": curves["plateau"],
        "steps": curves["steps"],
        "loss": curves["loss"],
        "block_names": list(net.block_names),
        "block_norms": np.asarray(net.block_norms[0, 0]),
        "defect": float(comparison.prediction.defect),
        "lv_applies": bool(comparison.prediction.lv_applies),
        "singular_plateau": comparison.plateau_predicted["singular_limit"][0],
        "comparison": comparison.to_json(),
        # why the network's own prediction (the mean-field flow) is missing, when it is
        "network_note": next(
            (note for note in comparison.prediction.notes if note.startswith("network (") and NOT_COMPUTED in note),
            "",
        ),
        "extras": _structure_extras(run["case"], arch, A, sample),
    }


def _structure_extras(case: str, arch, A: np.ndarray, x) -> dict[str, Any]:
    """Checks of A(x) (autodiff, float64) that the closed forms state."""
    if case == "attention":
        return attention_extras(arch, A)
    if case == "moe":
        return moe_extras(arch, A, x)
    return {}
