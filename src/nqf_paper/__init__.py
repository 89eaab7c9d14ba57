"""The paper's reproduction, apart from the library: its experiments E1-E7 and the driver of
``nqf reproduce`` (plan the runs, compute the missing ones into a results store, judge the
claims, build the report).

One folder per experiment (``e1_staircase/``, ..., ``e7_digits/``), each holding its config,
its runs, its summary (the claims) and its figures (``figures.py``); what they share in
``_base`` (the :class:`Experiment` contract), ``_common``, ``_config``, ``_staircase``; the
registry in ``registry``; the driver in ``plan``, ``execute``, ``finish``, ``events`` and
``reproduce``. The library (everything below ``nqf.cli``) never imports this package; the
command line loads it when ``nqf reproduce`` or ``nqf report`` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nqf.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__)  # nqf reproduce's --help starts without JAX

if TYPE_CHECKING:  # the names it re-exports, each imported on first use (nqf.core.lazy reads this block)
    from nqf_paper.registry import EXPERIMENTS as EXPERIMENTS
    from nqf_paper.registry import Claim as Claim
    from nqf_paper.registry import Experiment as Experiment
    from nqf_paper.registry import ExperimentResult as ExperimentResult
    from nqf_paper.registry import Record as Record
    from nqf_paper.registry import RunSpec as RunSpec
    from nqf_paper.registry import Tolerance as Tolerance
    from nqf_paper.registry import Verdict as Verdict
    from nqf_paper.registry import build_config as build_config
    from nqf_paper.registry import config_from_dict as config_from_dict
    from nqf_paper.registry import config_to_dict as config_to_dict
    from nqf_paper.registry import judge as judge
    from nqf_paper.registry import load_config_file as load_config_file
    from nqf_paper.registry import parse_overrides as parse_overrides
    from nqf_paper.reproduce import rebuild_report as rebuild_report
    from nqf_paper.reproduce import reproduce as reproduce
