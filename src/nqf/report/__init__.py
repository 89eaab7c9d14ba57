"""The library's figures: the figure style and files (``style``, ``panels``), the plots of
``nqf predict``, ``nqf compare`` and ``nqf sweep``, and the tidy tables of curves.

A leaf of the library: it imports the numerical core, the core never imports it. The paper's
figures and its HTML report live with the paper (``nqf_paper``), and use this style.
"""

from __future__ import annotations

from .style import (
    OKABE_ITO,
    PALETTE,
    SOURCES,
    SavedFigure,
    axis_label,
    curve,
    new_figure,
    save_figure,
    setup_axes,
    source_label,
)

__all__ = [
    "OKABE_ITO",
    "PALETTE",
    "SOURCES",
    "SavedFigure",
    "axis_label",
    "curve",
    "new_figure",
    "save_figure",
    "setup_axes",
    "source_label",
]
