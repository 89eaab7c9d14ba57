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

Here: the checked :class:`Spec`, the entry points and the readers of the sections that name what
is run (the tables, ``[sweep]``, ``[task]``, ``[arch]``, ``[settings]``; the task and the
architecture are read into an ``Owner``, which the axes extend); the vocabulary, the tables'
models and the checking of a table (``validate``) are in :mod:`nqf.scans.sweep.spec_values`, the
axes, zip and figures in :mod:`nqf.scans.sweep.spec_axes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nqf.core.errors import NqfError
from nqf.core.output_paths import shown_path

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
from .spec_values import (
    FIGURE_KEYS,
    GIVEN_SETTINGS,
    MAX_POINTS,
    MODES,
    REQUIRED,
    SETTINGS,
    SWEEP_KEYS,
    TOP_KEYS,
    TRACED,
    Figures,
    Owner,
    Problems,
    Sweep,
    Tables,
    option_model,
    validate,
)

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


# -- the sections that name what is run: each reader notes every problem and goes on --------------


def read_tables(raw: dict, problems: Problems) -> dict[str, dict]:
    """The spec's tables by name (an absent or bad one empty); unknown top-level keys are problems."""
    tables = validate(Tables, raw, "", problems, lambda key: _misplaced(key, raw[key]))
    return {key: tables.get(key, {}) for key in TOP_KEYS}


def _misplaced(key: str, value: Any) -> str:
    """The problem of a key at the top level that is no table: when it is a key of a table (TOML
    puts ``mode = "train"`` above the first ``[sweep]`` line at the top), which one, and the
    problem of its value there, the one a spec with the key in its table gets."""
    homes = ["sweep"] if key in SWEEP_KEYS else []
    homes += ["task", "arch"] if key == "name" else []
    homes += ["settings"] if any(key in known for known in SETTINGS.values()) else []
    homes += ["figures"] if key in FIGURE_KEYS else []
    if not homes:
        return f"unknown key; a spec has {', '.join(TOP_KEYS)}"
    if len(homes) > 1:
        return f"unknown key at the top level; {key} is a key of {' or '.join(f'[{h}]' for h in homes)}"
    (home,) = homes
    problem = f"unknown key at the top level; {key} is a key of [{home}]: put it below a [{home}] line"
    mode = next(m for m in MODES if home != "settings" or key in SETTINGS[m])
    model = Sweep if home == "sweep" else Figures if home == "figures" else GIVEN_SETTINGS[mode]
    there = Problems()
    validate(model, {key: value}, home, there, lambda _: "")
    return f"{problem}, where it {there[0].split(': ', 1)[1]}" if there else problem


def read_sweep(sweep: dict, path: Path, problems: Problems) -> dict[str, Any]:
    """``[sweep]``: mode (compare by default), zip, batch_size, name (the spec file's stem by default)."""
    given = validate(Sweep, sweep, "sweep", problems, lambda key: f"unknown key; [sweep] takes {', '.join(SWEEP_KEYS)}")
    return {"mode": "compare", "zip": [], "batch_size": None, "name": path.stem, **given}


def read_figures(figures: dict, problems: Problems) -> dict[str, Any]:
    """``[figures]``: heatmap and curves, as given (checked against the axes in :mod:`nqf.scans.sweep.spec_axes`)."""
    return validate(
        Figures, figures, "figures", problems, lambda key: f"unknown key; [figures] takes {', '.join(FIGURE_KEYS)}"
    )


def read_options(owner: Owner, table: dict, problems: Problems) -> None:
    """The options given in ``[task]`` or ``[arch]`` (but the name) into ``owner.options``, each
    typed like its default; none when the owner has no name."""
    if owner.name is not None:
        model = option_model(owner.section, owner.known)
        owner.options.update(validate(model, table, owner.section, problems, owner.no_option))


def read_task(table: dict, path: Path, problems: Problems) -> tuple[Owner, Path | None]:
    """``[task]``: the task and its options, and the data file of the npz task (relative to the spec)."""
    from nqf.training.tasks import TASKS, task_options

    table = dict(table)
    task = Owner("task", table.pop("name", None))
    if task.name is None:
        problems.bad("task.name", "missing; name a task (" + ", ".join(TASKS) + ")")
    else:
        try:
            task.known = task_options(task.name)
        except NqfError as err:
            problems.bad("task.name", str(err))
            task.name = None
    read_options(task, table, problems)
    data_file = None
    if task.name == "npz":
        given = task.options.get("path")
        if not given:
            problems.bad("task.path", 'the npz task needs path = "FILE.npz" (relative to the spec)')
        else:
            try:
                data_file = (path.parent / given).resolve()
                found = data_file.is_file()
            except (OSError, ValueError, TypeError) as err:  # a name too long for the OS, a NUL byte
                problems.bad(
                    "task.path", f"cannot use {shown_path(str(given))}: {getattr(err, 'strerror', None) or err}"
                )
                return task, None
            if not found:
                problems.bad("task.path", f"no such file {shown_path(data_file)}")
            else:
                from nqf.core.input_files import check_npz

                try:  # its arrays' headers against the file and the memory, before anything reads it
                    check_npz(data_file, ("X", "Y"))
                except NqfError as err:
                    problems.bad("task.path", str(err))
            task.options["path"] = str(data_file)
    return task, data_file


def natural_architecture(task: Owner, problems: Problems) -> tuple[str, dict] | None:
    """(name, options) of the task's own architecture; None for the npz task or a bad task."""
    from nqf.training.tasks import get_task

    if task.name is None or task.name == "npz":
        return None
    try:
        return get_task(task.name, **task.options).natural_architecture()
    except (NqfError, TypeError, ValueError) as err:
        problems.bad("task", str(err))
        return None


def read_arch(table: dict, task: Owner, natural: tuple[str, dict] | None, problems: Problems) -> Owner:
    """``[arch]``: the architecture (the task's own when options but no name are given) and its options."""
    from nqf.architectures import architecture_options

    table = dict(table)
    arch = Owner("arch", table.pop("name", None))
    if arch.name is not None or table:
        label = arch.name or (natural[0] if natural else None)
        if label is None:
            problems.bad("arch.name", "missing; name an architecture (nqf structure --list)")
        else:
            try:
                arch.known = architecture_options(label)
            except NqfError as err:
                problems.bad("arch.name", str(err))
                label = None
        arch.name = label
    read_options(arch, table, problems)
    if task.name == "npz" and arch.name is None:
        problems.bad("arch.name", "the npz task needs an architecture ([arch] name = ...)")
    return arch


def read_settings(table: dict, mode: str, problems: Problems) -> dict[str, Any]:
    """``[settings]``: the fixed settings of the mode, checked (a bad one left out)."""

    def unknown(key: str) -> str:
        other = [m for m in MODES if key in SETTINGS[m]]
        hint = f" (a setting of mode {other[0]})" if other else ""
        return f"unknown setting{hint}; mode {mode} takes {', '.join(SETTINGS[mode])}"

    return validate(GIVEN_SETTINGS[mode], table, "settings", problems, unknown)
