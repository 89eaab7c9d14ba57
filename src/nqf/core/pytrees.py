"""Result dataclasses as JAX pytrees, field by field.

``register_fields(cls, data_fields, meta_fields)`` makes the frozen dataclass ``cls`` a pytree
whose children are ``data_fields`` (arrays, numbers, nested pytrees: what ``jax.tree.map``
reaches) and whose static metadata is ``meta_fields`` (names, settings, notes: equal metadata is
what lets two results share a tree structure). Every field must be named exactly once, so a new
field cannot be forgotten. Rebuilding bypasses the constructor (as equinox does): a leaf may be
a tracer or a stacked array, which a constructor's checks would refuse. Key paths name the
fields (``.flow.loss``).

``json_value`` writes a result's leaves as JSON, whatever ``jax.tree.map`` made of them;
``json_number`` and ``json_numbers`` write one number, or an array's numbers, as JSON floats.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np


def register_fields(
    cls: type,
    data_fields: tuple[str, ...],
    meta_fields: tuple[str, ...] = (),
    before: Callable[[], None] | None = None,
) -> None:
    """Register the dataclass ``cls`` as a pytree (module docstring). ``before()`` runs before
    each flattening: a registration of a nested class that must wait for its import."""
    names = {f.name for f in dataclasses.fields(cls)}
    if names != set(data_fields) | set(meta_fields) or set(data_fields) & set(meta_fields):
        raise AssertionError(f"{cls.__name__}: the pytree fields must be its dataclass fields, each once")

    def flatten_with_keys(obj):
        if before is not None:
            before()
        children = tuple((jax.tree_util.GetAttrKey(name), getattr(obj, name)) for name in data_fields)
        return children, tuple(getattr(obj, name) for name in meta_fields)

    def flatten(obj):
        children, meta = flatten_with_keys(obj)
        return tuple(child for _, child in children), meta

    def unflatten(meta, children):
        obj: object = object.__new__(cls)
        for name, value in zip(data_fields, children, strict=True):
            object.__setattr__(obj, name, value)
        for name, value in zip(meta_fields, meta, strict=True):
            object.__setattr__(obj, name, value)
        return obj

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)


def json_value(obj: object) -> Any:
    """``obj`` in plain JSON types: dicts (keys as strings), lists (tuples too), bools, ints,
    floats (NaN and inf: None), strings and None. A number or array of any kind (Python, numpy
    scalar or array, JAX array on any device, 0-d or not) becomes a Python number or nested
    lists of them, so that a result's leaves give the same JSON after ``jax.device_put``,
    ``jax.jit`` or ``jax.tree.map(np.asarray, ...)``. Anything else is written as its repr."""
    if isinstance(obj, dict):
        return {str(key): json_value(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_value(value) for value in obj]
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, (bool, int, float)):  # as they are: an int beyond int64 too
        return _finite_or_none(obj)
    if isinstance(obj, (np.generic, np.ndarray, jax.Array)):
        return _finite_or_none(np.asarray(obj).tolist())  # tolist: Python numbers, nested lists
    return repr(obj)


def json_number(value: Any) -> float | None:
    """``float(value)`` (a Python, numpy or JAX number, or a one-element array), None where NaN or inf."""
    v = float(value)
    return v if math.isfinite(v) else None


def json_numbers(a: Any) -> list[float | None]:
    """The numbers of the array ``a``, of any shape, flattened (C order) as :func:`json_number` writes them."""
    return [json_number(v) for v in np.asarray(a, dtype=np.float64).ravel()]


def _finite_or_none(value: object) -> object:
    if isinstance(value, list):
        return [_finite_or_none(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
