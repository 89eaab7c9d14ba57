r"""E5's settings: :class:`ArchitecturesConfig` (one field group per case) and the ``compare``
part of a run's config."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nqf.core.arguments import check_count, check_seed
from nqf.core.errors import NqfError

from .common import CASES

# the sizes of the cases' data and units (each a positive integer)
_COUNTS = (
    "perceptron_width",
    "fixed_inputs",
    "fixed_samples",
    "fixed_width",
    "attention_tokens",
    "attention_dim",
    "attention_key_dim",
    "attention_value_dim",
    "attention_samples",
    "attention_width",
    "icl_dim",
    "icl_context",
    "icl_prompts",
    "icl_width",
    "conv_length",
    "conv_samples",
    "conv_width",
)


@dataclass(frozen=True)
class ArchitecturesConfig:
    """E5's settings; see the module docstring. One seed (``seed``) and data set (``data_seed``)."""

    sigma0: float = 1e-6
    seed: int = 0
    data_seed: int = 0
    # seconds each case's network prediction (the mean field) may take by its estimate: softmax
    # attention's (2 x 64 particles, d = 112) is estimated at 5.3 s (400 steps) and 9.3 s (700), and
    # took 2.8 s and 5.4 s warm on the 2-core Intel machine (ICL's unit is exactly quadratic: its
    # network prediction is its M-flow)
    network_budget: float = 10.0
    perceptron_width: int = 16
    perceptron_lr: float = 0.05
    perceptron_steps: int = 700
    fixed_activation: str = "one_minus_cos"
    fixed_inputs: int = 8
    fixed_samples: int = 2048
    fixed_width: int = 16
    fixed_lr: float = 0.01
    fixed_steps: int = 500
    attention_tokens: int = 8
    attention_dim: int = 8
    attention_key_dim: int = 4
    attention_value_dim: int = 4
    attention_samples: int = 256
    attention_width: int = 8
    attention_lr: float = 0.05
    attention_steps: int = 700
    icl_dim: int = 4
    icl_context: int = 31
    icl_prompts: int = 20000
    icl_task_variances: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)
    icl_width: int = 8
    icl_lr: float = 0.5
    icl_steps: int = 300
    moe_experts: tuple[int, ...] = (2, 4, 8)
    moe_lr: float = 0.1
    moe_steps: int = 1200
    conv_length: int = 16
    conv_samples: int = 1024
    conv_alpha: float = 1.0
    conv_width: int = 16
    conv_lr: float = 0.5
    conv_steps: int = 800
    cases: tuple[str, ...] = CASES

    def __post_init__(self) -> None:
        unknown = [c for c in self.cases if c not in CASES]
        if unknown or not self.cases or len(set(self.cases)) != len(self.cases):
            raise NqfError(f"E5: cases must be distinct names from {', '.join(CASES)}, got {self.cases!r}")
        if not (math.isfinite(self.sigma0) and 0 < self.sigma0 < 1):
            raise NqfError(f"E5: sigma0 must lie in (0, 1), got {self.sigma0!r}")
        if not (math.isfinite(self.network_budget) and self.network_budget > 0):
            raise NqfError(f"E5: network_budget must be a positive number of seconds, got {self.network_budget!r}")
        experts = tuple(self.moe_experts)
        if len(experts) < 2 or len(set(experts)) != len(experts) or any(e < 1 for e in experts):
            raise NqfError(f"E5: moe_experts needs at least two distinct positive numbers, got {self.moe_experts!r}")
        for name in ("perceptron", "fixed", "attention", "icl", "moe", "conv"):
            if getattr(self, f"{name}_steps") < 1:
                raise NqfError(f"E5: {name}_steps must be a positive integer")
            if not getattr(self, f"{name}_lr") > 0:
                raise NqfError(f"E5: {name}_lr must be positive")
        # what the cases' tasks and architectures take, checked here: a --set is refused before
        # any run computes (the sizes of the data and the units, the activation's name)
        for name in _COUNTS:
            check_count(f"E5: {name}", getattr(self, name))
        for name in ("seed", "data_seed"):
            check_seed(f"E5: {name}", getattr(self, name))
        from nqf.architectures.activations import ACTIVATIONS  # JAX: loaded with the experiments anyway

        if self.fixed_activation not in ACTIVATIONS:
            raise NqfError(
                f"E5: fixed_activation must be one of {', '.join(ACTIVATIONS)}, got {self.fixed_activation!r}"
            )

    @classmethod
    def quick(cls) -> ArchitecturesConfig:
        """Smaller data (ICL 4000 prompts, fixed readout 1024 samples, convolution L = 8) and
        shorter horizons: 67-107 s on 2 shared cores (module docstring)."""
        return cls(
            perceptron_steps=400,
            fixed_samples=1024,
            fixed_steps=400,
            attention_steps=400,
            icl_prompts=4000,
            moe_steps=800,
            conv_length=8,
            conv_samples=512,
            conv_steps=400,
        )

    @classmethod
    def full(cls) -> ArchitecturesConfig:
        """docs/theory.md's ICL size (20000 prompts), L = 16 and horizons past every mode."""
        return cls()


def compare_dict(c: ArchitecturesConfig, width: int, lr: float, steps: int) -> dict[str, Any]:
    """The ``compare`` settings of one case: its width, lr and steps, the shared sigma0, seeds and
    network budget."""
    return {
        "width": width,
        "lr": lr,
        "steps": steps,
        "sigma0": c.sigma0,
        "seed": c.seed,
        "data_seed": c.data_seed,
        "network_budget": c.network_budget,
    }
