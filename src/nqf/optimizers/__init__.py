r"""The optimizers nqf trains with, one object each, in one JAX-free place.

Each optimizer is one file: a subclass of :class:`AbstractOptimizer` (training: its optax
transformation and how figures and tables call it) or, when its quadratic model closes on
M = W W^T, of :class:`AbstractClosedOptimizer` (also its update as a map of the factor, from
which ``nqf.theory`` derives the M-flow, the adaptive jumps, the Lotka-Volterra map, the escape
rate and the stability bound). The registry below lists them in the order lists, tables and
figures show them.

Importing this package loads neither JAX nor optax (the command line checks its arguments
against :data:`OPTIMIZERS` before JAX starts).

Adding an optimizer: its file here and one line in :data:`_ALL`; CONTRIBUTING.md has the
recipe, and ``tests/test_optimizers.py`` checks every registered one (its M-flow against
training the quadratic model, its escape rate and stability bound against its own step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nqf.core.errors import NqfError
from nqf.optimizers.adam import Adam as Adam
from nqf.optimizers.base import BATCH_RULES as BATCH_RULES
from nqf.optimizers.base import REFERENCE_FLOW as REFERENCE_FLOW
from nqf.optimizers.base import AbstractClosedOptimizer as AbstractClosedOptimizer
from nqf.optimizers.base import AbstractOptimizer as AbstractOptimizer
from nqf.optimizers.base import OwnTransform as OwnTransform
from nqf.optimizers.gd import GD as GD
from nqf.optimizers.momentum import HeavyBall as HeavyBall
from nqf.optimizers.muon import Muon as Muon
from nqf.optimizers.nesterov import Nesterov as Nesterov
from nqf.optimizers.sgd import SGD as SGD

_ALL: tuple[AbstractOptimizer, ...] = (GD(), SGD(), HeavyBall(), Adam(), Muon(), Nesterov())
# name -> optimizer, in the order lists, tables and figures show them
OPTIMIZER_RECORDS: Mapping[str, AbstractOptimizer] = {optimizer.name: optimizer for optimizer in _ALL}

# the optimizers nqf.train runs, and those whose M-flow nqf.predict computes (they close on M)
OPTIMIZERS = tuple(OPTIMIZER_RECORDS)
PREDICT_OPTIMIZERS = tuple(name for name, record in OPTIMIZER_RECORDS.items() if record.closes_on_m)
# the optimizers always on minibatches (a batch size is theirs; their M-flow reads the samples)
MINIBATCH_OPTIMIZERS = tuple(name for name, record in OPTIMIZER_RECORDS.items() if record.minibatches)
# the optimizers with a learning rate of their own beside --lr (nqf compare's --lr-OPT, a sweep's lr_OPT)
RATE_OPTIMIZERS = tuple(name for name in OPTIMIZERS if name != REFERENCE_FLOW)
# the settings of predict and compare (and a sweep's) that only some optimizers use: what each is,
# and who uses it (the minibatch of the minibatch optimizers, the momentum of the M-flows that
# carry one; Adam's b1 and Muon's beta keep their defaults there)
OPTIMIZER_SETTINGS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "batch": ("the minibatch size", MINIBATCH_OPTIMIZERS),
    "beta": ("the momentum", tuple(n for n, r in OPTIMIZER_RECORDS.items() if r.flow_takes_beta)),
}


def unused_setting(setting: str, optimizers: Sequence[str], label: str | None = None) -> str | None:
    """Why none of ``optimizers`` uses ``setting`` (a key of :data:`OPTIMIZER_SETTINGS`), as one
    line naming it as ``label`` (default the setting) and the optimizers; None when one of them
    uses it. ``unused_setting("batch", ["gd"], "--batch")`` -> ``"--batch is not used by optimizer
    gd (full batch): it is the minibatch size of sgd only"``. Predict, compare and the sweep spec
    refuse such a setting instead of ignoring it."""
    what, users = OPTIMIZER_SETTINGS[setting]
    if any(name in users for name in optimizers):
        return None
    names = ", ".join(optimizers)
    which = f"optimizer {names}" if len(optimizers) == 1 else f"optimizers {names}"
    full = " (full batch)" if setting == "batch" else ""
    return f"{label or setting} is not used by {which}{full}: it is {what} of {' and '.join(users)} only"


# what a user's own optax transform is called in tables, JSON and figures (``own_record``)
OWN_OPTIMIZER = "custom"
OWN_OPTIMIZER_TEXT = "a user's own optax GradientTransformation (an object with init and update)"


def is_transform(value: Any) -> bool:
    """Whether ``value`` is a user's own optax transformation: not a name, with callable ``init``
    and ``update`` (``optax.GradientTransformation`` and anything shaped like it)."""
    return (
        not isinstance(value, str)
        and callable(getattr(value, "init", None))
        and callable(getattr(value, "update", None))
    )


def own_record(transform: Any, name: str = OWN_OPTIMIZER) -> OwnTransform:
    """The optimizer of a user's own optax transformation (:class:`OwnTransform`); its colour
    follows the built-in optimizers'."""
    return OwnTransform(transform, name, len(_ALL))


def closed_optimizer(name: Any) -> AbstractClosedOptimizer:
    """The optimizer called ``name`` (or that object) when its quadratic model closes on M;
    NqfError naming it otherwise."""
    optimizer = name if isinstance(name, AbstractOptimizer) else optimizer_record(name)
    if not isinstance(optimizer, AbstractClosedOptimizer):
        raise NqfError(
            f"optimizer {optimizer.name} does not close on M: no M-flow; those that do: {', '.join(PREDICT_OPTIMIZERS)}"
        )
    return optimizer


def optimizer_record(name: Any) -> AbstractOptimizer:
    """The optimizer called ``name``, or :func:`own_record` of a user's own optax
    transformation; NqfError for anything else (an unknown name, a number, an object without
    ``init`` and ``update``)."""
    if is_transform(name):
        return own_record(name)
    try:
        return OPTIMIZER_RECORDS[name]
    except (KeyError, TypeError):
        shown = repr(name) if isinstance(name, str) else f"(a {type(name).__name__}, without init and update)"
        raise NqfError(
            f"unknown optimizer {shown}; choose one of {', '.join(OPTIMIZERS)}, or pass {OWN_OPTIMIZER_TEXT}"
        ) from None
