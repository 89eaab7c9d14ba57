"""The sweep spec: a TOML file that names a task, an architecture, what to run per point,
fixed settings and grid axes; parsed and checked here without JAX.

    [sweep]                       # optional
    mode = "compare"              # or "predict"
    zip = [["lr", "steps"]]       # axes that vary together (equal lengths); the rest is a product
    batch_size = 8                # points per task (default: see nqf.scans.sweep.points)

    [task]
    name = "staircase"            # a built-in task, or "npz" with path = "data.npz" (relative to the spec)
    samples = 128                 # any option of the task (nqf structure --list)

    [arch]                        # optional: the task's natural architecture
    name = "mlp"
    activation = "tanh"

    [settings]                    # fixed values of what is not an axis
    width = 16
    steps = 300
    lr = 0.05
    optimizers = ["gd"]           # compare; predict takes optimizer = "gd"

    [axes]                        # one list, or a range, per axis
    sigma0 = {logspace = [-8, -2, 4]}    # 10^-8 .. 10^-2, 4 values
    seed = {range = [0, 6]}              # 0..5
    "arch.activation" = ["tanh", "sin"]  # task.NAME / arch.NAME: an option of the task / architecture

    [figures]                     # optional
    heatmap = ["sigma0", "seed"]  # two axes: the network-vs-theory error over them
    curves = [0, 5]               # point indices whose loss curves are drawn (or a count)

Settings (keys of ``[settings]`` and axis names): ``width``, ``steps``, ``lr``, ``sigma0``,
``seed``, ``data_seed``, ``allow_inapplicable`` and, for ``compare``, ``optimizers``,
``lr_sgd``/``lr_momentum``/``lr_adam``/``lr_muon``, ``beta``, ``batch``, ``closure``; for
``predict``, ``optimizer``, ``beta``, ``batch``, ``loss``, ``route``, ``stepping``: the fields of
:mod:`nqf.comparison.settings` (types, constraints, defaults; ``nqf compare`` and ``nqf predict``
take their options from the same models). ``width``, ``steps``, ``lr`` and ``sigma0`` are
required (a setting or an axis).

Every problem is one line naming its key path (``spec axes.sigma0: empty axis``, ``spec
axes.sigma0[2]: must be a positive finite number, got -1.0``; an axis reports its first bad
value); all of them are collected (:class:`SpecError`) so that one run shows every mistake.
The values are checked through pydantic, the references between keys by hand. The checks that need
the data and JAX (the learning rate against the stability bound, the theory gate, the
memory estimate) are in :mod:`nqf.scans.sweep.checks` (``check_points``).

Here: the checked :class:`Spec` and the entry points; the vocabulary, the tables' models and the
checking of a table (``validate``) are in :mod:`nqf.scans.sweep.spec_values`, the sections that
name what is run in :mod:`nqf.scans.sweep.spec_sections`, the axes, zip and figures in
:mod:`nqf.scans.sweep.spec_axes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nqf.core.errors import NqfError

from .spec_axes import (
    check_optimizers,
    check_required,
    check_size,
    count_points,
    read_axes,
    read_curves,
    read_heatmap,
    read_zip,
)
from .spec_sections import (
    Problems,
    natural_architecture,
    read_arch,
    read_figures,
    read_settings,
    read_sweep,
    read_tables,
    read_task,
)
from .spec_values import MAX_POINTS, REQUIRED, SETTINGS, TRACED

__all__ = [
    "MAX_POINTS",
    "REQUIRED",
    "SETTINGS",
    "TRACED",
    "Spec",
    "SpecError",
    "load_spec",
    "parse_spec",
]


class SpecError(NqfError):
    """Every problem of a spec, one line each (``lines``)."""

    def __init__(self, lines: list[str]):
        self.lines = list(lines)
        super().__init__("; ".join(self.lines))


@dataclass(frozen=True)
class Spec:
    """A checked spec. ``axes``: name -> values (lists, ranges expanded); ``groups``: the axes
    as product factors, each a tuple of names zipped together (a lone axis is a group of one)."""

    path: Path
    mode: str
    task: str
    task_options: dict[str, Any]
    arch: str | None
    arch_options: dict[str, Any]
    settings: dict[str, Any]
    axes: dict[str, list]
    groups: tuple[tuple[str, ...], ...]
    batch_size: int | None = None
    heatmap: tuple[str, str] | None = None
    curves: tuple[int, ...] | int = 3
    name: str = ""
    data_file: Path | None = None


def load_spec(path: str | Path) -> Spec:
    """Read and check the spec at ``path``; SpecError with every problem (one line each)."""
    from nqf.core.input_files import read_toml  # numpy: imported when a spec is read

    path = Path(path)
    try:
        raw = read_toml(path, f"spec {path}")  # a missing file, not TOML, nested too deeply: one line
    except NqfError as err:
        raise SpecError([str(err)]) from None
    return parse_spec(raw, path)


def parse_spec(raw: dict, path: Path) -> Spec:
    """Check a spec's parsed TOML (see the module docstring): the sections in turn, every problem
    noted (SpecError with all of them)."""
    problems = Problems()
    tables = read_tables(raw, problems)
    sweep = read_sweep(tables["sweep"], path, problems)
    mode = sweep["mode"]
    task, data_file = read_task(tables["task"], path, problems)
    natural = natural_architecture(task, problems)
    arch = read_arch(tables["arch"], task, natural, problems)
    settings = read_settings(tables["settings"], mode, problems)
    axes = read_axes(tables["axes"], mode, tables["settings"], task, arch, natural, problems)
    check_required(tables, problems)
    groups = read_zip(sweep["zip"], tables["axes"], axes, problems)
    figures = read_figures(tables["figures"], problems)
    heatmap = read_heatmap(figures.get("heatmap"), tables["axes"], problems)
    total = count_points(axes, groups)
    curves = read_curves(figures.get("curves", 3), total, problems)
    check_size(total, problems)
    check_optimizers(mode, settings, axes, problems)
    if problems:
        raise SpecError(problems)
    assert task.name is not None  # a missing or unknown task is a problem above
    return Spec(
        path=path,
        mode=mode,
        task=task.name,
        task_options=task.options,
        arch=arch.name,
        arch_options=arch.options,
        settings=settings,
        axes=axes,
        groups=groups,
        batch_size=sweep["batch_size"],
        heatmap=heatmap,
        curves=curves,
        name=sweep["name"],
        data_file=data_file,
    )
