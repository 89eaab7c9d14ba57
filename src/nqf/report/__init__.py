"""The report side of ``nqf reproduce``: figure style, figure files and the HTML report.

A leaf package: it imports the numerical core, the core never imports it. Each
experiment's figures live here as ``figures_<experiment>.py`` with a function
``plot(result: ExperimentResult, figure_dir: Path) -> list[SavedFigure]`` named by the
experiment's ``figures="nqf.report.figures_e1:plot"``.
"""

from __future__ import annotations

from ._html import REPORT_NAME as REPORT_NAME
from ._html import build_report as build_report
from ._html import render_report as render_report
from ._style import (
    OKABE_ITO as OKABE_ITO,
)
from ._style import (
    PALETTE as PALETTE,
)
from ._style import (
    SOURCES as SOURCES,
)
from ._style import (
    SavedFigure as SavedFigure,
)
from ._style import (
    axis_label as axis_label,
)
from ._style import (
    curve as curve,
)
from ._style import (
    new_figure as new_figure,
)
from ._style import (
    save_figure as save_figure,
)
from ._style import (
    setup_axes as setup_axes,
)
from ._style import (
    source_label as source_label,
)
