"""The vocabulary of a sweep spec (its tables, keys and settings) and the checks of its values,
through pydantic: the settings are those of :mod:`nqf.comparison.settings` (their types,
defaults and checks), the tables and the task's and architecture's options are typed here.

:func:`validate` checks a table against a model and notes every error as one line, ``spec
KEY: message`` with the key's path (``spec axes.sigma0[2]: must be a positive finite number,
got -1.0``) in a :class:`Problems`; the axes' forms (lists and ranges) are expanded by hand
(:func:`expand_axis`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, create_model
from pydantic.fields import FieldInfo

from nqf.comparison.settings import SETTINGS_MODELS, Count, choice, defaults, partial_model, required, says
from nqf.core.arguments import is_integer, is_real_number

MODES = tuple(SETTINGS_MODELS)
# setting -> (its field in the mode's model: type, description; its default, None when required)
SETTINGS: dict[str, dict[str, tuple[FieldInfo, Any]]] = {
    mode: {name: (model.model_fields[name], default) for name, default in defaults(model).items()}
    for mode, model in SETTINGS_MODELS.items()
}
REQUIRED = required(SETTINGS_MODELS["compare"])
# values that a compiled training run takes as traced arguments: points differing only in
# these share one batch (train_grid vmaps over sigma0 and seed; lr is one scalar per call)
TRACED = ("sigma0", "seed")
MAX_POINTS = 1_000_000
AXIS_FORMS = "an axis is a list or one of {logspace = [a, b, n]}, {linspace = [a, b, n]}, {range = [a, b]}"
_TABLE = ConfigDict(extra="forbid")
Text = Annotated[str, Strict()]


class Sweep(BaseModel):
    """``[sweep]``: the mode, the zipped axes, the points per task, the name (the spec's stem)."""

    model_config = _TABLE
    mode: choice(MODES) = "compare"  # type: ignore[valid-type]
    zip: Annotated[list[list[Text]], says('must be a list of lists of axis names, e.g. [["lr", "steps"]]')] = []
    batch_size: Count | None = None
    name: Annotated[str, Strict(), says("must be text, got {got}")] | None = None


class Figures(BaseModel):
    """``[figures]``: the heatmap's two axes, the loss curves drawn (a count or point indices)."""

    model_config = _TABLE
    heatmap: Annotated[tuple[Text, Text], says('names two axes, e.g. ["sigma0", "lr"]')] | None = None
    curves: Annotated[
        Annotated[int, Strict(), Field(ge=0)] | tuple[Annotated[int, Strict()], ...],
        says("must be a count >= 0 or a list of point indices, got {got}"),
    ] = 3


TOP_KEYS = ("sweep", "task", "arch", "settings", "axes", "figures")
SWEEP_KEYS = tuple(Sweep.model_fields)
FIGURE_KEYS = tuple(Figures.model_fields)
# the spec: its tables (each checked on its own)
Tables = create_model(
    "Tables",
    __config__=_TABLE,
    **{key: (Annotated[dict[str, Any], says(f"must be a table ([{key}])")], {}) for key in TOP_KEYS},  # type: ignore[call-overload]
)
# a task's or architecture's option takes values of its default's type
OPTION_TYPES: dict[type, Any] = {
    bool: Annotated[bool, Strict(), says("takes true or false, got {got}")],
    int: Annotated[int, Strict(), says("takes an integer, got {got}")],
    float: Annotated[float, Strict(), says("takes a number, got {got}")],
    tuple: Annotated[
        tuple[Annotated[float, Strict()], ...], Field(min_length=1), says("takes a list of numbers, got {got}")
    ],
    str: Annotated[str, Strict(), says("takes text, got {got}")],
    type(None): Annotated[
        Annotated[int, Strict()] | Annotated[float, Strict()] | Annotated[str, Strict()],
        says("takes a number or text, got {got}"),
    ],
}


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


def key_path(where: str, loc: tuple) -> str:
    """``where`` and a pydantic error's location: ``settings`` and ("lr",) -> ``settings.lr``,
    ``axes`` and ("sigma0", 2) -> ``axes.sigma0[2]``."""
    path = where
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f"{'.' if path else ''}{part}"
    return path


def validate(model: type[BaseModel], table: dict, where: str, problems: Problems, unknown: Callable[[str], str]):
    """The entries of ``table`` that ``model`` accepts, checked and normalised; every error a problem
    at its key path under ``where`` (an unknown key: ``unknown(key)``), in the table's order."""
    try:
        valid = model.model_validate(table)
    except ValidationError as err:
        bad, order = set(), {key: i for i, key in enumerate(table)}
        for error in sorted(err.errors(include_url=False), key=lambda error: order.get(error["loc"][0], -1)):
            loc = error["loc"]
            bad.add(loc[0])
            message = unknown(str(loc[0])) if error["type"] == "extra_forbidden" else error["msg"]
            problems.bad(key_path(where, loc), message)
        valid = model.model_validate({key: value for key, value in table.items() if key not in bad})
    given = valid.model_dump(by_alias=True, exclude_unset=True)
    return {key: given[key] for key in table if key in given}


# per mode: the [settings] a spec gives, and the axes over them
GIVEN_SETTINGS = {mode: partial_model(model) for mode, model in SETTINGS_MODELS.items()}
SETTING_AXES = {mode: partial_model(model, listed=True) for mode, model in SETTINGS_MODELS.items()}


def option_model(label: str, known: dict[str, Any], listed: bool = False) -> type[BaseModel]:
    """The options of a task or an architecture (option -> default) as a model, each typed like its
    default (``listed``: the axes over them); fields by alias, so that any name is an option."""
    fields = {
        f"option{i}": (OPTION_TYPES.get(type(default), Any), Field(default, alias=name))
        for i, (name, default) in enumerate(known.items())
    }
    model = create_model(label, __config__=_TABLE, **fields)  # type: ignore[call-overload]
    return partial_model(model, listed=True) if listed else model


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
    if not (isinstance(args, list) and len(args) in (2, 3) and all(is_integer(a) for a in args)):
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
    shaped = isinstance(args, list) and len(args) == 3 and is_integer(args[2])
    if not (shaped and all(is_real_number(a) for a in args[:2])):
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
