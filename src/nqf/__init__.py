"""nqf: Neural Quadratic Forms.

Near small weights every layer that is a sum over interchangeable units reduces to
Tr[W W^T A(x)]; nqf computes the structure matrix A(x), predicts training from the
flow of M = W W^T and its Lotka-Volterra reduction, and compares with real training.
"""

from ._architecture import (
    Architecture as Architecture,
    Block as Block,
    ClosedTerm as ClosedTerm,
    Router as Router,
    closed_form_structure as closed_form_structure,
    describe_blocks as describe_blocks,
    init_weights as init_weights,
    network as network,
    order_parameter as order_parameter,
    quadratic_model as quadratic_model,
    structure as structure,
    structure_matrix as structure_matrix,
)
from ._activations import ACTIVATIONS as ACTIVATIONS
from ._errors import NqfError as NqfError, TheoryDoesNotApply as TheoryDoesNotApply
from ._structure import BlockFactors as BlockFactors, BlockTerm as BlockTerm, DenseStructure as DenseStructure
from .architectures import (
    ARCHITECTURES as ARCHITECTURES,
    architecture_options as architecture_options,
    attention as attention,
    conv1d as conv1d,
    conv2d as conv2d,
    get_architecture as get_architecture,
    linear_attention as linear_attention,
    mlp as mlp,
    mlp_fixed as mlp_fixed,
    moe as moe,
)
from ._expansion import (
    ExpansionReport as ExpansionReport,
    expansion_check as expansion_check,
    require_expansion as require_expansion,
)
from ._tasks import (
    TASKS as TASKS,
    Task as Task,
    get_task as get_task,
    task_options as task_options,
)
from ._training import (
    OPTIMIZERS as OPTIMIZERS,
    SweepResult as SweepResult,
    TrainConfig as TrainConfig,
    TrainResult as TrainResult,
    checkpoint_steps as checkpoint_steps,
    make_optimizer as make_optimizer,
    train as train,
    train_sweep as train_sweep,
)
from ._measure import (
    SlopeFit as SlopeFit,
    fit_switch_slope as fit_switch_slope,
    loss_crossings as loss_crossings,
    switch_steps as switch_steps,
    switch_steps_own as switch_steps_own,
)
from ._closure import ClosureResult as ClosureResult, closure_diagnostic as closure_diagnostic
from ._sampling import minibatch_indices as minibatch_indices
from ._data import (
    DataMatrices as DataMatrices,
    PopulationDataMatrices as PopulationDataMatrices,
    data_matrices as data_matrices,
    population_data_matrices as population_data_matrices,
)
from ._flow import (
    FlowResult as FlowResult,
    LearningRateBound as LearningRateBound,
    continuous_flow as continuous_flow,
    gd_map as gd_map,
    momentum_map as momentum_map,
    sgd_map as sgd_map,
    stable_lr_bound as stable_lr_bound,
)
from ._lotka_volterra import (
    LotkaVolterra as LotkaVolterra,
    LVSolution as LVSolution,
    equilibrium as equilibrium,
    fixed_point as fixed_point,
    gd_occupations as gd_occupations,
    logistic_occupation as logistic_occupation,
    logistic_switch_time as logistic_switch_time,
    solve_lv as solve_lv,
    switch_slope_continuous as switch_slope_continuous,
    switch_slope_gd as switch_slope_gd,
    switch_slope_momentum as switch_slope_momentum,
    switch_times as switch_times,
)
from ._singular_limit import SingularLimit as SingularLimit, plateau_losses as plateau_losses, singular_limit as singular_limit
from ._scaling import (
    PowerLawFit as PowerLawFit,
    finite_init_exponent as finite_init_exponent,
    fit_power_law as fit_power_law,
    local_exponent as local_exponent,
    predicted_exponent as predicted_exponent,
)
from ._reduction import ModeBasis as ModeBasis, mode_basis as mode_basis
from ._predict import (
    PredictConfig as PredictConfig,
    Prediction as Prediction,
    momentum_occupations as momentum_occupations,
    predict as predict,
)
from ._compare import CompareConfig as CompareConfig, Comparison as Comparison, compare as compare
from ._store import ResultsStore as ResultsStore
from ._verdict import Claim as Claim, Tolerance as Tolerance, Verdict as Verdict, judge as judge
from ._reproduce import reproduce as reproduce, rebuild_report as rebuild_report

__version__ = "0.1.0"
