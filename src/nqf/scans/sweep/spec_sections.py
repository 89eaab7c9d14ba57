"""Reading the sections of a sweep spec that name what is run: the top-level tables, ``[sweep]``,
``[task]``, ``[arch]`` and ``[settings]`` (the format: :mod:`nqf.scans.sweep.spec`).

Each reader notes every problem it finds in a :class:`Problems` (one line per key, the values'
checks through pydantic: :func:`nqf.scans.sweep.spec_values.validate`) and goes on, so that one
run shows every mistake; the task and the architecture are read into an
:class:`Owner` (its name, its options' defaults, the options given), which the axes
(:mod:`nqf.scans.sweep.spec_axes`) extend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nqf.core.errors import NqfError
from nqf.core.output_paths import shown_path

from .spec_values import (
    FIGURE_KEYS,
    GIVEN_SETTINGS,
    MODES,
    SETTINGS,
    SWEEP_KEYS,
    TOP_KEYS,
    Figures,
    Problems,
    Sweep,
    Tables,
    option_model,
    validate,
)


@dataclass
class Owner:
    """The task (``section`` "task") or the architecture ("arch") of a spec: its ``name`` (None when
    missing or bad), ``known`` (option -> default) and ``options`` (the options given, checked)."""

    section: str
    name: str | None = None
    known: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def no_option(self, option: str) -> str:
        """The problem of an option this task or architecture does not have."""
        label = f"task {self.name}" if self.section == "task" else self.name
        return f"{label} has no option {option}; its options are {', '.join(self.known) or 'none'}"


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
