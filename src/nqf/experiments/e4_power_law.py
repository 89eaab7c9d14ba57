r"""E4, power laws: many Lotka-Volterra modes whose steps merge, and a trained network that shows
the merge (THEORY.md section 4).

**Many-mode LV.** c_k = k^-alpha, K = I (gamma = 0), k = 1..``lv_modes``, m0 = 1e-12,
lr 0.05 (``power_law_system``), solved exactly (uncoupled logistic modes, ``solve_lv``)
on ``lv_points`` log-spaced times. Mode k switches on at t_k ~ eps / (4 lr c_k) ~ k^alpha
and leaves c_k^2 / 2 in the loss until then, so L - L_inf ~ (t/eps)^-beta with

    beta = (2 alpha - gamma - 1) / alpha                      (eps = ln(1/m0) -> infinity),
    beta_eff ~= beta / (1 - 1 / (eps - alpha ln k*))           (finite init, k* the mode
                                                               switching at that time).

``fit_power_law`` fits ln(L - L_inf) on the window from the switch of mode
``lv_window_modes[0]`` (10) to that of mode ``lv_window_modes[1]`` (1000), with a 95%
interval corrected for the residuals' autocorrelation; k* = sqrt(10 x 1000) = 100.
Claims per alpha: the interval contains the corrected exponent; and the asymptotic
exponent lies *below* the interval (confirmed = excluded). At m0 = 1e-12,
eps - alpha ln k* is only 23 (alpha = 1) to 18 (alpha = 2), so the finite-init
correction (5-6%) is several times the interval's half-width: the eps -> infinity
exponent is not what a finite init shows (THEORY.md section 4). Measured with 10^5 modes
(THEORY.md): 1.051, 1.406, 1.596 against corrected 1.05, 1.40, 1.59 and asymptotic
1, 1.333, 1.5; with 10^4 modes (quick) alpha = 1 reads 1.067, because the truncation at
10^4 removes loss near mode 1000 and steepens the end of the window.

**Trained model.** The ``powerlaw`` task (s_k = scale k^-alpha, k = 1..``train_modes``,
inputs = outputs = train_modes, whitened), alpha = ``train_alpha`` = 1.5, learned by the
tanh perceptron's quadratic model and by the tanh network itself with GD,
lr 0.5 (2 lr c_1 = 0.5: stable, superstable mode 1), width n = 128, sigma0 = 5e-5
(eps = ln(1/(n sigma0^2)) = 15: steps merge beyond mode ~4), float64. The prediction
is the exact GD map of the LV system of the task's own spectrum (c_k = s_k/2, K = 1/4,
m0 = n sigma0^2, ``gd_occupations``): both curves are fitted on the same window, from
the GD-map switch of mode ``train_window_modes[0]`` (4) to that of mode
``train_window_modes[1]`` (25), chosen from the theory before training. Claims: the
trained exponent equals the own-spectrum LV exponent within ``trained_tolerance``
(relative 5%: random init moves each mode's ln m_k(0) by ~sqrt(2/n) = 0.13, i.e. its
switch by ~1% of t_k, which bends the local exponent by a few percent), and the fitter
finds the trained curve straight on log-log axes (largest residual <= 5% of the ln-loss
range, the fitter's own criterion); the fitter's full verdict is in the text.
Width matters: with n = modes (64) the late modes lag the LV prediction (measured: mode
48 at step 666 against 520), because each learned mode takes a direction in unit space
and the later modes' initial occupations along it are removed; n = 2 x modes keeps this
to a few percent.

Float64: compute functions run under ``jax.enable_x64(True)`` (a scoped context).
Cost (2 shared CPU cores, wall time with compilation, measured at load ~4): quick
(10^4 LV modes, both trained models) about 20-40 s; full (10^5 LV modes) about 60 s,
of which the three 10^5-mode LV solves take ~27 s. Training: ~2200 GD steps, about
8 s per model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from nqf.core.errors import NqfError
from nqf.store.verdict import Claim, Tolerance
from ._base import Experiment, ExperimentResult, RunSpec
from ._common import as_array, gd_train_config

CONFIDENCE = 0.95
RESIDUAL_LIMIT = 0.05  # fit_power_law's default max_relative_residual
MODELS = {"quadratic": "quadratic model", "network": "network"}


@dataclass(frozen=True)
class PowerLawConfig:
    """E4's settings; see the module docstring."""

    alphas: tuple[float, ...] = (1.0, 1.5, 2.0)
    lv_modes: int = 100_000
    lv_m0: float = 1e-12
    lv_lr: float = 0.05
    lv_window_modes: tuple[int, int] = (10, 1000)
    lv_points: int = 1500
    train_alpha: float = 1.5
    train_modes: int = 64
    train_scale: float = 1.0
    train_samples: int = 64
    train_window_modes: tuple[int, int] = (4, 25)
    train_models: tuple[str, ...] = ("quadratic", "network")
    train_width: int = 128
    train_sigma0: float = 5e-5
    train_lr: float = 0.5
    data_seed: int = 0
    seed: int = 0
    trained_tolerance: float = 0.05

    def __post_init__(self) -> None:
        if not self.alphas or any(not (math.isfinite(a) and a > 0.5) for a in self.alphas):
            raise NqfError(f"E4: alphas must be numbers > 1/2 (a summable loss), got {self.alphas!r}")
        if len(set(self.alphas)) != len(self.alphas):
            raise NqfError(f"E4: alphas must be distinct, got {self.alphas!r}")
        lo, hi = self.lv_window_modes
        if not (1 <= lo < hi <= self.lv_modes):
            raise NqfError(f"E4: lv_window_modes must satisfy 1 <= lo < hi <= lv_modes, got {self.lv_window_modes!r}")
        if not (0 < self.lv_m0 < 1e-2):
            raise NqfError(f"E4: lv_m0 must lie in (0, 1e-2), got {self.lv_m0!r}")
        if not (self.lv_lr > 0 and self.train_lr > 0 and self.train_scale > 0):
            raise NqfError("E4: learning rates and train_scale must be positive")
        if self.lv_points < 100:
            raise NqfError(f"E4: lv_points must be >= 100, got {self.lv_points!r}")
        lo, hi = self.train_window_modes
        if not (1 <= lo < hi <= self.train_modes):
            raise NqfError(f"E4: train_window_modes must satisfy 1 <= lo < hi <= train_modes, got {(lo, hi)!r}")
        if not self.train_models or any(m not in MODELS for m in self.train_models):
            raise NqfError(f"E4: train_models must be among {', '.join(MODELS)}, got {self.train_models!r}")
        if len(set(self.train_models)) != len(self.train_models):
            raise NqfError(f"E4: train_models must be distinct, got {self.train_models!r}")
        if self.train_samples < self.train_modes:
            raise NqfError(f"E4: whitening needs train_samples >= train_modes ({self.train_modes})")
        if self.train_width < 1 or not (0 < self.train_sigma0 < 1):
            raise NqfError("E4: train_width must be >= 1 and train_sigma0 in (0, 1)")
        if self.train_lr * self.train_scale >= 1.0:
            raise NqfError("E4: GD on mode 1 is unstable for train_lr * train_scale >= 1 (|1 - 4 lr c_1| >= 1)")
        if self.train_width * self.train_sigma0**2 >= 0.1 * 2 * self.train_scale * self.train_modes**-self.train_alpha:
            raise NqfError("E4: train_sigma0 too large: the last mode would start near saturation")
        if self.seed < 0 or self.data_seed < 0:
            raise NqfError("E4: seeds must be >= 0")
        if not self.trained_tolerance > 0:
            raise NqfError("E4: trained_tolerance must be positive")

    @classmethod
    def quick(cls) -> "PowerLawConfig":
        return cls(lv_modes=10_000)

    @classmethod
    def full(cls) -> "PowerLawConfig":
        return cls()


