r"""What an optimizer is to nqf: :class:`AbstractOptimizer` (training) and
:class:`AbstractClosedOptimizer` (training, and the theory of an optimizer whose quadratic model
closes on M = W W^T).

An optimizer carries its optax transformation (:meth:`AbstractOptimizer.transform`) and what
figures, tables and the command line say of it. One that closes on M carries its update as an
arithmetic map of the factor and its buffers (:meth:`AbstractClosedOptimizer.flow_step`): on the
quadratic model grad_W L = 2 G(M) W, so every update built linearly from gradients and earlier
buffers (gradient descent, heavy ball, Nesterov) keeps W = F Q for one fixed Q with Q Q^T = I
(F d x r, r <= d) and maps M = F F^T to M+ = F+ F+^T. Everything the theory needs is derived
from that one step (``nqf.theory``): the compiled and the numpy M-flows, the Gram map that the
adaptive jumps linearise, the Lotka-Volterra map on a diagonal M (each mode's amplitude and
buffers, a carry of scalars), and the mean-field flow of the network's units. The per-step
growth of a mode near M = 0 (:meth:`AbstractClosedOptimizer.log_growth`, the escape rate) and the
linear-stability bound (:meth:`AbstractClosedOptimizer.stable_rate`) are closed forms of the
same step's linearisation; ``tests/test_optimizers.py`` checks both against the spectral radius
of the step itself.

Importing this module loads neither JAX nor optax: the command line checks its arguments
against the registry (``nqf.optimizers``) before JAX starts; ``transform`` imports optax inside,
and ``flow_step`` is plain arithmetic on whatever arrays it is given (numpy or jax).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import optax

Batch = Literal["never", "required", "optional"]
BATCH_RULES: tuple[Batch, ...] = ("never", "required", "optional")
# the M-flow every comparison draws (the reference of the optimizers without one of their own)
REFERENCE_FLOW = "gd"


class AbstractOptimizer(ABC):
    """An optimizer nqf trains with, and what nqf says of it.

    Attributes (class attributes of each final optimizer):
        name: what a user passes (``TrainConfig.optimizer``, ``--optimizer``, ``--optimizers``).
        label: how figures and tables call it ("GD", "Adam").
        colour: its index into the figure colour cycle (``nqf.report.style.PALETTE``), fixed so
            that figures of different runs agree.
        default_beta: its ``beta`` when none is given (a momentum, Adam's b1, Muon's beta);
            None: it takes no ``beta``.
        takes_eps: whether it takes ``eps`` (Adam's, Muon's epsilon; optax's default 1e-8).
        batch: ``never`` (full batch only), ``required`` (always on minibatches: it needs a
            ``batch_size``) or ``optional``.
        equivariant: whether its update commutes with W -> W O (E6's closure claims).
    """

    name: str
    label: str
    colour: int
    default_beta: float | None = None
    takes_eps: bool = False
    batch: Batch = "optional"
    equivariant: bool = False

    @abstractmethod
    def transform(self, lr, beta: float | None, eps: float | None) -> optax.GradientTransformation:
        """The optax transformation with exactly this ``beta`` and ``eps`` (None: optax's default
        eps), acting on W (d x n) as one array; imports optax inside."""

    def build(self, lr, beta: float | None = None, eps: float | None = None) -> optax.GradientTransformation:
        """:meth:`transform` at learning rate ``lr`` (a float or a traced scalar); ``beta`` None
        takes :attr:`default_beta`."""
        return self.transform(lr, self.default_beta if beta is None else beta, eps)

    @property
    def closes_on_m(self) -> bool:
        """Whether the quadratic model trained by it closes on M = W W^T, so that its M-flow is the
        model's exact trajectory (``nqf.predict`` takes it)."""
        return False

    @property
    def reference_flow(self) -> str:
        """The M-flow ``nqf compare`` draws beside it: its own when it closes on M, else GD's."""
        return self.name if self.closes_on_m else REFERENCE_FLOW

    @property
    def takes_beta(self) -> bool:
        return self.default_beta is not None

    def beta_of(self, beta: float | None) -> float:
        """The beta its step runs with: ``beta``, else its default; 0 for an optimizer without one
        (whatever was given: it is unused there)."""
        if self.default_beta is None:
            return 0.0
        return float(self.default_beta if beta is None else beta)

    @property
    def minibatches(self) -> bool:
        """Always on minibatches (``sgd``): its M-flow replays the batches on the per-sample data,
        and ``nqf compare``'s ``--batch`` is its."""
        return self.batch == "required"

    @property
    def flow_takes_beta(self) -> bool:
        """Its M-flow carries ``beta`` (a momentum): ``--beta`` of predict and compare is its."""
        return self.closes_on_m and self.takes_beta

    @property
    def deterministic_flow(self) -> bool:
        """It closes on M with a full-batch M-flow: a map of M alone (the grid of ``predict_grid``
        and the network's own prediction take these)."""
        return self.closes_on_m and not self.minibatches

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # one object per optimizer class: equal and hashed by class (a static argument of compiled
    # programs; a user's own transformation is compared by identity, below)
    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


class AbstractClosedOptimizer(AbstractOptimizer):
    """An optimizer whose quadratic model closes on M: its update as a map of the factor.

    The carry is (F, B_1, ..., B_b): the factor F (d x r) with M = F F^T and the optimizer's
    :attr:`buffers` b buffers of F's shape (the momentum V), all zero at the start. One step is
    :meth:`flow_step` with ``gradient`` = 2 G(M) F, the gradient of the loss at W = F; it must be
    linear in (gradient, carry) with scalar coefficients, which is what makes it close on M.

    Attributes:
        buffers: the number of buffers beside F (0 for GD, 1 for a momentum).
        mean_flow: the name of the full-batch optimizer whose Lotka-Volterra map and escape rate
            give its numbers (itself, or GD for SGD: its LV numbers are the full-batch mean).
    """

    buffers: int = 0
    mean_flow: str

    @property
    def closes_on_m(self) -> bool:
        return True

    @abstractmethod
    def flow_step(self, gradient, carry: tuple, lr, beta) -> tuple:
        """One update of (F, B_1, ..., B_b) given ``gradient`` = 2 G(M) F; arithmetic only, so
        that numpy arrays, jax arrays and tracers all pass (``beta`` is ignored by an optimizer
        without one)."""

    @abstractmethod
    def log_growth(self, rate, beta: float):
        """ln of the per-step growth of a mode's amplitude near M = 0, where the gradient along it
        is -rate w / lr (rate = 2 lr c, c > 0 its eigenvalue of -G(0)): ln of the spectral radius
        of the step linearised there. Elementwise over an array of rates (numpy)."""

    @abstractmethod
    def stable_rate(self, beta: float) -> float:
        """The largest lr * lambda at which the step is linearly stable along a direction of
        curvature lambda (gradient lambda w): lr < stable_rate / lambda_max(H)."""

    def switch_slope(self, c, lr: float, beta: float = 0.0):
        """Switch-on step per unit ln(1/sigma0) of a mode with eigenvalue c > 0: 1 / ln growth (a
        mode's occupation grows by the square of its amplitude's growth, and starts at sigma0^2)."""
        import numpy as np

        return 1.0 / self.log_growth(2.0 * lr * np.asarray(c, dtype=np.float64), beta)


class OwnTransform(AbstractOptimizer):
    """A user's own optax transformation: it trains as given (its own learning rate, momentum and
    epsilon: ``lr``, ``beta`` and ``eps`` are not its), on the full batch or on minibatches, and it
    has no M-flow (nothing is assumed about it)."""

    def __init__(self, transformation: Any, name: str, colour: int):
        self.transformation = transformation
        self.name = self.label = name
        self.colour = colour

    def transform(self, lr, beta: float | None, eps: float | None) -> optax.GradientTransformation:
        return self.transformation

    def __repr__(self) -> str:
        return f"OwnTransform({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)
