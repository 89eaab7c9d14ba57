r"""Loss curves in: a measured loss curve read from a file, and switch-on steps read from a loss.

A measured curve (:func:`read_loss_curve`) is a list of records (step, loss), from

- CSV (``.csv``, ``.txt``): a header naming the columns ``step`` and ``loss`` (other
  columns are ignored; a header line may start with ``#``, as ``numpy.savetxt(...,
  header="step,loss")`` writes it), or no header and exactly two columns, step then
  loss; comma-separated; blank lines and ``#`` comment lines after the header are skipped;
- NPY (``.npy``): one real array of shape (T, 2), columns step and loss;
- JSON (``.json``): ``{"step": [...], "loss": [...]}`` or a list of ``[step, loss]`` pairs.

Every record must be finite, steps >= 0 and strictly increasing, and there must be at
least two records; anything else is an :class:`~nqf.NqfError` with one line that says
what and where (line of a CSV, index of an array).

Switch-on steps of a loss curve. A measured curve has no occupations m_k, so the
occupation convention of the rest of nqf (m_k reaches m_k*/2) cannot be applied to it.
The loss convention used instead, for the measured curve and, like for like, for the
predicted M-flow loss curve it is compared with:

    mode k switches on at the first step at which the loss falls to or below
    (L_before + L_after) / 2,

the arithmetic midpoint between the predicted plateau losses before and after mode k
activates. The plateau losses are the vanishing-init limit's (``nqf.theory.singular_limit``:
docs/theory.md section 4), in its activation order: L_before of the first mode to activate is
the initial loss L(0) = L(M = 0); modes that activate at the same rescaled time share one
level (the plateau before the group to the one after it); a mode the limit never
activates has no level (NaN). With records one step apart the answer is the first
recorded step at or below the level; between records further apart it is linearly
interpolated in the loss (``nqf.core.measure.loss_crossings``). A noisy curve (SGD) is read
the same way: its first crossing counts. A level the curve is already at or below at its first
record is no switch-on (the fall came before the curve begins): NaN, as for a mode that never
switches on (``nqf.core.measure``), and said (``below_at_start``).

Relative error per mode: (t_measured - t_predicted) / t_predicted, both by the loss
convention, as ``nqf compare`` reports switch steps.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nqf.core.errors import NqfError
from nqf.core.input_files import read_npy
from nqf.core.measure import loss_crossings

if TYPE_CHECKING:
    from nqf.theory.predict.pipeline import Prediction

CURVE_SUFFIXES = (".csv", ".txt", ".npy", ".json")
CONVENTION = (
    "switch-on of mode k from a loss curve: the first step at which the loss falls to or below "
    "(L_before + L_after) / 2, the midpoint between the predicted plateau losses (vanishing-init limit) "
    "before and after mode k activates; applied alike to the measured curve and to the M-flow loss"
)


@dataclass(frozen=True)
class LossCurve:
    """A measured loss curve.

    Attributes:
        path: the file it was read from.
        steps: (R,) float64, >= 0, strictly increasing.
        loss: (R,) float64, finite.
    """

    path: str
    steps: np.ndarray
    loss: np.ndarray


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NqfError(f"{where} is not a number: {value!r}"[:200])
    try:
        return float(value)
    except OverflowError:  # an integer beyond float64: not finite, said as such by the common checks
        return math.inf


def _check_records(where: str, steps: np.ndarray, loss: np.ndarray, rows: list | None = None) -> LossCurve:
    """The common checks of every format; ``rows`` maps a record index to a file line (CSV)."""

    def at(i: int) -> str:
        return f"line {rows[i]}" if rows is not None else f"record {i}"

    if steps.size == 0:
        raise NqfError(f"{where}: no records (an empty loss curve)")
    if steps.size < 2:
        raise NqfError(f"{where}: only one record; a loss curve needs at least two")
    for name, values in (("step", steps), ("loss", loss)):
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            i = int(bad[0])
            raise NqfError(f"{where}: {at(i)}: {name} is {float(values[i])}, not finite")
    negative = np.flatnonzero(steps < 0)
    if negative.size:
        i = int(negative[0])
        raise NqfError(f"{where}: {at(i)}: step {steps[i]:g} is negative")
    stalls = np.flatnonzero(np.diff(steps) <= 0)
    if stalls.size:
        i = int(stalls[0]) + 1
        raise NqfError(
            f"{where}: {at(i)}: step {steps[i]:g} does not increase (after step {steps[i - 1]:g}); "
            "steps must be strictly increasing"
        )
    return LossCurve(where, steps, loss)


def _read_text(path: Path, where: str, expected: str) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise NqfError(f"{where}: not a text file ({expected} expected)") from None


def _read_csv(path: Path, where: str) -> LossCurve:
    text = _read_text(path, where, "CSV with columns step, loss")
    if "\x00" in text:
        raise NqfError(f"{where}: not a text file (CSV with columns step, loss expected)")
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise NqfError(f"{where}: no records (an empty file)")
    first_number, first = lines[0]
    head = first.strip().lstrip("#").strip()
    cells = [c.strip() for c in next(csv.reader(io.StringIO(head)), [])]
    # a header: no cell reads as a number (a row of numbers with one bad cell is a bad record)
    header = None if any(_is_number(c) for c in cells) else [c.lower() for c in cells]
    if header is None and first.lstrip().startswith("#"):  # a comment of numbers: not a header, not a record
        columns, body, width = (0, 1), lines[1:], 2
    elif header is None:
        if len(cells) != 2:
            raise NqfError(
                f"{where}: line {first_number} has {len(cells)} columns; without a header the file needs exactly "
                "two (step, loss), or give a header naming the columns step and loss"
            )
        columns, body, width = (0, 1), lines, 2
    else:
        missing = [name for name in ("step", "loss") if name not in header]
        if missing:
            raise NqfError(
                f"{where}: the header ({', '.join(cells)}) has no column {' or '.join(missing)}; "
                "name the columns step and loss (or leave out the header: two columns, step then loss)"
            )
        columns, body, width = (header.index("step"), header.index("loss")), lines[1:], len(header)
    steps, loss, rows = [], [], []
    for number, line in body:
        if line.lstrip().startswith("#"):
            continue
        row = [c.strip() for c in next(csv.reader(io.StringIO(line)), [])]
        if len(row) != width:
            raise NqfError(f"{where}: line {number} has {len(row)} columns, expected {width}")
        values = []
        for column in columns:
            try:
                values.append(float(row[column]))
            except ValueError:
                raise NqfError(f"{where}: line {number}: {row[column]!r} is not a number"[:200]) from None
        steps.append(values[0])
        loss.append(values[1])
        rows.append(number)
    return _check_records(where, np.asarray(steps, dtype=np.float64), np.asarray(loss, dtype=np.float64), rows)


def _read_npy(path: Path, where: str) -> LossCurve:
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic != b"\x93NUMPY":  # say what the file is instead
        what = "an .npz archive" if magic.startswith(b"PK") else "an empty file" if not magic else "not an .npy array"
        raise NqfError(f"{where}: cannot read it as .npy: it is {what}; save one array of shape (T, 2) with numpy.save")
    # its header against the file's size and the memory before anything is read; nothing unpickled
    array = read_npy(path, where)
    if array.dtype.kind not in "iuf":
        raise NqfError(f"{where}: the array has dtype {array.dtype}, not real numbers")
    if array.ndim != 2 or array.shape[1] != 2:
        raise NqfError(f"{where}: the array has shape {array.shape}; a loss curve is (T, 2): columns step, loss")
    array = array.astype(np.float64)
    return _check_records(where, array[:, 0].copy(), array[:, 1].copy())


def _reject_constant(token: str):
    raise NqfError(f"{token} is not a finite number")


def _read_json(path: Path, where: str) -> LossCurve:
    text = _read_text(path, where, "JSON")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except NqfError as err:
        raise NqfError(f"{where}: {err}, not allowed in a loss curve") from None
    except (ValueError, RecursionError) as err:
        raise NqfError(f"{where}: not valid JSON ({str(err).splitlines()[0]})") from None
    form = 'give {"step": [...], "loss": [...]} or a list of [step, loss] pairs'
    if isinstance(data, dict):
        missing = [k for k in ("step", "loss") if k not in data]
        if missing:
            keys = ", ".join(map(str, data)) or "none"
            raise NqfError(f"{where}: no key {' or '.join(missing)} (found: {keys}); {form}"[:300])
        if not isinstance(data["step"], list) or not isinstance(data["loss"], list):
            raise NqfError(f"{where}: step and loss must be lists of numbers; {form}")
        if len(data["step"]) != len(data["loss"]):
            raise NqfError(f"{where}: {len(data['step'])} steps but {len(data['loss'])} losses")
        steps = [_number(v, f"{where}: step[{i}]") for i, v in enumerate(data["step"])]
        loss = [_number(v, f"{where}: loss[{i}]") for i, v in enumerate(data["loss"])]
    elif isinstance(data, list):
        steps, loss = [], []
        for i, pair in enumerate(data):
            if not isinstance(pair, list) or len(pair) != 2:
                raise NqfError(f"{where}: entry {i} is not a [step, loss] pair; {form}")
            steps.append(_number(pair[0], f"{where}: entry {i}: step"))
            loss.append(_number(pair[1], f"{where}: entry {i}: loss"))
    else:
        raise NqfError(f"{where}: the JSON holds a {type(data).__name__}; {form}")
    return _check_records(where, np.asarray(steps, dtype=np.float64), np.asarray(loss, dtype=np.float64))


def read_loss_curve(path) -> LossCurve:
    """The measured loss curve in ``path`` (CSV, NPY or JSON by its suffix; module docstring).

    Raises NqfError (one line, prefixed with the path) for a missing or unreadable file,
    an unknown suffix, wrong columns or shape, non-numeric or non-finite values, negative
    or non-increasing steps, and fewer than two records.
    """
    where = str(path)
    path = Path(path)
    if not path.exists():
        raise NqfError(f"{where}: no such file (not found)")
    if path.is_dir():
        raise NqfError(f"{where} is a folder, not a loss curve file")
    if not path.is_file():
        raise NqfError(f"{where} is not a regular file")
    if not os.access(path, os.R_OK):
        raise NqfError(f"{where}: permission denied")
    suffix = path.suffix.lower()
    if suffix not in CURVE_SUFFIXES:
        raise NqfError(
            f"{where}: a loss curve is a .csv, .txt (CSV), .npy or .json file, got {suffix or 'no suffix'!r}"
        )
    try:
        if suffix == ".npy":
            return _read_npy(path, where)
        if suffix == ".json":
            return _read_json(path, where)
        return _read_csv(path, where)
    except OSError as err:
        raise NqfError(f"{where}: cannot read it ({err.strerror or type(err).__name__})") from None


def midpoint_levels(initial_loss: float, step_times, activation_order, plateau_losses, num_modes: int) -> np.ndarray:
    """The loss convention's level of each mode, (num_modes,) (module docstring).

    initial_loss: L(0); step_times (n,), activation_order (n,), plateau_losses (n,): the
    singular limit's events in time order (``SingularLimit``). Level of mode k: the
    midpoint between the plateau before its first activation and the one after it (after
    every activation at the same time). NaN for modes never activated.
    """
    times = np.asarray(step_times, dtype=np.float64)
    order = np.asarray(activation_order, dtype=np.int64)
    plateaus = np.asarray(plateau_losses, dtype=np.float64)
    if not (times.shape == order.shape == plateaus.shape) or times.ndim != 1:
        raise NqfError("step_times, activation_order and plateau_losses must be 1-D of one length")
    levels = np.full(int(num_modes), np.nan)
    for i, mode in enumerate(order):
        if mode >= num_modes or not np.isnan(levels[mode]):
            continue  # a decaying mode, or a re-activation after a suppression
        same = np.flatnonzero(np.isclose(times, times[i], rtol=1e-12, atol=0.0))
        first, last = int(same.min()), int(same.max())
        before = float(initial_loss) if first == 0 else float(plateaus[first - 1])
        levels[mode] = 0.5 * (before + float(plateaus[last]))
    return levels


def loss_switch_steps(steps, loss, levels) -> np.ndarray:
    """First step at which ``loss`` (R,) falls to or below each level (g,): (g,), NaN where never,
    where the level is NaN, and where the loss is at or below the level at its first record
    already (:func:`below_at_start`: the fall happened before the curve begins, so no switch-on
    is seen; NaN as for a mode that never switches on). Interpolated between records more than
    one step apart."""
    levels = np.asarray(levels, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    return np.where(below_at_start(loss, levels), np.nan, loss_crossings(steps, loss, levels))


def below_at_start(loss, levels) -> np.ndarray:
    """(g,) bools: whether ``loss`` (R,) is at or below each level (g,) at its first record already."""
    loss = np.asarray(loss, dtype=np.float64)
    levels = np.asarray(levels, dtype=np.float64)
    if loss.size == 0:
        return np.zeros(levels.shape, dtype=bool)
    return np.isfinite(levels) & np.isfinite(loss[0]) & (loss[0] <= levels)


def prediction_levels(prediction: Prediction) -> np.ndarray:
    """The loss convention's levels of ``prediction``'s growing modes, (g,)."""
    limit = prediction.singular
    return midpoint_levels(
        limit.initial_loss, limit.step_times, limit.activation_order, limit.plateau_losses, prediction.num_growing
    )


@dataclass(frozen=True)
class OverlayComparison:
    """A measured loss curve against a predicted M-flow loss curve, by the loss convention.

    Attributes:
        curve: the measured curve.
        against: which prediction (e.g. "M-flow (gd), seed 0").
        levels: (g,) the loss levels of the convention, per mode (NaN: no level).
        switch_steps: (g,) the measured curve's switch-on steps (NaN: never reached).
        predicted_switch_steps: (g,) the M-flow loss curve's, same convention.
        relative_error: (g,) (measured - predicted) / predicted.
        horizon: the prediction's last step; measured records past it have no prediction to
            meet (``records_beyond_horizon``), so a mode that switches on after it has no error.
        below_at_start, predicted_below_at_start: (g,) bools, the measured curve's and the
            M-flow's loss at or below the mode's level at their first record already: no
            switch-on is seen, the step is NaN (:func:`loss_switch_steps`).
    """

    curve: LossCurve
    against: str
    levels: np.ndarray
    switch_steps: np.ndarray
    predicted_switch_steps: np.ndarray
    relative_error: np.ndarray
    horizon: float
    below_at_start: np.ndarray
    predicted_below_at_start: np.ndarray

    @property
    def records_beyond_horizon(self) -> int:
        """How many measured records lie past the prediction's horizon (compared with nothing)."""
        return int(np.count_nonzero(np.asarray(self.curve.steps) > self.horizon))

    def to_json(self) -> dict:
        """JSON form (non-finite numbers as null; per-mode lists in the modes' order)."""
        return {
            "file": self.curve.path,
            "records": int(self.curve.steps.size),
            "horizon": _numbers([self.horizon], integral=True)[0],
            "records_beyond_horizon": self.records_beyond_horizon,
            "steps": _numbers(self.curve.steps, integral=True),
            "loss": _numbers(self.curve.loss),
            "against": self.against,
            "convention": CONVENTION,
            "levels": _numbers(self.levels),
            "switch_steps": _numbers(self.switch_steps, integral=True),
            "predicted_switch_steps_by_loss": _numbers(self.predicted_switch_steps, integral=True),
            "relative_error": _numbers(self.relative_error),
            "below_at_start": [bool(v) for v in self.below_at_start],
            "predicted_below_at_start": [bool(v) for v in self.predicted_below_at_start],
        }


