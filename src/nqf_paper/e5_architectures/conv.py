r"""E5's circular-convolution case (``conv1d``, kernel L, per-position readout) on the fourier task.

Modes come in cos/sin pairs per frequency |f| (groups of degenerate modes). Claims beyond
the early groups: each mode's kernel block lies in one frequency group, and the groups
switch on in the order of the input's power P(|f|), for the M-flow and the network.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nqf_paper.verdict import Claim, Tolerance

from .common import FOURIER_PURITY, LABELS, _array, own_steps
from .config import ArchitecturesConfig, compare_dict


def conv_specs(c: ArchitecturesConfig) -> dict[str, dict[str, Any]]:
    """Circular convolution on the fourier task."""
    options = {"length": c.conv_length, "samples": c.conv_samples, "alpha": c.conv_alpha}
    return {
        "conv": {
            "case": "conv",
            "task": ["fourier", options],
            "arch": None,
            "compare": compare_dict(c, c.conv_width, c.conv_lr, c.conv_steps),
        }
    }


def _frequency_groups(arch, basis: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Dominant |f| of each mode's kernel block and the share of its power there, (g,), (g,)."""
    block = arch.block("k")
    kernel = basis[block.start : block.stop]  # (L, g)
    power = np.abs(np.fft.fft(kernel, axis=0)) ** 2
    f = np.arange(length)
    folded = np.minimum(f, length - f)
    per = np.stack([power[folded == h].sum(axis=0) for h in range(length // 2 + 1)])  # (L/2 + 1, g)
    total = per.sum(axis=0)
    dominant = per.argmax(axis=0)
    return dominant, per.max(axis=0) / np.where(total > 0, total, 1.0)


def frequency_extras(arch, comparison, task, groups: list[list[int]]) -> dict[str, Any]:
    """Each mode's dominant frequency and its share of the kernel power there, per mode and per group."""
    g = comparison.prediction.num_growing
    basis = np.asarray(comparison.prediction.modes.basis[:, :g])
    dominant, purity = _frequency_groups(arch, basis, int(task.length))
    power = task.power_spectrum()
    return {
        "mode_frequency": dominant,
        "mode_purity": purity,
        "group_frequency": [int(dominant[idx[0]]) for idx in groups],
        "group_frequencies_agree": all(len({int(dominant[k]) for k in idx}) == 1 for idx in groups),
        "group_power": [float(power[int(dominant[idx[0]])]) for idx in groups],
    }


def _inversions(order_key: np.ndarray, switch: np.ndarray) -> tuple[int, int]:
    """Pairs (i, j) with key_i > key_j (i should switch first) whose switch steps are not strictly ordered.

    Only groups that switched on count; returns (inverted pairs, groups that switched on).
    """
    on = np.flatnonzero(np.isfinite(switch))
    bad = 0
    for a in on:
        for b in on:
            if order_key[a] > order_key[b] and not switch[a] < switch[b]:
                bad += 1
    return bad, int(on.size)


def conv_claims(record: dict) -> tuple[list[Claim], dict[str, Any]]:
    label = LABELS["conv"]
    extras = record["extras"]
    purity = _array(extras["mode_purity"])
    claims = [
        Claim(
            f"{label}: the modes are Fourier modes",
            "smallest share of a mode's kernel power at its dominant frequency |f|",
            predicted=1.0,
            measured=float(purity.min()),
            tolerance=Tolerance("absolute", FOURIER_PURITY),
        )
    ]
    power = _array(extras["group_power"])
    info: dict[str, Any] = {"frequencies": extras["group_frequency"], "power": power.tolist()}
    for source, what in (("mflow", "M-flow"), ("network", "network")):
        switch = _array(record["switch"][source])
        bad, on = _inversions(power, switch)
        info[f"{source}_inversions"], info[f"{source}_switched"] = bad, on
        second: dict[str, Any] = {}
        if source == "network":  # the network's own prediction of its inverted pairs: a second verdict
            own, why = own_steps(record)
            second = {"network_predicted": None, "network_why_missing": why}
            if own is not None:
                second = {"network_predicted": float(_inversions(power, own)[0]), "network_why_missing": ""}
        claims.append(
            Claim(
                f"{label}: frequencies switch on in the order of the input's power ({what})",
                f"pairs of frequency groups whose {what} switch steps invert the order of P(|f)| "
                f"({on} of {len(switch)} groups switched on)",
                predicted=0.0,
                measured=float(bad),
                tolerance=Tolerance("absolute", 0.0),
                unit="pairs",
                **second,
            )
        )
    return claims, info


def conv_text(info: dict) -> str:
    return (
        f"Circular convolution: frequency groups |f| = {', '.join(map(str, info['frequencies']))} with input power "
        f"{', '.join(f'{p:.3g}' for p in info['power'])}. Inverted pairs against the power order: M-flow "
        f"{info['mflow_inversions']} ({info['mflow_switched']} groups switched on), network "
        f"{info['network_inversions']} ({info['network_switched']} groups)."
    )
