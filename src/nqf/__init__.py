"""nqf: Neural Quadratic Forms.

Near small weights every layer that is a sum over interchangeable units reduces to
Tr[W W^T A(x)]; nqf computes the structure matrix A(x), predicts training from the
flow of M = W W^T and its Lotka-Volterra reduction, and compares with real training.

Importing nqf is cheap: the public names below are loaded from their modules (and JAX
with them) on first use (PEP 562), so ``nqf --help`` starts without JAX. Importing nqf
changes no global JAX setting; the first computation switches JAX's persistent
compilation cache on (``nqf.core.cache.ensure_default_cache``; ``NQF_CACHE_DIR=""`` keeps
it off) and :func:`enable_compilation_cache` puts it elsewhere.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from nqf.core.version import __version__ as __version__

# public name -> the module that defines it (relative to this package)
_MODULES: dict[str, tuple[str, ...]] = {
    ".architectures.architecture": (
        "Architecture",
        "Block",
        "ClosedTerm",
        "Router",
        "closed_form_structure",
        "describe_blocks",
        "init_weights",
        "network",
        "order_parameter",
        "quadratic_model",
        "structure",
        "structure_matrix",
    ),
    ".architectures.activations": ("ACTIVATIONS",),
    ".core.errors": ("NqfError", "PrecisionWarning", "TheoryDoesNotApply"),
    ".architectures.structure": ("BlockFactors", "BlockTerm", "DenseStructure"),
    ".architectures": (
        "ARCHITECTURES",
        "architecture_options",
        "attention",
        "conv1d",
        "conv2d",
        "get_architecture",
        "linear_attention",
        "mlp",
        "mlp_fixed",
        "moe",
    ),
    ".architectures.expansion": ("ExpansionReport", "expansion_check", "require_expansion"),
    ".training.tasks": ("TASKS", "Task", "get_task", "task_options"),
    ".training.config": ("OPTIMIZERS", "TrainConfig", "checkpoint_steps", "make_optimizer"),
    ".training.runs": ("TrainResult", "train"),
    ".training.sweep": ("SweepResult", "train_sweep"),
    ".core.measure": ("SlopeFit", "fit_switch_slope", "loss_crossings", "switch_steps", "switch_steps_own"),
    ".training.closure": ("ClosureResult", "closure_diagnostic"),
    ".core.sampling": ("minibatch_indices",),
    ".theory.data_matrices.build": (
        "DataMatrices",
        "PopulationDataMatrices",
        "data_matrices",
        "population_data_matrices",
    ),
    ".theory.data_matrices.protocol": ("AbstractDataMatrices", "AbstractSampleDataMatrices"),
    ".theory.flow": (
        "FlowResult",
        "LearningRateBound",
        "continuous_flow",
        "gd_map",
        "momentum_map",
        "sgd_map",
        "stable_lr_bound",
    ),
    ".theory.lotka_volterra.system": (
        "LotkaVolterra",
        "equilibrium",
        "fixed_point",
        "gd_occupations",
        "logistic_occupation",
        "logistic_switch_time",
        "switch_slope_continuous",
        "switch_slope_gd",
        "switch_slope_momentum",
    ),
    ".theory.lotka_volterra.solve": ("LVSolution", "solve_lv", "switch_times"),
    ".theory.singular_limit": ("SingularLimit", "plateau_losses", "singular_limit"),
    ".theory.scaling": ("PowerLawFit", "finite_init_exponent", "fit_power_law", "local_exponent", "predicted_exponent"),
    ".theory.lotka_volterra.modes": ("ModeBasis", "mode_basis"),
    ".theory.predict.pipeline": ("PredictConfig", "Prediction", "momentum_occupations", "predict"),
    ".theory.predict.grid": ("PredictionGrid", "predict_grid"),
    ".comparison.compare": ("CompareConfig", "Comparison", "compare"),
    ".theory.departure.estimate": ("Departure", "corrected_switch_steps", "departure"),
    ".store.results": ("ResultsStore",),
    ".store.verdict": ("Claim", "Tolerance", "Verdict", "judge"),
    ".scans.reproduce": ("reproduce", "rebuild_report"),
    ".core.cache": ("enable_compilation_cache",),
    ".architectures.modules": ("from_equinox", "from_flax"),
}
_ORIGIN: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [name for names in _MODULES.values() for name in names]


def __getattr__(name: str) -> Any:
    """Load a public name (or a submodule such as ``nqf.architectures``) on first use."""
    module = _ORIGIN.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
    elif _is_submodule(name):
        value = importlib.import_module(f"{__name__}.{name}")  # nqf.theory.flow, nqf.experiments, ...
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def _is_submodule(name: str) -> bool:
    if name.startswith("__") or not name.isidentifier():
        return False
    try:
        return importlib.util.find_spec(f"{__name__}.{name}") is not None
    except (ImportError, ValueError):
        return False


def __dir__() -> list[str]:
    """The public API and the package's dunders (``__version__``, ...): not the names this module
    imports for itself (``importlib``, ``Any``, ``TYPE_CHECKING``, ``annotations``)."""
    return sorted(set(__all__) | {name for name in globals() if name.startswith("__") and name.endswith("__")})


if TYPE_CHECKING:  # the eager form, for type checkers and editors
    from nqf.architectures.activations import ACTIVATIONS as ACTIVATIONS
    from nqf.architectures.architecture import (
        Architecture as Architecture,
    )
    from nqf.architectures.architecture import (
        Block as Block,
    )
    from nqf.architectures.architecture import (
        ClosedTerm as ClosedTerm,
    )
    from nqf.architectures.architecture import (
        Router as Router,
    )
    from nqf.architectures.architecture import (
        closed_form_structure as closed_form_structure,
    )
    from nqf.architectures.architecture import (
        describe_blocks as describe_blocks,
    )
    from nqf.architectures.architecture import (
        init_weights as init_weights,
    )
    from nqf.architectures.architecture import (
        network as network,
    )
    from nqf.architectures.architecture import (
        order_parameter as order_parameter,
    )
    from nqf.architectures.architecture import (
        quadratic_model as quadratic_model,
    )
    from nqf.architectures.architecture import (
        structure as structure,
    )
    from nqf.architectures.architecture import (
        structure_matrix as structure_matrix,
    )
    from nqf.architectures.expansion import (
        ExpansionReport as ExpansionReport,
    )
    from nqf.architectures.expansion import (
        expansion_check as expansion_check,
    )
    from nqf.architectures.expansion import (
        require_expansion as require_expansion,
    )
    from nqf.architectures.modules import from_equinox as from_equinox
    from nqf.architectures.modules import from_flax as from_flax
    from nqf.architectures.structure import BlockFactors as BlockFactors
    from nqf.architectures.structure import BlockTerm as BlockTerm
    from nqf.architectures.structure import DenseStructure as DenseStructure
    from nqf.comparison.compare import CompareConfig as CompareConfig
    from nqf.comparison.compare import Comparison as Comparison
    from nqf.comparison.compare import compare as compare
    from nqf.core.cache import enable_compilation_cache as enable_compilation_cache
    from nqf.core.errors import NqfError as NqfError
    from nqf.core.errors import PrecisionWarning as PrecisionWarning
    from nqf.core.errors import TheoryDoesNotApply as TheoryDoesNotApply
    from nqf.core.measure import (
        SlopeFit as SlopeFit,
    )
    from nqf.core.measure import (
        fit_switch_slope as fit_switch_slope,
    )
    from nqf.core.measure import (
        loss_crossings as loss_crossings,
    )
    from nqf.core.measure import (
        switch_steps as switch_steps,
    )
    from nqf.core.measure import (
        switch_steps_own as switch_steps_own,
    )
    from nqf.core.sampling import minibatch_indices as minibatch_indices
    from nqf.scans.reproduce import rebuild_report as rebuild_report
    from nqf.scans.reproduce import reproduce as reproduce
    from nqf.store.results import ResultsStore as ResultsStore
    from nqf.store.verdict import Claim as Claim
    from nqf.store.verdict import Tolerance as Tolerance
    from nqf.store.verdict import Verdict as Verdict
    from nqf.store.verdict import judge as judge
    from nqf.theory.data_matrices.build import (
        DataMatrices as DataMatrices,
    )
    from nqf.theory.data_matrices.build import (
        PopulationDataMatrices as PopulationDataMatrices,
    )
    from nqf.theory.data_matrices.build import (
        data_matrices as data_matrices,
    )
    from nqf.theory.data_matrices.build import (
        population_data_matrices as population_data_matrices,
    )
    from nqf.theory.data_matrices.protocol import AbstractDataMatrices as AbstractDataMatrices
    from nqf.theory.data_matrices.protocol import AbstractSampleDataMatrices as AbstractSampleDataMatrices
    from nqf.theory.departure.estimate import (
        Departure as Departure,
    )
    from nqf.theory.departure.estimate import (
        corrected_switch_steps as corrected_switch_steps,
    )
    from nqf.theory.departure.estimate import (
        departure as departure,
    )
    from nqf.theory.flow import (
        FlowResult as FlowResult,
    )
    from nqf.theory.flow import (
        LearningRateBound as LearningRateBound,
    )
    from nqf.theory.flow import (
        continuous_flow as continuous_flow,
    )
    from nqf.theory.flow import (
        gd_map as gd_map,
    )
    from nqf.theory.flow import (
        momentum_map as momentum_map,
    )
    from nqf.theory.flow import (
        sgd_map as sgd_map,
    )
    from nqf.theory.flow import (
        stable_lr_bound as stable_lr_bound,
    )
    from nqf.theory.lotka_volterra.modes import ModeBasis as ModeBasis
    from nqf.theory.lotka_volterra.modes import mode_basis as mode_basis
    from nqf.theory.lotka_volterra.solve import (
        LVSolution as LVSolution,
    )
    from nqf.theory.lotka_volterra.solve import (
        solve_lv as solve_lv,
    )
    from nqf.theory.lotka_volterra.solve import (
        switch_times as switch_times,
    )
    from nqf.theory.lotka_volterra.system import (
        LotkaVolterra as LotkaVolterra,
    )
    from nqf.theory.lotka_volterra.system import (
        equilibrium as equilibrium,
    )
    from nqf.theory.lotka_volterra.system import (
        fixed_point as fixed_point,
    )
    from nqf.theory.lotka_volterra.system import (
        gd_occupations as gd_occupations,
    )
    from nqf.theory.lotka_volterra.system import (
        logistic_occupation as logistic_occupation,
    )
    from nqf.theory.lotka_volterra.system import (
        logistic_switch_time as logistic_switch_time,
    )
    from nqf.theory.lotka_volterra.system import (
        switch_slope_continuous as switch_slope_continuous,
    )
    from nqf.theory.lotka_volterra.system import (
        switch_slope_gd as switch_slope_gd,
    )
    from nqf.theory.lotka_volterra.system import (
        switch_slope_momentum as switch_slope_momentum,
    )
    from nqf.theory.predict.grid import PredictionGrid as PredictionGrid
    from nqf.theory.predict.grid import predict_grid as predict_grid
    from nqf.theory.predict.pipeline import (
        PredictConfig as PredictConfig,
    )
    from nqf.theory.predict.pipeline import (
        Prediction as Prediction,
    )
    from nqf.theory.predict.pipeline import (
        momentum_occupations as momentum_occupations,
    )
    from nqf.theory.predict.pipeline import (
        predict as predict,
    )
    from nqf.theory.scaling import (
        PowerLawFit as PowerLawFit,
    )
    from nqf.theory.scaling import (
        finite_init_exponent as finite_init_exponent,
    )
    from nqf.theory.scaling import (
        fit_power_law as fit_power_law,
    )
    from nqf.theory.scaling import (
        local_exponent as local_exponent,
    )
    from nqf.theory.scaling import (
        predicted_exponent as predicted_exponent,
    )
    from nqf.theory.singular_limit import SingularLimit as SingularLimit
    from nqf.theory.singular_limit import plateau_losses as plateau_losses
    from nqf.theory.singular_limit import singular_limit as singular_limit
    from nqf.training.closure import ClosureResult as ClosureResult
    from nqf.training.closure import closure_diagnostic as closure_diagnostic
    from nqf.training.config import (
        OPTIMIZERS as OPTIMIZERS,
    )
    from nqf.training.config import (
        TrainConfig as TrainConfig,
    )
    from nqf.training.config import (
        checkpoint_steps as checkpoint_steps,
    )
    from nqf.training.config import (
        make_optimizer as make_optimizer,
    )
    from nqf.training.runs import TrainResult as TrainResult
    from nqf.training.runs import train as train
    from nqf.training.sweep import SweepResult as SweepResult
    from nqf.training.sweep import train_sweep as train_sweep
    from nqf.training.tasks import (
        TASKS as TASKS,
    )
    from nqf.training.tasks import (
        Task as Task,
    )
    from nqf.training.tasks import (
        get_task as get_task,
    )
    from nqf.training.tasks import (
        task_options as task_options,
    )

    from .architectures import (
        ARCHITECTURES as ARCHITECTURES,
    )
    from .architectures import (
        architecture_options as architecture_options,
    )
    from .architectures import (
        attention as attention,
    )
    from .architectures import (
        conv1d as conv1d,
    )
    from .architectures import (
        conv2d as conv2d,
    )
    from .architectures import (
        get_architecture as get_architecture,
    )
    from .architectures import (
        linear_attention as linear_attention,
    )
    from .architectures import (
        mlp as mlp,
    )
    from .architectures import (
        mlp_fixed as mlp_fixed,
    )
    from .architectures import (
        moe as moe,
    )
