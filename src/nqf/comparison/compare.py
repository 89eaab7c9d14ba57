r"""Train the real networks side by side with the theory (docs/theory.md section 5).

:func:`compare` runs, on one task, with the same data, seeds and initial weights
W0 = ``init_weights(arch, training_keys(seed)[0], width, sigma0)``:

- the predictions (``nqf.predict``): the M-flow of the optimizer (GD; minibatch SGD
  replaying the training batches; heavy-ball momentum), the Lotka-Volterra map and the
  singular limit. Adam and Muon have no M-flow here (Adam's update is not equivariant
  under W -> W O, so M does not close; Muon's is, but ``predict`` has no Muon map), so
  their rows show the GD prediction as a *reference*, marked as such. A user's own optax
  transformation (``CompareConfig(optimizers=(..., optax.adamw(1e-3)))``, named ``custom``)
  has no M-flow and no reference: its rows report the trained network alone, and a note says so;
- the quadratic model f = <W W^T, A(x)> trained by GD (it must reproduce the GD M-flow:
  same W0, exact map);
- the full network trained by each optimizer (``nqf.train_grid`` over the seeds);
- the closure diagnostic of each optimizer on the quadratic model (``nqf.closure_diagnostic``).

Measurements, per mode k (the eigenvectors q_k of C with c_k > 0, sorted by growth,
largest first; occupations m_k = q_k^T M q_k = ||W^T q_k||^2):

- switch-on step: the first step with m_k >= thresholds_k = m_k*/2, half the theory's
  (LV) fixed point, one threshold for every source; and, side by side, the step at half
  of each run's own final occupation (``own``), which differs when a model converges to
  a different occupation (the tanh network's m_1 ends near 10.4, the theory's at 6); NaN /
  null for a run that diverged and for a mode that never reached m_k*/2 (never switched on:
  half of a still-small final occupation would time a bogus early step).
  A mode with m_k* = 0 (suppressed by the others) has no switch-on: NaN / null;
- relative error of a switch step: (t - t_mflow) / t_mflow per seed against the M-flow of
  the same seed and optimizer (the GD M-flow for Adam and Muon: a reference, not a
  prediction), then averaged over seeds;
- plateau loss after switch k: the loss at the geometric mean sqrt(t_k t_next) of the
  source's own switch step t_k and its next switch step t_next (the earliest switch of
  any mode after t_k; the horizon when none follows), the middle of the plateau on the
  log-time axis; modes switching on within one step of each other share the plateau after
  the later one (``nqf.core.measure.plateau_bounds``). Predicted plateau losses: the singular
  limit's equilibrium loss after mode k activates, and the LV map and M-flow curves read the
  same way as the runs;
- closure defect: max_t ||M(t) - M'(t)||_F / ||M(t)||_F of the quadratic model trained
  from W0 and W0 O (O random orthogonal) with the optimizer, up to the end of the last
  switch-on: the first step at which every mode has reached ``closure_fraction`` (0.9)
  of m_k* in the optimizer's M-flow (first seed; the quadratic model's exact trajectory),
  or, for Adam and Muon, in the optimizer's network run (first seed); the horizon if
  some mode never does.

Validity: the unit must pass the expansion check (``nqf.architectures.expansion.theory_gate``, the
one gate of ``predict`` and ``nqf structure``) unless ``allow_inapplicable``; the verdict
is in ``Comparison.expansion`` and the JSON either way. A network run has diverged when
its loss becomes non-finite or exceeds ``DIVERGENCE_FACTOR`` (100) times its initial loss
(``nqf.training.runs``); its seed is listed in ``diverged``, its records from that step on are
NaN (so it has no switch-on steps there: null) and a note says so.

Seeds: runs use seeds ``seed, seed + 1, ..., seed + seeds - 1`` for W0 and minibatches;
every per-mode number is the mean over seeds (NaN when some seed never switched within
the horizon) and per-seed values and spreads are kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nqf.architectures.architecture import Architecture
from nqf.comparison import stages
from nqf.comparison.config import COMPARE_OPTIMIZERS, FLOW_OF, CompareConfig
from nqf.comparison.result import Comparison
from nqf.core.cache import ensure_default_cache
from nqf.core.errors import NqfError
from nqf.core.measure import measured_plateau_losses
from nqf.training.grid import train_grid

__all__ = ["COMPARE_OPTIMIZERS", "FLOW_OF", "CompareConfig", "Comparison", "compare", "measured_plateau_losses"]


def compare(task, arch: Architecture | str | None, config: CompareConfig, *, train=None) -> Comparison:
    """Train the network (each optimizer), the quadratic model and the theory's flows side by side.

    task: a ``nqf`` Task (``get_task``) or a task's name (``"staircase"``: ``get_task(name)``,
    its default options, as ``nqf compare --task NAME``); arch: the architecture, an
    architecture's name (``get_architecture(name)``, default options) or None (the task's
    natural one). See the module docstring for what is measured and how. Raises NqfError for
    bad input (an unknown name, width != experts for a mixture of experts, a learning rate
    above the GD stability bound, data for which no mode grows, ...).

    The pipeline (``nqf.comparison.stages``): prepare (input, gate, data) -> theory (the
    predictions) -> the reference modes and predicted numbers -> train and measure the
    quadratic model and the networks -> closure; then the Comparison of their outputs.

    ``train`` (default :func:`nqf.train_grid`) runs each training grid, with train_grid's
    signature and result. ``nqf sweep`` passes one that answers the points of a batch from
    one batched call over all their init scales and seeds.
    """
    task, arch = _by_name(task, arch)
    ensure_default_cache()
    train = train_grid if train is None else train
    prep = stages.prepare(task, arch, config)
    predictions = stages.theory(prep, config)
    modes = stages.reference_modes(predictions)
    predicted = stages.predicted(predictions, config)
    reference_only, reference_notes = stages.reference_notes(config)
    quadratic = stages.train_quadratic(prep, config, modes, train)
    networks, divergence_notes = stages.train_networks(prep, config, modes, train)
    closure, closure_until = stages.closure(prep, config, predictions, networks, modes)
    # the other optimizers' network notes (a step or plateau withheld, or not computed): their
    # mean-field columns are theirs, and a null there says why only here
    network_notes = [
        f"{flow}: {note}"
        for flow, per_seed in predictions.items()
        if flow != "gd"
        for note in dict.fromkeys(note for p in per_seed for note in p.notes if note.startswith("network ("))
    ]
    notes = [*predictions["gd"][0].notes, *network_notes, *reference_notes, *divergence_notes]
    return Comparison(
        task_name=getattr(task, "name", type(task).__name__),
        task_options=task.options() if hasattr(task, "options") else {},
        arch=prep.arch,
        config=config,
        seeds=np.asarray(config.seed_list),
        growth=modes.group_growth,
        thresholds=modes.group_thresholds,
        groups=modes.groups,
        predictions=predictions,
        predicted=predicted.switch,
        flow_switch=predicted.flow_switch,
        quadratic=None if quadratic is None else quadratic.sweep,
        quadratic_switch=None if quadratic is None else quadratic.switch,
        quadratic_switch_own=None if quadratic is None else quadratic.own,
        network={opt: m.sweep for opt, m in networks.items()},
        network_switch={opt: m.switch for opt, m in networks.items()},
        network_switch_own={opt: m.own for opt, m in networks.items()},
        plateau_predicted=predicted.plateau,
        plateau_quadratic=None if quadratic is None else quadratic.plateau,
        plateau_network={opt: m.plateau for opt, m in networks.items()},
        mean_field_switch=predicted.mean_field_switch,
        plateau_mean_field=predicted.mean_field_plateau,
        timing_mean_field=predicted.mean_field_timing,
        closure=closure,
        closure_until=closure_until,
        reference_only=reference_only,
        notes=tuple(notes),
        expansion=prep.expansion,
    )


def _by_name(task: Any, arch: Architecture | str | None) -> tuple[Any, Architecture | None]:
    """A task's name as ``get_task(name)`` and an architecture's as ``get_architecture(name)``;
    anything else unchanged (stage 1 refuses what is not a task). NqfError for an unknown
    name, or an ``arch`` that is neither an Architecture, a name nor None."""
    if isinstance(task, str):
        from nqf.training.tasks import get_task

        task = get_task(task)
    if isinstance(arch, str):
        from nqf.architectures import get_architecture

        arch = get_architecture(arch)
    elif arch is not None and not isinstance(arch, Architecture):
        raise NqfError(
            f"compare needs an architecture (nqf.get_architecture), its name or None, got {type(arch).__name__}"
        )
    return task, arch
