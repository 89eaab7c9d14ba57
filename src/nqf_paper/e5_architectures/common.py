r"""E5's shared pieces: the case names and labels, the tolerances stated in advance (module
constants, not config fields), the mode groups and their switch steps, A(x) by autodiff, and a
case record read back (arrays, group names, labels).
"""

from __future__ import annotations

import math

import jax
import numpy as np

from nqf.core.measure import DEGENERATE_RTOL as DEGENERATE_RTOL  # the library's groups (nqf.core.measure)
from nqf.core.measure import group_switch_steps as group_switch_steps
from nqf.core.measure import mode_groups as mode_groups
from nqf.core.pytrees import json_number as json_number  # finite float, else None (a claim's number)

CASES = ("perceptron", "fixed-readout", "attention", "linear-attention", "moe", "conv")
LABELS = {
    "perceptron": "perceptron (tanh, trainable readout)",
    "fixed-readout": "perceptron (fixed readout, 1 - cos)",
    "attention": "softmax attention",
    "linear-attention": "merged linear attention (ICL)",
    "moe": "mixture of experts",
    "conv": "circular convolution",
}
SOURCES = ("network", "quadratic", "mflow")
# what a prediction's note says when the network's own prediction was not computed (then why)
NOT_COMPUTED = ": not computed: "

# Stated in advance (docs/theory.md section 5); deliberately not config fields.
SWITCH_TOLERANCE = 0.10  # network vs M-flow switch-on step, relative
PLATEAU_TOLERANCE = 0.10  # network vs M-flow plateau loss, relative
EARLY_GROUPS = 2  # groups claimed per case (linear attention: 1, mixture of experts: mode 1 per E)
STRUCTURE_ZERO = 1e-12  # |entry| of A(x) that the closed form says vanishes (float64 autodiff)
QK_FACTOR = 2.0  # ||W_Q||, ||W_K|| stay within this factor of init through the first plateau
VO_GROWTH = 100.0  # ||W_V||, ||W_O|| grow at least this much by the end of the first plateau
ICL_PLATEAU_TOLERANCE = 0.10  # relative, loss after the drop / initial loss vs population optimum
ONE_DROP_SHARE = 0.95  # share of the run's loss decrease inside [t_1/2, 2 t_1]
GROWTH_SCALING_TOLERANCE = 1e-9  # c_1(E0)/c_1(E) = E/E0, relative
RATIO_TOLERANCE = 0.10  # switch-step ratio across E, network vs M-flow, relative
FOURIER_PURITY = 1e-6  # 1 - power fraction of a mode's kernel at its dominant |f|


def own_steps(record: dict) -> tuple[np.ndarray | None, str]:
    """(the network's own predicted switch-on steps of a case's groups, ""), or (None, why there are
    none): the mean-field flow's (the networks sharing M0 for a router), as the record keeps them."""
    if "mean_field" in record["switch"]:
        return _array(record["switch"]["mean_field"]), ""
    return None, "no mean-field flow: " + (record.get("network_note") or "the run recorded none").split(NOT_COMPUTED)[
        -1
    ]


def _autodiff_structure(arch, x) -> np.ndarray:
    """A(x) (K, d, d) by the generic route, compiled (eager Hessians of a whole unit are slow)."""
    from nqf.architectures.architecture import structure_matrix

    return np.asarray(jax.jit(lambda sample: structure_matrix(arch, sample))(x))


def _none_to_nan(value):
    if value is None:
        return math.nan
    if isinstance(value, (list, tuple)):
        return [_none_to_nan(v) for v in value]
    return value


def _array(value) -> np.ndarray:
    """A record's (nested) list back as floats; None (JSON's null) becomes NaN."""
    return np.array(_none_to_nan(value), dtype=np.float64)


def _steps_text(values, digits: int = 0) -> str:
    return ", ".join("never" if not math.isfinite(v) else f"{v:.{digits}f}" for v in np.asarray(values, dtype=float))


def _group_name(record: dict, k: int) -> str:
    if record["case"] == "conv":
        return f"frequency |f| = {record['extras']['group_frequency'][k]}"
    size = len(record["groups"][k])
    return f"mode {k + 1}" + (f" (group of {size} degenerate modes)" if size > 1 else "")


def _claimed_groups(record: dict) -> int:
    if record["case"] == "linear-attention" or record["case"] == "moe":
        return 1
    return EARLY_GROUPS


def _label(name: str, record: dict) -> str:
    if record["case"] == "moe":
        return f"{LABELS['moe']}, E = {record['width']}"
    return LABELS[record["case"]]
