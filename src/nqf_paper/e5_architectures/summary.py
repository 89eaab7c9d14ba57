r"""E5's summary: the early groups' claims of every case, each family's own claims and text, the
figures' data, and an explanation of each claim that was not confirmed."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nqf_paper.verdict import Claim, Tolerance

from .._base import ExperimentResult
from .._common import percent
from .attention import attention_claims, attention_text
from .common import (
    PLATEAU_TOLERANCE,
    SOURCES,
    SWITCH_TOLERANCE,
    _array,
    _claimed_groups,
    _group_name,
    _label,
    _steps_text,
    json_number,
    own_steps,
)
from .config import ArchitecturesConfig
from .conv import conv_claims, conv_text
from .linear_attention import icl_claims, icl_text
from .mlp import PERCEPTRON_WHY
from .moe import MOE_WHY, moe_claims, moe_text
from .runner import case_specs


def early_mode_claims(name: str, record: dict) -> list[Claim]:
    """Network versus M-flow switch-on step and plateau loss of the case's early groups; each claim
    also carries the network's own prediction, the mean-field flow's step and plateau (its second
    verdict), or why there is none."""
    claims = []
    switch = {s: _array(record["switch"][s]) for s in SOURCES}
    plateau = {s: _array(record["plateau"][s]) for s in SOURCES}
    label = _label(name, record)
    own_switch, no_own = own_steps(record)
    own_plateau = None if own_switch is None else _array(record["plateau"]["mean_field"])

    def second(values, k: int, what: str) -> dict:
        if values is None:
            return {"network_predicted": None, "network_why_missing": no_own}
        value = json_number(values[k])
        return {
            "network_predicted": value,
            "network_why_missing": ""
            if value is not None
            else f"{what}: none in the mean-field flow within the horizon",
        }

    for k in range(min(_claimed_groups(record), len(record["groups"]))):
        what = _group_name(record, k)
        flow, net = switch["mflow"][k], switch["network"][k]
        missing = ""
        if not math.isfinite(flow):
            horizon = len(record["loss"]["mflow"]) - 1
            missing = f"{what} never reaches half its fixed point in the M-flow within {horizon} steps"
        elif not math.isfinite(net):
            missing = f"{what} never switched on in the network within the horizon"
        claims.append(
            Claim(
                f"{label}: {what} switches on at the M-flow's step",
                "first step with the group's occupation >= half its LV fixed point (network, GD)",
                predicted=json_number(flow),
                measured=json_number(net),
                tolerance=Tolerance("relative", SWITCH_TOLERANCE),
                unit="steps",
                why_missing=missing,
                **second(own_switch, k, what),
            )
        )
        p_flow, p_net = plateau["mflow"][k], plateau["network"][k]
        missing = ""
        if not (math.isfinite(p_flow) and math.isfinite(p_net)):
            missing = f"{what} has no switch step in the M-flow or the network, so no plateau after it"
        claims.append(
            Claim(
                f"{label}: plateau loss after {what} equals the M-flow's",
                "loss at sqrt(t_k t_next) of the network's own switch steps",
                predicted=json_number(p_flow),
                measured=json_number(p_net),
                tolerance=Tolerance("relative", PLATEAU_TOLERANCE),
                why_missing=missing,
                **second(own_plateau, k, what),
            )
        )
    return claims


def summarise(config: ArchitecturesConfig, records: dict[str, dict]) -> ExperimentResult:
    claims: list[Claim] = []
    paragraphs: list[str] = []
    cases: dict[str, Any] = {}
    specifics: dict[str, Any] = {}
    for name in case_specs(config):
        record = records[name]
        claims.extend(early_mode_claims(name, record))
        cases[name] = _figure_data(name, record)
        paragraphs.append(_case_text(name, record))
        if record["case"] == "attention":
            more, specifics["attention"] = attention_claims(record)
            claims.extend(more)
            paragraphs.append(attention_text(specifics["attention"]))
        elif record["case"] == "linear-attention":
            more, specifics["linear-attention"] = icl_claims(record, config)
            claims.extend(more)
            paragraphs.append(icl_text(specifics["linear-attention"], record))
        elif record["case"] == "conv":
            more, specifics["conv"] = conv_claims(record)
            claims.extend(more)
            paragraphs.append(conv_text(specifics["conv"]))
    moe_records = {n: r for n, r in records.items() if n in case_specs(config) and r["case"] == "moe"}
    if moe_records:
        more, specifics["moe"] = moe_claims(moe_records)
        claims.extend(more)
        paragraphs.append(moe_text(specifics["moe"], config.moe_lr))
    explanations = _explanations(claims, records, config)
    if explanations:
        paragraphs.append(" ".join(explanations))
    intro = (
        f"Each case: one run of the network, its quadratic model and the M-flow (GD, float64, sigma0 = "
        f"{config.sigma0:g}, seed {config.seed}). Switch-on steps are per group of degenerate modes (equal c_k; "
        "one mode where c_k is simple): the first step at which the group's occupation reaches half its LV "
        f"fixed point. Early groups are claimed within {SWITCH_TOLERANCE:.0%} (switch step) and "
        f"{PLATEAU_TOLERANCE:.0%} (plateau loss) of the M-flow; later groups are reported."
    )
    data = {"cases": cases, "specifics": _jsonable(specifics), "sigma0": config.sigma0}
    return ExperimentResult(claims=tuple(claims), text="\n\n".join([intro, *paragraphs]), data=data)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _figure_data(name: str, record: dict) -> dict[str, Any]:
    """What the figures need from one case record."""
    return {
        "case": record["case"],
        "label": _label(name, record),
        "arch": record["arch"],
        "width": record["width"],
        "blocks": record["blocks"],
        "structure_abs": record["structure_abs"],
        "outputs": record["outputs"],
        "steps": record["steps"],
        "loss": record["loss"],
        "switch": record["switch"],
        "group_names": [_group_name(record, k) for k in range(len(record["groups"]))],
        "block_names": record["block_names"],
        "block_norms": record["block_norms"],
        "extras": record["extras"],
    }


def _case_text(name: str, record: dict) -> str:
    sw = {s: _array(record["switch"][s]) for s in SOURCES}
    pl = {s: _array(record["plateau"][s]) for s in SOURCES}
    groups = record["groups"]
    sizes = [len(g) for g in groups]
    degenerate = (
        f" Groups of degenerate modes: sizes {', '.join(map(str, sizes))}." if any(s > 1 for s in sizes) else ""
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_text = percent((sw["network"] - sw["mflow"]) / sw["mflow"])
    lv = (
        "the data matrices share an eigenbasis (LV applies)"
        if record["lv_applies"]
        else f"the data matrices do not share an eigenbasis (defect {record['defect']:.2g}): the LV reduction is "
        "only approximate here and the M-flow is the prediction"
    )
    return (
        f"{_label(name, record)} ({record['arch']}, width {record['width']}, task {record['task']}): {lv}.{degenerate} "
        f"Switch-on steps per group, M-flow {_steps_text(sw['mflow'])}; "
        f"quadratic model {_steps_text(sw['quadratic'])}; "
        f"network {_steps_text(sw['network'])} ({rel_text} from the M-flow). Plateau losses after each group, "
        f"M-flow {_steps_text(pl['mflow'], 4)}; network {_steps_text(pl['network'], 4)}."
    )


def _midpoint(switch: np.ndarray, k: int, horizon: float) -> float:
    """sqrt(t_k t_next), the log-time midpoint ``measured_plateau_losses`` reads the plateau at."""
    t = float(switch[k])
    later = switch[np.isfinite(switch) & (switch > t)]
    t_next = float(later.min()) if later.size else horizon
    return math.sqrt(max(t, 1.0) * max(t_next, 1.0))


def _relative_slope(steps: np.ndarray, loss: np.ndarray, at: float) -> float:
    """|L(at + 1) - L(at)| / L(at): how far from flat the curve is at ``at``."""
    here = float(np.interp(at, steps, loss))
    return abs(float(np.interp(at + 1.0, steps, loss)) - here) / here


def plateau_diagnosis(record: dict, k: int) -> str:
    """Why a plateau loss after group k may differ: where each source reads it and how flat it is there."""
    net_s, net_l = _array(record["steps"]["network"]), _array(record["loss"]["network"])
    flow_s, flow_l = _array(record["steps"]["mflow"]), _array(record["loss"]["mflow"])
    net_sw, flow_sw = _array(record["switch"]["network"]), _array(record["switch"]["mflow"])
    horizon = float(net_s[-1])
    if not (math.isfinite(net_sw[k]) and math.isfinite(flow_sw[k])):
        return ""
    t_net, t_flow = _midpoint(net_sw, k, horizon), _midpoint(flow_sw, k, horizon)
    return (
        f"The network reads its plateau at step {t_net:.0f} (M-flow: {t_flow:.0f}), where the M-flow's loss is "
        f"{np.interp(t_net, flow_s, flow_l):.4g}; at the M-flow's step the network's loss is "
        f"{np.interp(t_flow, net_s, net_l):.4g}. The curves change there by {_relative_slope(net_s, net_l, t_net):.2%} "
        f"(network) and {_relative_slope(flow_s, flow_l, t_flow):.2%} (M-flow) per step"
    )


_WHY = {**PERCEPTRON_WHY, "moe": MOE_WHY}


def _explanations(claims: list[Claim], records: dict[str, dict], config: ArchitecturesConfig) -> list[str]:
    """One sentence per claim that was not confirmed, with the numbers that explain it."""
    out = []
    for name in case_specs(config):
        record = records[name]
        label = _label(name, record)
        for k in range(min(_claimed_groups(record), len(record["groups"]))):
            what = _group_name(record, k)
            for claim in claims:
                if claim.claim != f"{label}: plateau loss after {what} equals the M-flow's":
                    continue
                if claim.verdict.status != "not confirmed":
                    continue
                why = _WHY.get(record["case"], "")
                out.append(
                    f"Not confirmed: {claim.claim} ({claim.measured:.4g} against {claim.predicted:.4g}). "
                    + plateau_diagnosis(record, k)
                    + (f"; {why}." if why else ".")
                )
    for claim in claims:
        if claim.verdict.status == "not confirmed" and "plateau loss after" not in claim.claim:
            out.append(f"Not confirmed: {claim.claim} ({claim.verdict.reason}).")
    return out
