"""Exception types. Library calls raise these; the CLI prints them as one line and exits 2."""

from __future__ import annotations


class NqfError(ValueError):
    """Bad input or a configuration nqf cannot honour (unknown option, wrong shape, ...)."""


class TheoryDoesNotApply(NqfError):
    """The quadratic-form expansion does not hold for this unit function.

    The message says why: not smooth at w = 0, a linear term is present,
    or the quadratic form vanishes (leading order is cubic).
    """


class PrecisionWarning(UserWarning):
    """A computation runs in lower precision than nqf's quoted numbers (float32: JAX's
    ``jax_enable_x64`` is off); its results can differ from float64's beyond rounding."""


def install_hint(extra: str) -> str:
    """How to install an optional extra: from the clone, as the README's Install section says
    (nqf is not on the package index), and by its name for an index that has it."""
    return f"pip install '.[{extra}]' in nqf's clone (pip install 'nqf[{extra}]' where nqf comes from an index)"
