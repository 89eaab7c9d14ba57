"""The experiments that ``nqf reproduce`` runs, and the registry that names them.

Each experiment is an :class:`Experiment` (see ``_base.py`` for the contract) added to
``EXPERIMENTS`` under its name ("E1", ...); each lives in its own folder of ``nqf_paper``
with its config, runs, summary and figures.
"""

from __future__ import annotations

from nqf_paper.verdict import Claim as Claim
from nqf_paper.verdict import Tolerance as Tolerance
from nqf_paper.verdict import Verdict as Verdict
from nqf_paper.verdict import judge as judge

from ._base import (
    Experiment as Experiment,
)
from ._base import (
    ExperimentResult as ExperimentResult,
)
from ._base import (
    Record as Record,
)
from ._base import (
    RunSpec as RunSpec,
)
from ._config import (
    build_config as build_config,
)
from ._config import (
    config_from_dict as config_from_dict,
)
from ._config import (
    config_to_dict as config_to_dict,
)
from ._config import (
    load_config_file as load_config_file,
)
from ._config import (
    parse_overrides as parse_overrides,
)
from .e1_staircase import E1 as E1
from .e2_init_sweep import E2 as E2
from .e3_singular_limit import E3 as E3
from .e4_power_law import E4 as E4
from .e5_architectures import E5 as E5
from .e6_optimizers import E6 as E6
from .e7_digits import E7 as E7

# Filled in by the experiment modules (E1 ... E7), one import and one entry each.
EXPERIMENTS: dict[str, Experiment] = {}
EXPERIMENTS["E1"] = E1
EXPERIMENTS["E2"] = E2
EXPERIMENTS["E3"] = E3
EXPERIMENTS["E4"] = E4
EXPERIMENTS["E5"] = E5
EXPERIMENTS["E6"] = E6
EXPERIMENTS["E7"] = E7
