"""What a comparison depends on besides task and architecture: :class:`CompareConfig`.

Also which M-flow each optimizer is compared with (``FLOW_OF``; Adam and Muon get the GD
flow as a reference) and the record spacing of the training runs. The comparison itself:
``nqf.comparison.compare``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nqf.core.arguments import check_count, check_flags, check_seed, check_steps, is_positive_finite, is_real_number
from nqf.core.errors import NqfError
from nqf.core.names import NETWORK_METHODS
from nqf.optimizers import (
    MINIBATCH_OPTIMIZERS,
    OPTIMIZER_RECORDS,
    OWN_OPTIMIZER,
    OWN_OPTIMIZER_TEXT,
    REFERENCE_FLOW,
    AbstractOptimizer,
    is_transform,
    optimizer_record,
    own_record,
)
from nqf.training.config import OPTIMIZERS, TrainConfig

COMPARE_OPTIMIZERS = OPTIMIZERS
# The M-flow each optimizer is compared with (its record's reference_flow); Adam and Muon get
# the GD flow as a reference.
FLOW_OF = {name: record.reference_flow for name, record in OPTIMIZER_RECORDS.items()}
# Records every step up to this horizon (as ``predict`` does), else ~2000 log+linear checkpoints.
_EVERY_STEP_LIMIT = 20000
_CHECKPOINTS = 2000


@dataclass(frozen=True)
class CompareConfig:
    """What a comparison depends on besides task and architecture.

    Attributes:
        width: n, the number of units.
        sigma0: init scale, W0 ~ N(0, sigma0^2).
        lr: learning rate of every optimizer (and of the GD reference flow) unless
            overridden in ``learning_rates``.
        steps: horizon in optimizer steps (the same for every source).
        optimizers: which optimizers train the network: any of ``nqf.optimizers.OPTIMIZERS``,
            and a user's own optax GradientTransformations (objects with init and update). Such a
            transformation is named ``custom`` (``custom1``, ``custom2``, ... for several) in the
            result, trains as given (its own learning rate: ``lr`` and ``learning_rates`` are not
            its) and has no M-flow: its rows report the network alone and a note says so. After
            construction ``optimizers`` holds the names, ``transforms`` the (name, transformation)
            pairs.
        learning_rates: per-optimizer overrides, (optimizer, lr) pairs (a mapping is
            accepted and stored sorted), e.g. (("adam", 1e-3),). An override for ``gd``
            also sets the GD reference flow's learning rate.
        beta: the momentum of the optimizers whose M-flow carries one (None: each one's default);
            Adam (b1 0.9) and Muon (beta 0.95) keep their optax defaults.
        batch_size: minibatch size of ``sgd`` (required with sgd, refused without it; the
            other optimizers are full batch, as their M-flows are).
        seeds: number of seeds K (init and minibatches): seed, seed + 1, ..., seed + K - 1.
        seed: the first seed.
        data_seed: seed of ``task.generate``.
        include_quadratic: also train the quadratic model (GD).
        closure: run the closure diagnostic per optimizer.
        closure_fraction: the closure window ends when every mode has reached this
            fraction of its fixed-point occupation (module docstring).
        allow_inapplicable: run even when the expansion check says the quadratic-form
            theory does not apply to the unit (the verdict is reported either way).
        departure: also evaluate the network along each predicted path, per flow and seed,
            without training (``PredictConfig.departure``, ``nqf.theory.departure.estimate``): the
            relative gap between the network and its quadratic form there.
        network, network_budget: the network's own prediction per flow and seed, the mean-field
            flow of its units (``PredictConfig.network``, ``PredictConfig.network_budget``: seconds
            per prediction, by its estimate and its own steps' time, None no limit), beside the trained network's;
            network_method: ``PredictConfig.network_method``.
    """

    width: int = 32
    sigma0: float = 1e-6
    lr: float = 0.05
    steps: int = 1000
    optimizers: tuple[str, ...] = ("gd",)
    learning_rates: tuple[tuple[str, float], ...] = ()
    beta: float | None = None
    batch_size: int | None = None
    seeds: int = 1
    seed: int = 0
    data_seed: int = 0
    include_quadratic: bool = True
    closure: bool = True
    closure_fraction: float = 0.9
    allow_inapplicable: bool = False
    departure: bool = False
    network: bool = True
    network_budget: float | None = 5.0
    network_method: str = "auto"
    transforms: tuple[tuple[str, Any], ...] = field(default=(), repr=False)

    def __post_init__(self):
        check_flags(self, "allow_inapplicable", "departure", "network")
        if self.network_budget is not None and not is_positive_finite(self.network_budget):
            raise NqfError(f"network_budget must be a positive number of seconds or None, got {self.network_budget!r}")
        if not isinstance(self.network_method, str) or self.network_method not in NETWORK_METHODS:
            raise NqfError(f"network_method must be one of {', '.join(NETWORK_METHODS)}, got {self.network_method!r}")
        try:
            opts = (self.optimizers,) if isinstance(self.optimizers, str) else tuple(self.optimizers)
        except TypeError:  # None, a number: no names
            raise NqfError(f"optimizers must be a name or names of optimizers, got {self.optimizers!r}") from None
        if not opts:
            raise NqfError("give at least one optimizer")
        opts = self._own_transforms(opts)
        object.__setattr__(self, "optimizers", opts)
        if len(set(opts)) != len(opts):
            raise NqfError(f"optimizer listed twice in {', '.join(opts)}")
        rates = self.learning_rates
        try:
            pairs: tuple[tuple[Any, ...], ...] = (
                tuple(sorted(rates.items())) if isinstance(rates, Mapping) else tuple(tuple(p) for p in rates)
            )
        except TypeError:  # None, a number, a list of numbers: no pairs
            raise NqfError(f"learning_rates must be (optimizer, lr) pairs or a mapping, got {rates!r}") from None
        for pair in pairs:
            if len(pair) != 2:
                raise NqfError(f"learning_rates must be (optimizer, lr) pairs, got {pair!r}")
            opt, lr = pair
            if opt not in opts:
                raise NqfError(
                    f"a learning rate is given for {opt!r}, which is not among the optimizers ({', '.join(opts)})"
                )
            if opt in self.own:
                raise NqfError(f"a learning rate is given for {opt}, a user's own optax transformation: set it there")
            if not is_positive_finite(lr):
                raise NqfError(f"learning rate of {opt} must be a positive finite number, got {lr!r}")
        if len({p[0] for p in pairs}) != len(pairs):
            raise NqfError("a learning rate is given twice for the same optimizer")
        object.__setattr__(self, "learning_rates", tuple((str(o), float(lr)) for o, lr in pairs))
        check_count("width", self.width)
        check_steps("steps", self.steps)
        if not is_positive_finite(self.lr):
            raise NqfError(f"learning rate must be a positive finite number, got {self.lr!r}")
        if not is_positive_finite(self.sigma0):
            raise NqfError(f"sigma0 must be a positive finite number, got {self.sigma0!r}")
        check_count("seeds", self.seeds)
        check_seed("seed", self.seed, count=self.seeds)  # seed .. seed + seeds - 1 are all seeds
        check_seed("data_seed", self.data_seed)
        if self.beta is not None and not (is_real_number(self.beta) and 0 <= self.beta < 1):
            raise NqfError(f"beta must lie in [0, 1), got {self.beta!r}")
        if self.beta is not None and not isinstance(self.beta, (int, float)):  # a NumPy scalar: its float
            object.__setattr__(self, "beta", float(self.beta))
        batched = [opt for opt in opts if self.record(opt).minibatches]
        if batched and self.batch_size is None:
            raise NqfError(f"optimizer {batched[0]} needs a batch size (--batch)")
        if self.batch_size is not None:
            if not batched:
                names = " or ".join(MINIBATCH_OPTIMIZERS)
                raise NqfError(
                    f"a batch size is used by {names} only (the other optimizers are full batch); add {names} or "
                    "drop it"
                )
            check_count("batch size", self.batch_size)
        fraction = self.closure_fraction
        if isinstance(fraction, bool) or not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
            raise NqfError(f"closure_fraction must lie in (0, 1], got {self.closure_fraction!r}")

    def _own_transforms(self, opts: tuple) -> tuple[str, ...]:
        """The optimizers' names, a user's own transformations named (``custom``, or ``custom1``,
        ``custom2``, ... for several) and kept in ``transforms``; NqfError for anything else."""
        try:
            given = dict(self.transforms) if isinstance(self.transforms, tuple) else None
        except (TypeError, ValueError):  # not pairs
            given = None
        if given is None or not all(isinstance(k, str) and is_transform(v) for k, v in given.items()):
            raise NqfError(f"transforms must be (name, optax transformation) pairs, got {self.transforms!r}")
        objects = [opt for opt in opts if not isinstance(opt, str) and is_transform(opt)]
        names: list[str] = []
        own = dict(given)
        for opt in opts:
            if isinstance(opt, str) and (opt in COMPARE_OPTIMIZERS or opt in given):
                names.append(opt)
            elif not isinstance(opt, str) and is_transform(opt):
                name = OWN_OPTIMIZER if len(objects) == 1 and not given else f"{OWN_OPTIMIZER}{len(own) + 1}"
                own[name] = opt
                names.append(name)
            else:
                shown = repr(opt) if isinstance(opt, str) else f"(a {type(opt).__name__}, without init and update)"
                known = ", ".join(COMPARE_OPTIMIZERS)
                raise NqfError(f"unknown optimizer {shown}; choose from {known}, or pass {OWN_OPTIMIZER_TEXT}")
        if len({id(t) for t in own.values()}) != len(own):
            raise NqfError("the same optax transformation is listed twice among the optimizers")
        object.__setattr__(self, "transforms", tuple((k, v) for k, v in own.items() if k in names))
        return tuple(names)

    @property
    def own(self) -> dict[str, Any]:
        """{name: a user's own optax transformation} among the optimizers (none: empty)."""
        return dict(self.transforms)

    def record(self, optimizer: str) -> AbstractOptimizer:
        """The record of ``optimizer``: a built-in's, or ``own_record`` of a user's own transformation."""
        own = self.own
        return own_record(own[optimizer], optimizer) if optimizer in own else optimizer_record(optimizer)

    def flow_of(self, optimizer: str) -> str | None:
        """The M-flow ``optimizer`` is compared with (``FLOW_OF``); None for a user's own transformation."""
        return None if optimizer in self.own else FLOW_OF[optimizer]

    def lr_for(self, optimizer: str) -> float:
        """The learning rate of ``optimizer`` (its override, else ``lr``); a user's own
        transformation has its own (``lr`` is passed to TrainConfig, which does not use it)."""
        return dict(self.learning_rates).get(optimizer, float(self.lr))

    def stated_lr(self, optimizer: str) -> float | None:
        """The learning rate to report for ``optimizer``: None for a user's own transformation."""
        return None if optimizer in self.own else self.lr_for(optimizer)

    @property
    def seed_list(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.seeds))

    @property
    def flows(self) -> tuple[str, ...]:
        """The M-flows computed: gd (always, the reference), then those of the other optimizers
        asked for that close on M."""
        out = [REFERENCE_FLOW]
        for opt in self.optimizers:
            flow = self.flow_of(opt)
            if flow is not None and flow not in out:
                out.append(flow)
        return tuple(out)

    def flow_lr(self, flow: str) -> float:
        return self.lr_for(flow) if flow in self.optimizers else float(self.lr)

    def train_config(self, optimizer: str, model: str) -> TrainConfig:
        """The TrainConfig of ``optimizer`` (seed and sigma0 are set per run)."""
        steps = self.steps
        record = self.record(optimizer)
        return TrainConfig(
            optimizer=self.own.get(optimizer, optimizer),
            lr=self.lr_for(optimizer),
            steps=steps,
            batch_size=self.batch_size if record.minibatches else None,
            beta=self.beta if record.flow_takes_beta else None,
            seed=self.seed,
            sigma0=float(self.sigma0),
            width=int(self.width),
            model=model,
            checkpoints=None if steps <= _EVERY_STEP_LIMIT else _CHECKPOINTS,
        )
