"""The vocabulary of a sweep spec (its tables, keys and settings) and the checks of one value:
a setting, a task or architecture option, an axis (a list or a range).

Each check returns (value, problem): the value normalised, and the problem ("" when the value is
fine), the text that follows ``spec KEY:`` in :class:`nqf.scans.sweep.spec.SpecError`.
"""

from __future__ import annotations

import math
from typing import Any

# re-exported for the spec readers: the library's lists and limits, not copies
from nqf.comparison.limits import MAX_SEED as MAX_SEED
from nqf.comparison.limits import MAX_STEPS as MAX_STEPS
from nqf.core.names import LOSSES, PREDICT_OPTIMIZERS, ROUTES, STEPPINGS
from nqf.core.optimizers import OPTIMIZERS as COMPARE_OPTIMIZERS
from nqf.core.optimizers import RATE_OPTIMIZERS

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
        # lr_sgd, lr_momentum, ...: one per optimizer with a rate of its own (its record)
        **{f"lr_{name}": ("pos", None) for name in RATE_OPTIMIZERS},
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
CHOICES = {  # the library's own lists: a new optimizer or route is a sweep setting at once
    "optimizer": PREDICT_OPTIMIZERS,
    "loss": LOSSES,
    "route": ROUTES,
    "stepping": STEPPINGS,
}
# values that a compiled training run takes as traced arguments: points differing only in
# these share one batch (train_sweep vmaps over sigma0 and seed; lr is one scalar per call)
TRACED = ("sigma0", "seed")
MAX_POINTS = 1_000_000
AXIS_FORMS = "an axis is a list or one of {logspace = [a, b, n]}, {linspace = [a, b, n]}, {range = [a, b]}"


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_setting(mode: str, name: str, value: Any) -> tuple[Any, str]:
    """(normalised value, problem); problem is "" when the value is fine."""
    kind, _ = SETTINGS[mode][name]
    if kind == "int":
        if not is_int(value) or value < 1:
            return value, f"must be a positive integer, got {value!r}"
        if name == "steps" and value > MAX_STEPS:
            return value, f"must be at most {MAX_STEPS}, got {value}"
        return value, ""
    if kind == "seed":
        if not is_int(value) or not 0 <= value <= MAX_SEED:
            return value, f"must be an integer in [0, {MAX_SEED}], got {value!r}"
        return value, ""
    if kind == "pos":
        if not is_number(value) or not math.isfinite(value) or value <= 0:
            return value, f"must be a positive finite number, got {value!r}"
        return float(value), ""
    if kind == "prob":
        if not is_number(value) or not 0 <= value < 1:
            return value, f"must lie in [0, 1), got {value!r}"
        return float(value), ""
    if kind == "bool":
        if not isinstance(value, bool):
            return value, f"must be true or false, got {value!r}"
        return value, ""
    if kind == "optimizers":
        return _check_optimizers(value)
    if kind == "str":
        if value not in CHOICES[name]:
            return value, f"must be one of {', '.join(CHOICES[name])}, got {value!r}"
        return value, ""
    raise AssertionError(kind)


def _check_optimizers(value: Any) -> tuple[Any, str]:
    """``optimizers`` of mode compare: a list of names (or one comma-separated text), as a tuple."""
    names = [p.strip() for p in value.split(",")] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        return value, f"must be a non-empty list of optimizer names, got {value!r}"
    bad = [n for n in names if n not in COMPARE_OPTIMIZERS]
    if bad:
        return value, f"unknown optimizer {bad[0]!r}; choose from {', '.join(COMPARE_OPTIMIZERS)}"
    if len(set(names)) != len(names):
        return value, "an optimizer is listed twice"
    return tuple(names), ""


def option_value(default: Any, value: Any) -> tuple[Any, str]:
    """A task or architecture option from TOML, typed like its default."""
    if isinstance(default, bool):
        return (value, "") if isinstance(value, bool) else (value, f"takes true or false, got {value!r}")
    if isinstance(default, int):
        return (value, "") if is_int(value) else (value, f"takes an integer, got {value!r}")
    if isinstance(default, float):
        return (float(value), "") if is_number(value) else (value, f"takes a number, got {value!r}")
    if isinstance(default, tuple):
        if isinstance(value, list) and value and all(is_number(v) for v in value):
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


def expand_axis(raw: Any) -> tuple[list, str]:
    """An axis's values: a list, or {logspace|linspace = [start, stop, num]} or {range = [start, stop(, step)]}."""
    if isinstance(raw, list):
        return _listed_axis(raw)
    if isinstance(raw, dict):
        if len(raw) != 1 or next(iter(raw)) not in ("logspace", "linspace", "range"):
            return [], AXIS_FORMS
        ((kind, args),) = raw.items()
        if kind == "range":
            return _range_axis(args)
        return _spaced_axis(kind, args)
    return [], AXIS_FORMS


def _listed_axis(raw: list) -> tuple[list, str]:
    """An axis given as a list of plain values, each once."""
    if not raw:
        return [], "empty axis"
    if any(isinstance(v, (list, dict)) for v in raw):
        return [], "an axis lists plain values (numbers, text, true/false)"
    if len({repr(v) for v in raw}) != len(raw):
        return [], "a value is listed twice"
    return list(raw), ""


def _range_axis(args: Any) -> tuple[list, str]:
    """{range = [start, stop]} or {range = [start, stop, step]}: integers, as Python's range."""
    if not (isinstance(args, list) and len(args) in (2, 3) and all(is_int(a) for a in args)):
        return [], "range takes [start, stop] or [start, stop, step], integers"
    step = args[2] if len(args) == 3 else 1
    if step == 0:
        return [], "range step must not be 0"
    span = range(args[0], args[1], step)
    if len(span) > MAX_POINTS:  # counted before a value is made: a sweep has at most MAX_POINTS points
        return [], f"{len(span)} values; a sweep has at most {MAX_POINTS} points"
    values = list(span)
    return values, "" if values else "empty axis"


def _spaced_axis(kind: str, args: Any) -> tuple[list, str]:
    """{logspace = [a, b, n]} (10^a .. 10^b) or {linspace = [a, b, n]}: n values, as NumPy's."""
    if not (isinstance(args, list) and len(args) == 3 and all(is_number(a) for a in args[:2]) and is_int(args[2])):
        return [], f"{kind} takes [start, stop, num] (num an integer)"
    a, b, n = float(args[0]), float(args[1]), args[2]
    if n < 1:
        return [], "empty axis"
    if n > MAX_POINTS:
        return [], f"{n} values; a sweep has at most {MAX_POINTS} points"
    if not (math.isfinite(a) and math.isfinite(b)):
        return [], f"{kind} bounds must be finite"
    import numpy as np

    values = (np.logspace(a, b, n) if kind == "logspace" else np.linspace(a, b, n)).tolist()
    if len(set(values)) != len(values):
        return [], "a value is listed twice"
    return values, ""
