"""Command line options of the run settings, from their schema (:mod:`nqf.comparison.settings`):
a setting's default and help text are written once, there, for the command line and the sweep spec.

    width: int = setting(CompareSettings, "width")    # --width, required, help from the schema
"""

from __future__ import annotations

from typing import Any

import typer
from pydantic import BaseModel

_FROM_SCHEMA: Any = object()


def setting(model: type[BaseModel], name: str, default: Any = _FROM_SCHEMA, flag: str | None = None) -> Any:
    """``typer.Option`` of setting ``name`` of ``model``: ``--name`` (underscores as dashes), its
    description as help, its default (required when it has none; a tuple as comma-separated text)
    unless ``default`` is given (a command whose setting has another source, e.g. predict's --init)."""
    field = model.model_fields[name]
    if default is _FROM_SCHEMA:
        default = ... if field.is_required() else field.default
        default = ",".join(default) if isinstance(default, tuple) else default
    return typer.Option(default, flag or "--" + name.replace("_", "-"), help=field.description)


def is_default(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` (its parameter's name) took its default: not given on the command line
    (a setting with a default of its own, e.g. predict's ``--beta``, is then told apart from one given)."""
    source = ctx.get_parameter_source(name)
    return source is None or source.name == "DEFAULT"
