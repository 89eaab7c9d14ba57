r"""A grid of predictions as one compiled program: :func:`predict_grid`.

A scan over learning rates, init scales and seeds is the everyday question of theory work
("where does the third plateau move when sigma0 halves?"). A Python loop of :func:`nqf.predict`
calls pays every shared stage again at each point: the gate, the data's moments, the mode
basis, the LV fixed point, the stability bound. Only four things depend on the point:

- W0 = sigma0 Z_seed (the draw ``nqf.train`` makes), hence the factor F0 (F0 F0^T = M0) and
  the initial occupations m_k(0) = |W0^T q_k|^2;
- the M-flow of the optimizer from F0 with learning rate lr (its own step on the factor and
  its buffers, GD: F+ = F - 2 lr G(F F^T) F), G(M) = unpack(S (pack(M) - m_hat)) from the
  moments;
- the LV map from m(0) with lr (the same step on each mode's scalars, in log occupations; GD:
  u+ = u + 2 ln|1 + 2 lr (c - K e^u)|; ``nqf.theory.lotka_volterra.maps``);
- the closed forms that read (c, K, m(0), lr): the logistic switch times, the LV gradient
  flow's, and the singular limit.

:func:`predict_grid` computes the shared stages once (on the host, as ``predict``'s numpy engine
does), then runs the M-flow and the LV map of every point in one program: :func:`grid_point`
is written for one point and ``jax.vmap``-ed over the grid, the point axis sharded over the
devices when there are several (as ``nqf.train_grid`` does for training). The program
reduces as it steps: it keeps the two loss curves at the recorded steps, the first step at
which each mode crosses its threshold m_k*/2 (M-flow and LV), the first step at which each
degenerate group's total M-flow occupation crosses its total threshold, and the smallest weight share
of each mode before its LV switch-on (the M-flow's resolution, ``nqf.theory.predict.pipeline``'s
docstring); never a (points, steps, modes) array. Its shapes are padded (points and records to
powers of two), so a grid with another lr, sigma0, seed, horizon or size within the same
bucket reuses the compiled program, in this process and through the persistent cache.

Every point equals ``predict`` with that point's config: the same W0, the same switch-on
steps (M-flow, LV map, LV flow, closed form, singular limit) and the same loss curves to
rounding (``tests/test_predict_grid.py``: 1e-12 relative against both engines). The grid
steps every step; ``predict``'s LV map extrapolates a constant-rate tail after 4096 steps, and
its compiled M-flow jumps linear stretches above 20000 steps (``stepping="adaptive"``), so
beyond those horizons the two agree to those maps' tolerances, not to rounding.

Scope: the moments route (squared loss, a unit with a structure the moments take), the
full-batch optimizers that close on M; other cases raise a one-line NqfError naming what does not apply, before
any heavy work.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, Real

from nqf.architectures.architecture import Architecture
from nqf.architectures.expansion import ExpansionReport
from nqf.core.cache import ensure_default_cache
from nqf.core.errors import NqfError
from nqf.core.measure import (
    ModeGroups,
    group_first,
    group_last_value,
    group_members,
    group_thresholds,
    measured_plateau_losses,
    mode_groups,
)
from nqf.core.memory import FLOPS_PER_SECOND, check_time
from nqf.core.programs import bucket_length, to_device
from nqf.optimizers import OPTIMIZER_RECORDS, AbstractClosedOptimizer, closed_optimizer, optimizer_record
from nqf.theory.data_matrices.moments import MomentDataMatrices
from nqf.theory.data_matrices.protocol import AbstractDataMatrices
from nqf.theory.flow.base import FlowResult
from nqf.theory.flow.maps import square_factor
from nqf.theory.lotka_volterra.maps import lv_step
from nqf.theory.lotka_volterra.modes import ModeBasis
from nqf.theory.lotka_volterra.solve import flow_switch_times_batch
from nqf.theory.predict import stages as stage
from nqf.theory.predict.init import check_init_scale, initial_weights, log_occupations
from nqf.theory.predict.result import PredictConfig, Prediction
from nqf.theory.predict.sizes import check_predict_memory, flow_cost, sample_count
from nqf.theory.predict.stages import MFLOW_RESOLUTION, record_steps

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["PredictionGrid", "grid_point", "predict_grid"]

# The grid's own notes (summaries over its points) start with this; a point's Prediction leaves them out.
_GRID_NOTE = "grid: "
# The program's outputs per chunk of points stay below this (the loss curves dominate:
# 2 x records x 8 bytes a point); a larger grid runs as several calls of the same program.
CHUNK_BYTES = 256 * 2**20
# The whole result (both loss curves of every point, float64) must fit in this share of
# the machine's memory; above it predict_grid refuses before computing anything.
MEMORY_SHARE = 0.5
# The grid steps every point through every step (no adaptive jumps, ``predict``'s way to a long
# horizon); a grid estimated to take longer than this is refused before any work
MAX_GRID_SECONDS = 3600.0
# A step of the grid's program costs this on top of its points' flops (the loop, the LV map, the
# crossings): measured 1.6e-5 s a step for one staircase point (10^6 steps in 16 s) and 4.3e-5
# for 16 points on the 2-core machine under load, where the points' flops account for 1e-6 each
GRID_SECONDS_PER_STEP = 1e-5


def grid_point(
    data: AbstractDataMatrices,
    F0,
    u0,
    m0,
    lr,
    beta,
    basis,
    c,
    K,
    thresholds,
    members,
    group_thr,
    gaps,
    steps,
    optimizer: AbstractClosedOptimizer,
):
    r"""The M-flow and the LV map of one point, reduced as they step (module docstring).

    data: the moments (``MomentDataMatrices``, shared); F0 (d, r) with F0 F0^T = M(0) (the
    optimizer's buffers start at zero); u0 (m,) ln m(0) and m0 (m,) m(0) of the LV map (m0 is what
    the record at step 0 shows, as ``predict`` records it); lr, beta scalars; basis (d, g) the
    growing modes; c (m,), K (m,) or (m, m) the LV system; thresholds (g,) m_k*/2; members (g, G)
    the 0/1 matrix of the degenerate groups of two or more modes (``nqf.core.measure.group_members``;
    G may be 0) and group_thr (G,) their summed thresholds (``group_thresholds``; inf: none); gaps (R,)
    the steps between consecutive records (gaps[0] = 0: step 0 is recorded; trailing zeros
    pad); steps the horizon (records past it are padding); optimizer: a full-batch one that
    closes on M (static): its own step drives the M-flow and the LV map.

    Returns (M-flow loss (R,), LV loss (R,), M-flow switch steps (g,), LV switch steps (g,),
    the LV's smallest weight share sum_k-normalised m_k / sum_j m_j before each switch-on
    (g,), M-flow group switch steps (G,): the first step with occupations @ members >=
    group_thr); switch steps are -1 where a mode (a group) does not cross by ``steps``.
    """
    g = thresholds.shape[0]
    Qt = basis.T
    dtype = F0.dtype
    diagonal_K = K.ndim == 1
    loss0 = data.loss(jnp.zeros((data.dim, data.dim), dtype=dtype))
    never = jnp.full((g,), -1, dtype=gaps.dtype)
    never_group = jnp.full(group_thr.shape, -1, dtype=gaps.dtype)

    def lv_occupations(lv_state, t):
        return jnp.where(t == 0, m0, jnp.exp(lv_state[0]))  # step 0 shows m(0) itself, not exp(ln m(0))

    # state: ((F, buffers), G = G(F F^T), M-flow loss, LV loss, LV state, switch steps x 2, shares,
    # group switch steps)
    def observe(state, t):
        """The losses, G and the crossings at step t, from F and the LV state at t."""
        carry, _, _, _, lv_state, flow_switch, lv_switch, share, group_switch = state
        F = carry[0]
        loss, G = data.loss_and_gradient(F @ F.T)
        occ = jnp.sum((Qt @ F) ** 2, axis=1)
        lv_occ = lv_occupations(lv_state, t)
        lv_loss = loss0 - lv_occ @ c + 0.5 * jnp.sum(lv_occ * (K * lv_occ if diagonal_K else lv_occ @ K.T))
        live = (t <= steps) & (thresholds > 0)
        # the weight share counts up to and including the LV switch-on step (mflow_resolution)
        total = jnp.sum(lv_occ)
        current = jnp.where(total > 0, lv_occ[:g] / jnp.where(total > 0, total, 1.0), jnp.inf)
        share = jnp.where((lv_switch < 0) & (t <= steps), jnp.minimum(share, current), share)
        flow_switch = jnp.where(live & (flow_switch < 0) & (occ >= thresholds), t, flow_switch)
        lv_switch = jnp.where(live & (lv_switch < 0) & (lv_occ[:g] >= thresholds), t, lv_switch)
        # a degenerate group is timed by its total: the init decides how it splits among the members
        crossed = (t <= steps) & (group_switch < 0) & (occ @ members >= group_thr)
        group_switch = jnp.where(crossed, t, group_switch)
        return (carry, G, loss, lv_loss, lv_state, flow_switch, lv_switch, share, group_switch)

    def step(state):
        """One step of the M-flow (with the G observed at its start) and of the LV map."""
        carry, G, loss, lv_loss, lv_state, *switches = state
        carry = optimizer.flow_step(2 * G @ carry[0], carry, lr, beta)
        lv_state = lv_step(optimizer, c, K, lr, beta, lv_state)
        return (carry, G, loss, lv_loss, lv_state, *switches)

    def between(carry, gap):
        state, t = carry
        # each step is observed once, at its end: the crossings of every step, G for the next
        state = jax.lax.fori_loop(0, gap, lambda i, st: observe(step(st), t + i + 1), state)
        return (state, t + gap), (state[2], state[3])

    lv_state0 = (u0, tuple(jnp.zeros_like(u0) for _ in range(optimizer.buffers)))
    share0 = jnp.full((g,), jnp.inf, dtype=dtype)
    zero = jnp.zeros((), dtype=dtype)
    t0 = jnp.zeros((), dtype=gaps.dtype)
    state0 = observe(
        (
            (F0, *(jnp.zeros_like(F0) for _ in range(optimizer.buffers))),
            jnp.zeros((F0.shape[0],) * 2, dtype=dtype),
            zero,
            zero,
            lv_state0,
            never,
            never,
            share0,
            never_group,
        ),
        t0,
    )
    (state, _), (loss, lv_loss) = jax.lax.scan(between, (state0, t0), gaps)
    flow_switch, lv_switch, share, group_switch = state[5:]
    return loss, lv_loss, flow_switch, lv_switch, share, group_switch


@functools.partial(jax.jit, static_argnames=("optimizer",))
def _grid_program(
    data: AbstractDataMatrices,
    F0,
    u0,
    m0,
    lr,
    beta,
    basis,
    c,
    K,
    thresholds,
    members,
    group_thr,
    gaps,
    steps,
    optimizer,
):
    """:func:`grid_point` vmapped over the point axis of F0, u0, m0 and lr (one program)."""

    def one(F, u, m, rate):
        return grid_point(
            data, F, u, m, rate, beta, basis, c, K, thresholds, members, group_thr, gaps, steps, optimizer
        )

    return jax.vmap(one)(F0, u0, m0, lr)


@dataclass(frozen=True, eq=False)
class GridContext:
    """What a grid's points share besides arrays, kept to rebuild each point's ``Prediction``
    (:meth:`PredictionGrid.prediction`): the mode basis, the LV stage (c, K, fixed point,
    thresholds, defects), the expansion verdict, the data route's reason; per init (S, R) the
    init defect; per point the M-flow's crossings before unresolved modes were left out
    (L, S, R, g), the power-law fits (P,: the fit or None, and the note of a failed fit if any)
    and the network's mean-field flows (P,: a NetworkFlow, or the note of why none; empty with
    ``config.network`` off). Compared by identity (a static pytree field)."""

    modes: ModeBasis
    system: stage.LVStage
    expansion: ExpansionReport
    arch_options: tuple
    route_reason: str
    init_defects: np.ndarray
    crossed: np.ndarray
    power_laws: tuple
    dtype: str
    networks: tuple = ()


@jax.tree_util.register_dataclass
@dataclass(frozen=True, eq=False)
class PredictionGrid:
    """Predictions over the grid lrs x sigma0s x seeds (:func:`predict_grid`); a pytree of arrays
    (``jax.tree_util`` maps over the arrays; the config, names and notes are static).

    Per-point arrays have leading axes (L, S, R) = (len(lrs), len(sigma0s), len(seeds)):
    entry [i, j, k] is what ``predict`` gives with lr = lrs[i], sigma0 = sigma0s[j], seed =
    seeds[k]. g is the number of growing modes, m of all modes, T of recorded steps.

    Attributes:
        lrs (L,), sigma0s (S,), seeds (R,): the axes.
        steps: (T,) the recorded steps (every step up to 20000, then log + linear).
        mflow_loss, lv_loss: (L, S, R, T) the M-flow's and the LV map's loss curves.
        mflow_switch_steps, lv_switch_steps, lv_continuous_switch_steps,
        closed_form_switch_steps, singular_switch_steps: (L, S, R, g) switch-on steps (the
            first step at which m_k reaches m_k*/2), NaN where not reached within the
            horizon; the M-flow's also where it cannot resolve the mode (mflow_resolution
            below ``MFLOW_RESOLUTION``).
        mflow_group_switch_steps: (L, S, R, G) the M-flow's switch-on step of each degenerate
            group (:attr:`groups`) as ``predict`` reads it (``Prediction.group_readings``): the
            first step at which the group's total occupation reaches half its fixed-point total;
            a mode of its own keeps its ``mflow_switch_steps``. G counts the degenerate groups of
            the growing modes (G = g when no two c_k coincide).
        lv_plateau_losses: (L, S, R, g) the loss on the plateau reached as mode k switches on,
            in the vanishing-init limit.
        power_law_exponent: (L, S, R) the fitted exponent of the M-flow's loss curve with at
            least 10 growing modes (NaN with fewer, or where no power law fits).
        initial_occupations: (S, R, m) m_k(0) = |W0^T q_k|^2 (they do not depend on lr).
        mflow_resolution: (L, S, R, g) r_k / u (``nqf.theory.predict.pipeline``'s docstring).
        network_switch_steps, network_plateau_losses: (L, S, R, g), network_loss: (L, S, R, T)
            the network's own prediction, the mean-field flow of its units (``PredictConfig.network``,
            ``nqf.theory.departure.mean_field``); NaN where it is not computed.
        growth: (m,) c_k; thresholds: (g,) m_k*/2; stable_lr: the linear-stability bound.
        config: the base PredictConfig (its lr, sigma0 and seed those of the first point);
        arch_name, route, notes: as in ``Prediction``.
    """

    lrs: np.ndarray
    sigma0s: np.ndarray
    seeds: np.ndarray
    steps: np.ndarray
    mflow_loss: np.ndarray
    lv_loss: np.ndarray
    mflow_switch_steps: np.ndarray
    mflow_group_switch_steps: np.ndarray
    lv_switch_steps: np.ndarray
    lv_continuous_switch_steps: np.ndarray
    closed_form_switch_steps: np.ndarray
    singular_switch_steps: np.ndarray
    lv_plateau_losses: np.ndarray
    power_law_exponent: np.ndarray
    initial_occupations: np.ndarray
    mflow_resolution: np.ndarray
    network_switch_steps: np.ndarray
    network_plateau_losses: np.ndarray
    network_loss: np.ndarray
    growth: np.ndarray
    thresholds: np.ndarray
    stable_lr: float = field(metadata={"static": True})
    config: PredictConfig = field(metadata={"static": True})
    arch_name: str = field(default="", metadata={"static": True})
    route: str = field(default="moments", metadata={"static": True})
    notes: tuple[str, ...] = field(default=(), metadata={"static": True})
    context: GridContext | None = field(default=None, metadata={"static": True})

    @property
    def shape(self) -> tuple[int, int, int]:
        """(L, S, R): the grid's axes."""
        return (int(self.lrs.size), int(self.sigma0s.size), int(self.seeds.size))

    @property
    def num_growing(self) -> int:
        return int(self.thresholds.size)

    @property
    def groups(self) -> ModeGroups:
        """The degenerate groups of the growing modes, as ``Prediction.groups`` (one c for every point)."""
        return mode_groups(self.growth[: self.num_growing])

    @property
    def degenerate(self) -> bool:
        """Whether some growing modes share their c_k (a group of two or more)."""
        return any(len(group) > 1 for group in self.groups)

    def prediction(self, i: int, j: int, k: int) -> Prediction:
        """The point (lrs[i], sigma0s[j], seeds[k]) as the ``Prediction`` that ``predict`` returns
        for it: the same numbers (``tests/test_predict_grid.py``), its notes, ``to_json()`` and
        tables; ``engine`` is ``"grid"``. Its M-flow carries the loss curve only: the grid keeps
        neither the occupations along the way nor the final M (``flow.occupations`` and
        ``flow.final`` are None; ``predict`` gives them)."""
        if self.context is None:
            raise NqfError("this grid was not made by predict_grid (no context): call nqf.predict for the point")
        L, S, R = self.shape
        if not (0 <= i < L and 0 <= j < S and 0 <= k < R):
            raise NqfError(f"point ({i}, {j}, {k}) is outside the grid of shape {self.shape}")
        ctx, system = self.context, self.context.system
        config = replace(self.config, lr=float(self.lrs[i]), sigma0=float(self.sigma0s[j]), seed=int(self.seeds[k]))
        m0 = self.initial_occupations[j, k]
        lv = ctx.modes.lotka_volterra(m0, config.lr, system.lv.loss0)
        notes = [note for note in self.notes if not note.startswith(_GRID_NOTE)]  # the grid's own summaries
        init_note = stage.init_defect_note(float(ctx.init_defects[j, k]))
        if init_note:
            notes.append(init_note)
        resolution = self.mflow_resolution[i, j, k]
        unresolved = np.flatnonzero(resolution < MFLOW_RESOLUTION)
        if unresolved.size:
            notes.append(stage.unresolved_note(unresolved, ctx.crossed[i, j, k], resolution, ctx.dtype))
        never = np.zeros(lv.num_modes, dtype=bool)
        limit = stage.vanishing_init(lv, never, self.num_growing, notes, float(config.sigma0))[0]
        point = (i * S + j) * R + k  # lr-major, as the per-point tuples of the context
        fit, failure = ctx.power_laws[point]
        notes += failure
        stage.degenerate_note(ctx.modes, notes)
        steps = int(config.steps)
        stats = (("stepped", steps), ("jumped", 0), ("jumps", 0))
        flow = FlowResult(steps=self.steps, loss=self.mflow_loss[i, j, k], final=None, stats=stats)
        prediction = Prediction(
            config=config,
            modes=ctx.modes,
            lv_applies=system.applies,
            defect=system.defect,
            init_defect=float(ctx.init_defects[j, k]),
            flow=flow,
            thresholds=self.thresholds,
            mflow_switch_steps=self.mflow_switch_steps[i, j, k],
            lv=lv,
            lv_steps=self.steps,
            lv_loss=self.lv_loss[i, j, k],
            lv_switch_steps=self.lv_switch_steps[i, j, k],
            lv_continuous_switch_steps=self.lv_continuous_switch_steps[i, j, k],
            closed_form_switch_steps=self.closed_form_switch_steps[i, j, k],
            lv_plateau_losses=self.lv_plateau_losses[i, j, k],
            singular=limit,
            singular_switch_steps=self.singular_switch_steps[i, j, k],
            stable_lr=self.stable_lr,
            power_law=fit,
            notes=tuple(notes),
            route=self.route,
            route_reason=ctx.route_reason,
            flow_stats={**dict(stats), "lv_map": {"stepped": steps, "extrapolated": 0}},
            expansion=ctx.expansion,
            arch_name=self.arch_name,
            arch_options=ctx.arch_options,
            initial_occupations=m0,
            mflow_resolution=resolution,
            engine="grid",
            engine_reason=f"one program for the {L * S * R} points of a grid (nqf.predict_grid)",
            mflow_group_switch_steps=self.mflow_group_switch_steps[i, j, k] if self.degenerate else None,
        )
        return stage.with_network(prediction, ctx.networks[point]) if ctx.networks else prediction

    def to_dataframes(self) -> dict[str, pd.DataFrame]:
        """The tables of ``nqf predict --csv`` for every point, with the point's lr, sigma0 and
        seed in front: ``"curves"`` (lr, sigma0, seed, source, optimizer, step, loss; sources
        ``mflow``, ``lv`` and ``mean_field`` where it was computed) and ``"modes"`` (lr, sigma0, seed, source,
        optimizer, mode, convention, switch_step, plateau_loss; sources ``mflow``, ``lv``, ``lv_flow``,
        ``closed_form``, ``singular_limit``, ``mean_field``: the network's own prediction, NaN where
        it is not computed), long format as ``Prediction.to_dataframes`` gives them: where modes
        share c_k, one row per degenerate group (its first mode; convention ``group_occupation``
        for two or more modes), read as ``Prediction.group_readings`` reads them. Needs pandas
        (the ``dataframe`` extra)."""
        from nqf.core.dataframes import require_pandas

        pd = require_pandas()
        L, S, R = self.shape
        T, P = self.steps.size, L * S * R
        lr, sigma0, seed = (a.reshape(-1) for a in np.meshgrid(self.lrs, self.sigma0s, self.seeds, indexing="ij"))
        optimizer = self.config.optimizer
        curves = [
            pd.DataFrame(
                {
                    "lr": np.repeat(lr, T),
                    "sigma0": np.repeat(sigma0, T),
                    "seed": np.repeat(seed, T),
                    "source": source,
                    "optimizer": optimizer,
                    "step": np.tile(self.steps.astype(np.int64), P),
                    "loss": curve.reshape(-1),
                }
            )
            for source, curve in (("mflow", self.mflow_loss), ("lv", self.lv_loss), ("mean_field", self.network_loss))
            if source != "mean_field" or np.isfinite(curve).any()
        ]
        groups = self.groups if self.degenerate else None
        convention: str | np.ndarray
        if groups is None:
            first, convention = np.arange(1, self.num_growing + 1), "occupation"
        else:
            first = np.array([group[0] + 1 for group in groups])
            labels = ["occupation" if len(group) == 1 else "group_occupation" for group in groups]
            convention = np.tile(labels, P)
        modes = [
            pd.DataFrame(
                {
                    "lr": np.repeat(lr, first.size),
                    "sigma0": np.repeat(sigma0, first.size),
                    "seed": np.repeat(seed, first.size),
                    "source": source,
                    "optimizer": optimizer,
                    "mode": np.tile(first, P),
                    "convention": convention,
                    "switch_step": switch.reshape(-1),
                    "plateau_loss": plateau.reshape(-1),
                }
            )
            for source, switch, plateau in self._mode_readings(groups)
        ]
        return {
            "curves": pd.concat(curves, ignore_index=True),
            "modes": pd.concat(modes, ignore_index=True),
        }

    def _mode_readings(self, groups: ModeGroups | None) -> tuple[tuple[str, np.ndarray, np.ndarray], ...]:
        """(source, switch steps, plateau losses) of the modes table, (P, g) or (L, S, R, g) each per
        mode (``groups`` None), else per degenerate group, G in place of g, as ``Prediction.group_readings``
        and ``nqf.theory.predict.tables.prediction_mode_rows`` read them: the M-flow's group step from
        the total occupation, the steps timed from each mode's own m_k(0) the earliest member's, the
        vanishing-init limit's plateau the last member's."""
        P = int(np.prod(self.shape))
        if groups is None:
            nothing = np.full((P, self.num_growing), np.nan)
            return (
                ("mflow", self.mflow_switch_steps, self._measured_plateaus(self.mflow_loss, self.mflow_switch_steps)),
                ("lv", self.lv_switch_steps, self._measured_plateaus(self.lv_loss, self.lv_switch_steps)),
                ("lv_flow", self.lv_continuous_switch_steps, nothing),
                ("closed_form", self.closed_form_switch_steps, nothing),
                ("singular_limit", self.singular_switch_steps, self.lv_plateau_losses),
                ("mean_field", self.network_switch_steps, self.network_plateau_losses),
            )
        nothing = np.full((P, len(groups)), np.nan)
        mflow, lv = self.mflow_group_switch_steps, group_first(self.lv_switch_steps, groups)
        singular = self.singular_switch_steps
        return (
            ("mflow", mflow, self._measured_plateaus(self.mflow_loss, mflow)),
            ("lv", lv, self._measured_plateaus(self.lv_loss, lv)),
            ("lv_flow", group_first(self.lv_continuous_switch_steps, groups), nothing),
            ("closed_form", group_first(self.closed_form_switch_steps, groups), nothing),
            (
                "singular_limit",
                group_first(singular, groups),
                group_last_value(self.lv_plateau_losses, singular, groups),
            ),
            ("mean_field", *self._network_group_readings(groups)),
        )

    def _network_group_readings(self, groups: ModeGroups) -> tuple[np.ndarray, np.ndarray]:
        """(switch steps, plateau losses), (P, G) each: the network's own prediction per degenerate
        group at each point (``NetworkFlow.group_readings``), NaN where it is not computed."""
        P, G = int(np.prod(self.shape)), len(groups)
        steps, plateaus = np.full((P, G), np.nan), np.full((P, G), np.nan)
        mflow = self.mflow_group_switch_steps.reshape(P, G)
        for p, flow in enumerate(self.context.networks if self.context is not None else ()):
            if isinstance(flow, str):
                continue
            if flow.exact:  # the M-flow itself, whose occupations the grid does not keep: its group steps
                steps[p] = mflow[p]
                plateaus[p] = measured_plateau_losses(flow.steps, flow.loss, mflow[p], float(flow.steps[-1]))
            else:
                steps[p], plateaus[p] = flow.group_readings(groups, self.thresholds)
        return steps, plateaus

    def _measured_plateaus(self, loss, switch) -> np.ndarray:
        """(P, g) the loss at the middle of each plateau on the log-time axis, per point, as the
        CSV tables measure it (``nqf.core.measure.measured_plateau_losses``)."""
        P = int(np.prod(self.shape))
        loss, switch = loss.reshape(P, -1), switch.reshape(P, -1)
        horizon = float(self.config.steps)
        return np.stack([measured_plateau_losses(self.steps, loss[p], switch[p], horizon) for p in range(P)])

    def to_dataframe(self, table: str = "curves") -> pd.DataFrame:
        """One table of :meth:`to_dataframes`: ``"curves"`` (the default) or ``"modes"``."""
        from nqf.core.dataframes import check_table

        return self.to_dataframes()[check_table(table)]


