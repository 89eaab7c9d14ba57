"""E3 (singular limit) and E4 (power laws) end to end on tiny configs: runs, store round trip, claims, figures.

Records go through the store's JSON conversion, as ``nqf reproduce`` reads them back.
"""

import dataclasses
import json
import math

import numpy as np
import pytest

from nqf.core.errors import NqfError
from nqf.store.results import to_jsonable
from nqf_paper import EXPERIMENTS
from nqf_paper.e3_singular_limit import E3, limit_paths, step_function
from nqf_paper.e4_power_law import E4
from nqf_paper.verdict import CONFIRMED, NOT_APPLICABLE, NOT_CONFIRMED

pytestmark = pytest.mark.slow  # runs the experiments

STATUSES = {CONFIRMED, NOT_CONFIRMED, NOT_APPLICABLE}


def _records(experiment, config):
    out = {}
    for spec in experiment.run_specs(config):
        run_config = json.loads(json.dumps(to_jsonable(dict(spec.config))))
        record = to_jsonable(spec.compute(run_config))
        out[spec.name] = json.loads(json.dumps(record))  # NaN survives, as in the store
    return out


def _check_figures(saved, prefix):
    assert saved
    for figure in saved:
        assert figure.png.name.startswith(prefix + "_")
        assert figure.png.is_file() and figure.png.stat().st_size > 1000
        assert figure.pdf.is_file() and figure.pdf.stat().st_size > 0
        assert figure.caption


def test_registered():
    assert EXPERIMENTS["E3"] is E3 and EXPERIMENTS["E4"] is E4


def test_e3_tiny(tmp_path):
    from nqf_paper.e3_singular_limit.figures import plot

    config = dataclasses.replace(
        E3.config("quick"),
        sigma0s=(1e-2, 1e-3, 1e-4, 1e-12),
        rounding_floor=1e-10,
        plateau_sigma0=1e-4,
        competition_eps=(10.0, 20.0, 40.0),
        curve_points=40,
    )
    result = E3.summarise(config, _records(E3, config))
    statuses = [claim.verdict.status for claim in result.claims]
    assert set(statuses) <= STATUSES and len(statuses) == 15
    # the LV flow's error is ln(m_k* - m0) / (r_k eps) exactly: slope -1 even at these few scales
    flow = result.claims[0]
    assert flow.verdict.status == CONFIRMED and flow.measured == pytest.approx(-1.0, abs=0.01)
    # 1e-12 is below this config's floor: kept out of the trained fit, judged by its own claim
    assert "(3 init scales)" in result.claims[2].measured_what
    assert result.claims[8].predicted is not None and result.claims[8].measured is not None
    _check_figures(plot(result, tmp_path), "E3")


def test_e4_tiny(tmp_path):
    from nqf_paper.e4_power_law.figures import plot

    config = dataclasses.replace(
        E4.config("quick"),
        alphas=(1.0, 2.0),
        lv_modes=2000,
        lv_window_modes=(5, 200),
        lv_points=200,
        train_modes=16,
        train_samples=16,
        train_window_modes=(2, 8),
        train_width=32,
    )
    result = E4.summarise(config, _records(E4, config))
    statuses = [claim.verdict.status for claim in result.claims]
    assert set(statuses) <= STATUSES and len(statuses) == 2 * 2 + 2 * len(config.train_models)
    for claim in result.claims:
        assert claim.predicted is not None and math.isfinite(claim.predicted)
        assert claim.measured is not None and math.isfinite(claim.measured)
    # the network's exponent also has its own prediction's (the mean-field flow's), a second verdict;
    # no other claim is about the network's own prediction
    seconds = [c for c in result.claims if c.network_verdict is not None]
    assert [c.claim.split(" (")[0] for c in seconds] == ["network"]
    assert seconds[0].network_predicted is not None and math.isfinite(seconds[0].network_predicted)
    assert seconds[0].network_predicted == result.data["trained"]["network"]["own_exponent"]
    _check_figures(plot(result, tmp_path), "E4")


def test_limit_paths_and_step_function():
    """One uncoupled mode: u climbs from -1 at 4 lr c and stays at 0; the loss steps once."""
    c, K, lr = np.array([1.0]), np.array([[1.0]]), 0.05
    s = np.array([0.0, 2.5, 5.0, 7.0])
    u = limit_paths(c, K, lr, [(5.0, 0, "on")], s)
    np.testing.assert_allclose(u[:, 0], [-1.0, -0.5, 0.0, 0.0], rtol=0, atol=1e-14)
    np.testing.assert_allclose(step_function([5.0], [0.5], 1.0, s), [1.0, 1.0, 0.5, 0.5], rtol=0, atol=0)


def test_config_errors():
    with pytest.raises(NqfError, match="rounding_floor"):
        dataclasses.replace(E3.config("quick"), sigma0s=(1e-20, 1e-30, 1e-40))
    with pytest.raises(NqfError, match="plateau_sigma0"):
        dataclasses.replace(E3.config("quick"), plateau_sigma0=1e-3)
    with pytest.raises(NqfError, match="unstable"):
        dataclasses.replace(E4.config("quick"), train_lr=1.0)
    with pytest.raises(NqfError, match="lv_window_modes"):
        dataclasses.replace(E4.config("quick"), lv_window_modes=(10, 10))
