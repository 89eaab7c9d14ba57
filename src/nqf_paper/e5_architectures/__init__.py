r"""E5, architectures: every built-in architecture against its quadratic form on a task made for it
(docs/theory.md sections 1, 2, 3 and 5).

One :func:`nqf.compare` per case (plain full-batch GD, float64 under ``jax.enable_x64(True)``,
init W0 ~ N(0, sigma0^2) with sigma0 = 1e-6, seed 0): the network, its quadratic model
f = <W W^T, A(x)> and the exact GD map on M (the M-flow) from the same W0.

=================  ===============================  ======================================
case               architecture                     task
=================  ===============================  ======================================
perceptron         ``mlp`` (tanh, trainable a)      staircase, s = 3, 2, 1, 0.5 (K 4, D 8)
fixed-readout      ``mlp-fixed`` (1 - cos z)        quadratic teacher y = x^T Q x (D 8)
attention          ``attention`` (softmax, last)    tokens: y = T xbar (T 8, D 8, dk = dv = 4)
linear-attention   ``linear-attention`` (merged)    icl: D 4, Lambda = (4,3,2,1)/10, N 31
moe-E<E>           ``moe`` (softmax gate, tanh)     experts: the staircase, E = 2, 4, 8
conv               ``conv1d`` (circular, kernel L,  fourier: stationary x, P(f) = (1+|f|)^-1,
                   per-position readout)            y = x_0
=================  ===============================  ======================================

The fixed-readout unit uses sigma(z) = 1 - cos z (sigma''(0) = 1, as the task's natural
z^2/2) because with z^2/2 the network *is* its quadratic model and the comparison could
not fail; 1 - cos z has a quartic remainder.

**Modes in groups.** The modes q_k are the eigenvectors of C = E[y A(x)] (``compare``'s
basis). Where c_k is degenerate the copies represent the same function: attention has
dv copies of each teacher direction (one per value channel), circular convolution a
cos/sin pair per frequency |f| (a = cos, k = cos and a = sin, k = -sin give the same
x -> sum_m x_m cos(omega m)). The LV fixed point then fixes only the copies' total
occupation, and its split (hence the per-mode threshold m_k*/2 ``compare`` uses) is
arbitrary, sometimes zero. So switch-on steps are measured per *group* of modes with
equal c_k (relative gap below 1e-6): the first step at which the group's total
occupation sum_k q_k^T M q_k reaches half its total LV fixed-point occupation, the same
threshold for network, quadratic model and M-flow (docs/theory.md section 5). A group is a
single mode wherever c_k is simple, and then this is ``compare``'s own switch step.
Plateau loss after group k: ``nqf.comparison.compare.measured_plateau_losses`` (the loss at the
log-time midpoint sqrt(t_k t_next) of the source's own switch steps).

**Claims** (tolerances stated in advance, module constants, not config fields):

* every case: network versus M-flow switch-on step of the early groups (the first two;
  one for linear attention, whose training has one drop, and mode 1 for each E of the
  mixture of experts), relative 10%; plateau loss after those groups, network versus
  M-flow, relative 10%;
* attention: the W_Q and W_K blocks of A(x) vanish (autodiff, |entry| <= 1e-12); through
  the first plateau (steps 0 .. network switch of group 1) ||W_Q|| and ||W_K|| stay
  within a factor 2 of their init while ||W_V|| and ||W_O|| grow at least 100-fold;
* linear attention: the loss after the drop (read at sqrt(t_1 T), T the horizon), as a
  fraction of the initial loss, equals the population optimum of the in-context map
  f = (1/N) sum_i y_i x_i^T Gamma x_q, Gamma = diag(gamma_k),
  gamma_k = lambda_k / ((1 + 1/N) lambda_k + Tr Lambda / N), whose
  loss is (1/2) sum_k lambda_k (1 - gamma_k) against (1/2) Tr Lambda at W = 0 (0.136 for
  the defaults; docs/theory.md measured 0.135), relative 10%; one drop: at least 95% of the
  loss decrease over the run happens between t_1/2 and 2 t_1;
* mixture of experts: E A_moe(x) equals the tanh perceptron's A(x) on the [a, v] blocks and
  the gate block u vanishes (|difference| <= 1e-12); c_1(E_0)/c_1(E) = E/E_0 (relative
  1e-9); the measured ratio of switch steps t_1(E)/t_1(E_0) equals the M-flow's ratio,
  relative 10% (E_0 the smallest E);
* convolution: each mode's kernel block lies in one frequency group (power fraction at
  its dominant |f| equal to 1 within 1e-6); the groups switch on in the order of the
  input's power P(|f|): zero inverted pairs (exact), for the M-flow and the network.

Learning rates: the GD steps must resolve each case's plateaus and stay stable for the
network: perceptron and attention 0.05, fixed readout 0.01 (c_1 ~ 6), linear attention 0.5
(c_1 ~ 0.27), mixture of experts 0.1 (at 0.2 the E = 2 network's loss jumps near step 350,
see the text), convolution 0.5 (c = P(f)/2 <= 0.5).

Cost (``nqf reproduce --only E5``, one process, compile time included; most of it is
compiling ``predict``'s solvers and the training loops once per case): quick 67 s wall
(83 s CPU) at load ~1 on 2 cores, 107 s wall at load ~4-5 shared with other jobs; full
117 s wall (145 s CPU, 1.7 GB peak memory, alongside another run). The dense lr-stability
Hessian of linear attention (d = 30, 900 directions, all vmapped at once) took 3.9 GB at
4000 prompts (so about 18 GB at 20000) until ``nqf.theory.flow.hessian_of_w`` switched to
batched Hessian-vector products (0.65 GB).

**Layout.** ``common`` (names, tolerances, mode groups), ``config``, one module per
architecture family holding its run config, checks of A(x), claims and text (``mlp``:
both perceptrons; ``attention``; ``linear_attention``; ``moe``; ``conv``), the one
``runner`` that every case runs through, and ``summary``.
"""

