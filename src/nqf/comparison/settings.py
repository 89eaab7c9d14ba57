"""The run settings of ``nqf compare`` and ``nqf predict``, once: :data:`CompareSettings` and
:data:`PredictSettings` (pydantic models), each field with its type, constraint, default and a
one-line description. JAX-free (pydantic and the library's JAX-free names only).

What derives from them: the keys, types, defaults and checks of a sweep spec's ``[settings]``
and setting axes (:mod:`nqf.scans.sweep.spec_values`, which turns every pydantic error into one
``spec KEY: ...`` line), and the defaults, help texts and checks of the command line options of
the same settings (``nqf.cli.settings.setting``; :func:`check_settings`, one ``--KEY: ...`` line,
before JAX is loaded), and the library's config of a run (:func:`run_config`, for the commands and
a sweep's points alike). The checks that need the data (the learning rate
against the stability bound, the theory gate, memory) stay in ``nqf.comparison.checks`` and
``nqf.scans.sweep.checks``; the library's own configs (``CompareConfig``, ``PredictConfig``)
keep their checks, as they are built without this schema too.

A constrained type carries the message of its constraint (:func:`says`): an error names the
rule the value breaks (``must be a positive integer, got 0``), not pydantic's wording.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    FailFast,
    Field,
    Strict,
    ValidationError,
    WrapValidator,
    create_model,
)
from pydantic_core import PydanticCustomError

from nqf.core.arguments import MAX_SEED, MAX_STEPS
from nqf.core.names import LOSSES, NETWORK_METHODS, ROUTES, STEPPINGS
from nqf.optimizers import (
    MINIBATCH_OPTIMIZERS,
    OPTIMIZER_RECORDS,
    OPTIMIZER_SETTINGS,
    OPTIMIZERS,
    PREDICT_OPTIMIZERS,
    RATE_OPTIMIZERS,
)

__all__ = [
    "BETA",
    "check_settings",
    "choice",
    "CompareSettings",
    "Count",
    "Flag",
    "Positive",
    "PredictSettings",
    "Probability",
    "SETTINGS_MODELS",
    "Seed",
    "Steps",
    "defaults",
    "partial_model",
    "required",
    "run_config",
    "says",
]


def says(text: str, *, nested: bool = False) -> WrapValidator:
    """A validator that words every error of the value it wraps as ``text`` (``{got}``: the value's
    repr). ``nested``: errors inside the value (a list's items, a table's keys) keep their own."""

    def wrap(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError as err:
            if nested and all(error["loc"] for error in err.errors()):
                raise
            raise PydanticCustomError("nqf", text, {"got": repr(value)}) from None

    return WrapValidator(wrap)


def _names(names: tuple[str, ...]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]


# the constrained types (strict: true is not 1, 1.0 is not 1; an integer is a number)
Count = Annotated[int, Strict(), Field(ge=1), says("must be a positive integer, got {got}")]
Steps = Annotated[
    int, Strict(), Field(ge=1, le=MAX_STEPS), says(f"must be a positive integer <= {MAX_STEPS}, got {{got}}")
]
Seed = Annotated[int, Strict(), Field(ge=0, le=MAX_SEED), says(f"must be an integer in [0, {MAX_SEED}], got {{got}}")]
Positive = Annotated[
    float, Strict(), Field(gt=0, allow_inf_nan=False), says("must be a positive finite number, got {got}")
]
Probability = Annotated[float, Strict(), Field(ge=0, lt=1), says("must lie in [0, 1), got {got}")]
# seconds of an estimate's budget; inf: no limit
Budget = Annotated[
    float, Strict(), Field(gt=0), says("must be a positive number of seconds (inf: no limit), got {got}")
]
Flag = Annotated[bool, Strict(), says("must be true or false, got {got}")]


def choice(names: tuple[str, ...]) -> Any:
    """The type of one of ``names`` (the library's own lists: a new optimizer or route is a setting at once)."""
    return Annotated[Literal[names], says(f"must be one of {', '.join(names)}, got {{got}}")]


def _split(value: Any) -> Any:
    return [part.strip() for part in value.split(",")] if isinstance(value, str) else value


def _once(names: tuple[str, ...]) -> tuple[str, ...]:
    if len(set(names)) != len(names):
        raise PydanticCustomError("nqf", "an optimizer is listed twice")
    return names


_Optimizer = Annotated[
    Literal[OPTIMIZERS],  # type: ignore[valid-type]
    says(f"unknown optimizer {{got}}; choose from {', '.join(OPTIMIZERS)}"),
]
# a list of optimizer names, or one comma-separated text; each once
Optimizers = Annotated[
    tuple[_Optimizer, ...],
    BeforeValidator(_split),
    Field(min_length=1),
    says("must be a non-empty list of optimizer names, got {got}", nested=True),
    AfterValidator(_once),
]
# the momentum of the M-flows that carry one, by default theirs (one default: checked in tests)
BETA = next(r.default_beta for r in OPTIMIZER_RECORDS.values() if r.flow_takes_beta)
_WITH_BETA = _names(OPTIMIZER_SETTINGS["beta"][1])
INAPPLICABLE = (
    "even for units the quadratic-form expansion does not apply to (relu, abs, ...); "
    "without it such units are an error."
)


def _field(kind: Any, default: Any, description: str) -> Any:
    """A field of a settings model (``...``: required)."""
    return kind, Field(default, description=description)


_COMMON = {
    "width": _field(Count, ..., "Number of units n."),
    "steps": _field(Steps, ..., "Horizon in optimizer steps."),
    "lr": _field(Positive, ..., "Learning rate."),
    "sigma0": _field(Positive, ..., "Init scale: W0 ~ N(0, sigma0^2)."),
    "seed": _field(Seed, 0, "Init and minibatch seed."),
    "data_seed": _field(Seed, 0, "Seed of the task's data."),
    "allow_inapplicable": _field(Flag, False, f"Run {INAPPLICABLE}"),
    "network": _field(
        Flag,
        True,
        "Also predict the network itself, not only its quadratic model: the mean-field flow of its units "
        "(switch-on steps and plateau losses where nonlinear units leave the quadratic model; docs/departure.md), "
        "where it applies (a full-batch optimizer with an M-flow).",
    ),
    "network_budget": _field(
        Budget,
        5.0,
        "Seconds the network's own prediction may take, by its estimate (its compiling, and particles x samples x "
        "steps x a unit's flops) and by its own steps' time as it runs; beyond, a note says so instead. inf: no "
        "limit. A sweep point's is its own.",
    ),
    "network_method": _field(
        choice(NETWORK_METHODS),
        "auto",
        "How the network's own prediction is computed: mean_field (its units' distribution), networks (16 or "
        "more networks sharing the init's M0: their median, and half their interquartile range as the "
        "finite-width spread), or auto (the mean field; the networks where a router couples the units).",
    ),
}
_BATCH = _field(Count | None, None, f"Minibatch size ({', '.join(MINIBATCH_OPTIMIZERS)}).")
_MODEL_CONFIG = ConfigDict(extra="forbid", frozen=True, defer_build=True)

# nqf compare and a compare sweep: the network trained by each optimizer beside the theory
CompareSettings: type[BaseModel] = create_model(
    "CompareSettings",
    __config__=_MODEL_CONFIG,
    __doc__="The settings of a comparison (``nqf compare``, a compare sweep).",
    **{
        **_COMMON,
        "lr": _field(Positive, ..., "Learning rate of every optimizer (see --lr-OPT)."),
        "seed": _field(Seed, 0, "First seed (init and minibatches)."),
        "allow_inapplicable": _field(Flag, False, f"Compare {INAPPLICABLE}"),
        "optimizers": _field(Optimizers, ("gd",), f"The optimizers, comma-separated: {', '.join(OPTIMIZERS)}."),
        # lr_sgd, lr_momentum, ...: one per optimizer with a rate of its own (its record)
        **{
            f"lr_{name}": _field(Positive | None, None, f"Learning rate of {name} (default --lr).")
            for name in RATE_OPTIMIZERS
        },
        "beta": _field(Probability | None, None, f"The momentum (of {_WITH_BETA}; default {BETA})."),
        "batch": _BATCH,
        "closure": _field(Flag, True, "Run the closure check per optimizer."),
    },
)

# nqf predict and a predict sweep: the M-flow of one optimizer, without training
PredictSettings: type[BaseModel] = create_model(
    "PredictSettings",
    __config__=_MODEL_CONFIG,
    __doc__="The settings of a prediction (``nqf predict``, a predict sweep).",
    **{
        **_COMMON,
        "allow_inapplicable": _field(Flag, False, f"Predict {INAPPLICABLE}"),
        "optimizer": _field(choice(PREDICT_OPTIMIZERS), "gd", f"{_names(PREDICT_OPTIMIZERS)}."),
        "beta": _field(Probability, BETA, f"The momentum (of {_WITH_BETA})."),
        "batch": _BATCH,
        "loss": _field(choice(LOSSES), "squared", f"{_names(LOSSES)}."),
        "route": _field(choice(ROUTES), "auto", f"How the M-flow reads the data: {_names(ROUTES)}."),
        "stepping": _field(choice(STEPPINGS), "adaptive", "adaptive (jump linear stretches) or every (step by step)."),
    },
)

SETTINGS_MODELS: dict[str, type[BaseModel]] = {"compare": CompareSettings, "predict": PredictSettings}


def defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Every setting of ``model`` -> its default (None for a required one), in the model's order."""
    return {name: None if field.is_required() else field.default for name, field in model.model_fields.items()}


def required(model: type[BaseModel]) -> tuple[str, ...]:
    """The settings of ``model`` without a default."""
    return tuple(name for name, field in model.model_fields.items() if field.is_required())


@functools.cache
def partial_model(model: type[BaseModel], listed: bool = False) -> type[BaseModel]:
    """``model`` with every field optional (None: not given; a required setting may come from
    elsewhere: an axis, ``--init``); ``listed``: each a list of its values, the axes over them
    (an axis's first bad value is its problem: a range may hold a million)."""
    fields = {}
    for name, field in model.model_fields.items():
        kind = field.rebuild_annotation()
        fields[name] = (Annotated[list[kind], FailFast()] if listed else kind, Field(None, alias=field.alias))  # type: ignore[valid-type]
    suffix = "Axes" if listed else "Given"
    return create_model(f"{model.__name__}{suffix}", __config__=ConfigDict(extra="forbid"), **fields)  # type: ignore[call-overload]


def check_settings(model: type[BaseModel], values: dict[str, Any]) -> None:
    """NqfError for the first of ``values`` (setting -> the value given; None: not given, left
    out) that ``model`` refuses, as one line naming its command line option: ``--width: must be
    a positive integer, got 0``. The rules are the sweep spec's (``spec settings.width: ...``)."""
    from nqf.core.errors import NqfError

    try:
        partial_model(model).model_validate({name: value for name, value in values.items() if value is not None})
    except ValidationError as err:
        error = err.errors(include_url=False)[0]
        raise NqfError(f"--{str(error['loc'][0]).replace('_', '-')}: {error['msg']}") from None


def run_config(mode: str, settings: Mapping[str, Any], **fields: Any) -> Any:
    """The library's config of one run, ``CompareConfig`` (``mode`` "compare") or ``PredictConfig``
    ("predict"), with their own checks, from its ``settings`` by the schema's names (those left
    out: their defaults; ``lr_OPT`` the compare rates); ``fields``: the config's fields set
    otherwise (``seeds``, ``departure``, a sweep point's ``learning_rates``). The names differ
    there: ``batch`` is ``batch_size``; an infinite ``network_budget`` is None (no limit; a sweep
    point stores it as None, JSON having no infinity). Imports the config's module (JAX for
    ``PredictConfig``) only when called."""
    model = SETTINGS_MODELS[mode]
    values = {**defaults(model), **settings}
    budget = values["network_budget"]
    common = {
        "width": values["width"],
        "lr": float(values["lr"]),
        "steps": values["steps"],
        "sigma0": float(values["sigma0"]),
        "batch_size": values["batch"],
        "seed": int(values["seed"]),
        "allow_inapplicable": bool(values["allow_inapplicable"]),
        "network": bool(values["network"]),
        "network_budget": None if budget is None or budget == float("inf") else float(budget),
        "network_method": values["network_method"],
    }
    if mode == "compare":
        from nqf.comparison.config import CompareConfig

        rates = tuple((name, values[f"lr_{name}"]) for name in RATE_OPTIMIZERS if values[f"lr_{name}"] is not None)
        return CompareConfig(
            **{
                **common,
                "optimizers": tuple(values["optimizers"]),
                "learning_rates": rates,
                "beta": values["beta"],  # None: each optimizer's own
                "data_seed": int(values["data_seed"]),
                "closure": bool(values["closure"]),
                **fields,
            }
        )
    from nqf.theory.predict.result import PredictConfig

    names = ("optimizer", "loss", "route", "stepping")
    return PredictConfig(
        **{**common, **{name: values[name] for name in names}, "beta": float(values["beta"]), **fields}
    )
