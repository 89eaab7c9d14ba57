r"""E6's settings (:class:`OptimizersConfig`), the optimizers' names and the bounds stated in advance."""

from __future__ import annotations

from dataclasses import dataclass

from nqf.core.errors import NqfError
from nqf.optimizers import OPTIMIZER_RECORDS, AbstractClosedOptimizer

from .._common import check_sigma0s

# The optimizers E6 studies, each with its own step count below (<name>_steps): a design choice
# of the experiment, so a new optimizer record joins E6 only when added here. Their order,
# names and equivariance are the records' (nqf.optimizers).
STUDIED = frozenset({"gd", "sgd", "momentum", "adam", "muon"})


def escape_of(optimizer: str) -> str | None:
    """Whose escape-rate formula predicts ``optimizer``'s switch-on slope: its own full-batch
    flow's (SGD: GD's), or None for an optimizer that does not close on M (normalised updates)."""
    record = OPTIMIZER_RECORDS[optimizer]
    return record.mean_flow if isinstance(record, AbstractClosedOptimizer) else None


OPTIMIZER_ORDER = tuple(name for name in OPTIMIZER_RECORDS if name in STUDIED)
OPTIMIZER_NAMES = {name: OPTIMIZER_RECORDS[name].label for name in OPTIMIZER_ORDER}
EQUIVARIANT = tuple(name for name in OPTIMIZER_ORDER if OPTIMIZER_RECORDS[name].equivariant)
MODELS = ("network", "quadratic")
# the optimizers whose tanh network's mode-1 slope is a claim (with the network's own prediction)
NETWORK_CLAIMS = ("gd", "momentum")

# Stated in advance (docs/theory.md sections 2, 4, 5); deliberately not config fields.
SLOPE_TOLERANCE = 0.03  # relative, slope of switch step versus ln(1/sigma0)
EQUIVARIANT_BOUND = 1e-8  # closure defect of an equivariant optimizer (float64 rounding is ~1e-14)
ADAM_BOUND = 1e-2  # Adam's closure defect is order one
NAIVE_OFF_BY = 0.2  # the lr/(1 - beta) rule misses heavy-ball escape by more than this (relative)


@dataclass(frozen=True)
class OptimizersConfig:
    """E6's settings; see the module docstring. ``sigma0s`` must hold ``closure_sigma0``."""

    sigma0s: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-6, 1e-8, 1e-10, 1e-12)
    seeds: tuple[int, ...] = (0, 1, 2)
    optimizers: tuple[str, ...] = OPTIMIZER_ORDER
    inputs: int = 8
    outputs: int = 4
    singular_values: tuple[float, ...] = (3.0, 2.0, 1.0, 0.5)
    samples: int = 256
    data_seed: int = 0
    width: int = 32
    lr: float = 0.05
    beta: float = 0.9
    batch_size: int = 32
    adam_lr: float = 1e-3
    muon_lr: float = 0.01
    gd_steps: int = 1400
    sgd_steps: int = 1400
    momentum_steps: int = 400
    adam_steps: int = 600
    muon_steps: int = 400
    closure_sigma0: float = 1e-6
    rotation_seed: int = 1
    network_closure: bool = True

    def __post_init__(self) -> None:
        check_sigma0s("E6", self.sigma0s)
        if self.closure_sigma0 not in self.sigma0s:
            raise NqfError(
                f"E6: closure_sigma0 = {self.closure_sigma0:g} must be one of sigma0s "
                "(its switch steps end the plateau window)"
            )
        if not self.seeds or any(s < 0 for s in self.seeds):
            raise NqfError(f"E6: seeds must be a non-empty tuple of integers >= 0, got {self.seeds!r}")
        unknown = [o for o in self.optimizers if o not in OPTIMIZER_ORDER]
        if unknown or not self.optimizers or len(set(self.optimizers)) != len(self.optimizers):
            raise NqfError(
                f"E6: optimizers must be distinct names from {', '.join(OPTIMIZER_ORDER)}, got {self.optimizers!r}"
            )
        for name in ("gd_steps", "sgd_steps", "momentum_steps", "adam_steps", "muon_steps", "width", "samples"):
            if getattr(self, name) < 1:
                raise NqfError(f"E6: {name} must be a positive integer, got {getattr(self, name)!r}")
        if not 0 <= self.beta < 1:
            raise NqfError(f"E6: beta must lie in [0, 1), got {self.beta!r}")

    @classmethod
    def quick(cls) -> OptimizersConfig:
        return cls(sigma0s=(1e-3, 1e-6, 1e-9, 1e-12), seeds=(0,))

    @classmethod
    def full(cls) -> OptimizersConfig:
        return cls()