def _axis(name: str, values, kind) -> np.ndarray:
    a = np.atleast_1d(np.asarray(values))
    if a.ndim != 1 or a.size == 0:
        raise NqfError(f"predict_grid: {name} must be a non-empty 1-D sequence, got shape {a.shape}")
    if kind is float:
        if not np.issubdtype(a.dtype, np.number) or not np.all(np.isfinite(a.astype(np.float64))):
            raise NqfError(f"predict_grid: {name} must be finite numbers")
        a = a.astype(np.float64)
        if np.any(a <= 0):
            raise NqfError(f"predict_grid: every {name[:-1]} must be positive, got {a[a <= 0][0]:g}")
        return a
    if not np.issubdtype(a.dtype, np.integer) or np.any(a < 0) or np.any(a >= 2**32):
        raise NqfError(f"predict_grid: {name} must be integers in [0, 2^32)")
    return a.astype(np.int64)


def _check_scope(data: AbstractDataMatrices | None, config: PredictConfig) -> None:
    """NqfError naming what the grid does not run: the optimizer, and the data route once the
    data matrices are built (``data`` None: not yet)."""
    blockers = []
    if not optimizer_record(config.optimizer).deterministic_flow:
        runs = " and ".join(o.name for o in OPTIMIZER_RECORDS.values() if o.deterministic_flow)
        blockers.append(f"the optimizer is {config.optimizer} (the grid runs {runs})")
    if data is not None and not isinstance(data, MomentDataMatrices):
        blockers.append("the data matrices are not moments (the grid runs the moments route)")
    if blockers:
        raise NqfError(f"predict_grid does not apply: {'; '.join(blockers)}; call nqf.predict per point")


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 8 * 2**30


