"""The library's figures: the figure style and files (``_style``, ``_panels``), the plots of
``nqf predict``, ``nqf compare`` and ``nqf sweep``, and the tidy tables of curves.

A leaf of the library: it imports the numerical core, the core never imports it. The paper's
figures and its HTML report live with the paper (``nqf.paper``), and use this style.
"""

from __future__ import annotations

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
