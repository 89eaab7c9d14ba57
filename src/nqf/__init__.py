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
    get_architecture as get_architecture,
)

__version__ = "0.1.0"
