"""Experiment configs from the standard modes, a TOML file and ``--set`` overrides.

Precedence, lowest first: ``Config.quick()`` / ``Config.full()``; the TOML section
``[E1]``; its mode subtable ``[E1.quick]`` / ``[E1.full]``; ``--set E1.field=value``.
Values are typed by the config dataclass's field annotations: bool, int, float, str,
``Literal[...]``, ``tuple[T, ...]`` / ``tuple[T1, T2]`` (comma-separated on the command
line) and ``T | None`` (``none`` on the command line). Unknown sections or fields raise
NqfError; the dataclass's own ``__post_init__`` checks the combined values.

Example file::

    [E1]
    sigma0 = 1e-8
    [E1.full]
    steps = 20000
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from nqf.core.errors import NqfError
from nqf.core.input_files import read_toml

_MODES = ("quick", "full")


def load_config_file(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """The TOML file as {section: table}; every top-level entry must be a table."""
    data = read_toml(path, f"config file {os.fspath(path)!r}")  # every way it can be bad, one line
    for name, table in data.items():
        if not isinstance(table, dict):
            raise NqfError(f"config file {os.fspath(path)!r}: top-level {name!r} must be a section like [E1]")
    return data


def parse_overrides(items: Iterable[str]) -> dict[str, dict[str, str]]:
    """``["E1.sigma0=1e-8", ...]`` as {"E1": {"sigma0": "1e-8"}} (values still strings)."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        target, sep, value = item.partition("=")
        experiment, dot, name = target.strip().partition(".")
        if not sep or not dot or not experiment or not name:
            raise NqfError(f"--set expects EXPERIMENT.FIELD=VALUE (e.g. E1.sigma0=1e-8), got {item!r}")
        out.setdefault(experiment, {})[name.strip()] = value.strip()
    return out


def _field_types(config_type: type) -> dict[str, Any]:
    hints = typing.get_type_hints(config_type)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_type) if f.init}


def _parse_bool(text: str, where: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise NqfError(f"{where}: expected true or false, got {text!r}")


def _coerce(value: Any, kind: Any, where: str) -> Any:
    """``value`` (from TOML, a string from the CLI, or JSON) converted to the annotation ``kind``."""
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and (value is None or isinstance(value, str) and value.strip().lower() == "none"):
            return None
        errors = []
        for option in args:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, where)
            except NqfError as err:
                errors.append(str(err))
        raise NqfError(errors[0] if len(errors) == 1 else f"{where}: {value!r} fits none of {kind}")
    if origin is typing.Literal:
        for option in args:
            try:
                candidate = _coerce(value, type(option), where)
            except NqfError:
                continue
            if candidate == option:
                return option
        raise NqfError(f"{where}: {value!r} is not one of {', '.join(repr(a) for a in args)}")
    if origin is tuple:
        if isinstance(value, str):
            items = [] if not value.strip() else [part.strip() for part in value.split(",")]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            raise NqfError(f"{where}: expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(item, args[0], f"{where}[{i}]") for i, item in enumerate(items))
        if len(items) != len(args):
            raise NqfError(f"{where}: expected {len(args)} values, got {len(items)}")
        return tuple(_coerce(item, arg, f"{where}[{i}]") for i, (item, arg) in enumerate(zip(items, args, strict=True)))
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            return _parse_bool(value, where)
        raise NqfError(f"{where}: expected true or false, got {value!r}")
    if kind is int:
        if isinstance(value, bool):
            raise NqfError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise NqfError(f"{where}: expected an integer, got {value!r}") from None
        if not number.is_integer():
            raise NqfError(f"{where}: expected an integer, got {value!r}")
        return int(number)
    if kind is float:
        if isinstance(value, bool):
            raise NqfError(f"{where}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise NqfError(f"{where}: expected a number, got {value!r}") from None
    if kind is str:
        if not isinstance(value, str):
            raise NqfError(f"{where}: expected a string, got {value!r}")
        return value
    raise NqfError(f"{where}: fields of type {kind} cannot be set from a file or the command line")


def with_values(config: Any, values: Mapping[str, Any], where: str) -> Any:
    """``config`` with fields replaced by ``values`` (typed by the annotations); checks names."""
    kinds = _field_types(type(config))
    changes = {}
    for name, value in values.items():
        if name not in kinds:
            raise NqfError(f"{where}: {type(config).__name__} has no field {name!r}; its fields are {', '.join(kinds)}")
        changes[name] = _coerce(value, kinds[name], f"{where}.{name}")
    return dataclasses.replace(config, **changes) if changes else config


def build_config(
    experiment: Any,
    mode: str,
    file_table: Mapping[str, Any] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Any:
    """The experiment's ``mode`` config, then its TOML section, mode subtable and CLI overrides."""
    config = experiment.config(mode)
    table = dict(file_table or {})
    subtables = {m: table.pop(m) for m in _MODES if isinstance(table.get(m), dict)}
    config = with_values(config, table, f"[{experiment.name}]")
    if mode in subtables:
        config = with_values(config, subtables[mode], f"[{experiment.name}.{mode}]")
    return with_values(config, dict(overrides or {}), f"--set {experiment.name}")


def config_to_dict(config: Any) -> dict[str, Any]:
    """The config's fields as JSON-able data (tuples become lists)."""
    from nqf.store.results import to_jsonable

    return to_jsonable({f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init})


def config_from_dict(config_type: type, data: Mapping[str, Any]) -> Any:
    """Rebuild a config from :func:`config_to_dict` output (missing fields keep the quick() value)."""
    # config types define quick()
    return with_values(config_type.quick(), data, config_type.__name__)  # type: ignore[attr-defined]
