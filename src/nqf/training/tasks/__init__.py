r"""Tasks: data sets with a known structure, each paired with the architecture it is made for.

A task is a frozen configuration. ``task.generate(key, dtype) -> (X, Y)`` draws the data
(X: (N, *input_shape), Y: (N, K)); ``key`` is an int seed or a JAX PRNG key. Data are
drawn with NumPy in float64 (so whitening is exact to rounding) and cast to ``dtype``
at the end; the same key always gives the same data. ``task.natural_architecture()``
gives the registry name and options of the architecture the task is built for, and
``task.architecture()`` builds it.

``task.spectrum()`` documents the growth coefficients of the theory's modes where they
are known: the positive eigenvalues c_k of the data matrix C = E[y A(x)] of the natural
architecture, in decreasing order (docs/theory.md sections 2-3). Near M = 0, GD grows mode k's
occupation by (1 + 2 lr c_k)^2 per step. Tasks without a closed form return None.

Conventions: second moments are uncentred (E[x x^T], as the data matrices use them);
"whitened" means the *sample* second moment is exactly the identity, X^T X / N = I, so
the data matrices of the sample commute exactly and the population formulas hold for
the sample itself.

One task per module (``staircase.py``, ...); ``base.py`` holds the :class:`Task` base class
and the shared helpers, ``linear_teacher.py`` the linear teacher of staircase, powerlaw and
experts; this module holds the registry (``TASKS``, ``get_task``, ``task_options``).

=============  =================================================  ======================
task           data                                               natural architecture
=============  =================================================  ======================
staircase      y = T x, T = U diag(s) V^T, s = (3, 2, 1, 0.5)      mlp (tanh)
powerlaw       y = T x, s_k = scale k^-alpha                      mlp (tanh)
quadratic      y = x^T Q x, Q = R diag(lambda) R^T                mlp-fixed (square)
fourier        stationary x with power spectrum P(f); y = x_0     conv1d, circular, per position
icl            in-context linear regression prompts               linear-attention
tokens         y = T xbar (+ a part uniform attention can't see)  attention
experts        y = T x                                            moe (softmax gate)
digits         scikit-learn's 8x8 digits, centred one-hot         mlp (tanh)
npz            the user's arrays X, Y from an .npz file           mlp when X is 2-D
=============  =================================================  ======================
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nqf.core.errors import NqfError

from .base import Task as Task
from .digits import Digits as Digits
from .experts import Experts as Experts
from .fourier import Fourier as Fourier
from .icl import ICL as ICL
from .npz import Npz as Npz
from .powerlaw import PowerLaw as PowerLaw
from .quadratic import Quadratic as Quadratic
from .staircase import Staircase as Staircase
from .tokens import Tokens as Tokens

# -- registry --------------------------------------------------------------------------

TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (Staircase, PowerLaw, Quadratic, Fourier, ICL, Tokens, Experts, Digits, Npz)
}


def _task_class(name: str) -> type[Task]:
    try:
        return TASKS[name]
    except KeyError:
        raise NqfError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}") from None


def task_options(name: str) -> dict[str, Any]:
    """The options of a task with their defaults."""
    return {f.name: f.default for f in dataclasses.fields(_task_class(name))}


def get_task(name: str, **options: Any) -> Task:
    """Build a task by name; unknown options raise NqfError. Lists become tuples (hashable configs)."""
    cls = _task_class(name)
    known = task_options(name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise NqfError(f"task {name!r} has no option {', '.join(unknown)}; its options are {', '.join(known)}")
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    return cls(**options)