# -- runs ------------------------------------------------------------------------------


def lv_run(run: dict[str, Any]) -> dict[str, Any]:
    """Many uncoupled LV modes c_k = k^-alpha, K = 1: exact excess loss on log-spaced times."""
    from nqf.theory.lv_solve import solve_lv, switch_times
    from nqf.theory.scaling import power_law_system

    with jax.enable_x64(True):
        alpha = run["alpha"]
        system = power_law_system(run["modes"], alpha, m0=run["m0"], lr=run["lr"])
        switch = switch_times(system)  # (modes,) closed form, increasing in k
        lo, hi = run["window_modes"]
        ts = np.geomspace(0.2 * switch[0], 1.5 * switch[-1], run["points"])
        sol = solve_lv(system, ts[-1], ts, save_occupations=False)
        # the mode switching at each time (switch times increase with k): k*(t) for the corrected formula
        k_star = np.interp(np.log(ts), np.log(switch), np.arange(1, switch.size + 1), left=np.nan, right=np.nan)
        return {
            "eps": system.eps,
            "ts": ts,
            "excess": sol.excess_losses,
            "window": (float(switch[lo - 1]), float(switch[hi - 1])),
            "k_star": k_star,
            "switch_first_last": (float(switch[0]), float(switch[-1])),
        }