def _check_grid_size(arch: Architecture, X, data, config: PredictConfig, points: int) -> None:
    """Before anything is built: one prediction's memory (``nqf.theory.predict.sizes``: the data,
    the moments and a d x width W0 per seed), and the time of stepping every point through every
    step, which above ``MAX_GRID_SECONDS`` is refused in favour of ``nqf.predict``."""
    check_predict_memory(arch, sample_count(X, data), config.width, config.loss, config.route, False)
    _, flops = flow_cost(arch, 0, config.loss, "moments")
    seconds = config.steps * (points * flops / FLOPS_PER_SECOND + GRID_SECONDS_PER_STEP)
    check_time(
        f"predict_grid: {points} point(s) x {config.steps} steps, each stepped (~{flops:.2g} flops a step)",
        seconds,
        MAX_GRID_SECONDS,
        "nqf.predict per point jumps the linear stretches (stepping='adaptive'), or use fewer steps",
    )


def predict_grid(
    arch: Architecture | str,
    X: Float[ArrayLike, " N *input"] | None,
    Y: Float[ArrayLike, "N K"] | Real[ArrayLike, " N"] | None,
    config: PredictConfig,
    lrs: Sequence[float] | Float[ArrayLike, " L"] | None = None,
    sigma0s: Sequence[float] | Float[ArrayLike, " S"] | None = None,
    seeds: Sequence[int] | ArrayLike | None = None,
    data: MomentDataMatrices | None = None,
) -> PredictionGrid:
    """``predict`` at every point of lrs x sigma0s x seeds, as one compiled program (module docstring).

    An axis left out is the config's own value (``[config.lr]``, ``[config.sigma0]``,
    ``[config.seed]``); the config gives everything else (width, steps, optimizer, beta,
    route). ``data`` may pass the moments of (X, Y) already built. ``arch`` may be a built-in
    architecture's name, as in ``predict``.

    Raises NqfError, before any heavy work, for a bad axis, a case the grid does not run
    (module docstring), an lr at or above the stability bound (naming the largest stable
    one), an init that underflows, a result or a width that would not fit in memory, a grid
    estimated to step for longer than ``MAX_GRID_SECONDS`` (one hour), and for an M-flow
    that diverges (naming the points).
    """
    if isinstance(arch, str):  # a built-in's name, as in predict: inputs and outputs from the data
        from nqf.architectures import architecture_for_data

        arch = architecture_for_data(arch, X, Y, config.loss)
    ensure_default_cache()
    lr_axis = _axis("lrs", [config.lr] if lrs is None else lrs, float)
    sigma0_axis = _axis("sigma0s", [config.sigma0] if sigma0s is None else sigma0s, float)
    seed_axis = _axis("seeds", [config.seed] if seeds is None else seeds, int)
    _check_scope(None, config)
    if config.departure:
        raise NqfError("predict_grid does not compute the departure; call nqf.predict with departure=True per point")
    record = record_steps(config.steps)
    L, S, R, T = lr_axis.size, sigma0_axis.size, seed_axis.size, record.size
    result_bytes = 2 * L * S * R * T * 8
    if result_bytes > MEMORY_SHARE * _physical_memory():
        raise NqfError(
            f"predict_grid: {L} x {S} x {R} points x {T} recorded steps need {result_bytes / 2**30:.3g} GiB for the "
            f"two loss curves, above {MEMORY_SHARE:.0%} of this machine's memory: fewer points or a shorter horizon"
        )
    _check_grid_size(arch, X, data, config, L * S * R)

    config = replace(config, lr=float(lr_axis[0]), sigma0=float(sigma0_axis[0]), seed=int(seed_axis[0]))
    expansion = stage.gate(arch, config)
    dtype = jnp.result_type(float)
    data, choice = stage.data_route(arch, X, Y, config, data, None, dtype)
    _check_scope(data, config)
    host = data.on_host()
    notes: list[str] = []
    stage.inapplicable_note(arch, expansion, notes)
    modes = stage.modes_of(host, arch, expansion)
    g = modes.num_growing
    # the network's particle flow compiles in the background from here, as in predict
    # (network_budget holds for the grid's L S R flows together: a large grid is refused in one note)
    network = stage.network_plan(arch, X, Y, config, expansion, record, g, L * S * R) if config.network else None

    # the draws: one per seed (sigma0 = 1 gives Z itself), scaled as initial_weights scales
    normals = {
        int(s): np.asarray(initial_weights(arch, replace(config, sigma0=1.0, seed=int(s)), None, dtype)[0])
        for s in seed_axis
    }
    m = modes.basis.shape[1]
    factors, inits, log_m0, init_defects = [], [], np.empty((S, R, m)), np.empty((S, R))
    for j, s0 in enumerate(sigma0_axis):
        for k, seed in enumerate(seed_axis):
            normal = normals[int(seed)]
            W0 = np.asarray(s0, dtype=normal.dtype) * normal
            log_m0[j, k] = log_occupations(modes.basis, W0)
            check_init_scale(log_m0[j, k, :g], dtype, replace(config, sigma0=float(s0), seed=int(seed)), False)
            factors.append(square_factor(W0=W0))
            inits.append(W0)
            init_defects[j, k] = modes.init_defect(W0 @ W0.T)
            if j == 0 and k == 0:
                W_first = W0
    if np.isneginf(log_m0[:, :, :g]).any():  # a Gaussian draw has a component along every mode
        raise NqfError("predict_grid: W0 has no component along a growing mode; call nqf.predict for this init")

    # shared: the LV system's c, K, fixed point and thresholds (they depend on neither lr nor m(0))
    scratch: list[str] = []
    system = stage.lv_system(modes, host, W_first, log_m0[0, 0], config, scratch)
    # the notes of every point; the init defect's is each point's own (PredictionGrid.prediction)
    notes += [note for note in scratch if note != stage.init_defect_note(system.init_defect)]
    stable = stage.stability(host, modes, system.m_star, replace(config, check_lr=False))
    unstable = lr_axis[lr_axis >= stable.bound]
    if config.check_lr and unstable.size:
        more = f" ({unstable.size} of the grid's {L} learning rates are at or above it)" if unstable.size > 1 else ""
        raise NqfError(
            f"learning rate {unstable.min():g} is unstable for these data: GD on M is linearly stable only for lr < "
            f"{stable.bound:.4g}{more}"
        )
    if network is not None and not isinstance(network, str):
        # the network's particle flows start here, point by point (lr-major), beside the grid's own program
        network = tuple(stage.network_start(network, modes, W0, float(lr)) for lr in lr_axis for W0 in inits)
    lv = system.lv
    loss0 = lv.loss0

    # the program, point by point: lr-major (i, j, k) flattened
    P = L * S * R
    lr_p = np.repeat(lr_axis, S * R)
    F0 = np.stack(factors)[np.tile(np.arange(S * R), L)]  # (P, d, r)
    m0_sr = np.maximum(np.exp(log_m0), 1e-300).reshape(S * R, m)  # as ModeBasis.lotka_volterra floors it
    m0_p = m0_sr[np.tile(np.arange(S * R), L)]
    groups = mode_groups(modes.growth[:g])
    # the program times only the groups of two or more by their total (none: no extra work per step)
    several = [j for j, group in enumerate(groups) if len(group) > 1]
    timed = [groups[j] for j in several]
    flow_loss, lv_curve, flow_switch, lv_switch, share, group_switch = _run_grid(
        data, F0, m0_p, lr_p, config, modes.basis[:, :g], lv, system.thresholds, timed, record, dtype
    )
    bad = ~np.all(np.isfinite(flow_loss), axis=1)
    if bad.any():
        i = np.flatnonzero(bad)
        where = ", ".join(_point_text(p, lr_axis, sigma0_axis, seed_axis) for p in i[:3])
        raise NqfError(
            f"the M-flow diverged (non-finite loss) at {i.size} of {P} points ({where}{', ...' if i.size > 3 else ''}) "
            f"although every lr is below the linear-stability bound {stable.bound:.4g} at M = 0 and at the fixed "
            "point: lower the learning rate (an intermediate plateau may be less stable)"
        )

    u = float(np.finfo(np.dtype(dtype)).eps)
    resolution = np.sqrt(share) / u
    mflow_switch = np.where(flow_switch >= 0, flow_switch, np.nan).astype(np.float64)
    crossed = mflow_switch.copy()  # before the unresolved modes are left out: their notes quote it
    unresolved = resolution < MFLOW_RESOLUTION
    if unresolved.any():
        modes_hit = ", ".join(str(k + 1) for k in np.flatnonzero(unresolved.any(axis=0)))
        notes.append(
            f"{_GRID_NOTE}the M-flow cannot resolve mode(s) {modes_hit} at {int(unresolved.any(axis=1).sum())} of "
            f"{P} points: "
            f"before switching on, a mode's weight share falls below {MFLOW_RESOLUTION:g} rounding units, so its "
            "M-flow switch step is left out (NaN) there; the LV map and the singular limit stand"
        )
        mflow_switch[unresolved] = np.nan
    # predict's M-flow reading per group (occupation_group_steps): a mode of its own keeps its step
    mflow_group = group_first(mflow_switch, groups)
    mflow_group[:, several] = np.where(group_switch >= 0, group_switch, np.nan)

    closed = stage.closed_form(modes, m0_p, lr_p[:, None])
    continuous, singular, plateaus = _per_point_limits(modes, m0_sr, lr_axis, loss0, system, config, g)
    fits = []  # per point: (the fit or None, the note of a failed fit or none), as predict fits
    for loss in flow_loss:
        failure: list[str] = []
        fits.append((stage.power_law(record, loss, system, g, failure), tuple(failure)))
    exponents = np.array([np.nan if fit is None else fit.exponent for fit, _ in fits], dtype=np.float64)
    failed = sum(1 for _, failure in fits if failure)
    if failed:
        notes.append(f"{_GRID_NOTE}the power-law fit was not possible at {failed} of {P} points (their notes say why)")
    networks: tuple = ()  # per point, as predict's: a NetworkFlow or the note of why none
    if network is not None:
        runs = network if isinstance(network, tuple) else (network,) * P
        networks = tuple(
            stage.network_finish(run, arch, config, record, flow_loss[p], None, mflow_switch[p], system.thresholds)
            for p, run in enumerate(runs)
        )
        if isinstance(network, str) and network != "exact":  # refused for the whole grid (its points say it too)
            notes.append(f"{_GRID_NOTE}{networks[0]}")
        elif refused := sum(isinstance(found, str) for found in networks):  # by their first steps' time
            notes.append(
                f"{_GRID_NOTE}the network's own prediction was not computed at {refused} of {P} points "
                "(their notes say why)"
            )
    net_steps, net_plateaus = np.full((P, g), np.nan), np.full((P, g), np.nan)
    net_loss = np.full((P, record.size), np.nan)
    for p, flow in enumerate(networks):
        if not isinstance(flow, str):
            net_steps[p], net_plateaus[p], net_loss[p] = flow.switch_steps, flow.plateau_losses, flow.loss
    context = GridContext(
        modes=modes,
        system=system,
        expansion=expansion,
        arch_options=tuple(arch.options),
        route_reason=choice.reason,
        init_defects=init_defects,
        crossed=crossed.reshape(L, S, R, g),
        power_laws=tuple(fits),
        dtype=np.dtype(dtype).name,
        networks=networks,
    )

    def grid(a):
        return a.reshape((L, S, R) + a.shape[1:])

    return PredictionGrid(
        lrs=lr_axis,
        sigma0s=sigma0_axis,
        seeds=seed_axis,
        steps=record,
        mflow_loss=grid(flow_loss),
        lv_loss=grid(lv_curve),
        mflow_switch_steps=grid(mflow_switch),
        mflow_group_switch_steps=grid(mflow_group),
        lv_switch_steps=grid(np.where(lv_switch >= 0, lv_switch, np.nan).astype(np.float64)),
        lv_continuous_switch_steps=grid(continuous),
        closed_form_switch_steps=grid(closed),
        singular_switch_steps=grid(singular),
        lv_plateau_losses=grid(plateaus),
        power_law_exponent=grid(exponents),
        initial_occupations=np.exp(log_m0),
        mflow_resolution=grid(resolution),
        network_switch_steps=grid(net_steps),
        network_plateau_losses=grid(net_plateaus),
        network_loss=grid(net_loss),
        growth=np.asarray(lv.c, dtype=np.float64),
        thresholds=np.asarray(system.thresholds, dtype=np.float64),
        stable_lr=float(stable.bound),
        config=config,
        arch_name=arch.name,
        route=choice.route,
        notes=tuple(notes),
        context=context,
    )


