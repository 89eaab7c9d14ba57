"""One-line checks of the arguments every entry point shares: counts (width, steps, batch
size), seeds and arrays of real numbers. The configs (``TrainConfig``, ``PredictConfig``,
``CompareConfig``), ``nqf.train``, ``nqf.predict`` and the command line's checks
(``nqf.comparison.limits``) all use these, so an argument is refused with the same words
wherever it comes in. JAX- and NumPy-free until an array is checked: a config is checked
before anything heavy is imported.
"""

from __future__ import annotations

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


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer: a Python or NumPy int, or a 0-d integer array (what a
    pytree leaf becomes after ``jax.tree.map(np.asarray, ...)``); never a bool or a float."""
    numpy = sys.modules.get("numpy")  # a NumPy value means NumPy is loaded: the CLI's checks stay NumPy-free
    if isinstance(value, bool) or (numpy is not None and isinstance(value, numpy.bool_)):
        return False
    if isinstance(value, numbers.Integral):
        return True
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    return numpy is not None and shape == () and dtype is not None and numpy.issubdtype(dtype, numpy.integer)


def check_count(name: str, value: Any, low: int = 1) -> int:
    """``value`` as an int when it is an integer >= ``low`` (1: "a positive integer"); else one NqfError line."""
    if not is_integer(value) or int(value) < low:
        wanted = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise NqfError(f"{name} must be {wanted}, got {value!r}")
    return int(value)


def check_seed(name: str, value: Any, count: int = 1) -> int:
    """``value`` as an int when ``value .. value + count - 1`` are all seeds in [0, MAX_SEED]; else NqfError."""
    if not is_integer(value) or int(value) < 0 or int(value) + count - 1 > MAX_SEED:
        span = "" if count == 1 else f" (with {count} seeds, up to {MAX_SEED - count + 1})"
        raise NqfError(f"{name} must be an integer in [0, {MAX_SEED}]{span}, got {value!r}")
    return int(value)


def real_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a NumPy array of real numbers (bool, integer or float), not copied when it is one.

    One NqfError line naming ``name`` for what is no such array: a ragged nesting of lists
    (``[[1, 2], [3]]``), complex numbers (whose imaginary part a cast to float would drop
    silently), strings, Python objects, records, dates.
    """
    import numpy as np

    if value is None:
        raise NqfError(f"{name} is missing (None)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's VisibleDeprecationWarning for ragged input, before its error
            array = np.asarray(value)
    except (ValueError, TypeError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise NqfError(f"{name} is not a rectangular array of numbers (a ragged nested list?): {reason}") from None
    if array.dtype.kind not in "biuf":
        kind = DTYPE_KINDS.get(array.dtype.kind, "not real numbers")
        raise NqfError(f"{name} must hold real numbers, got {kind} (dtype {array.dtype})")
    return array
