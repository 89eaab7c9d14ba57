"""Curves out and in for ``nqf predict`` and ``nqf compare``: ``--plot``, ``--csv DIR``, ``--overlay CURVE``.

Checked before any compute (:func:`check_outputs`): the figure's path (a .png or .pdf
file in a writable folder, ``nqf.core.output_paths.check_output_path``), the table folder (an
existing writable folder, or a new one whose parent is a writable folder; nothing is
created until the end) and the measured curve, read in full (``nqf.comparison.curves``). Written
at the end, each file atomically (a temporary file in the same folder, renamed).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Annotated

import typer

from nqf.core.errors import NqfError
from nqf.core.output_paths import check_output_path, one_line_path_errors

TABLE_FILES = ("curves.csv", "modes.csv")

# --plot and --overlay, as predict and compare both take them
PlotOption = Annotated[Path | None, typer.Option("--plot", help="Write the loss-curve figure (.png or .pdf).")]
OverlayOption = Annotated[
    Path | None,
    typer.Option("--overlay", help="A measured loss curve (CSV step,loss; NPY (T, 2); JSON) to compare and draw."),
]

# the widest a piped table is drawn (a bound, not a width: a table takes its natural width)
PIPED_MAX_WIDTH = 1000


def stdout_console():
    """The console of the text output on stdout. On a terminal, rich's own (the terminal's
    width); with ``COLUMNS`` set to a number, that width. Piped without ``COLUMNS``, one that
    wraps no line (rich would wrap, and fold long words such as paths, at 80 columns); its
    tables are printed at their natural width by :func:`print_table`."""
    from rich.console import Console

    console = Console()
    return console if _has_width(console) else Console(soft_wrap=True)


def _has_width(console) -> bool:
    """Whether ``console`` has a width to keep to: a terminal, or ``COLUMNS`` set to a number."""
    return console.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit()


def print_table(console, table) -> None:
    """Print a rich ``table`` whole: its headers and numbers are never cut.

    With a width to keep to (a terminal, or ``COLUMNS``), the table fits it: a column too
    narrow for its header or a number folds them onto more lines (the CLI's tables make
    their columns with ``overflow="fold"``). Piped, where rich would assume 80 columns, the
    console widens to the table's natural width for this table (at most ``PIPED_MAX_WIDTH``),
    so every header and number stays on one line.
    """
    if _has_width(console):
        console.print(table)
        return
    from rich.measure import Measurement

    wanted = Measurement.get(console, console.options.update_width(PIPED_MAX_WIDTH), table).maximum
    width = console.width
    if wanted <= width:
        console.print(table)
        return
    console.width = wanted
    try:
        console.print(table)
    finally:
        console.width = width


def _check_table_folder(option: str, folder: Path) -> Path:
    """NqfError unless the tables can be written in ``folder``; creates nothing.

    An existing ``folder`` must be a writable folder whose tables can be replaced; a
    new one needs a writable parent folder (it is made when the tables are written).
    """
    if folder.exists():
        if not folder.is_dir():
            raise NqfError(f"{option} {folder} exists and is not a folder")
        for name in TABLE_FILES:
            check_output_path(option, folder / name)
    else:
        parent = folder.parent if str(folder.parent) else Path(".")
        if not parent.is_dir():
            raise NqfError(f"{option} {folder}: folder {parent} does not exist")
        check_output_path(option, folder)  # the parent's permissions, read-only mounts, root
    return folder


def check_outputs(plot: Path | None, csv_dir: Path | None, overlay: Path | None):
    """The checks of ``--plot``, ``--csv`` and ``--overlay``; returns the measured curve (or None)."""
    if plot is not None:
        if plot.suffix.lower() not in (".png", ".pdf"):
            raise NqfError(f"--plot must name a .png or .pdf file, got {plot}")
        check_output_path("--plot", plot)
    if csv_dir is not None:
        one_line_path_errors("--csv", csv_dir, _check_table_folder)
        if plot is not None and _same_place(plot, csv_dir):
            raise NqfError(f"--plot and --csv name the same path {plot}; give the figure and the table folder apart")
    if overlay is None:
        return None
    from nqf.comparison.curves import read_loss_curve

    try:
        return read_loss_curve(overlay)
    except NqfError as err:
        raise NqfError(f"--overlay {err}") from None


def _same_place(a: Path, b: Path) -> bool:
    """Whether two output paths name one place (as written, or resolved through links)."""
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return os.path.abspath(a) == os.path.abspath(b)


def write_tables(csv_dir: Path, tables: dict) -> None:
    """Each table as ``csv_dir/<name>``, atomically."""
    from nqf.store.results import atomic_write_bytes

    from ..report.curve_tables import table_bytes

    for name, (columns, rows) in tables.items():
        atomic_write_bytes(csv_dir / name, table_bytes(columns, rows))


def fmt(value, digits: int = 4) -> str:
    """A number of the text tables: ``digits`` significant digits, whole floats >= 1 without a
    decimal point, None and non-finite as ``-``."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float) and abs(value) >= 1 and value == round(value):
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def _step(value) -> str:
    """A switch-on step: whole steps as integers, interpolated ones to a tenth of a step."""
    if value is None:
        return "-"
    return f"{value:.0f}" if float(value) == round(float(value)) else f"{value:.1f}"