def _point_text(p: int, lrs, sigma0s, seeds) -> str:
    S, R = sigma0s.size, seeds.size
    i, rest = divmod(int(p), S * R)
    j, k = divmod(rest, R)
    return f"lr {lrs[i]:g}, sigma0 {sigma0s[j]:g}, seed {int(seeds[k])}"


def _per_point_limits(modes, m0_sr, lr_axis, loss0: float, system, config: PredictConfig, g: int):
    """(LV flow switch steps, singular-limit switch steps, plateau losses), (P, g) each: the
    closed forms ``predict`` computes per point.

    Both the LV gradient flow (du/dt = 4 lr (c - K e^u)) and the singular limit (rates
    4 lr c_k) depend on lr only through time: in steps, a time at lr is the time at lr_ref
    times lr_ref / lr. So each init m(0) is solved once, at lr_ref = the largest lr (whose
    horizon reaches furthest in lr t; a crossing beyond it is beyond every other lr's), and
    rescaled: the singular limit to rounding, the LV flow to the solver's tolerance (about
    1e-7 relative, as ``predict``'s own solve)."""
    L, SR = lr_axis.size, m0_sr.shape[0]
    lr_ref = float(lr_axis.max())
    never = np.zeros(m0_sr.shape[1], dtype=bool)
    singular_ref, plateaus_ref = np.empty((SR, g)), np.empty((SR, g))
    for q in range(SR):
        lv = modes.lotka_volterra(m0_sr[q], lr_ref, loss0)
        _, singular_ref[q], plateaus_ref[q] = stage.vanishing_init(lv, never, g)
    # as ModeBasis.lotka_volterra floors m0
    reference = modes.lotka_volterra(m0_sr[0], lr_ref, loss0)
    flow_ref = flow_switch_times_batch(reference, np.maximum(m0_sr, 1e-300), float(config.steps), system.m_star)[:, :g]
    scale = (lr_ref / lr_axis)[:, None, None]  # (L, 1, 1)
    continuous = flow_ref[None] * scale
    continuous[continuous > config.steps] = np.nan
    singular = singular_ref[None] * scale
    plateaus = np.broadcast_to(plateaus_ref[None], (L, SR, g))
    return continuous.reshape(L * SR, g), singular.reshape(L * SR, g), plateaus.reshape(L * SR, g).copy()


