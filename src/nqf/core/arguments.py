"""One-line checks of the arguments every entry point shares: counts (width, steps, batch
size), seeds and arrays of real numbers. The configs (``TrainConfig``, ``PredictConfig``,
``CompareConfig``), ``nqf.train``, ``nqf.predict`` and the command line's checks
(``nqf.comparison.checks``) all use these, so an argument is refused with the same words
wherever it comes in. JAX- and NumPy-free until an array is checked: a config is checked
before anything heavy is imported.
"""

from __future__ import annotations

import math
import numbers
import sys
import warnings
from typing import TYPE_CHECKING, Any

from nqf.core.errors import NqfError

if TYPE_CHECKING:
    import numpy as np

# Seeds are 32-bit unsigned integers (JAX and NumPy generators take them all; larger
# Python ints overflow JAX's int64 key conversion)
MAX_SEED = 2**32 - 1
# Step counts and checkpoints are int32 inside the compiled loops
MAX_STEPS = 2**31 - 1

# what numpy's dtype kinds are, for a refusal that says what was given (or what a file holds)
DTYPE_KINDS = {
    "c": "complex numbers",
    "O": "Python objects",
    "U": "strings",
    "S": "bytes",
    "V": "records",
    "M": "dates",
    "m": "time spans",
}


def _is_bool(value: Any) -> bool:
    """Whether ``value`` is True or False, a Python or a NumPy bool."""
    numpy = sys.modules.get("numpy")  # a NumPy value means NumPy is loaded: the CLI's checks stay NumPy-free
    return isinstance(value, bool) or (numpy is not None and isinstance(value, numpy.bool_))


def _is_number(value: Any, kind: type, dtype_kinds: str) -> bool:
    """Whether ``value`` is one number of Python's ``kind`` (NumPy registers its scalars there) or a
    0-d array of one of ``dtype_kinds``; never a bool."""
    if _is_bool(value):
        return False
    numpy = sys.modules.get("numpy")
    if isinstance(value, kind):
        return True
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    return numpy is not None and shape == () and dtype is not None and numpy.dtype(dtype).kind in dtype_kinds


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer: a Python or NumPy int, or a 0-d integer array (what a
    pytree leaf becomes after ``jax.tree.map(np.asarray, ...)``); never a bool or a float."""
    return _is_number(value, numbers.Integral, "iu")


def is_real_number(value: Any) -> bool:
    """Whether ``value`` is one real number: a Python or NumPy int or float, or a 0-d array of
    one (a concrete JAX scalar too); never a bool, a string, a complex number or several numbers."""
    return _is_number(value, numbers.Real, "iuf")


def is_positive_finite(value: Any) -> bool:
    """Whether ``value`` is a real number (:func:`is_real_number`), finite and > 0 (an int
    beyond float's range, 10**400, is not: it has no float)."""
    if not is_real_number(value):
        return False
    try:
        number = float(value)
    except OverflowError:
        return False
    return math.isfinite(number) and number > 0


def check_flags(config: Any, *names: str) -> None:
    """One NqfError line for the first of ``config``'s on/off settings ``names`` that is not True or
    False (a NumPy bool counts; 0, None or the string "false" are refused, never read by their truth)."""
    for name in names:
        if not _is_bool(getattr(config, name)):
            raise NqfError(f"{name} must be True or False, got {getattr(config, name)!r}")


def check_count(name: str, value: Any, low: int = 1) -> int:
    """``value`` as an int when it is an integer >= ``low`` (1: "a positive integer"); else one NqfError line."""
    if not is_integer(value) or int(value) < low:
        wanted = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise NqfError(f"{name} must be {wanted}, got {value!r}")
    return int(value)


def check_steps(name: str, value: Any) -> int:
    """``value`` as an int when it is a step count in [1, MAX_STEPS] (the compiled loops count in
    int32: a larger horizon would wrap around); else one NqfError line, the settings schema's."""
    if not is_integer(value) or not 1 <= int(value) <= MAX_STEPS:
        raise NqfError(f"{name} must be a positive integer <= {MAX_STEPS}, got {value!r}")
    return int(value)


def check_seed(name: str, value: Any, count: int = 1) -> int:
    """``value`` as an int when ``value .. value + count - 1`` are all seeds in [0, MAX_SEED]; else NqfError."""
    if not is_integer(value) or int(value) < 0 or int(value) + count - 1 > MAX_SEED:
        span = "" if count == 1 else f" (with {count} seeds, up to {MAX_SEED - count + 1})"
        raise NqfError(f"{name} must be an integer in [0, {MAX_SEED}]{span}, got {value!r}")
    return int(value)


def is_tracer(value: Any) -> bool:
    """Whether ``value`` is a JAX tracer (an argument inside ``jax.jit``, ``vmap`` or ``grad``),
    told without importing JAX."""
    return any(c.__name__ == "Tracer" and c.__module__.startswith("jax") for c in type(value).__mro__)


def traced_message(name: str) -> str:
    """The refusal of a traced ``name``: nqf's entry points run on concrete values."""
    return (
        f"{name} is a traced JAX value (inside jax.jit, vmap or grad): nqf.predict, nqf.train and nqf.compare "
        "read concrete values on the host and cannot be transformed; call them outside the transformation"
    )


def check_entry_arguments(entry: str, arch: Any, config: Any, arch_type: type, config_type: type) -> None:
    """One NqfError line unless ``arch`` is an ``arch_type`` or a name and ``config`` a
    ``config_type`` with concrete numbers (``nqf.predict``, ``nqf.train``: a dict, a config of
    the other entry or a traced learning rate would fail later with an AttributeError or JAX's
    TracerArrayConversionError)."""
    if not isinstance(arch, (arch_type, str)):
        raise NqfError(f"{entry} needs an architecture (nqf.get_architecture) or its name, got {type(arch).__name__}")
    if not isinstance(config, config_type):
        raise NqfError(f"{entry} needs a {config_type.__name__} as its config, got {type(config).__name__}")
    for name in ("lr", "sigma0", "beta"):
        if is_tracer(getattr(config, name, None)):
            raise NqfError(traced_message(f"config.{name}"))


def real_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a NumPy array of real numbers (bool, integer or float), not copied when it is one.

    One NqfError line naming ``name`` for what is no such array: a ragged nesting of lists
    (``[[1, 2], [3]]``), complex numbers (whose imaginary part a cast to float would drop
    silently), strings, Python objects, records, dates.
    """
    import numpy as np

    if value is None:
        raise NqfError(f"{name} is missing (None)")
    if is_tracer(value):
        raise NqfError(traced_message(name))
    if isinstance(value, np.ma.MaskedArray) and np.ma.is_masked(value):  # np.asarray would use what is masked
        count = int(np.ma.count_masked(value))
        raise NqfError(f"{name} is a masked array with {count} masked value(s); fill or drop them first")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's VisibleDeprecationWarning for ragged input, before its error
            array = np.asarray(value)
    except (ValueError, TypeError) as err:
        if "Tracer" in type(err).__name__:  # a traced value nested in a list
            raise NqfError(traced_message(name)) from None
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise NqfError(f"{name} is not a rectangular array of numbers (a ragged nested list?): {reason}") from None
    if array.dtype.kind not in "biuf":
        kind = DTYPE_KINDS.get(array.dtype.kind, "not real numbers")
        raise NqfError(f"{name} must hold real numbers, got {kind} (dtype {array.dtype})")
    return array
