r"""E6, training methods: how GD, SGD, heavy-ball momentum, Adam and Muon escape from small init, and
which of them keep the quadratic model closed on M = W W^T (docs/theory.md sections 2 and 5).

Task: the staircase (K = 4 outputs, D = 8 whitened inputs, s = 3, 2, 1, 0.5, N = 256),
learned by the tanh perceptron (``mlp``, width n = 32) and by its quadratic model
f = <W W^T, A(x)>, both trained in float64.

**Switch-on steps versus init scale.** Near M = 0, G(M) = -C, so the weight component
along a mode q_k (C q_k = c_k q_k) grows geometrically and the switch-on step t_k (first
step with m_k = q_k^T M q_k >= m_k*/2, m_k* the LV fixed point of the task's modes,
docs/theory.md section 5) is linear in ln(1/sigma0) with slope

* GD, lr eta:               1 / ln(1 + 2 eta c_k);
* heavy ball, beta:         1 / ln z, z the larger root of z^2 - (1 + beta + 2 eta c_k) z + beta = 0;
* the "effective lr" rule:  1 / ln(1 + 2 eta c_k / (1 - beta)) (valid only for 2 eta c_k << (1 - beta)^2;
  shown to be far off here).

For each optimizer one compiled ``train_grid`` per model (vmapped over sigma0 and seeds)
records m_k at every step; ``fit_switch_slope`` fits t_k = a + b ln(1/sigma0) with a
standard error. Claims (relative tolerance 3%, docs/theory.md section 4's "linear with slope
within 3%"): GD and momentum slopes of the quadratic model for every mode, and of the
tanh network for mode 1, which also carries the network's own prediction as a second verdict
(``predict_grid``'s mean-field flow of the tanh units at the same scales and seeds, runs
``network-own-<optimizer>``, its mode-1 slope fitted the same way). The network's later modes
are known to move at about mode 1's rate instead; they are shown as measured findings, not claims. SGD (minibatch
``batch_size``, same lr) is compared with the GD formula as a finding; Adam (lr 1e-3) and
Muon (lr 0.01) have no prediction: their slopes are measured and shown (near zero: their
normalised steps grow the weights linearly, not geometrically).

**Closure.** ``closure_diagnostic`` trains the quadratic model from W0 and W0 O (O random
orthogonal) and records the relative M defect ||M - M'||_F / ||M||_F per step and the
per-step update defect of the optimizer. Claims: the equivariant optimizers (GD, SGD with
the same batches, momentum, Muon) stay below 1e-8 over the plateaus, i.e. up to the last
switch-on of the same optimizer's quadratic run at ``closure_sigma0`` (constant-lr Muon
oscillates after convergence and amplifies rounding, docs/theory.md section 2, so it is judged
there and by its per-step update defect over the whole run); Adam's defect is at least
1e-2. The tanh network under GD is shown for contrast (the rotation is not a symmetry of
the network).

Learning rates: eta = 0.05 for GD, SGD and momentum (beta = 0.9), Adam 1e-3 (optax
defaults b1 = 0.9, b2 = 0.999, eps = 1e-8), Muon 0.01 (optax.contrib.muon, beta 0.95,
Nesterov, eps 1e-8, W declared one d x n matrix; at lr 0.01 optax's momentum
normalisation delays switch-ons by at most a step, see ``nqf.training.runs``).

Float64: the compute functions run under ``jax.enable_x64(True)`` (a scoped context, not
a global switch): closure defects of 1e-14 and sigma0 down to 1e-12 need it.

Cost (measured on 2 CPU cores shared with other jobs, compile time included; 16 runs, one
compiled call each): quick (4 scales 1e-3 ... 1e-12, 1 seed) 40-65 s; full (7 scales
1e-2 ... 1e-12, 3 seeds) about 90 s. Most of it is compilation, so more scales or seeds
cost little.

**Layout.** ``config`` (settings, names, bounds), ``runner`` (sweeps and closure runs),
``summary`` (fits, claims, figures' data), ``text``.
"""

from __future__ import annotations

from .._base import Experiment
from .config import (
    ADAM_BOUND,
    EQUIVARIANT,
    EQUIVARIANT_BOUND,
    MODELS,
    NAIVE_OFF_BY,
    OPTIMIZER_NAMES,
    OPTIMIZER_ORDER,
    SLOPE_TOLERANCE,
    OptimizersConfig,
)
from .runner import _setup, _task_dict, closure_run, runs, sweep_run
from .summary import summarise

__all__ = [
    "ADAM_BOUND",
    "E6",
    "EQUIVARIANT",
    "EQUIVARIANT_BOUND",
    "MODELS",
    "NAIVE_OFF_BY",
    "OPTIMIZER_NAMES",
    "OPTIMIZER_ORDER",
    "SLOPE_TOLERANCE",
    "OptimizersConfig",
    "_setup",
    "_task_dict",
    "closure_run",
    "runs",
    "summarise",
    "sweep_run",
]


E6 = Experiment(
    "E6",
    "training methods",
    OptimizersConfig,
    runs,
    summarise,
    figures="nqf_paper.e6_optimizers.figures:plot",
    description="Switch-on steps versus init scale and closure on M for GD, SGD, heavy-ball momentum, Adam and Muon "
    "on the staircase.",
)