def _run_grid(
    data: AbstractDataMatrices, F0, m0, lr, config: PredictConfig, basis, lv, thresholds, groups, record, dtype
):
    """The program over every point, in chunks of a power-of-two size (padded with the last
    point), each chunk's point axis sharded over the devices. Returns numpy arrays:
    M-flow loss (P, T), LV loss (P, T), switch steps (P, g) x 2, weight shares (P, g), M-flow
    switch steps of ``groups`` (P, G), each timed by its total occupation (the groups of two or more)."""
    P, T = F0.shape[0], record.size
    gaps = np.zeros(bucket_length(T, floor=64), dtype=np.int64)
    gaps[1:T] = np.diff(record)
    per_point = 2 * gaps.size * 8
    chunk = min(bucket_length(P, floor=8), max(8, 1 << max(int(CHUNK_BYTES // per_point).bit_length() - 1, 0)))
    devices = jax.devices()
    chunk += (-chunk) % len(devices)
    mesh = jax.sharding.Mesh(np.asarray(devices), ("points",))
    split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("points"))
    whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    shared = jax.device_put(
        (
            data,
            to_device(config.beta, dtype=dtype),
            to_device(basis, dtype=dtype),
            to_device(lv.c, dtype=dtype),
            to_device(lv.K, dtype=dtype),
            to_device(thresholds, dtype=dtype),
            to_device(group_members(groups, len(thresholds)), dtype=dtype),
            to_device(group_thresholds(thresholds, groups), dtype=dtype),
            to_device(gaps),
            to_device(np.int64(config.steps)),
        ),
        whole,
    )
    data_d, beta, basis_d, c, K, thr, members, group_thr, gaps_d, steps = shared
    outs = []
    for start in range(0, P, chunk):
        idx = np.minimum(np.arange(start, start + chunk), P - 1)  # the last chunk repeats the last point
        points = jax.device_put(
            (
                to_device(F0[idx], dtype=dtype),
                to_device(np.log(m0[idx]), dtype=dtype),
                to_device(m0[idx], dtype=dtype),
                to_device(lr[idx], dtype=dtype),
            ),
            split,
        )
        with np.errstate(over="ignore"):
            out = _grid_program(
                data_d,
                *points[:3],
                points[3],
                beta,
                basis_d,
                c,
                K,
                thr,
                members,
                group_thr,
                gaps_d,
                steps,
                optimizer=closed_optimizer(config.optimizer),
            )
        outs.append(tuple(np.asarray(a)[: min(chunk, P - start)] for a in out))
    loss, lv_loss, flow_switch, lv_switch, share, group_switch = (
        np.concatenate(parts) for parts in zip(*outs, strict=True)
    )
    return loss[:, :T], lv_loss[:, :T], flow_switch, lv_switch, share, group_switch
