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
``predict``, ``optimizer``, ``beta``, ``batch``, ``loss``, ``route``, ``stepping``.
``width``, ``steps``, ``lr`` and ``sigma0`` are required (a setting or an axis).

Every problem is one line naming its key (``spec axes.sigma0: empty axis``); all of them
are collected (:class:`SpecError`) so that one run shows every mistake. The checks that need
the data and JAX (the learning rate against the stability bound, the theory gate, the
memory estimate) are in :mod:`nqf.scans.sweep.points` (``check_points``).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nqf.core.errors import NqfError

MODES = ("compare", "predict")
TOP_KEYS = ("sweep", "task", "arch", "settings", "axes", "figures")
SWEEP_KEYS = ("mode", "zip", "batch_size", "name")
FIGURE_KEYS = ("heatmap", "curves")
REQUIRED = ("width", "steps", "lr", "sigma0")
# setting -> (kind, default); kinds: int, seed, pos (positive finite number), bool, str, optimizers, prob
COMMON: dict[str, tuple[str, Any]] = {
    "width": ("int", None),
    "steps": ("int", None),
    "lr": ("pos", None),
    "sigma0": ("pos", None),
    "seed": ("seed", 0),
    "data_seed": ("seed", 0),
    "allow_inapplicable": ("bool", False),
}
SETTINGS: dict[str, dict[str, tuple[str, Any]]] = {
    "compare": {
        **COMMON,
        "optimizers": ("optimizers", ("gd",)),
        "lr_sgd": ("pos", None),
        "lr_momentum": ("pos", None),
        "lr_adam": ("pos", None),
        "lr_muon": ("pos", None),
        "beta": ("prob", None),
        "batch": ("int", None),
        "closure": ("bool", True),
    },
    "predict": {
        **COMMON,
        "optimizer": ("str", "gd"),
        "beta": ("prob", 0.9),
        "batch": ("int", None),
        "loss": ("str", "squared"),
        "route": ("str", "auto"),
        "stepping": ("str", "adaptive"),
    },
}
CHOICES = {
    "optimizer": ("gd", "sgd", "momentum"),
    "loss": ("squared", "cross_entropy"),
    "route": ("auto", "moments", "samples"),
    "stepping": ("adaptive", "every"),
}
COMPARE_OPTIMIZERS = ("gd", "sgd", "momentum", "adam", "muon")
# values that a compiled training run takes as traced arguments: points differing only in
# these share one batch (train_sweep vmaps over sigma0 and seed; lr is one scalar per call)
TRACED = ("sigma0", "seed")
MAX_SEED = 2**32 - 1
MAX_STEPS = 2**31 - 1
MAX_POINTS = 1_000_000


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
    data_file: Path | None = field(default=None)

    @property
    def num_points(self) -> int:
        total = 1
        for group in self.groups:
            total *= len(self.axes[group[0]])
        return total


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_setting(mode: str, name: str, value: Any) -> tuple[Any, str]:
    """(normalised value, problem); problem is "" when the value is fine."""
    kind, _ = SETTINGS[mode][name]
    if kind == "int":
        if not _is_int(value) or value < 1:
            return value, f"must be a positive integer, got {value!r}"
        if name == "steps" and value > MAX_STEPS:
            return value, f"must be at most {MAX_STEPS}, got {value}"
        return value, ""
    if kind == "seed":
        if not _is_int(value) or not 0 <= value <= MAX_SEED:
            return value, f"must be an integer in [0, {MAX_SEED}], got {value!r}"
        return value, ""
    if kind == "pos":
        if not _is_number(value) or not math.isfinite(value) or value <= 0:
            return value, f"must be a positive finite number, got {value!r}"
        return float(value), ""
    if kind == "prob":
        if not _is_number(value) or not 0 <= value < 1:
            return value, f"must lie in [0, 1), got {value!r}"
        return float(value), ""
    if kind == "bool":
        if not isinstance(value, bool):
            return value, f"must be true or false, got {value!r}"
        return value, ""
    if kind == "optimizers":
        names = [p.strip() for p in value.split(",")] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            return value, f"must be a non-empty list of optimizer names, got {value!r}"
        bad = [n for n in names if n not in COMPARE_OPTIMIZERS]
        if bad:
            return value, f"unknown optimizer {bad[0]!r}; choose from {', '.join(COMPARE_OPTIMIZERS)}"
        if len(set(names)) != len(names):
            return value, "an optimizer is listed twice"
        return tuple(names), ""
    if kind == "str":
        if value not in CHOICES[name]:
            return value, f"must be one of {', '.join(CHOICES[name])}, got {value!r}"
        return value, ""
    raise AssertionError(kind)


