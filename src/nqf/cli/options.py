"""Generic ``--name value`` options for factories (architectures, tasks), and the task and
architecture that ``compare`` and ``predict`` build from them (``--task NAME`` or ``--data FILE``).

Options are read from the arguments typer leaves over (``allow_extra_args``), dashes
mapped to underscores, values converted to the type of the factory default. An option
that several factories accept (e.g. ``--inputs`` for a task and its architecture) is
given to each of them, since it means the same thing for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from nqf.core.errors import NqfError

_Args = TypeVar("_Args", bound="RunArgs")


@dataclass(frozen=True)
class RunArgs:
    """The command line that ``nqf predict`` and ``nqf compare`` share, as typer read it.

    ``beta``: None when not given (the momentum record's default); ``extra``: the remaining
    ``--name value`` pairs, the options of the task, the architecture or the unit. ``SETTINGS``:
    the fields that are run settings (a command adds its own).
    """

    SETTINGS: ClassVar[tuple[str, ...]] = (
        *("width", "lr", "steps", "batch", "beta", "seed"),
        *("network", "network_budget", "network_method", "allow_inapplicable"),
    )

    width: int
    lr: float
    steps: int
    arch: str | None
    unit: str | None
    batch: int | None
    beta: float | None
    seed: int
    as_json: bool
    plot: Path | None
    csv_dir: Path | None
    overlay: Path | None
    departure: bool
    network: bool
    network_budget: float
    network_method: str
    allow_inapplicable: bool
    extra: tuple[str, ...]

    def settings(self) -> dict[str, Any]:
        """The run settings given, by the schema's names (``nqf.comparison.settings``), those not
        given (None) left out: what :func:`~nqf.comparison.settings.check_settings` checks and
        :func:`~nqf.comparison.settings.run_config` builds the library's config from."""
        return {name: value for name in self.SETTINGS if (value := getattr(self, name)) is not None}


def command_args(cls: type[_Args], values: Mapping[str, Any], **given: Any) -> _Args:
    """``cls`` (a command's arguments) from the command function's parameters ``values`` (its
    ``locals()``), field by field; ``given`` sets the fields read otherwise."""
    return cls(**{f.name: values[f.name] for f in fields(cls) if f.name not in given}, **given)


def convert_value(owner: str, option: str, raw: str, default: Any) -> Any:
    """``raw`` converted to the type of ``default`` (bool, int, float, tuple of floats, None: a number
    if it reads as one, else str)."""
    flag = "--" + option.replace("_", "-")
    if isinstance(default, bool):
        lowered = raw.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise NqfError(f"{owner}: option {flag} takes true or false, got {raw!r}")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise NqfError(f"{owner}: option {flag} takes an integer, got {raw!r}") from None
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise NqfError(f"{owner}: option {flag} takes a number, got {raw!r}") from None
    if default is None:  # an optional number (e.g. digits --samples): an int, else a float, else text
        for kind in (int, float):
            try:
                return kind(raw)
            except ValueError:
                pass
        return raw
    if isinstance(default, tuple):
        try:
            return tuple(float(v) for v in raw.split(",") if v.strip())
        except ValueError:
            raise NqfError(f"{owner}: option {flag} takes comma-separated numbers, got {raw!r}") from None
    return raw


def parse_factory_options(args: list[str], owners: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Split ``["--name", "value", "--other=value", ...]`` among factories.

    owners maps a factory's label (e.g. "mlp", "task staircase") to its options and
    defaults. Returns {label: {option: value}}. NqfError for an option no factory has,
    a missing value, a repeated option or a stray argument.
    """
    parsed: dict[str, dict[str, Any]] = {label: {} for label in owners}
    seen: set[str] = set()
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--") or token == "--":
            raise NqfError(f"unexpected argument {token!r}; options are given as --name value")
        if "=" in token:
            flag, raw = token.split("=", 1)
            i += 1
        else:
            flag = token
            if i + 1 >= len(args) or (args[i + 1].startswith("--") and len(args[i + 1]) > 2):
                raise NqfError(f"option {flag} needs a value")
            raw = args[i + 1]
            i += 2
        option = flag[2:].replace("-", "_")
        if option in seen:
            raise NqfError(f"option {flag} given twice")
        seen.add(option)
        takers = [label for label, known in owners.items() if option in known]
        if not takers and len(owners) == 1:
            ((label, known),) = owners.items()
            flags = ", ".join("--" + k.replace("_", "-") for k in known) or "none"
            raise NqfError(f"{label} has no option {flag}; its options are {flags}")
        if not takers:
            listing = "; ".join(
                f"{label}: {', '.join('--' + k.replace('_', '-') for k in known) or 'none'}"
                for label, known in owners.items()
            )
            raise NqfError(f"no option {flag} here; the options are {listing}")
        for label in takers:
            parsed[label][option] = convert_value(label, option, raw, owners[label][option])
    return parsed


def check_task_file(task_name: str, options: dict[str, Any]) -> None:
    """The npz task's file checked before the task reads it (``nqf.core.input_files.check_npz``:
    its arrays' headers against the file's size and the memory), so that a forged or huge file
    is one line, not an allocation."""
    path = options.get("path")
    if task_name == "npz" and isinstance(path, str) and path:
        from nqf.core.input_files import check_npz

        check_npz(path, ("X", "Y"), owner="task npz: ")


def resolve_task_and_arch(task_name: str, arch_name: str | None, args: list[str]):
    """The Task and Architecture named on the command line, extra options split between them.

    Without ``--arch`` (or with the task's natural architecture) the architecture starts from
    the task's natural options; an option both accept goes to both.
    """
    from nqf.training.tasks import get_task, task_options

    from ..architectures import architecture_options, get_architecture

    task_label = f"task {task_name}"
    owners = {task_label: task_options(task_name)}  # raises for an unknown task
    arch_label = arch_name
    if arch_label is None:
        try:
            arch_label = get_task(task_name).natural_architecture()[0]
        except NqfError:  # npz: the architecture follows from the file; it takes no options here
            arch_label = None
    if arch_label is not None:
        owners[arch_label] = architecture_options(arch_label)  # raises for an unknown architecture
    parsed = parse_factory_options(args, owners)
    check_task_file(task_name, parsed[task_label])
    task = get_task(task_name, **parsed[task_label])
    natural_name, natural_options = task.natural_architecture()
    if arch_name is None or arch_name == natural_name:
        extra = parsed[arch_label] if arch_label == natural_name else {}
        return task, get_architecture(natural_name, **{**natural_options, **extra})
    return task, get_architecture(arch_name, **parsed[arch_name])


def check_task_or_data(command: str, task: str | None, data: Path | None, extra: list[str]) -> None:
    """Exactly one of ``--task TASK`` and ``--data FILE`` (and no ``--path`` beside ``--data``), as
    ``compare`` and ``predict`` both take them; one line otherwise."""
    if data is None:
        if task is None:
            raise NqfError(f"{command} needs --task TASK (a built-in task) or --data FILE.npz (your data)")
        return
    if task is not None:
        raise NqfError(f"give --task {task} or --data {data}, not both (--data FILE is --task npz --path FILE)")
    if any(token == "--path" or token.startswith("--path=") for token in extra):
        raise NqfError("give --data FILE or --path FILE, not both (--data FILE is --task npz --path FILE)")


def task_of(task: str | None, data: Path | None, extra: list[str]) -> str:
    """compare: the task name from ``--task`` or ``--data FILE`` (the task ``npz`` with ``--path FILE``,
    added to ``extra``): one of them (:func:`check_task_or_data`)."""
    check_task_or_data("compare", task, data, extra)
    if data is None:
        assert task is not None  # checked: one of them
        return task
    extra += ["--path", str(data)]
    return "npz"
