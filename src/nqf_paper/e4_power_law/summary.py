r"""E4's summary: the fitted exponent of each many-mode LV system against the finite-init and the
asymptotic exponents, the trained models' exponents against the LV of their own spectrum, the
figures' data and the text."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nqf.core.errors import NqfError
from nqf_paper.verdict import Claim, Tolerance

from .._base import ExperimentResult
from .._common import as_array
from .config import CONFIDENCE, MODELS, RESIDUAL_LIMIT, PowerLawConfig


def _fit_dict(fit) -> dict[str, Any]:
    return {
        "exponent": fit.exponent,
        "ci": list(fit.ci),
        "prefactor": fit.prefactor,
        "window": list(fit.window),
        "decades": fit.decades,
        "relative_residual": fit.relative_residual,
        "drift": fit.exponent_drift,
        "is_power_law": fit.is_power_law,
        "reason": fit.reason,
    }


def _corrected_curve(alpha: float, eps: float, k_star: np.ndarray) -> np.ndarray:
    """beta / (1 - 1/(eps - alpha ln k*)) where the gap exceeds 1, NaN elsewhere."""
    from nqf.theory.scaling import predicted_exponent

    gap = eps - alpha * np.log(k_star)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(gap > 1, predicted_exponent(alpha) / (1.0 - 1.0 / gap), np.nan)


def summarise(config: PowerLawConfig, records: dict[str, dict]) -> ExperimentResult:
    from nqf.theory.scaling import fit_power_law

    claims: list[Claim] = []
    lv_data = []
    k_star = math.sqrt(config.lv_window_modes[0] * config.lv_window_modes[1])
    for alpha in config.alphas:
        more, fitted = _lv_law(config, alpha, records[f"lv-alpha{alpha:g}"], k_star)
        claims += more
        lv_data.append(fitted)

    own = records["own-spectrum-lv"]
    own_switch = as_array(own["switch"])
    lo_mode, hi_mode = config.train_window_modes
    window = (float(own_switch[lo_mode - 1]), float(own_switch[hi_mode - 1]))
    steps = np.arange(1, as_array(own["loss"]).size)
    own_fit = fit_power_law(steps, as_array(own["loss"])[1:], 0.0, window=window, confidence=CONFIDENCE)
    trained_data = {}
    for model in config.train_models:
        own_network = records.get("network-own") if model == "network" else None
        more, trained_data[model] = _trained_law(
            config, model, records[f"trained-{model}"], steps, window, own_fit, own_network
        )
        claims += more

    eps_train = float(own["eps"])
    data = {
        "lv": lv_data,
        "lv_modes": config.lv_modes,
        "lv_window_modes": list(config.lv_window_modes),
        "train_alpha": config.train_alpha,
        "train_window_modes": [lo_mode, hi_mode],
        "own_loss": as_array(own["loss"]),
        "own_flow_loss": as_array(own["flow_loss"]),
        "own_switch": own_switch,
        "own_fit": _fit_dict(own_fit),
        "trained": trained_data,
        "train_eps": eps_train,
    }
    text = _text(config, lv_data, own_fit, trained_data, eps_train, window)
    return ExperimentResult(claims=tuple(claims), text=text, data=data)


def _lv_law(config: PowerLawConfig, alpha: float, rec: dict, k_star: float) -> tuple[list[Claim], dict[str, Any]]:
    """One many-mode LV system: its fitted exponent against the finite-init and the asymptotic exponents."""
    from nqf.theory.scaling import finite_init_exponent, fit_power_law, local_exponent, predicted_exponent

    ts, excess, eps = as_array(rec["ts"]), as_array(rec["excess"]), float(rec["eps"])
    fit = fit_power_law(ts, excess, 0.0, window=tuple(rec["window"]), confidence=CONFIDENCE)
    asymptotic = predicted_exponent(alpha)
    corrected = finite_init_exponent(alpha, 0.0, eps, k_star)
    lo, hi = fit.ci
    claims = [
        Claim(
            claim=f"LV, alpha = {alpha:g}: the {CONFIDENCE:.0%} interval of the fitted exponent contains the "
            f"finite-init exponent beta/(1 - 1/(eps - alpha ln k*)), k* = {k_star:g}",
            measured_what=f"fitted loss exponent, {config.lv_modes} modes, modes {config.lv_window_modes[0]}"
            f"-{config.lv_window_modes[1]} window (tolerance = the interval)",
            predicted=corrected,
            measured=fit.exponent,
            tolerance=Tolerance("interval", (fit.exponent - hi, fit.exponent - lo)),
        ),
        Claim(
            claim=f"LV, alpha = {alpha:g}: finite init steepens the law; the asymptotic (2 alpha - 1)/alpha "
            "lies below the interval",
            measured_what=f"lower end of the fitted exponent's {CONFIDENCE:.0%} interval",
            predicted=asymptotic,
            measured=lo,
            tolerance=Tolerance("at_least", 0.0),
        ),
    ]
    positive = excess > 0
    local = np.full(ts.size, np.nan)
    local[positive] = local_exponent(ts[positive], excess[positive])
    data = {
        "alpha": alpha,
        "eps": eps,
        "s": ts / eps,
        "excess": excess,
        "local": local,
        "k_star": as_array(rec["k_star"]),
        "corrected_curve": _corrected_curve(alpha, eps, as_array(rec["k_star"])),
        "fit": _fit_dict(fit),
        "asymptotic": asymptotic,
        "corrected": corrected,
    }
    return claims, data


def _own_exponent(own_network: dict, window: tuple[float, float]) -> tuple[float | None, str]:
    """(the exponent of the network's own predicted loss on ``window``, the same fit as the trained
    curve's, None) or (None, why there is none)."""
    from nqf.theory.scaling import fit_power_law

    if own_network.get("loss") is None:
        said = [note for note in own_network.get("notes", ()) if "not computed" in note]
        return None, "; ".join(said) or "the run recorded no mean-field flow"
    steps, loss = as_array(own_network["steps"]), as_array(own_network["loss"])
    try:
        fit = fit_power_law(steps[1:], loss[1:], 0.0, window=window, confidence=CONFIDENCE)
    except NqfError as err:
        return None, f"the mean-field flow's loss: {err}"
    return fit.exponent, ""


def _trained_law(
    config: PowerLawConfig,
    model: str,
    rec: dict,
    steps: np.ndarray,
    window: tuple[float, float],
    own_fit,
    own_network: dict | None = None,
) -> tuple[list[Claim], dict[str, Any]]:
    """One trained model: its exponent on the own-spectrum LV's window against that LV's, and how straight it is;
    for the network the exponent claim also carries its own prediction's (``own_network``: the mean-field
    flow's loss, fitted the same way), a second verdict."""
    from nqf.theory.scaling import fit_power_law

    lo_mode, hi_mode = config.train_window_modes
    loss = as_array(rec["loss"])
    source = MODELS[model]
    diverged = rec.get("diverged_at")
    try:
        fit = (
            None if diverged is not None else fit_power_law(steps, loss[1:], 0.0, window=window, confidence=CONFIDENCE)
        )
        problem = "" if fit is not None else f"training diverged at step {diverged}"
    except NqfError as err:
        fit, problem = None, str(err)
    second: dict[str, Any] = {}
    if own_network is not None:
        value, why_not = _own_exponent(own_network, window)
        second = {"network_predicted": value, "network_why_missing": why_not}
    claims = [
        Claim(
            claim=f"{source} (GD, tanh perceptron, alpha = {config.train_alpha:g}, {config.train_modes} modes): "
            "loss exponent = that of the LV of its own spectrum",
            measured_what=f"fitted exponent on the own-spectrum LV's window, modes {lo_mode}-{hi_mode} "
            f"(steps {window[0]:.0f}-{window[1]:.0f}); predicted: same fit of the exact LV GD map",
            predicted=own_fit.exponent,
            measured=None if fit is None else fit.exponent,
            tolerance=Tolerance("relative", config.trained_tolerance),
            why_missing=problem,
            **second,
        ),
        Claim(
            claim=f"{source}: the loss is a power law over the window (steps merged)",
            measured_what="largest residual of the fit / range of ln(loss) over the window (fit_power_law); "
            "a pure power law has 0",
            predicted=0.0,
            measured=None if fit is None else fit.relative_residual,
            tolerance=Tolerance("at_most", RESIDUAL_LIMIT),
            why_missing=problem,
        ),
    ]
    data = {
        "source": source,
        "loss": loss,
        "switch": as_array(rec["switch"]),
        "fit": None if fit is None else _fit_dict(fit),
        "problem": problem,
        "own_exponent": second.get("network_predicted"),
        "own_problem": second.get("network_why_missing", ""),
    }
    return claims, data


def _ci(fit: dict[str, Any]) -> str:
    return f"{fit['exponent']:.3f} [{fit['ci'][0]:.3f}, {fit['ci'][1]:.3f}]"


def _text(config, lv_data, own_fit, trained_data, eps_train, window) -> str:
    lv_lines = "; ".join(
        f"alpha = {d['alpha']:g}: fitted {_ci(d['fit'])}, finite-init {d['corrected']:.3f}, asymptotic "
        f"{d['asymptotic']:.3f} (fitter: {'power law' if d['fit']['is_power_law'] else 'not a power law'})"
        for d in lv_data
    )
    lines = [
        f"Many-mode LV ({config.lv_modes} modes, c_k = k^-alpha, K = I, m0 = {config.lv_m0:g}, eps = "
        f"{lv_data[0]['eps']:.2f}), window from the switch of mode {config.lv_window_modes[0]} to that of mode "
        f"{config.lv_window_modes[1]}, {CONFIDENCE:.0%} intervals: {lv_lines}.",
        "The asymptotic exponent (2 alpha - 1)/alpha is the eps -> infinity limit; at this finite init the later "
        "modes have less to grow (ln(m_k*/m_k(0)) = eps - alpha ln k), come relatively early and steepen the "
        "law, by more than the interval's width.",
    ]
    own_line = (
        f"Trained: powerlaw task, alpha = {config.train_alpha:g}, {config.train_modes} modes, width "
        f"{config.train_width}, sigma0 = {config.train_sigma0:g} (eps = ln(1/(n sigma0^2)) = {eps_train:.2f}), GD lr "
        f"{config.train_lr:g}. Window: steps {window[0]:.0f}-{window[1]:.0f} (own-spectrum LV GD map switches of "
        f"modes {config.train_window_modes[0]} and {config.train_window_modes[1]}). Own-spectrum LV (GD map): "
        f"{_ci(_fit_dict(own_fit))}; fitter: {own_fit.reason}."
    )
    lines.append(own_line)
    for d in trained_data.values():
        if d["fit"] is None:
            lines.append(f"{d['source']}: no fit ({d['problem']}).")
        else:
            f = d["fit"]
            agree = abs(f["exponent"] - own_fit.exponent) / abs(own_fit.exponent)
            lines.append(f"{d['source']}: {_ci(f)}, {100 * agree:.1f}% from the LV prediction; fitter: {f['reason']}.")
        if d.get("own_exponent") is not None:
            lines.append(
                f"The network's own prediction (the mean-field flow of its units, the same fit on the same window): "
                f"{d['own_exponent']:.3f}."
            )
        elif d.get("own_problem"):
            lines.append(f"The network's own prediction: none ({d['own_problem']}).")
    return "\n\n".join(lines)