def _option_value(default: Any, value: Any) -> tuple[Any, str]:
    """A task or architecture option from TOML, typed like its default."""
    if isinstance(default, bool):
        return (value, "") if isinstance(value, bool) else (value, f"takes true or false, got {value!r}")
    if isinstance(default, int):
        return (value, "") if _is_int(value) else (value, f"takes an integer, got {value!r}")
    if isinstance(default, float):
        return (float(value), "") if _is_number(value) else (value, f"takes a number, got {value!r}")
    if isinstance(default, tuple):
        if isinstance(value, list) and value and all(_is_number(v) for v in value):
            return tuple(float(v) for v in value), ""
        return value, f"takes a list of numbers, got {value!r}"
    if isinstance(default, str):
        return (value, "") if isinstance(value, str) else (value, f"takes text, got {value!r}")
    if default is None:
        return (
            (value, "")
            if isinstance(value, (int, float, str)) and not isinstance(value, bool)
            else (value, f"takes a number or text, got {value!r}")
        )
    return value, ""


def _expand_axis(raw: Any) -> tuple[list, str]:
    """An axis's values: a list, or {logspace|linspace = [start, stop, num]} or {range = [start, stop(, step)]}."""
    if isinstance(raw, list):
        if not raw:
            return [], "empty axis"
        if any(isinstance(v, (list, dict)) for v in raw):
            return [], "an axis lists plain values (numbers, text, true/false)"
        if len({repr(v) for v in raw}) != len(raw):
            return [], "a value is listed twice"
        return list(raw), ""
    if isinstance(raw, dict):
        if len(raw) != 1 or next(iter(raw)) not in ("logspace", "linspace", "range"):
            return [], "an axis is a list or one of {logspace = [a, b, n]}, {linspace = [a, b, n]}, {range = [a, b]}"
        ((kind, args),) = raw.items()
        if kind == "range":
            if not (isinstance(args, list) and len(args) in (2, 3) and all(_is_int(a) for a in args)):
                return [], "range takes [start, stop] or [start, stop, step], integers"
            step = args[2] if len(args) == 3 else 1
            if step == 0:
                return [], "range step must not be 0"
            values = list(range(args[0], args[1], step))
            return values, "" if values else "empty axis"
        if not (
            isinstance(args, list) and len(args) == 3 and all(_is_number(a) for a in args[:2]) and _is_int(args[2])
        ):
            return [], f"{kind} takes [start, stop, num] (num an integer)"
        a, b, n = float(args[0]), float(args[1]), args[2]
        if n < 1:
            return [], "empty axis"
        if not (math.isfinite(a) and math.isfinite(b)):
            return [], f"{kind} bounds must be finite"
        import numpy as np

        values = (np.logspace(a, b, n) if kind == "logspace" else np.linspace(a, b, n)).tolist()
        if len(set(values)) != len(values):
            return [], "a value is listed twice"
        return values, ""
    return [], "an axis is a list or one of {logspace = [a, b, n]}, {linspace = [a, b, n]}, {range = [a, b]}"


