r"""E2's text: the setup, predicted and fitted slopes, local slopes of the network, switch-on steps at
the extreme scales, the M-flow's and LV's gaps from the quadratic model, and predict's failures."""

from __future__ import annotations

import math

import numpy as np

from .._common import fmt_fit
from .config import MFLOW_STEPS


def _text(
    config, c, discrete, continuous, fits, predicted, measured, overlap, failures, network_fits=None, over_inits=None
) -> str:
    def row(name: str) -> str:
        return "; ".join(f"mode {k + 1} {fmt_fit(f)}" for k, f in enumerate(fits[name]))

    def ratio(name: str, reference: np.ndarray) -> str:
        return ", ".join(f"{f.slope / r:.3f}" for f, r in zip(fits[name], reference, strict=True))

    def residuals(name: str) -> str:
        return ", ".join("n/a" if not math.isfinite(f.max_residual) else f"{f.max_residual:.2f}" for f in fits[name])

    order = np.argsort(np.log(1.0 / np.asarray(config.sigma0s)))
    xs = np.log(1.0 / np.asarray(config.sigma0s))[order]
    net_mean = np.nanmean(measured["network"], axis=1)[order]  # (S, m)
    local = np.diff(net_mean, axis=0) / np.diff(xs)[:, None]
    local_text = "; ".join(
        f"sigma0 {config.sigma0s[order[i]]:g} to {config.sigma0s[order[i + 1]]:g}: "
        + ", ".join("n/a" if not np.isfinite(v) else f"{v:.2f}" for v in local[i])
        for i in range(local.shape[0])
    )
    first, last = 0, len(config.sigma0s) - 1
    net_steps = measured["network"][:, 0, :]
    quad_steps = measured["quadratic"][:, 0, :]

    def steps_at(steps: np.ndarray, i: int) -> str:
        return ", ".join("n/a" if not np.isfinite(v) else f"{v:.0f}" for v in steps[i])

    paragraphs = [
        f"Staircase s = {', '.join(f'{s:g}' for s in config.singular_values)} (D = {config.inputs}, K = "
        f"{config.outputs}, "
        f"N = {config.samples}, data seed {config.data_seed}), tanh network of width {config.width} and its quadratic "
        f"model, GD with lr {config.lr:g}, float64, {config.steps} steps, init scales sigma0 = "
        f"{', '.join(f'{s:g}' for s in config.sigma0s)}, seeds {', '.join(str(s) for s in config.seeds)}. Growth "
        f"c_k = {', '.join(f'{v:.4g}' for v in c)} (predict's modes are the task's: overlap {overlap:.6f}). Slopes "
        "are in "
        "steps per unit ln(1/sigma0) with the standard error of the fit.",
        f"Predicted slopes: GD 1/ln(1 + 2 lr c_k) = {', '.join(f'{v:.3f}' for v in discrete)}; gradient flow "
        f"1/(2 lr c_k) = {', '.join(f'{v:.3f}' for v in continuous)} "
        f"({', '.join(f'{v / d - 1:+.1%}' for v, d in zip(continuous, discrete, strict=True))} "
        f"off). Fitted: quadratic model {row('quadratic')}; tanh network {row('network')}; M-flow {row('mflow')}; LV "
        f"discrete map {row('lv')}; LV gradient flow {row('lv_continuous')}.",
        f"Measured / predicted GD slope per mode: quadratic model {ratio('quadratic', discrete)}; tanh network "
        f"{ratio('network', discrete)}. Largest residual of the linear fits (steps): quadratic model "
        f"{residuals('quadratic')}; tanh network {residuals('network')}. Local slopes of the tanh network between "
        f"neighbouring scales, per mode: {local_text}, against the predicted {', '.join(f'{v:.2f}' for v in discrete)} "
        f"and mode 1's {discrete[0]:.2f}. Where a later mode's local slope falls from its own rate towards mode 1's, "
        "its switch-on is no longer set by its own escape from sigma0: the tanh network's higher-order terms feed it "
        "once the earlier modes are learned (visible in E1's occupations as a jump of the later modes at mode 1's "
        "switch-on), and its step is not linear in ln(1/sigma0).",
        f"Switch-on steps at sigma0 = {config.sigma0s[first]:g} and {config.sigma0s[last]:g} (seed {config.seeds[0]}): "
        f"quadratic model {steps_at(quad_steps, first)} and {steps_at(quad_steps, last)}; tanh network "
        f"{steps_at(net_steps, first)} and {steps_at(net_steps, last)}; M-flow "
        f"{steps_at(predicted['mflow'][:, 0, :], first)} "
        f"and {steps_at(predicted['mflow'][:, 0, :], last)}.",
        _gap_paragraph(config, predicted, measured),
    ]
    if network_fits is not None:
        paragraphs.append(_network_paragraph(fits["network"], network_fits))
    if over_inits is not None:
        paragraphs.append(_init_seeds_paragraph(over_inits))
    if failures:
        paragraphs.append(_failure_paragraph(failures))
    return "\n\n".join(paragraphs)


