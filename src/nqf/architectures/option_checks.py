"""Validation of architecture options at construction (one clear NqfError per bad option)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nqf.core.errors import NqfError


def positive_int(architecture: str, option: str, value) -> int:
    """``value`` as a Python int >= 1, or NqfError naming the architecture and option."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise NqfError(f"{architecture}: option {option} must be a positive integer, got {value!r}")
    if value < 1:
        raise NqfError(f"{architecture}: option {option} must be >= 1, got {value}")
    return int(value)


def one_of(architecture: str, option: str, value, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else NqfError listing them."""
    if value not in choices:
        raise NqfError(f"{architecture}: unknown {option} {value!r}; choose one of {', '.join(choices)}")
    return value
