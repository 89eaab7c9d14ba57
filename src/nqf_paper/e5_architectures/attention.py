r"""E5's softmax-attention case (``attention``, the last token's output) on the tokens task y = T xbar.

Claims beyond the early groups: the W_Q and W_K blocks of A(x) vanish, and through the first
plateau ||W_Q||, ||W_K|| stay near their init while ||W_V||, ||W_O|| grow.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nqf_paper.verdict import Claim, Tolerance

from .common import LABELS, QK_FACTOR, STRUCTURE_ZERO, VO_GROWTH, _array
from .config import ArchitecturesConfig, compare_dict


def attention_specs(c: ArchitecturesConfig) -> dict[str, dict[str, Any]]:
    """Softmax attention on the tokens task."""
    options = {
        "tokens": c.attention_tokens,
        "dim": c.attention_dim,
        "key_dim": c.attention_key_dim,
        "value_dim": c.attention_value_dim,
        "samples": c.attention_samples,
    }
    return {
        "attention": {
            "case": "attention",
            "task": ["tokens", options],
            "arch": None,
            "compare": compare_dict(c, c.attention_width, c.attention_lr, c.attention_steps),
        }
    }


def structure_extras(arch, A: np.ndarray) -> dict[str, Any]:
    """The largest |entry| of A(x) on the W_Q and W_K rows and columns (the closed form says 0)."""
    rows = np.concatenate([np.arange(b.start, b.stop) for b in arch.blocks if b.name in ("W_Q", "W_K")])
    return {"qk_block_max": float(max(np.abs(A[:, rows, :]).max(), np.abs(A[:, :, rows]).max()))}


def _window_max_ratio(norms: np.ndarray, steps: np.ndarray, until: float) -> float:
    """max over recorded steps <= until of norms(t)/norms(0)."""
    keep = steps <= until
    return float(np.max(norms[keep] / norms[0]))


def attention_claims(record: dict) -> tuple[list[Claim], dict[str, Any]]:
    """Q-K blocks of A vanish; Q-K norms stay near init through the first plateau while V, O grow."""
    label = LABELS["attention"]
    claims = [
        Claim(
            f"{label}: the W_Q and W_K blocks of A(x) vanish",
            "max |A_c(x)| over W_Q, W_K rows and columns (autodiff, first sample)",
            predicted=0.0,
            measured=record["extras"]["qk_block_max"],
            tolerance=Tolerance("absolute", STRUCTURE_ZERO),
        )
    ]
    names = record["block_names"]
    norms = _array(record["block_norms"])  # (R, B)
    steps = _array(record["steps"]["network"])
    t1 = float(_array(record["switch"]["network"])[0])
    finite = [float(t) for t in _array(record["switch"]["network"]) if math.isfinite(t)]
    t_last = max(finite) if finite else math.nan
    info: dict[str, Any] = {"t1": t1, "t_last": t_last}
    for name in names:
        j = names.index(name)
        info[f"{name}_first"] = _window_max_ratio(norms[:, j], steps, t1) if math.isfinite(t1) else math.nan
        info[f"{name}_last"] = _window_max_ratio(norms[:, j], steps, t_last) if math.isfinite(t_last) else math.nan
        info[f"{name}_end"] = float(norms[-1, j] / norms[0, j])
    if math.isfinite(t1):
        at_t1 = int(np.searchsorted(steps, t1))
        qk = max(info["W_Q_first"], info["W_K_first"])
        vo = min(
            norms[at_t1, names.index("W_V")] / norms[0, names.index("W_V")],
            norms[at_t1, names.index("W_O")] / norms[0, names.index("W_O")],
        )
        info["vo_growth"] = float(vo)
        missing = ""
    else:
        qk = vo = None
        missing = "group 1 never switched on in the network"
    claims.append(
        Claim(
            f"{label}: ||W_Q||, ||W_K|| stay within a factor {QK_FACTOR:g} of init through the first plateau",
            "max over steps <= t_1 (network) of ||W||/||W(0)||, the larger of W_Q and W_K",
            predicted=1.0,
            measured=qk,
            tolerance=Tolerance("at_most", QK_FACTOR - 1.0),
            why_missing=missing,
        )
    )
    claims.append(
        Claim(
            f"{label}: ||W_V||, ||W_O|| grow at least {VO_GROWTH:g}-fold by the end of the first plateau",
            "||W(t_1)||/||W(0)|| at the network's switch step t_1, the smaller of W_V and W_O",
            predicted=VO_GROWTH,
            measured=vo,
            tolerance=Tolerance("at_least", 0.0),
            why_missing=missing,
        )
    )
    return claims, info


def attention_text(info: dict) -> str:
    return (
        f"Softmax attention, parameter blocks (network, ||W(t)||/||W(0)||): through the first plateau (t <= "
        f"{info['t1']:.0f}) W_Q reaches at most {info['W_Q_first']:.3g} and W_K {info['W_K_first']:.3g}, while W_V "
        f"and W_O grow {info.get('vo_growth', math.nan):.3g}-fold (the smaller of the two). Through the last "
        f"switch-on (t <= {info['t_last']:.0f}) W_Q and W_K reach {info['W_Q_last']:.3g} and {info['W_K_last']:.3g}; "
        f"at the end of the run {info['W_Q_end']:.3g} and {info['W_K_end']:.3g}. They do move once V and O are of "
        "order one (the scores' gradient is proportional to W_V W_O), but stay orders of magnitude below V and O: "
        "the head is a perceptron on the mean token throughout these plateaus."
    )