def _network_paragraph(trained, own) -> str:
    """The network's own prediction's slopes against the tanh network's, the difference in the
    trained fit's standard errors: how far apart they are beside how well the fit pins the slope."""

    def apart(t, o) -> str:
        if not (np.isfinite(t.slope) and np.isfinite(o.slope)):
            return "n/a"
        gap = o.slope / t.slope - 1.0
        sigmas = abs(o.slope - t.slope) / t.stderr if np.isfinite(t.stderr) and t.stderr > 0 else math.nan
        return f"{gap:+.1%}" + ("" if not math.isfinite(sigmas) else f" ({sigmas:.2f} standard errors)")

    return (
        "The network's own prediction (the mean-field flow of its units, the claims' second verdict): slopes "
        + "; ".join(f"mode {k + 1} {fmt_fit(f)}" for k, f in enumerate(own))
        + ". Against the tanh network's fitted slopes, per mode: "
        + ", ".join(apart(t, o) for t, o in zip(trained, own, strict=True))
        + ". A gap of a fraction of one standard error is within what the scales and seeds pin the measured "
        "slope to, even where the claim's relative tolerance calls it a miss."
    )


def _init_seeds_paragraph(over_inits: dict) -> str:
    """How far the tanh network's slope moves from one init to another (the data fixed), and how far
    its own prediction from each init's M0 is from each: the claims' single init against the spread."""
    trained, predicted = over_inits["trained"], over_inits["predicted"]  # (seeds, m)
    seeds = over_inits["seeds"]

    def span(values: np.ndarray, fmt: str) -> str:
        values = values[np.isfinite(values)]
        return "n/a" if values.size == 0 else f"{values.min():{fmt}} to {values.max():{fmt}}"

    gaps = predicted / trained - 1.0
    pooled_gap = over_inits["predicted_pooled"] / over_inits["trained_pooled"] - 1.0
    modes = range(trained.shape[1])
    paragraph = (
        f"Over init seeds {', '.join(str(s) for s in seeds)} (the data fixed), the tanh network's fitted slopes "
        "move from one init to another, per mode: "
        + "; ".join(
            f"mode {k + 1} {span(trained[:, k], '.2f')} (relative spread {_relative_spread(trained[:, k])})"
            for k in modes
        )
        + ". Its own prediction, from each init's M0, is off each init's slope by "
        + "; ".join(f"mode {k + 1} {span(100 * gaps[:, k], '+.1f')}%" for k in modes)
        + ", and the slope of the steps pooled over the seeds by "
        + ", ".join("n/a" if not np.isfinite(g) else f"{g:+.1%}" for g in pooled_gap)
        + " (trained "
        + ", ".join("n/a" if not np.isfinite(v) else f"{v:.2f}" for v in over_inits["trained_pooled"])
        + "; predicted "
        + ", ".join("n/a" if not np.isfinite(v) else f"{v:.2f}" for v in over_inits["predicted_pooled"])
        + "). Where one init's slope moves by more than the claims' tolerance from another's, and the "
        "prediction's gaps change sign from init to init while the pooled gap is small, what the claims' second "
        "verdict (one init) misses is that init's finite-width variation, not a drift of the prediction."
    )
    if over_inits["notes"]:
        paragraph += " The network's own prediction noted: " + "; ".join(over_inits["notes"]) + "."
    return paragraph


def _relative_spread(values: np.ndarray) -> str:
    """(max - min) / mean of the finite values, as a percentage ("n/a" with fewer than two)."""
    values = values[np.isfinite(values)]
    return "n/a" if values.size < 2 else f"{np.ptp(values) / values.mean():.1%}"


def _gap_paragraph(config, predicted, measured) -> str:
    """How far the M-flow and the LV map are from the quadratic model's switch-on steps, per scale."""

    def worst(source: str) -> np.ndarray:
        """Largest |t_source - t_quadratic| over seeds and modes, per scale (NaN where nothing to compare)."""
        diff = np.abs(predicted[source] - measured["quadratic"]).reshape(len(config.sigma0s), -1)
        ok = np.isfinite(diff).any(axis=1)
        return np.where(ok, np.max(np.where(np.isfinite(diff), diff, -np.inf), axis=1), np.nan)

    def per_scale(values: np.ndarray) -> str:
        return ", ".join(
            f"{s:g}: " + ("n/a" if not np.isfinite(v) else f"{v:.0f}")
            for s, v in zip(config.sigma0s, values, strict=True)
        )

    mflow_gap, lv_gap = worst("mflow"), worst("lv")
    paragraph = (
        "Largest |difference| of the switch-on steps from the quadratic model's over the modes, per scale: M-flow "
        f"{per_scale(mflow_gap)}; LV discrete map {per_scale(lv_gap)}."
    )
    off = [
        sigma0
        for sigma0, a, b in zip(config.sigma0s, mflow_gap, lv_gap, strict=True)
        if a > MFLOW_STEPS and b <= MFLOW_STEPS
    ]
    if off:
        paragraph += (
            f" At sigma0 = {', '.join(f'{v:g}' for v in off)} the M-flow is off while the LV map (log occupations, no "
            "rounding floor) is not: the float64 M-flow, which stores M in the standard basis, loses occupations far "
            "below "
            "the rounding of the learned modes' O(1) entries; the theory is not at fault."
        )
    return paragraph


def _failure_paragraph(failures) -> str:
    """Where predict failed, and why (float64 rounding of the M-flow)."""
    scales = ", ".join(sorted({f"{f['sigma0']:g}" for f in failures}, key=float, reverse=True))
    return (
        f"predict failed at sigma0 = {scales} ({failures[0]['error']}); its M-flow and LV fits use the other "
        "scales. The cause is float64, not the learning rate: the M-flow stores M = W W^T in the standard basis, so "
        "once mode 1 is learned (entries O(1)) every occupation carries an absolute rounding of about 1e-16. An "
        "occupation n sigma0^2 far below that (mode 4 at the smallest scales) is lost to rounding and can turn "
        "negative, and a negative occupation along a growing mode grows geometrically until the flow diverges. "
        "The quadratic model and the network keep W and do not have this floor."
    )
