r"""E6's text: the setup, the slopes per optimizer against their formulas, Adam's and Muon's measured
slopes, and closure on M."""

from __future__ import annotations

from functools import partial

import numpy as np

from nqf.optimizers import OPTIMIZER_RECORDS

from .._common import as_array, fmt_fit
from .config import ADAM_BOUND, EQUIVARIANT_BOUND, OPTIMIZER_NAMES, escape_of


def _text(config, c, first, predicted, switch, fits, closure, network_closure, closure_index) -> str:
    paragraphs = [_setup_paragraph(config, c, first), *_slope_paragraphs(config, predicted, fits)]
    for optimizer in OPTIMIZER_RECORDS:  # no escape-rate prediction: normalised updates
        if escape_of(optimizer) is None and optimizer in fits:
            paragraphs.append(_normalised_paragraph(config, optimizer, switch, fits, closure_index))
    if closure:
        paragraphs.append(_closure_paragraph(config, closure, network_closure))
    return "\n\n".join(paragraphs)


def _setup_paragraph(config, c, first) -> str:
    """The task, models, thresholds, init scales and learning rates, and how finely a slope is resolved."""
    m_star = as_array(first["fixed_point"])
    scales = ", ".join(f"{s:g}" for s in config.sigma0s)
    return (
        f"Staircase (s = {', '.join(f'{s:g}' for s in config.singular_values)}, D = {config.inputs}, K = "
        f"{config.outputs}, "
        f"N = {config.samples} whitened samples), tanh network of width {config.width} and its quadratic model, "
        "float64. "
        f"Growth coefficients c_k = q_k^T C q_k = {', '.join(f'{v:.4g}' for v in c)}; switch-on thresholds are half "
        "the LV "
        f"fixed point m_k* = {', '.join(f'{v:.4g}' for v in m_star)} for every model and optimizer. Init scales "
        "sigma0 = "
        f"{scales}, seeds {', '.join(str(s) for s in config.seeds)}. Learning rates: GD, SGD (batch "
        f"{config.batch_size}) and "
        f"momentum (beta {config.beta:g}) {config.lr:g}; Adam {config.adam_lr:g}; Muon {config.muon_lr:g}. Slopes are "
        "in steps per unit ln(1/sigma0), with standard errors of the fit; switch-on steps are whole steps, so over "
        f"a span of {np.ptp(np.log(np.asarray(config.sigma0s))):.3g} in ln(1/sigma0) a slope is resolved to about "
        f"{1.0 / np.ptp(np.log(np.asarray(config.sigma0s))):.2g} steps per unit, even where the fit's standard error "
        "is smaller."
    )


def _row(fits, optimizer: str, model: str) -> str:
    """The fitted slope of each mode, with its standard error."""
    return "; ".join(f"mode {k + 1} {fmt_fit(f)}" for k, f in enumerate(fits[optimizer][model]))


def _ratio(fits, predicted, optimizer: str, model: str, key: str) -> str:
    """Fitted slope / predicted slope of each mode."""
    return ", ".join(f"{f.slope / p:.3f}" for f, p in zip(fits[optimizer][model], predicted[key], strict=True))


def _pred(predicted, key: str) -> str:
    """The predicted slope of each mode."""
    return ", ".join(f"{v:.3f}" for v in predicted[key])


