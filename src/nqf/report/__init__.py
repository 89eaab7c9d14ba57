"""The report side of ``nqf reproduce``: figure style, figure files and the HTML report.

A leaf package: it imports the numerical core, the core never imports it. Each
experiment's figures live here as ``figures_<experiment>.py`` with a function
``plot(result: ExperimentResult, figure_dir: Path) -> list[SavedFigure]`` named by the
experiment's ``figures="nqf.report.figures_e1:plot"``.
"""

from __future__ import annotations

from ._html import REPORT_NAME as REPORT_NAME, build_report as build_report, render_report as render_report
from ._style import (
    OKABE_ITO as OKABE_ITO,
    PALETTE as PALETTE,
    SOURCES as SOURCES,
    SavedFigure as SavedFigure,
    axis_label as axis_label,
    curve as curve,
    new_figure as new_figure,
    save_figure as save_figure,
    setup_axes as setup_axes,
    source_label as source_label,
)
