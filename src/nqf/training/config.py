r"""What a training run is: its settings (``TrainConfig``), the optimizers and the checkpoint steps.

Optimizers (``TrainConfig.optimizer``): the names of ``nqf.optimizers`` (one file each: its optax
transformation acting on W (d x n) as one array, its default ``beta``, whether it takes ``eps``
and minibatches). ``sgd`` step t uses row t of ``minibatch_indices(batch_key, N, batch_size,
steps)`` (``nqf.core.sampling``) with ``batch_key = training_keys(seed)[1]``, so an SGD map on M
can replay the batches. ``eps`` (Adam, Muon) defaults to optax's 1e-8. Any optimizer but ``gd``
may take ``batch_size``.

A user's own optax transformation (``optax.GradientTransformation``, or any object with
``init`` and ``update``) is an optimizer too: ``TrainConfig(optimizer=optax.adamw(1e-3))``
trains with it as given, on the full batch or on minibatches of ``batch_size``. Its learning
rate, momentum and epsilon are its own: ``lr`` is not used (``beta`` and ``eps`` are refused).
Compiled runs with such a transformation are keyed by the object itself (``nqf.training.runs``):
two transformations never share one, even when they print alike. It has no M-flow: ``nqf.predict``
refuses it, ``nqf.compare`` trains and reports the network and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
import optax

from nqf.core.arguments import check_count, check_seed, check_steps, is_integer, is_positive_finite, is_real_number
from nqf.core.errors import NqfError
from nqf.core.names import MODELS as MODELS
from nqf.core.precision import resolve_dtype
from nqf.optimizers import OPTIMIZERS as OPTIMIZERS
from nqf.optimizers import optimizer_record

# A run has diverged once its loss exceeds this multiple of the initial full-data loss.
DIVERGENCE_FACTOR = 100.0


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (besides architecture, data and basis).

    Attributes:
        optimizer: a name of ``nqf.optimizers.OPTIMIZERS`` (gd, sgd, momentum, adam, muon,
            nesterov), or a user's own optax GradientTransformation (module docstring).
        lr: learning rate eta (not used by a user's own transformation: it has its own).
        steps: number of updates.
        batch_size: minibatch size (required for ``sgd``; None = full batch).
        beta: momentum / Adam b1 / Muon beta (None: the optimizer's default).
        eps: Adam's / Muon's epsilon (None: optax's default 1e-8).
        seed: init and minibatch key, see :func:`training_keys`.
        sigma0: init scale, W0_ij ~ N(0, sigma0^2).
        width: n, the number of units.
        dtype: ``float32``/``float64`` (None: JAX's default float).
        model: ``network`` (full layer) or ``quadratic`` (f = <W W^T, A(x)>).
        checkpoints: None records every step, else about this many log+linear steps.
    """

    optimizer: str | optax.GradientTransformation = "gd"
    lr: float = 0.05
    steps: int = 1000
    batch_size: int | None = None
    beta: float | None = None
    eps: float | None = None
    seed: int = 0
    sigma0: float = 1e-6
    width: int = 32
    dtype: str | None = None
    model: str = "network"
    checkpoints: int | None = None

    def __post_init__(self):
        record = optimizer_record(self.optimizer)  # NqfError for an unknown name or a bad object
        own = "" if isinstance(self.optimizer, str) else " (your own optax transformation: set it there)"
        if not isinstance(self.model, str):  # before `in` (an array breaks it)
            raise NqfError(f"model must be a name (a str), got {type(self.model).__name__}")
        if self.model not in MODELS:
            raise NqfError(f"unknown model {self.model!r}; choose one of {', '.join(MODELS)}")
        if not is_positive_finite(self.lr):
            raise NqfError(f"learning rate must be a positive finite number, got {self.lr!r}")
        check_steps("steps", self.steps)
        check_count("width", self.width)
        if not (is_real_number(self.sigma0) and (self.sigma0 == 0 or is_positive_finite(self.sigma0))):
            raise NqfError(f"sigma0 must be a finite number >= 0, got {self.sigma0!r}")
        check_seed("seed", self.seed)
        if record.batch == "required" and self.batch_size is None:
            raise NqfError(f"optimizer {record.name} needs a batch_size (gd is the full-batch version)")
        if record.batch == "never" and self.batch_size is not None:
            raise NqfError(f"optimizer {record.name} is full batch; use sgd for minibatches")
        if self.batch_size is not None:
            check_count("batch_size", self.batch_size)
        if self.beta is not None:
            if not record.takes_beta:
                raise NqfError(f"beta is not used by optimizer {record.name}{own}")
            if not (is_real_number(self.beta) and 0 <= self.beta < 1):
                raise NqfError(f"beta must lie in [0, 1), got {self.beta!r}")
        if self.eps is not None:
            if not record.takes_eps:
                raise NqfError(f"eps is not used by optimizer {record.name}{own}")
            if not (is_real_number(self.eps) and self.eps >= 0):
                raise NqfError(f"eps must be >= 0, got {self.eps!r}")
        for name in ("lr", "sigma0", "beta", "eps"):  # a NumPy or JAX scalar: kept as the float it is
            value = getattr(self, name)
            if value is not None and not isinstance(value, (int, float)):
                object.__setattr__(self, name, float(value))
        if self.checkpoints is not None and (not is_integer(self.checkpoints) or self.checkpoints < 2):
            raise NqfError(f"checkpoints must be an integer >= 2 (or None for every step), got {self.checkpoints!r}")
        resolve_dtype(self.dtype)

    @property
    def effective_beta(self) -> float | None:
        return self.beta if self.beta is not None else optimizer_record(self.optimizer).default_beta


def make_optimizer(config: TrainConfig, lr: float | jax.Array | None = None) -> optax.GradientTransformation:
    """The optax transformation named by ``config.optimizer`` (see the module docstring).

    ``lr`` overrides ``config.lr`` (it may be a traced scalar: compiled runs take it as an argument).
    """
    lr = config.lr if lr is None else lr
    return optimizer_record(config.optimizer).transform(lr, config.effective_beta, config.eps)


def checkpoint_count(steps: int, count: int | None = None) -> int:
    """How many steps :func:`checkpoint_steps` records at most, without making them."""
    return steps + 1 if count is None else min(steps + 1, count + 2)


def checkpoint_steps(steps: int, count: int | None = None) -> np.ndarray:
    """Record steps in [0, steps]: all of them (count None or >= steps + 1), else about
    count/2 log-spaced and count/2 evenly spaced steps, deduplicated, with 0 and steps."""
    if count is None or count >= steps + 1:
        return np.arange(steps + 1)
    log = np.rint(np.geomspace(1, steps, max(count // 2, 2)))
    lin = np.rint(np.linspace(0, steps, max(count - count // 2, 2)))
    return np.unique(np.concatenate([[0, steps], log, lin]).astype(np.int64))
