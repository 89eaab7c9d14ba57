r"""Where the network leaves its quadratic model, without training (docs/theory.md section 5).

- ``estimate``: :func:`departure`, the relative gap between the network and its quadratic
  model along the predicted path, and its result :class:`Departure`;
- ``path``: the weights along the path, propagated by the optimizer's map;
- ``mean_field``: the network's own prediction, the mean-field flow of its units
  (:func:`network_flow`, :class:`NetworkFlow`; ``nqf.predict`` runs it by default).
"""

from __future__ import annotations

from nqf.theory.departure.estimate import DEFAULT_POINTS as DEFAULT_POINTS
from nqf.theory.departure.estimate import DEFAULT_SAMPLES as DEFAULT_SAMPLES
from nqf.theory.departure.estimate import Departure as Departure
from nqf.theory.departure.estimate import departure as departure
from nqf.theory.departure.estimate import network_outputs as network_outputs
from nqf.theory.departure.estimate import path_weights as path_weights
from nqf.theory.departure.estimate import propagators as propagators
from nqf.theory.departure.estimate import quadratic_outputs as quadratic_outputs
from nqf.theory.departure.mean_field import NetworkFlow as NetworkFlow
from nqf.theory.departure.mean_field import network_flow as network_flow
