"""What an experiment is: a frozen config, independent runs, and a summary into claims.

An experiment plugs into ``nqf reproduce`` as an :class:`Experiment` in
``nqf_paper.EXPERIMENTS``:

* ``config_type``: a frozen dataclass with classmethods ``quick()`` and ``full()``
  returning the two standard configs; fields with simple types (bool, int, float, str,
  Literal, tuples of those, ``X | None``) so TOML and ``--set E1.field=value`` can
  override them.
* ``runs(config) -> Sequence[RunSpec]``: the independent pieces of work. Each run is
  stored (and resumed) on its own, keyed by a hash of its ``config`` dict, which must
  therefore hold everything the run depends on, seed included.
* ``summarise(config, records) -> ExperimentResult``: pure and cheap; ``records`` maps
  run name to the record dict as read back from the store (arrays come back as lists).
* ``figures``: ``"module:function"`` of the report-side function
  ``plot(result: ExperimentResult, figure_dir: Path) -> Sequence[SavedFigure]``, whose
  file stems start with the experiment name (``E1_loss``). It is a string so that
  numerical modules never import the plotting ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nqf.core.errors import NqfError
from nqf_paper.verdict import Claim, Tolerance

Record = dict[str, Any]

# Placeholder rows have no numbers, so their tolerance is never applied (the table shows "—").
_NO_TOLERANCE = Tolerance("absolute", 0.0)


@dataclass(frozen=True)
class RunSpec:
    """One independent run: ``compute(config) -> record``.

    ``compute`` must be a module-level function (or a ``functools.partial`` of one) so
    that ``--jobs`` can send it to a worker process; ``config`` is JSON-able data
    (numbers, strings, lists, dicts) and fully determines the record.
    """

    name: str
    config: Mapping[str, Any]
    compute: Callable[[dict[str, Any]], Mapping[str, Any]]

    def __post_init__(self) -> None:
        if not isinstance(self.config, Mapping):
            raise NqfError(f"run {self.name!r}: config must be a dict, got {type(self.config).__name__}")
        if not callable(self.compute):
            raise NqfError(f"run {self.name!r}: compute must be callable")


@dataclass(frozen=True)
class ExperimentResult:
    """What ``summarise`` returns: the claims (table rows), a short text, data for the figures.

    ``text`` is a paragraph for the report (plain text; blank lines separate paragraphs).
    ``data`` is whatever the experiment's ``plot`` function needs (curves, step times).
    """

    claims: tuple[Claim, ...]
    text: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        claims = tuple(self.claims)
        for claim in claims:
            if not isinstance(claim, Claim):
                raise NqfError(f"ExperimentResult.claims must hold Claim objects, got {type(claim).__name__}")
        object.__setattr__(self, "claims", claims)


@dataclass(frozen=True)
class Experiment:
    """An experiment of the suite; see the module docstring for the contract of each field."""

    name: str
    title: str
    config_type: type
    runs: Callable[[Any], Sequence[RunSpec]]
    summarise: Callable[[Any, dict[str, Record]], ExperimentResult]
    figures: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise NqfError(f"experiment name {self.name!r} must be letters, digits, '-' or '_'")
        kind = self.config_type
        if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
            raise NqfError(f"experiment {self.name}: config_type must be a dataclass type")
        if not kind.__dataclass_params__.frozen:  # type: ignore[attr-defined]  # set by @dataclass, not in the stub
            raise NqfError(f"experiment {self.name}: config_type {kind.__name__} must be a frozen dataclass")
        for mode in ("quick", "full"):
            if not callable(getattr(kind, mode, None)):
                raise NqfError(f"experiment {self.name}: config_type {kind.__name__} needs a classmethod {mode}()")
        if self.figures is not None and ":" not in self.figures:
            raise NqfError(f"experiment {self.name}: figures must be 'module:function', got {self.figures!r}")

    def config(self, mode: str) -> Any:
        """The standard config of ``mode`` ("quick" or "full")."""
        if mode not in ("quick", "full"):
            raise NqfError(f"mode must be 'quick' or 'full', got {mode!r}")
        config = getattr(self.config_type, mode)()
        if not isinstance(config, self.config_type):
            raise NqfError(f"{self.config_type.__name__}.{mode}() must return a {self.config_type.__name__}")
        return config

    def run_specs(self, config: Any) -> tuple[RunSpec, ...]:
        """``runs(config)`` checked: RunSpec objects with distinct names."""
        specs = tuple(self.runs(config))
        seen: set[str] = set()
        for spec in specs:
            if not isinstance(spec, RunSpec):
                raise NqfError(f"experiment {self.name}: runs() must return RunSpec objects, got {type(spec).__name__}")
            if spec.name in seen:
                raise NqfError(f"experiment {self.name}: two runs are named {spec.name!r}")
            seen.add(spec.name)
        return specs


@dataclass(frozen=True)
class RunStatus:
    """How one run of an experiment stands after ``reproduce`` / ``rebuild_report``.

    ``state``: "computed" (now), "stored" (read from the store), "missing" (not in the
    store: interrupted or never run) or "failed" (``error`` holds the exception line).
    """

    name: str
    key: str
    state: str
    error: str = ""


@dataclass(frozen=True)
class ExperimentOutcome:
    """An experiment as the report shows it: its config, runs, and result (None if incomplete)."""

    name: str
    title: str
    description: str
    config: Mapping[str, Any]
    runs: tuple[RunStatus, ...]
    result: ExperimentResult | None
    error: str = ""

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(run.name for run in self.runs if run.state in ("missing", "failed"))

    def rows(self) -> tuple[tuple[Claim, bool], ...]:
        """Table rows as (claim, is_placeholder); an incomplete experiment gets one placeholder row.

        The placeholder has no numbers, so :func:`nqf_paper.verdict.judge` calls it
        "not applicable" with the reason below.
        """
        if self.result is not None and not self.error:
            return tuple((claim, False) for claim in self.result.claims)
        if self.error:
            reason = self.error
        else:
            reason = f"runs missing from the store: {', '.join(self.missing)} (interrupted, failed or not yet run)"
        placeholder = Claim(
            claim=f"every claim of {self.name}",
            measured_what="(no result)",
            predicted=None,
            measured=None,
            tolerance=_NO_TOLERANCE,
            why_missing=reason,
        )
        return ((placeholder, True),)