def print_overlay(console, overlay: dict) -> None:
    """The overlay block of the JSON as a short table."""
    from rich import box
    from rich.table import Table

    console.print(
        f"measured curve {overlay['file']} ({overlay['records']} records) against the {overlay['against']}:",
        highlight=False,
    )
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("mode", "loss level", "measured", "predicted", "error"):
        table.add_column(column, justify="right", overflow="fold")
    for k, level in enumerate(overlay["levels"]):
        error = overlay["relative_error"][k]
        table.add_row(
            str(k + 1),
            fmt(level),
            _step(overlay["switch_steps"][k]),
            _step(overlay["predicted_switch_steps_by_loss"][k]),
            "-" if error is None else f"{100 * error:+.1f}%",
        )
    print_table(console, table)
    for key, curve in (("below_at_start", "measured loss"), ("predicted_below_at_start", "M-flow's loss")):
        below = [str(k + 1) for k, flag in enumerate(overlay.get(key, ())) if flag]
        if below:
            first = overlay["steps"][0] if key == "below_at_start" else 0
            console.print(
                f"  note: the {curve} is already below the level of mode(s) {', '.join(below)} at its first record "
                f"(step {first}): not a switch-on, so no step there (-)",
                highlight=False,
            )
    beyond = overlay.get("records_beyond_horizon", 0)
    if beyond:
        console.print(
            f"  note: {beyond} of the {overlay['records']} measured records lie past the prediction's horizon "
            f"(step {overlay['horizon']}): a mode the prediction does not switch on by then has no predicted "
            "step to compare with (predict with more --steps)",
            highlight=False,
        )
    console.print(
        "  switch-on here: the first step at which the loss falls to the midpoint between the predicted plateaus "
        "before and after the mode (vanishing-init limit), for both curves; error: (measured - predicted) / predicted",
        highlight=False,
    )


def finish_prediction(
    prediction, result: dict, plot: Path | None, csv_dir: Path | None, measured, init: Path | None = None
) -> None:
    """``nqf predict``'s outputs: the overlay block in ``result``, then the figure and the tables.
    ``init``: the ``--init`` file W0 came from (the overlay's header names it; else the seed)."""
    matched = None
    if measured is not None:
        from nqf.comparison.curves import compare_overlay

        cfg = prediction.config
        w0 = f"W0 from {init.name}" if init is not None else f"seed {cfg.seed}"
        matched = compare_overlay(measured, prediction, f"M-flow ({cfg.optimizer}), {w0}")
        result["overlay"] = matched.to_json()
    if plot is not None:
        from ..report.predict_plot import plot_prediction

        plot_prediction(prediction, plot, overlay=matched)
    if csv_dir is not None:
        from ..report.curve_tables import prediction_tables

        write_tables(csv_dir, prediction_tables(prediction, matched))


def finish_comparison(comparison, result: dict, csv_dir: Path | None, measured):
    """``nqf compare``'s overlay block (in ``result``) and tables; returns the OverlayComparison (or None).

    The measured curve is compared with the M-flow of the first optimizer listed (the GD
    M-flow for Adam and Muon, a reference), first seed.
    """
    matched = None
    seed = int(comparison.seeds[0])
    first = comparison.config.optimizers[0]
    from nqf.comparison.compare import FLOW_OF

    flow = FLOW_OF[first]
    if measured is not None:
        from nqf.comparison.curves import compare_overlay

        against = f"M-flow ({flow}), seed {seed}"
        if first in comparison.reference_only:
            against += f", a reference for {first} (no M-flow of its own)"
        matched = compare_overlay(measured, comparison.predictions[flow][0], against)
        result["overlay"] = matched.to_json()
    if csv_dir is not None:
        from ..report.curve_tables import comparison_tables

        write_tables(csv_dir, comparison_tables(comparison, matched, overlay_flow=flow, overlay_seed=seed))
    return matched


def print_outputs(console, result: dict, plot: Path | None, csv_dir: Path | None) -> None:
    """After the text output: the overlay table and where the figure and tables went."""
    if "overlay" in result:
        print_overlay(console, result["overlay"])
    if plot is not None:
        console.print(f"figure: {plot}", highlight=False)
    if csv_dir is not None:
        console.print(f"tables: {', '.join(os.fspath(csv_dir / name) for name in TABLE_FILES)}", highlight=False)


def print_departure(console, block: dict) -> None:
    """The ``departure`` block as text: the relative gap at a few recorded steps."""
    steps, gap = block["steps"], block["relative_gap"]
    picks = sorted({int(round(q * (len(steps) - 1))) for q in (0.1, 0.25, 0.5, 0.75, 1.0)}) if steps else []
    shown = ", ".join(f"{100 * gap[i]:.1f}% at {steps[i]}" for i in picks if gap[i] is not None)
    console.print(
        f"network vs quadratic model along the predicted path (relative output gap, {block['samples']} samples): "
        f"{shown or '-'}; not an error bar on switch-on steps",
        highlight=False,
    )