def load_spec(path: str | Path) -> Spec:
    """Read and check the spec at ``path``; SpecError with every problem (one line each)."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError([f"spec {path}: no such file"]) from None
    except IsADirectoryError:
        raise SpecError([f"spec {path}: is a folder"]) from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError([f"spec {path}: unreadable ({type(err).__name__})"]) from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError([f"spec {path}: not valid TOML ({err})"]) from None
    return parse_spec(raw, path)


def parse_spec(raw: dict, path: Path) -> Spec:
    """Check a spec's parsed TOML (see the module docstring)."""
    from nqf.architectures import architecture_options
    from nqf.training.tasks import TASKS, get_task, task_options

    problems: list[str] = []

    def bad(key: str, message: str) -> None:
        problems.append(f"spec {key}: {message}")

    for key in raw:
        if key not in TOP_KEYS:
            bad(key, f"unknown key; a spec has {', '.join(TOP_KEYS)}")
    tables = {}
    for key in TOP_KEYS:
        value = raw.get(key, {})
        if not isinstance(value, dict):
            bad(key, "must be a table ([" + key + "])")
            value = {}
        tables[key] = value

    sweep = tables["sweep"]
    for key in sweep:
        if key not in SWEEP_KEYS:
            bad(f"sweep.{key}", f"unknown key; [sweep] takes {', '.join(SWEEP_KEYS)}")
    mode = sweep.get("mode", "compare")
    if mode not in MODES:
        bad("sweep.mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
        mode = "compare"
    spec_batch = sweep.get("batch_size")
    if spec_batch is not None and (not _is_int(spec_batch) or spec_batch < 1):
        bad("sweep.batch_size", f"must be a positive integer, got {spec_batch!r}")
        spec_batch = None
    name = sweep.get("name", path.stem)
    if not isinstance(name, str):
        bad("sweep.name", f"must be text, got {name!r}")
        name = path.stem

    # the task and its options
    task_table = dict(tables["task"])
    task_name = task_table.pop("name", None)
    task_known: dict[str, Any] = {}
    if task_name is None:
        bad("task.name", "missing; name a task (" + ", ".join(TASKS) + ")")
    else:
        try:
            task_known = task_options(task_name)
        except NqfError as err:
            bad("task.name", str(err))
            task_name = None
    task_opts: dict[str, Any] = {}
    for key, value in task_table.items():
        if task_name is None:
            continue
        if key not in task_known:
            bad(
                f"task.{key}",
                f"task {task_name} has no option {key}; its options are {', '.join(task_known) or 'none'}",
            )
            continue
        value, problem = _option_value(task_known[key], value)
        if problem:
            bad(f"task.{key}", problem)
            continue
        task_opts[key] = value
    data_file = None
    if task_name == "npz":
        given = task_opts.get("path")
        if not given:
            bad("task.path", 'the npz task needs path = "FILE.npz" (relative to the spec)')
        else:
            data_file = (path.parent / given).resolve()
            if not data_file.is_file():
                bad("task.path", f"no such file {data_file}")
            task_opts["path"] = str(data_file)

    # the architecture
    arch_table = dict(tables["arch"])
    arch_name = arch_table.pop("name", None)
    arch_known: dict[str, Any] = {}
    natural: tuple[str, dict] | None = None
    if task_name is not None and task_name != "npz":
        try:
            natural = get_task(task_name, **task_opts).natural_architecture()
        except (NqfError, TypeError, ValueError) as err:
            bad("task", str(err))
    if arch_name is not None or arch_table:
        label = arch_name or (natural[0] if natural else None)
        if label is None:
            bad("arch.name", "missing; name an architecture (nqf structure --list)")
        else:
            try:
                arch_known = architecture_options(label)
            except NqfError as err:
                bad("arch.name", str(err))
                label = None
        arch_name = label
    arch_opts: dict[str, Any] = {}
    for key, value in arch_table.items():
        if arch_name is None:
            continue
        if key not in arch_known:
            bad(f"arch.{key}", f"{arch_name} has no option {key}; its options are {', '.join(arch_known) or 'none'}")
            continue
        value, problem = _option_value(arch_known[key], value)
        if problem:
            bad(f"arch.{key}", problem)
            continue
        arch_opts[key] = value
    if task_name == "npz" and arch_name is None:
        bad("arch.name", "the npz task needs an architecture ([arch] name = ...)")
    if arch_name is not None and not arch_known:
        try:
            arch_known = architecture_options(arch_name)
        except NqfError:
            pass

    # settings
    known = SETTINGS[mode]
    settings: dict[str, Any] = {}
    for key, value in tables["settings"].items():
        if key not in known:
            other = [m for m in MODES if key in SETTINGS[m]]
            hint = f" (a setting of mode {other[0]})" if other else ""
            bad(f"settings.{key}", f"unknown setting{hint}; mode {mode} takes {', '.join(known)}")
            continue
        value, problem = check_setting(mode, key, value)
        if problem:
            bad(f"settings.{key}", problem)
        settings[key] = value

    # axes
    axes: dict[str, list] = {}
    for key, spec in tables["axes"].items():
        where = f"axes.{key}"
        values, problem = _expand_axis(spec)
        if problem:
            bad(where, problem)
            continue
        owner, _, option = key.partition(".")
        if option and owner == "task":
            if task_name is None:
                continue
            if option not in task_known:
                bad(
                    where, f"task {task_name} has no option {option}; its options are {', '.join(task_known) or 'none'}"
                )
                continue
            if option in task_opts:
                bad(where, f"task option {option} is given in [task] too; give it in one place")
                continue
            checked = [_option_value(task_known[option], v) for v in values]
        elif option and owner == "arch":
            if arch_name is None and natural is not None:
                arch_name = natural[0]
                arch_known = architecture_options(arch_name)
            if arch_name is None:
                continue
            if option not in arch_known:
                bad(where, f"{arch_name} has no option {option}; its options are {', '.join(arch_known) or 'none'}")
                continue
            if option in arch_opts:
                bad(where, f"architecture option {option} is given in [arch] too; give it in one place")
                continue
            checked = [_option_value(arch_known[option], v) for v in values]
        elif not option:
            if key not in known:
                bad(
                    where,
                    f"unknown axis; an axis is a setting of mode {mode} ({', '.join(known)}), "
                    "task.OPTION or arch.OPTION",
                )
                continue
            if key == "optimizers":
                bad(where, "optimizers is not an axis (every point trains each listed optimizer)")
                continue
            if key in settings:
                bad(where, "also given in [settings]; give it in one place")
                continue
            checked = [check_setting(mode, key, v) for v in values]
        else:
            bad(where, "unknown axis; an axis is a setting, task.OPTION or arch.OPTION")
            continue
        problem = next((p for _, p in checked if p), "")
        if problem:
            bad(where, problem)
            continue
        axes[key] = [v for v, _ in checked]
    for key in REQUIRED:
        if key not in tables["settings"] and key not in tables["axes"]:
            bad(f"settings.{key}", "missing; give it in [settings] or as an axis")

    # zipped axes
    zipped = sweep.get("zip", [])
    groups: list[tuple[str, ...]] = []
    in_zip: set[str] = set()
    if not (isinstance(zipped, list) and all(isinstance(g, list) for g in zipped)):
        bad("sweep.zip", 'must be a list of lists of axis names, e.g. [["lr", "steps"]]')
        zipped = []
    for i, group in enumerate(zipped):
        where = f"sweep.zip[{i}]"
        if len(group) < 2:
            bad(where, "zips at least two axes")
            continue
        missing = [n for n in group if n not in tables["axes"]]
        if missing:
            bad(where, f"{missing[0]!r} is not an axis")
            continue
        twice = [n for n in group if n in in_zip]
        if twice or len(set(group)) != len(group):
            bad(where, f"axis {(twice or group)[0]!r} is zipped twice")
            continue
        if not all(n in axes for n in group):
            continue  # the axis itself is bad, reported above
        lengths = {n: len(axes[n]) for n in group}
        if len(set(lengths.values())) != 1:
            bad(where, "zipped axes need equal lengths, got " + ", ".join(f"{n} {k}" for n, k in lengths.items()))
            continue
        in_zip.update(group)
        groups.append(tuple(group))
    ordered: list[tuple[str, ...]] = []
    for key in axes:
        group = next((g for g in groups if key in g), (key,))
        if group not in ordered and (key in in_zip or len(group) == 1):
            ordered.append(group)

    # figures
    figures = tables["figures"]
    for key in figures:
        if key not in FIGURE_KEYS:
            bad(f"figures.{key}", f"unknown key; [figures] takes {', '.join(FIGURE_KEYS)}")
    heatmap = figures.get("heatmap")
    if heatmap is not None:
        if not (isinstance(heatmap, list) and len(heatmap) == 2 and all(isinstance(h, str) for h in heatmap)):
            bad("figures.heatmap", 'names two axes, e.g. ["sigma0", "lr"]')
            heatmap = None
        elif heatmap[0] == heatmap[1]:
            bad("figures.heatmap", "names the same axis twice")
            heatmap = None
        else:
            for h in heatmap:
                if h not in tables["axes"]:
                    bad("figures.heatmap", f"{h!r} is not an axis")
                    heatmap = None
                    break
    total = 1
    for group in ordered:
        total *= len(axes[group[0]])
    curves = figures.get("curves", 3)
    if _is_int(curves):
        if curves < 0:
            bad("figures.curves", f"must be a count >= 0 or a list of point indices, got {curves}")
    elif isinstance(curves, list) and all(_is_int(c) for c in curves):
        out_of_range = [c for c in curves if not 0 <= c < total]
        if out_of_range and not problems:
            bad(
                "figures.curves",
                f"point index {out_of_range[0]} out of range (the sweep has {total} points: 0..{total - 1})",
            )
        curves = tuple(curves)
    else:
        bad("figures.curves", f"must be a count or a list of point indices, got {curves!r}")
    if total > MAX_POINTS:
        bad("axes", f"{total} points; a sweep has at most {MAX_POINTS}")

    if mode == "compare" and not problems:
        opts = settings.get("optimizers", ("gd",))
        for key in ("lr_sgd", "lr_momentum", "lr_adam", "lr_muon"):
            if (key in settings or key in axes) and key[3:] not in opts:
                bad(f"settings.{key}" if key in settings else f"axes.{key}", f"{key[3:]} is not among the optimizers")
        batched = "batch" in settings or "batch" in axes
        if "sgd" in opts and not batched:
            bad("settings.batch", "optimizer sgd needs a minibatch size (batch = B)")
        if batched and "sgd" not in opts:
            where = "settings.batch" if "batch" in settings else "axes.batch"
            bad(where, "batch is used by sgd only; add sgd to the optimizers or drop it")
    if mode == "predict" and not problems:
        opt = settings.get("optimizer", "gd")
        batched = "batch" in settings or "batch" in axes
        if opt == "sgd" and not batched:
            bad("settings.batch", "optimizer sgd needs a minibatch size (batch = B)")
    if problems:
        raise SpecError(problems)
    return Spec(
        path=path,
        mode=mode,
        task=task_name,
        task_options=task_opts,
        arch=arch_name,
        arch_options=arch_opts,
        settings=settings,
        axes=axes,
        groups=tuple(ordered),
        batch_size=spec_batch,
        heatmap=None if heatmap is None else (heatmap[0], heatmap[1]),
        curves=curves,
        name=name,
        data_file=data_file,
    )
