"""The library's figures: the figure style and files (``style``, ``panels``), the plots of
``nqf predict``, ``nqf compare`` and ``nqf sweep``, and the tidy tables of curves.

A leaf of the library: it imports the numerical core, the core never imports it. The paper's
figures and its HTML report live with the paper (``nqf_paper``), and use this style.
"""

from __future__ import annotations

from .style import (
    OKABE_ITO as OKABE_ITO,
)
from .style import (
    PALETTE as PALETTE,
)
from .style import (
    SOURCES as SOURCES,
)
from .style import (
    SavedFigure as SavedFigure,
)
from .style import (
    axis_label as axis_label,
)
from .style import (
    curve as curve,
)
from .style import (
    new_figure as new_figure,
)
from .style import (
    save_figure as save_figure,
)
from .style import (
    setup_axes as setup_axes,
)
from .style import (
    source_label as source_label,
)