def _powerlaw_task(run: dict[str, Any]):
    from nqf.training.tasks import get_task

    modes = run["modes"]
    return get_task(
        "powerlaw",
        modes=modes,
        alpha=run["alpha"],
        scale=run["scale"],
        inputs=modes,
        outputs=modes,
        samples=run["samples"],
    )


def own_spectrum_run(run: dict[str, Any]) -> dict[str, Any]:
    """The LV system of the trained task's own spectrum: exact GD map (and the flow) at every step."""
    from nqf.theory.lotka_volterra import LotkaVolterra, gd_occupations
    from nqf.theory.lv_solve import solve_lv
    from nqf.core.measure import switch_steps

    with jax.enable_x64(True):
        task = _powerlaw_task(run)
        c = np.asarray(task.spectrum(run["data_seed"]))
        m_star = np.asarray(task.fixed_point_occupations())
        loss0 = float(task.plateau_losses()[0])  # whitened: L(W = 0) = (1/2) sum_k s_k^2
        m0 = run["width"] * run["sigma0"] ** 2
        system = LotkaVolterra(c=c, K=c / m_star, m0=m0, lr=run["lr"], loss0=loss0)
        steps = run["steps"]
        occ = gd_occupations(system, steps)
        flow = solve_lv(system, float(steps), np.arange(steps + 1, dtype=np.float64), save_occupations=False)
        return {
            "eps": system.eps,
            "c": c,
            "m_star": m_star,
            "loss": system.loss(occ),
            "flow_loss": flow.losses,
            "switch": switch_steps(np.arange(steps + 1), occ, 0.5 * m_star),
        }


def trained_run(run: dict[str, Any]) -> dict[str, Any]:
    """The powerlaw task learned by GD (network or quadratic model), loss and switch steps at every step."""
    from nqf.core.measure import switch_steps
    from nqf.training.runs import train

    with jax.enable_x64(True):
        task = _powerlaw_task(run)
        X, Y = task.generate(run["data_seed"], "float64")
        result = train(task.architecture(), X, Y, gd_train_config(run), basis=task.mode_basis(run["data_seed"]))
        m_star = np.asarray(task.fixed_point_occupations())
        return {
            "loss": result.loss,
            "switch": switch_steps(result.steps, result.occupations, 0.5 * m_star),
            "initial_occupations": result.occupations[0],
            "diverged_at": result.diverged_at,
        }


def train_steps(c: PowerLawConfig) -> int:
    """Training length: 1.6 x the flow switch time of the last window mode (GD is <= 7% slower)."""
    from nqf.theory.lotka_volterra import logistic_switch_time

    k = c.train_window_modes[1]
    s_k = c.train_scale * k ** (-c.train_alpha)
    t_k = logistic_switch_time(s_k / 2, 0.25, c.train_width * c.train_sigma0**2, c.train_lr)
    return int(math.ceil(1.6 * t_k))


def runs(c: PowerLawConfig) -> list[RunSpec]:
    specs = [
        RunSpec(
            f"lv-alpha{alpha:g}",
            {
                "alpha": alpha,
                "modes": c.lv_modes,
                "m0": c.lv_m0,
                "lr": c.lv_lr,
                "window_modes": list(c.lv_window_modes),
                "points": c.lv_points,
            },
            lv_run,
        )
        for alpha in c.alphas
    ]
    base = {
        "alpha": c.train_alpha,
        "modes": c.train_modes,
        "scale": c.train_scale,
        "samples": c.train_samples,
        "data_seed": c.data_seed,
        "width": c.train_width,
        "sigma0": c.train_sigma0,
        "lr": c.train_lr,
        "steps": train_steps(c),
    }
    specs.append(RunSpec("own-spectrum-lv", base, own_spectrum_run))
    for model in c.train_models:
        specs.append(RunSpec(f"trained-{model}", {**base, "model": model, "seed": c.seed}, trained_run))
    return specs


