r"""E5's perceptron cases: the tanh perceptron (``mlp``, trainable readout) on the staircase, and the
perceptron with a fixed readout (``mlp-fixed``, 1 - cos) on a quadratic teacher y = x^T Q x.

Their claims are the early groups' (``summary.early_mode_claims``); :data:`PERCEPTRON_WHY` says why their
plateau losses may differ from the M-flow's when that claim is not confirmed.
"""

from __future__ import annotations

from typing import Any

from .config import ArchitecturesConfig, compare_dict


def perceptron_specs(c: ArchitecturesConfig) -> dict[str, dict[str, Any]]:
    """The tanh perceptron on the staircase (the task's own architecture)."""
    return {
        "perceptron": {
            "case": "perceptron",
            "task": ["staircase", {}],
            "arch": None,
            "compare": compare_dict(c, c.perceptron_width, c.perceptron_lr, c.perceptron_steps),
        }
    }


def fixed_readout_specs(c: ArchitecturesConfig) -> dict[str, dict[str, Any]]:
    """The fixed-readout perceptron on the quadratic teacher."""
    return {
        "fixed-readout": {
            "case": "fixed-readout",
            "task": ["quadratic", {"inputs": c.fixed_inputs, "samples": c.fixed_samples}],
            "arch": ["mlp-fixed", {"inputs": c.fixed_inputs, "activation": c.fixed_activation}],
            "compare": compare_dict(c, c.fixed_width, c.fixed_lr, c.fixed_steps),
        }
    }


# Why a plateau-loss claim may not be confirmed (see ``summary.plateau_diagnosis``).
PERCEPTRON_WHY = {
    "perceptron": "the tanh network settles onto this plateau more slowly than its quadratic model, and its later "
    "modes drift from the quadratic order (docs/theory.md section 3; mode 3 comes early), so where its plateau is read "
    "its loss is still falling",
    "fixed-readout": "the growth coefficients c_k = lambda_k + Tr(Q)/2 of this task lie close together (the "
    "uncentred target adds Tr(Q)/2 to every direction), so the first modes switch on a few steps apart and there "
    "is no plateau between them: the midpoint lies on the drop, where a lag of one or two steps changes the loss "
    "by tens of percent",
}
