"""Reading the sections of a sweep spec that name what is run: the top-level tables, ``[sweep]``,
``[task]``, ``[arch]`` and ``[settings]`` (the format: :mod:`nqf.scans.sweep.spec`).

Each reader notes every problem it finds in a :class:`Problems` (one line per key) and goes on,
so that one run shows every mistake; the task and the architecture are read into an
:class:`Owner` (its name, its options' defaults, the options given), which the axes
(:mod:`nqf.scans.sweep.spec_axes`) extend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nqf.comparison.limits import shown_path
from nqf.core.errors import NqfError

from .spec_values import MODES, SETTINGS, SWEEP_KEYS, TOP_KEYS, check_setting, is_int, option_value


class Problems(list):
    """The problems of a spec so far, one line each (``spec KEY: message``), in the order found."""

    def bad(self, key: str, message: str) -> None:
        self.append(f"spec {key}: {message}")


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
    for key in raw:
        if key not in TOP_KEYS:
            problems.bad(key, f"unknown key; a spec has {', '.join(TOP_KEYS)}")
    tables = {}
    for key in TOP_KEYS:
        value = raw.get(key, {})
        if not isinstance(value, dict):
            problems.bad(key, "must be a table ([" + key + "])")
            value = {}
        tables[key] = value
    return tables


def read_sweep(sweep: dict, path: Path, problems: Problems) -> tuple[str, int | None, str]:
    """``[sweep]`` but its zip: (mode, batch size or None, name; the spec file's stem by default)."""
    for key in sweep:
        if key not in SWEEP_KEYS:
            problems.bad(f"sweep.{key}", f"unknown key; [sweep] takes {', '.join(SWEEP_KEYS)}")
    mode = sweep.get("mode", "compare")
    if mode not in MODES:
        problems.bad("sweep.mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
        mode = "compare"
    spec_batch = sweep.get("batch_size")
    if spec_batch is not None and (not is_int(spec_batch) or spec_batch < 1):
        problems.bad("sweep.batch_size", f"must be a positive integer, got {spec_batch!r}")
        spec_batch = None
    name = sweep.get("name", path.stem)
    if not isinstance(name, str):
        problems.bad("sweep.name", f"must be text, got {name!r}")
        name = path.stem
    return mode, spec_batch, name


def read_options(owner: Owner, table: dict, problems: Problems) -> None:
    """The options given in ``[task]`` or ``[arch]`` (but the name) into ``owner.options``, each
    typed like its default; none when the owner has no name."""
    for key, value in table.items():
        if owner.name is None:
            continue
        if key not in owner.known:
            problems.bad(f"{owner.section}.{key}", owner.no_option(key))
            continue
        value, problem = option_value(owner.known[key], value)
        if problem:
            problems.bad(f"{owner.section}.{key}", problem)
            continue
        owner.options[key] = value


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
    if arch.name is not None and not arch.known:
        try:
            arch.known = architecture_options(arch.name)
        except NqfError:
            pass
    return arch


def read_settings(table: dict, mode: str, problems: Problems) -> dict[str, Any]:
    """``[settings]``: the fixed settings of the mode, checked (a bad value is kept as given)."""
    known = SETTINGS[mode]
    settings: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            other = [m for m in MODES if key in SETTINGS[m]]
            hint = f" (a setting of mode {other[0]})" if other else ""
            problems.bad(f"settings.{key}", f"unknown setting{hint}; mode {mode} takes {', '.join(known)}")
            continue
        value, problem = check_setting(mode, key, value)
        if problem:
            problems.bad(f"settings.{key}", problem)
        settings[key] = value
    return settings
