"""nqf: Neural Quadratic Forms.

Near small weights every layer that is a sum over interchangeable units reduces to
Tr[W W^T A(x)]; nqf computes the structure matrix A(x), predicts training from the
flow of M = W W^T and its Lotka-Volterra reduction, and compares with real training.

Importing nqf is cheap: the public names below are loaded from their modules (and JAX
with them) on first use (PEP 562, ``nqf.core.lazy``), so ``nqf --help`` starts without JAX.
Importing nqf changes no global JAX setting; the first computation switches JAX's persistent
compilation cache on (``nqf.core.cache.ensure_default_cache``; ``NQF_CACHE_DIR=""`` keeps
it off) and :func:`enable_compilation_cache` puts it elsewhere.

The top level holds what a researcher reaches for (architectures and A(x), tasks, ``train``,
``predict`` and ``compare``, the theory objects one composes, the errors); the rest lives in
the packages, by concept: ``nqf.theory.flow`` (the exact maps on M), ``nqf.theory.lotka_volterra``,
``nqf.core.measure`` (switch steps read off a curve), ``nqf.store``, ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nqf.core.lazy import lazy_exports
from nqf.core.version import __version__ as __version__

__getattr__, __dir__, __all__ = lazy_exports(__name__)

if TYPE_CHECKING:  # the public API, one name a line: imported on first use (nqf.core.lazy reads this block)
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
    from nqf.theory.departure import NetworkFlow as NetworkFlow
    from nqf.theory.departure import departure as departure
    from nqf.theory.departure import network_flow as network_flow
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
    from nqf.training.grid import TrainingGrid as TrainingGrid
    from nqf.training.grid import train_grid as train_grid
    from nqf.training.runs import TrainResult as TrainResult
    from nqf.training.runs import train as train
    from nqf.training.tasks import TASKS as TASKS
    from nqf.training.tasks import Task as Task
    from nqf.training.tasks import get_task as get_task
    from nqf.training.tasks import task_options as task_options
