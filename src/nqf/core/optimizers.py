r"""The optimizers nqf trains with, one record each (:class:`Optimizer`), in one JAX-free place.

A record says everything the library, the command line, the sweep, the report and E6 need to
know about an optimizer: its name, how figures and tables call it and colour it, its default
``beta``, whether it takes ``eps`` and minibatches, whether the quadratic model trained by it
closes on M (then the M-flow is its exact trajectory and ``nqf.predict`` takes it), which M-flow
``nqf compare`` draws beside it, whether its update is equivariant under W -> W O, which
Lotka-Volterra escape rate applies, and how optax builds it (:meth:`Optimizer.build`).

Importing this module loads neither JAX nor optax (the command line checks its arguments
against :data:`OPTIMIZERS` before JAX starts); only :meth:`Optimizer.build` imports optax.

Adding an optimizer: a record in :data:`OPTIMIZER_RECORDS` (and, when it closes on M, its
exact map on M in ``nqf.theory``); CONTRIBUTING.md has the recipe, and
``tests/test_registries.py`` checks every record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from nqf.core.errors import NqfError

if TYPE_CHECKING:
    import optax

Batch = Literal["never", "required", "optional"]
BATCH_RULES: tuple[Batch, ...] = ("never", "required", "optional")
# the M-flow every comparison draws (the reference of the optimizers without one of their own)
REFERENCE_FLOW = "gd"


@dataclass(frozen=True)
class Optimizer:
    """One optimizer: what nqf knows about it, and how optax builds it.

    Attributes:
        name: what a user passes (``TrainConfig.optimizer``, ``--optimizer``, ``--optimizers``).
        label: how figures and tables call it ("GD", "Adam").
        colour: its index into the figure colour cycle (``nqf.report.style.PALETTE``), fixed
            so that figures of different runs agree.
        make: ``(lr, beta, eps) -> optax.GradientTransformation``, importing optax inside
            (call it through :meth:`build`).
        default_beta: its ``beta`` when none is given (momentum, Adam's b1, Muon's beta);
            None: it takes no ``beta``.
        takes_eps: whether it takes ``eps`` (Adam's, Muon's epsilon; optax's default 1e-8).
        batch: ``never`` (full batch only), ``required`` (always on minibatches: it needs a
            ``batch_size``) or ``optional``.
        closes_on_m: whether the quadratic model trained by it closes on M = W W^T, so that its
            M-flow is the model's exact trajectory (``nqf.predict`` takes it: :data:`PREDICT_OPTIMIZERS`).
        reference_flow: the M-flow ``nqf compare`` draws beside it: its own when it closes on M,
            else the GD flow as a reference.
        equivariant: whether its update commutes with W -> W O (E6's closure claims).
        escape: which Lotka-Volterra escape rate applies to its switch-on steps (``gd``: the
            GD map's 1/ln(1 + 2 lr c); ``momentum``: the heavy-ball rate 1/ln z); None: no
            prediction.
    """

    name: str
    label: str
    colour: int
    make: Callable[[Any, float | None, float | None], optax.GradientTransformation]
    default_beta: float | None = None
    takes_eps: bool = False
    batch: Batch = "optional"
    closes_on_m: bool = False
    reference_flow: str = REFERENCE_FLOW
    equivariant: bool = False
    escape: str | None = None

    def build(self, lr, beta: float | None = None, eps: float | None = None) -> optax.GradientTransformation:
        """The optax transformation at learning rate ``lr`` (a float or a traced scalar), acting on
        W (d x n) as one array; ``beta`` None takes :attr:`default_beta`, ``eps`` None optax's default."""
        return self.make(lr, self.default_beta if beta is None else beta, eps)

    @property
    def takes_beta(self) -> bool:
        return self.default_beta is not None

    @property
    def minibatches(self) -> bool:
        """Always on minibatches (``sgd``): its M-flow replays the batches on the per-sample data,
        and ``nqf compare``'s ``--batch`` is its."""
        return self.batch == "required"

    @property
    def flow_takes_beta(self) -> bool:
        """Its M-flow carries the momentum ``beta`` (heavy ball): ``--beta`` of predict and compare is its."""
        return self.closes_on_m and self.takes_beta

    @property
    def deterministic_flow(self) -> bool:
        """It closes on M with a full-batch M-flow: a map of M alone (the grid of ``predict_grid`` and
        the network's own prediction take these)."""
        return self.closes_on_m and not self.minibatches


def _eps_option(eps: float | None) -> dict[str, float]:
    return {} if eps is None else {"eps": eps}


def _sgd(lr, beta: float | None, eps: float | None) -> optax.GradientTransformation:
    """W <- W - lr grad L (``gd`` on the full batch, ``sgd`` on minibatches)."""
    import optax

    return optax.sgd(lr)


def _heavy_ball(lr, beta: float | None, eps: float | None) -> optax.GradientTransformation:
    """Heavy ball: v <- g + beta v, W <- W - lr v."""
    import optax

    return optax.sgd(lr, momentum=beta)


def _adam(lr, beta: float | None, eps: float | None) -> optax.GradientTransformation:
    """Adam with b1 = beta (b2 = 0.999)."""
    import optax

    return optax.adam(lr, b1=beta, **_eps_option(eps))


def _muon(lr, beta: float | None, eps: float | None) -> optax.GradientTransformation:
    """Muon with W declared a matrix: the whole d x n W is orthogonalised by Newton-Schulz (never
    the Adam fallback optax uses for non-2-D leaves)."""
    import optax

    matrix = optax.contrib.MuonDimensionNumbers(reduction_axis=0, output_axis=1)
    return optax.contrib.muon(lr, beta=beta, muon_weight_dimension_numbers=matrix, **_eps_option(eps))


_RECORDS = (
    Optimizer("gd", "GD", 0, _sgd, batch="never", closes_on_m=True, reference_flow="gd", equivariant=True, escape="gd"),
    Optimizer(
        "sgd", "SGD", 1, _sgd, batch="required", closes_on_m=True, reference_flow="sgd", equivariant=True, escape="gd"
    ),
    Optimizer(
        "momentum",
        "momentum",
        2,
        _heavy_ball,
        default_beta=0.9,
        closes_on_m=True,
        reference_flow="momentum",
        equivariant=True,
        escape="momentum",
    ),
    Optimizer("adam", "Adam", 3, _adam, default_beta=0.9, takes_eps=True),
    Optimizer("muon", "Muon", 4, _muon, default_beta=0.95, takes_eps=True, equivariant=True),
)
# name -> record, in the order lists, tables and figures show them
OPTIMIZER_RECORDS: Mapping[str, Optimizer] = {record.name: record for record in _RECORDS}

# the optimizers nqf.train runs, and those whose M-flow nqf.predict computes (they close on M)
OPTIMIZERS = tuple(OPTIMIZER_RECORDS)
PREDICT_OPTIMIZERS = tuple(name for name, record in OPTIMIZER_RECORDS.items() if record.closes_on_m)
# the optimizers always on minibatches (a batch size is theirs; their M-flow reads the samples)
MINIBATCH_OPTIMIZERS = tuple(name for name, record in OPTIMIZER_RECORDS.items() if record.minibatches)
# the optimizers with a learning rate of their own beside --lr (nqf compare's --lr-OPT, a sweep's lr_OPT)
RATE_OPTIMIZERS = tuple(name for name in OPTIMIZERS if name != REFERENCE_FLOW)
# the settings of predict and compare (and a sweep's) that only some optimizers use: what each is,
# and who uses it (the minibatch of the minibatch optimizers, the heavy-ball momentum of the M-flows
# that carry one; Adam's b1 and Muon's beta keep their defaults there)
OPTIMIZER_SETTINGS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "batch": ("the minibatch size", MINIBATCH_OPTIMIZERS),
    "beta": ("the heavy-ball momentum", tuple(n for n, r in OPTIMIZER_RECORDS.items() if r.flow_takes_beta)),
}


def unused_setting(setting: str, optimizers: Sequence[str], label: str | None = None) -> str | None:
    """Why none of ``optimizers`` uses ``setting`` (a key of :data:`OPTIMIZER_SETTINGS`), as one
    line naming it as ``label`` (default the setting) and the optimizers; None when one of them
    uses it. ``unused_setting("batch", ["gd"], "--batch")`` -> ``"--batch is not used by optimizer
    gd (full batch): it is the minibatch size of sgd only"``. Predict, compare and the sweep spec
    refuse such a setting instead of ignoring it."""
    what, users = OPTIMIZER_SETTINGS[setting]
    if any(name in users for name in optimizers):
        return None
    names = ", ".join(optimizers)
    which = f"optimizer {names}" if len(optimizers) == 1 else f"optimizers {names}"
    full = " (full batch)" if setting == "batch" else ""
    return f"{label or setting} is not used by {which}{full}: it is {what} of {' and '.join(users)} only"


# what a user's own optax transform is called in tables, JSON and figures (``own_record``)
OWN_OPTIMIZER = "custom"
OWN_OPTIMIZER_TEXT = "a user's own optax GradientTransformation (an object with init and update)"


def is_transform(value: Any) -> bool:
    """Whether ``value`` is a user's own optax transformation: not a name, with callable ``init``
    and ``update`` (``optax.GradientTransformation`` and anything shaped like it)."""
    return (
        not isinstance(value, str)
        and callable(getattr(value, "init", None))
        and callable(getattr(value, "update", None))
    )


def own_record(transform: Any, name: str = OWN_OPTIMIZER) -> Optimizer:
    """The record of a user's own optax transformation: it trains as given (its own learning rate,
    momentum and epsilon: ``lr``, ``beta`` and ``eps`` are not its), on the full batch or on
    minibatches, and it has no M-flow (``closes_on_m`` False; nothing is assumed about it).
    Its colour follows the built-in optimizers'."""
    return Optimizer(name, name, len(_RECORDS), lambda lr, beta, eps: transform, batch="optional")


def optimizer_record(name: Any) -> Optimizer:
    """The record of optimizer ``name``, or :func:`own_record` of a user's own optax
    transformation; NqfError for anything else (an unknown name, a number, an object without
    ``init`` and ``update``)."""
    if is_transform(name):
        return own_record(name)
    try:
        return OPTIMIZER_RECORDS[name]
    except (KeyError, TypeError):
        shown = repr(name) if isinstance(name, str) else f"(a {type(name).__name__}, without init and update)"
        raise NqfError(
            f"unknown optimizer {shown}; choose one of {', '.join(OPTIMIZERS)}, or pass {OWN_OPTIMIZER_TEXT}"
        ) from None