def compare_overlay(curve: LossCurve, prediction: Prediction, against: str = "M-flow") -> OverlayComparison:
    """Switch-on steps of ``curve`` and of ``prediction``'s M-flow loss curve by the loss convention."""
    levels = prediction_levels(prediction)
    flow_loss = np.asarray(prediction.flow.loss)
    measured = loss_switch_steps(curve.steps, curve.loss, levels)
    predicted = loss_switch_steps(np.asarray(prediction.flow.steps), flow_loss, levels)
    with np.errstate(divide="ignore", invalid="ignore"):
        error = (measured - predicted) / predicted
    horizon = float(np.asarray(prediction.flow.steps)[-1]) if np.asarray(prediction.flow.steps).size else 0.0
    return OverlayComparison(
        curve,
        against,
        levels,
        measured,
        predicted,
        np.where(np.isfinite(error), error, np.nan),
        horizon,
        below_at_start(curve.loss, levels),
        below_at_start(flow_loss, levels),
    )


def _numbers(values, integral: bool = False) -> list:
    """JSON numbers, non-finite as None; with ``integral`` (steps), whole numbers as int."""
    out: list[float | int | None] = []
    for entry in np.asarray(values, dtype=np.float64).ravel():
        v = float(entry)
        if not math.isfinite(v):
            out.append(None)
        elif integral and v == round(v) and abs(v) < 2**53:
            out.append(int(v))
        else:
            out.append(v)
    return out