def _slope_paragraphs(config, predicted, fits) -> list[str]:
    """GD and momentum against their formulas, SGD against GD's (no claim)."""
    row, ratio, pred = partial(_row, fits), partial(_ratio, fits, predicted), partial(_pred, predicted)
    paragraphs = []
    if "gd" in fits:
        paragraphs.append(
            f"GD, predicted 1/ln(1 + 2 lr c_k) = {pred('gd')}. Quadratic model: {row('gd', 'quadratic')}. "
            f"Tanh network: {row('gd', 'network')}. Network slope / predicted slope per mode: "
            f"{ratio('gd', 'network', 'gd')} "
            f"(mode 1's slope is {fits['gd']['network'][0].slope:.3f}); only mode 1 is a claim for the network: its "
            "later "
            "modes are a measured finding (beyond the quadratic order the tanh network couples them to the modes "
            "already learned)."
        )
    if "momentum" in fits:
        paragraphs.append(
            f"Heavy-ball momentum, predicted 1/ln z = {pred('momentum')}; the effective-lr rule lr/(1 - beta) would "
            "give "
            f"{pred('momentum_naive')}, far off because 2 lr c_k is not small against (1 - beta)^2 = "
            f"{(1 - config.beta) ** 2:.3g}. "
            f"Quadratic model: {row('momentum', 'quadratic')}. Tanh network: {row('momentum', 'network')}; network "
            "slope / "
            f"predicted per mode: {ratio('momentum', 'network', 'momentum')}."
        )
    if "sgd" in fits:
        paragraphs.append(
            f"SGD (batch {config.batch_size}, same batches for every scale), no claim; GD's formula gives "
            f"{pred('gd')}. "
            f"Quadratic model: {row('sgd', 'quadratic')}. Tanh network: {row('sgd', 'network')}. Quadratic-model "
            "slope / "
            f"GD formula per mode: {ratio('sgd', 'quadratic', 'gd')}."
        )
    return paragraphs


def _normalised_paragraph(config, optimizer: str, switch, fits, closure_index) -> str:
    """Adam or Muon, no prediction: measured slopes, switch-on steps over all scales, switch-on order."""
    names = OPTIMIZER_NAMES
    row = partial(_row, fits)
    steps = switch[optimizer]["network"]
    spread = ", ".join(
        f"{np.nanmin(col):.0f}-{np.nanmax(col):.0f}" + ("" if np.isfinite(col).all() else " (not always reached)")
        if np.isfinite(col).any()
        else "never reached"
        for col in steps.reshape(-1, steps.shape[-1]).T
    )
    order = np.argsort(switch[optimizer]["quadratic"][closure_index, 0, :])
    comparison = ""
    if "gd" in switch:
        gd = switch["gd"]["network"][:, :, 0]
        comparison = f" (GD's mode 1 moves from {np.nanmin(gd):.0f} to {np.nanmax(gd):.0f} over the same scales)"
    return (
        f"{names[optimizer]} (lr {getattr(config, f'{optimizer}_lr', config.lr):g}), no prediction: "
        f"measured slopes, quadratic model: {row(optimizer, 'quadratic')}; tanh network: {row(optimizer, 'network')}. "
        f"Network switch-on steps over all scales and seeds (per mode, min-max): {spread}{comparison}: a weak or no "
        "dependence on sigma0, as expected of normalised updates, which grow the weights linearly rather than "
        f"geometrically. Switch-on order at sigma0 = {config.closure_sigma0:g} (quadratic model, seed "
        f"{config.seeds[0]}): modes {', '.join(str(i + 1) for i in order)}."
    )


def _closure_paragraph(config, closure, network_closure) -> str:
    """Maximum relative M defect over the plateaus per optimizer, and the tanh network for contrast."""
    names = OPTIMIZER_NAMES
    parts = []
    for optimizer, info in closure.items():
        parts.append(
            f"{names[optimizer]} {info['max_m_window']:.2g} through step {info['window']} "
            f"({info['max_m_all']:.2g} over all steps; update defect {info['max_update_all']:.2g})"
        )
    extra = ""
    if network_closure is not None:
        extra = (
            " For contrast, the tanh network under GD reaches an M defect of "
            f"{np.nanmax(network_closure['m_defect']):.2g} "
            f"(update defect {np.nanmax(network_closure['update_defect']):.2g}): the rotation is not a symmetry of "
            "the network."
        )
    return (
        f"Closure on M (quadratic model, W0 versus W0 O, sigma0 = {config.closure_sigma0:g}, seed {config.seeds[0]}), "
        "maximum relative M defect over the plateaus, i.e. through the last switch-on: "
        + "; ".join(parts)
        + f". Bounds: equivariant optimizers at most {EQUIVARIANT_BOUND:g}, Adam at least {ADAM_BOUND:g}."
        + extra
    )