# -- summary ---------------------------------------------------------------------------


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
    from nqf.theory.scaling import finite_init_exponent, fit_power_law, local_exponent, predicted_exponent

    claims: list[Claim] = []
    lv_data = []
    k_star = math.sqrt(config.lv_window_modes[0] * config.lv_window_modes[1])
    for alpha in config.alphas:
        rec = records[f"lv-alpha{alpha:g}"]
        ts, excess, eps = as_array(rec["ts"]), as_array(rec["excess"]), float(rec["eps"])
        fit = fit_power_law(ts, excess, 0.0, window=tuple(rec["window"]), confidence=CONFIDENCE)
        asymptotic = predicted_exponent(alpha)
        corrected = finite_init_exponent(alpha, 0.0, eps, k_star)
        lo, hi = fit.ci
        claims.append(
            Claim(
                claim=f"LV, alpha = {alpha:g}: the {CONFIDENCE:.0%} interval of the fitted exponent contains the "
                f"finite-init exponent beta/(1 - 1/(eps - alpha ln k*)), k* = {k_star:g}",
                measured_what=f"fitted loss exponent, {config.lv_modes} modes, modes {config.lv_window_modes[0]}"
                f"-{config.lv_window_modes[1]} window (tolerance = the interval)",
                predicted=corrected,
                measured=fit.exponent,
                tolerance=Tolerance("interval", (fit.exponent - hi, fit.exponent - lo)),
            )
        )
        claims.append(
            Claim(
                claim=f"LV, alpha = {alpha:g}: finite init steepens the law; the asymptotic (2 alpha - 1)/alpha "
                "lies below the interval",
                measured_what=f"lower end of the fitted exponent's {CONFIDENCE:.0%} interval",
                predicted=asymptotic,
                measured=lo,
                tolerance=Tolerance("at_least", 0.0),
            )
        )
        positive = excess > 0
        local = np.full(ts.size, np.nan)
        local[positive] = local_exponent(ts[positive], excess[positive])
        lv_data.append(
            {
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
        )

    own = records["own-spectrum-lv"]
    own_switch = as_array(own["switch"])
    lo_mode, hi_mode = config.train_window_modes
    window = (float(own_switch[lo_mode - 1]), float(own_switch[hi_mode - 1]))
    steps = np.arange(1, as_array(own["loss"]).size)
    own_fit = fit_power_law(steps, as_array(own["loss"])[1:], 0.0, window=window, confidence=CONFIDENCE)
    trained_data = {}
    for model in config.train_models:
        rec = records[f"trained-{model}"]
        loss = as_array(rec["loss"])
        source = MODELS[model]
        diverged = rec.get("diverged_at")
        try:
            fit = None if diverged is not None else fit_power_law(
                steps, loss[1:], 0.0, window=window, confidence=CONFIDENCE
            )
            problem = "" if fit is not None else f"training diverged at step {diverged}"
        except NqfError as err:
            fit, problem = None, str(err)
        claims.append(
            Claim(
                claim=f"{source} (GD, tanh perceptron, alpha = {config.train_alpha:g}, {config.train_modes} modes): "
                "loss exponent = that of the LV of its own spectrum",
                measured_what=f"fitted exponent on the own-spectrum LV's window, modes {lo_mode}-{hi_mode} "
                f"(steps {window[0]:.0f}-{window[1]:.0f}); predicted: same fit of the exact LV GD map",
                predicted=own_fit.exponent,
                measured=None if fit is None else fit.exponent,
                tolerance=Tolerance("relative", config.trained_tolerance),
                why_missing=problem,
            )
        )
        claims.append(
            Claim(
                claim=f"{source}: the loss is a power law over the window (steps merged)",
                measured_what="largest residual of the fit / range of ln(loss) over the window (fit_power_law); "
                "a pure power law has 0",
                predicted=0.0,
                measured=None if fit is None else fit.relative_residual,
                tolerance=Tolerance("at_most", RESIDUAL_LIMIT),
                why_missing=problem,
            )
        )
        trained_data[model] = {
            "source": source,
            "loss": loss,
            "switch": as_array(rec["switch"]),
            "fit": None if fit is None else _fit_dict(fit),
            "problem": problem,
        }

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
    for model, d in trained_data.items():
        if d["fit"] is None:
            lines.append(f"{d['source']}: no fit ({d['problem']}).")
        else:
            f = d["fit"]
            agree = abs(f["exponent"] - own_fit.exponent) / abs(own_fit.exponent)
            lines.append(
                f"{d['source']}: {_ci(f)}, {100 * agree:.1f}% from the LV prediction; fitter: {f['reason']}."
            )
    return "\n\n".join(lines)


E4 = Experiment(
    "E4",
    "power laws from merged steps",
    PowerLawConfig,
    runs,
    summarise,
    figures="nqf.report.figures_e4:plot",
    description="Loss exponents of many-mode LV systems and of a trained network against the theory's prediction.",
)
