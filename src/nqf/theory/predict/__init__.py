r"""Predict training without training: :func:`predict` and its pieces (docs/theory.md sections 2-4).

- ``pipeline``: :func:`predict`, the stages chained for one configuration;
- ``result``: its configuration (:class:`PredictConfig`) and result (:class:`Prediction`);
- ``stages``: the stages (gate, data route, engine, modes, LV system, stability, M-flow);
- ``init``: the init's occupations in log space, and its checks;
- ``grid``: :func:`predict_grid`, a grid of learning rates x init scales x seeds as one
  compiled program;
- ``tables``: the rows of a prediction's tidy tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nqf.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__)  # the names of the block below, imported when first used

if TYPE_CHECKING:  # the eager form, for type checkers and editors
    from nqf.theory.predict.grid import PredictionGrid as PredictionGrid
    from nqf.theory.predict.grid import predict_grid as predict_grid
    from nqf.theory.predict.pipeline import LV_DEFECT_TOLERANCE as LV_DEFECT_TOLERANCE
    from nqf.theory.predict.pipeline import MFLOW_RESOLUTION as MFLOW_RESOLUTION
    from nqf.theory.predict.pipeline import PREDICT_OPTIMIZERS as PREDICT_OPTIMIZERS
    from nqf.theory.predict.pipeline import STEPPINGS as STEPPINGS
    from nqf.theory.predict.pipeline import PredictConfig as PredictConfig
    from nqf.theory.predict.pipeline import Prediction as Prediction
    from nqf.theory.predict.pipeline import check_init_scale as check_init_scale
    from nqf.theory.predict.pipeline import first_crossing as first_crossing
    from nqf.theory.predict.pipeline import log_occupations as log_occupations
    from nqf.theory.predict.pipeline import lv_occupations as lv_occupations
    from nqf.theory.predict.pipeline import mflow_resolution as mflow_resolution
    from nqf.theory.predict.pipeline import predict as predict
