"""nqf: Neural Quadratic Forms.

Near small weights every layer that is a sum over interchangeable units reduces to
Tr[W W^T A(x)]; nqf computes the structure matrix A(x), predicts training from the
flow of M = W W^T and its Lotka-Volterra reduction, and compares with real training.

Importing nqf is cheap: the public names below are loaded from their modules (and JAX
with them) on first use (PEP 562), so ``nqf --help`` starts without JAX. Importing nqf
changes no global JAX setting; the first computation switches JAX's persistent
compilation cache on (``nqf.core.cache.ensure_default_cache``; ``NQF_CACHE_DIR=""`` keeps
it off) and :func:`enable_compilation_cache` puts it elsewhere.

The top level holds what a researcher reaches for (architectures and A(x), tasks, ``train``,
``predict`` and ``compare``, the theory objects one composes, the errors); the rest lives in
the packages, by concept: ``nqf.theory.flow`` (the exact maps on M), ``nqf.theory.lotka_volterra``,
``nqf.core.measure`` (switch steps read off a curve), ``nqf.store``, ... Names that were at the
top level before (:data:`MOVED`) still work there, with a ``DeprecationWarning`` naming their home.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from nqf.core.lazy import lazy_submodules
from nqf.core.version import __version__ as __version__

# public name -> the module that defines it (relative to this package)
_MODULES: dict[str, tuple[str, ...]] = {
    ".architectures.architecture": (
        "Architecture",
        "closed_form_structure",
        "init_weights",
        "network",
        "order_parameter",
        "quadratic_model",
        "structure",
        "structure_matrix",
    ),
    ".architectures": (
        "ARCHITECTURES",
        "architecture_options",
        "get_architecture",
    ),
    ".architectures.expansion": (
        "ExpansionReport",
        "expansion_check",
    ),
    ".architectures.modules": (
        "from_equinox",
        "from_flax",
    ),
    ".training.tasks": (
        "TASKS",
        "Task",
        "get_task",
        "task_options",
    ),
    ".training.config": (
        "OPTIMIZERS",
        "TrainConfig",
    ),
    ".training.runs": (
        "TrainResult",
        "train",
    ),
    ".training.sweep": (
        "SweepResult",
        "train_sweep",
    ),
    ".training.closure": (
        "ClosureResult",
        "closure_diagnostic",
    ),
    ".theory.data_matrices": (
        "AbstractDataMatrices",
        "DataMatrices",
        "data_matrices",
        "population_data_matrices",
    ),
    ".theory.lotka_volterra": (
        "LotkaVolterra",
        "ModeBasis",
        "mode_basis",
        "solve_lv",
    ),
    ".theory.singular_limit": (
        "SingularLimit",
        "singular_limit",
    ),
    ".theory.scaling": (
        "PowerLawFit",
        "fit_power_law",
    ),
    ".theory.predict": (
        "PredictConfig",
        "Prediction",
        "PredictionGrid",
        "predict",
        "predict_grid",
    ),
    ".theory.departure": (
        "Departure",
        "corrected_switch_steps",
        "departure",
    ),
    ".comparison.compare": (
        "CompareConfig",
        "Comparison",
        "compare",
    ),
    ".core.errors": (
        "NqfError",
        "PrecisionWarning",
        "TheoryDoesNotApply",
    ),
    ".core.cache": ("enable_compilation_cache",),
}
# names nqf exported at the top level before its API was cut to the above -> where they live now
MOVED: dict[str, str] = {
    "Block": "nqf.architectures.architecture",
    "ClosedTerm": "nqf.architectures.architecture",
    "Router": "nqf.architectures.architecture",
    "describe_blocks": "nqf.architectures.architecture",
    "BlockFactors": "nqf.architectures.structure",
    "BlockTerm": "nqf.architectures.structure",
    "DenseStructure": "nqf.architectures.structure",
    "ACTIVATIONS": "nqf.architectures.activations",
    "attention": "nqf.architectures",
    "conv1d": "nqf.architectures",
    "conv2d": "nqf.architectures",
    "linear_attention": "nqf.architectures",
    "mlp": "nqf.architectures",
    "mlp_fixed": "nqf.architectures",
    "moe": "nqf.architectures",
    "require_expansion": "nqf.architectures.expansion",
    "checkpoint_steps": "nqf.training.config",
    "make_optimizer": "nqf.training.config",
    "SlopeFit": "nqf.core.measure",
    "fit_switch_slope": "nqf.core.measure",
    "loss_crossings": "nqf.core.measure",
    "switch_steps": "nqf.core.measure",
    "switch_steps_own": "nqf.core.measure",
    "minibatch_indices": "nqf.core.sampling",
    "PopulationDataMatrices": "nqf.theory.data_matrices",
    "AbstractSampleDataMatrices": "nqf.theory.data_matrices",
    "FlowResult": "nqf.theory.flow",
    "LearningRateBound": "nqf.theory.flow",
    "continuous_flow": "nqf.theory.flow",
    "gd_map": "nqf.theory.flow",
    "momentum_map": "nqf.theory.flow",
    "sgd_map": "nqf.theory.flow",
    "stable_lr_bound": "nqf.theory.flow",
    "equilibrium": "nqf.theory.lotka_volterra",
    "fixed_point": "nqf.theory.lotka_volterra",
    "gd_occupations": "nqf.theory.lotka_volterra",
    "logistic_occupation": "nqf.theory.lotka_volterra",
    "logistic_switch_time": "nqf.theory.lotka_volterra",
    "switch_slope_continuous": "nqf.theory.lotka_volterra",
    "switch_slope_gd": "nqf.theory.lotka_volterra",
    "switch_slope_momentum": "nqf.theory.lotka_volterra",
    "LVSolution": "nqf.theory.lotka_volterra",
    "switch_times": "nqf.theory.lotka_volterra",
    "plateau_losses": "nqf.theory.singular_limit",
    "finite_init_exponent": "nqf.theory.scaling",
    "local_exponent": "nqf.theory.scaling",
    "predicted_exponent": "nqf.theory.scaling",
    "momentum_occupations": "nqf.theory.predict",
    "ResultsStore": "nqf.store.results",
    "reproduce": "nqf.paper.reproduce",
    "rebuild_report": "nqf.paper.reproduce",
    "Claim": "nqf.store.verdict",
    "Tolerance": "nqf.store.verdict",
    "Verdict": "nqf.store.verdict",
    "judge": "nqf.store.verdict",
}
_ORIGIN: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [name for names in _MODULES.values() for name in names]


def __getattr__(name: str) -> Any:
    """Load a public name (or a submodule such as ``nqf.architectures``) on first use."""
    module = _ORIGIN.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
    elif name in MOVED:  # not cached: each new use warns
        warnings.warn(
            f"nqf.{name} moved to {MOVED[name]}.{name}; the top-level name goes in the next nqf release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(MOVED[name]), name)
    else:
        value = _submodule(name)  # nqf.theory, nqf.paper, ...; AttributeError for anything else
    globals()[name] = value  # later lookups skip __getattr__
    return value


_submodule = lazy_submodules(__name__)


def __dir__() -> list[str]:
    """The public API and the package's dunders (``__version__``, ...): not the names this module
    imports for itself (``importlib``, ``Any``, ``TYPE_CHECKING``, ``annotations``)."""
    return sorted(set(__all__) | {name for name in globals() if name.startswith("__") and name.endswith("__")})


if TYPE_CHECKING:  # the eager form, for type checkers and editors (tests/test_docs.py: the same names as _MODULES)
    from nqf.architectures import ARCHITECTURES as ARCHITECTURES
    from nqf.architectures import architecture_options as architecture_options
    from nqf.architectures import get_architecture as get_architecture
    from nqf.architectures.architecture import Architecture as Architecture
    from nqf.architectures.architecture import closed_form_structure as closed_form_structure
    from nqf.architectures.architecture import init_weights as init_weights
    from nqf.architectures.architecture import network as network
    from nqf.architectures.architecture import order_parameter as order_parameter
    from nqf.architectures.architecture import quadratic_model as quadratic_model
    from nqf.architectures.architecture import structure as structure
    from nqf.architectures.architecture import structure_matrix as structure_matrix
    from nqf.architectures.expansion import ExpansionReport as ExpansionReport
    from nqf.architectures.expansion import expansion_check as expansion_check
    from nqf.architectures.modules import from_equinox as from_equinox
    from nqf.architectures.modules import from_flax as from_flax
    from nqf.comparison.compare import CompareConfig as CompareConfig
    from nqf.comparison.compare import Comparison as Comparison
    from nqf.comparison.compare import compare as compare
    from nqf.core.cache import enable_compilation_cache as enable_compilation_cache
    from nqf.core.errors import NqfError as NqfError
    from nqf.core.errors import PrecisionWarning as PrecisionWarning
    from nqf.core.errors import TheoryDoesNotApply as TheoryDoesNotApply
    from nqf.theory.data_matrices import AbstractDataMatrices as AbstractDataMatrices
    from nqf.theory.data_matrices import DataMatrices as DataMatrices
    from nqf.theory.data_matrices import data_matrices as data_matrices
    from nqf.theory.data_matrices import population_data_matrices as population_data_matrices
    from nqf.theory.departure import Departure as Departure
    from nqf.theory.departure import corrected_switch_steps as corrected_switch_steps
    from nqf.theory.departure import departure as departure
    from nqf.theory.lotka_volterra import LotkaVolterra as LotkaVolterra
    from nqf.theory.lotka_volterra import ModeBasis as ModeBasis
    from nqf.theory.lotka_volterra import mode_basis as mode_basis
    from nqf.theory.lotka_volterra import solve_lv as solve_lv
    from nqf.theory.predict import PredictConfig as PredictConfig
    from nqf.theory.predict import Prediction as Prediction
    from nqf.theory.predict import PredictionGrid as PredictionGrid
    from nqf.theory.predict import predict as predict
    from nqf.theory.predict import predict_grid as predict_grid
    from nqf.theory.scaling import PowerLawFit as PowerLawFit
    from nqf.theory.scaling import fit_power_law as fit_power_law
    from nqf.theory.singular_limit import SingularLimit as SingularLimit
    from nqf.theory.singular_limit import singular_limit as singular_limit
    from nqf.training.closure import ClosureResult as ClosureResult
    from nqf.training.closure import closure_diagnostic as closure_diagnostic
    from nqf.training.config import OPTIMIZERS as OPTIMIZERS
    from nqf.training.config import TrainConfig as TrainConfig
    from nqf.training.runs import TrainResult as TrainResult
    from nqf.training.runs import train as train
    from nqf.training.sweep import SweepResult as SweepResult
    from nqf.training.sweep import train_sweep as train_sweep
    from nqf.training.tasks import TASKS as TASKS
    from nqf.training.tasks import Task as Task
    from nqf.training.tasks import get_task as get_task
    from nqf.training.tasks import task_options as task_options