from __future__ import annotations

from .._base import Experiment
from .attention import attention_claims
from .common import (
    CASES,
    DEGENERATE_RTOL,
    EARLY_GROUPS,
    FOURIER_PURITY,
    GROWTH_SCALING_TOLERANCE,
    ICL_PLATEAU_TOLERANCE,
    LABELS,
    ONE_DROP_SHARE,
    PLATEAU_TOLERANCE,
    QK_FACTOR,
    RATIO_TOLERANCE,
    SOURCES,
    STRUCTURE_ZERO,
    SWITCH_TOLERANCE,
    VO_GROWTH,
    group_switch_steps,
    mode_groups,
)
from .config import ArchitecturesConfig
from .conv import conv_claims
from .linear_attention import icl_claims, icl_plateau_ratio
from .moe import moe_claims
from .runner import case_run, case_specs, runs
from .summary import early_mode_claims, plateau_diagnosis, summarise

__all__ = [
    "CASES",
    "DEGENERATE_RTOL",
    "E5",
    "EARLY_GROUPS",
    "FOURIER_PURITY",
    "GROWTH_SCALING_TOLERANCE",
    "ICL_PLATEAU_TOLERANCE",
    "LABELS",
    "ONE_DROP_SHARE",
    "PLATEAU_TOLERANCE",
    "QK_FACTOR",
    "RATIO_TOLERANCE",
    "SOURCES",
    "STRUCTURE_ZERO",
    "SWITCH_TOLERANCE",
    "VO_GROWTH",
    "ArchitecturesConfig",
    "attention_claims",
    "case_run",
    "case_specs",
    "conv_claims",
    "early_mode_claims",
    "group_switch_steps",
    "icl_claims",
    "icl_plateau_ratio",
    "mode_groups",
    "moe_claims",
    "plateau_diagnosis",
    "runs",
    "summarise",
]


E5 = Experiment(
    "E5",
    "architectures",
    ArchitecturesConfig,
    runs,
    summarise,
    figures="nqf_paper.e5_architectures.figures:plot",
    description="Each built-in architecture on a task made for it: network, quadratic model and M-flow, switch-on "
    "steps and plateaus of the early modes, attention's Q-K blocks, ICL's single drop, experts' 1/E slowdown and "
    "convolution's Fourier order.",
)
