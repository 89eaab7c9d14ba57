"""E1 (staircase) and E2 (init sweep): runs, claims and figures on tiny configs.

The tiny configs use sigma0 >= 1e-4 and a few hundred steps, where the staircase's
switch-on steps are known (docs/theory.md section 3: quadratic model = M-flow, to the step;
slopes 1/ln(1 + 2 lr c_k) with c_k = s_k / 2). Both experiments share the task and the
horizon so that ``predict`` compiles once.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from nqf.core.errors import NqfError
from nqf.report.style import check_saved
from nqf.store.results import to_jsonable
from nqf_paper import EXPERIMENTS
from nqf_paper.e1_staircase import E1, StaircaseConfig, plateau_losses
from nqf_paper.e2_init_sweep import E2, InitSweepConfig, fit_mode
from tests.conftest import assert_allclose

pytestmark = pytest.mark.slow  # runs the experiments

STEPS = 400
E1_TINY = dataclasses.replace(StaircaseConfig.quick(), sigma0=1e-3, steps=STEPS)
E2_TINY = dataclasses.replace(InitSweepConfig.quick(), sigma0s=(1e-2, 1e-3, 1e-4), steps=STEPS)


def _records(experiment, config) -> dict[str, dict]:
    """Compute every run and read it back as the store would (JSON round trip)."""
    out = {}
    for spec in experiment.run_specs(config):
        record = spec.compute(dict(spec.config))
        out[spec.name] = json.loads(json.dumps(to_jsonable(record)))
    return out


@pytest.fixture(scope="module")
def e1_result():
    return E1.summarise(E1_TINY, _records(E1, E1_TINY))


@pytest.fixture(scope="module")
def e2_records():
    return _records(E2, E2_TINY)


def _claims(result, text: str):
    return [c for c in result.claims if text in c.claim]


def test_registered():
    assert EXPERIMENTS["E1"] is E1 and EXPERIMENTS["E2"] is E2
    assert E1.config("full").data_seeds == (0, 1, 2, 3, 4)
    assert len(E2.config("full").sigma0s) == 11 and 4 <= len(E2.config("quick").sigma0s) <= 5


def test_e1_claims(e1_result):
    claims = e1_result.claims
    # one loss claim, network modes 1-3, one LV claim, three plateaus; every verdict is computed
    assert len(claims) == 1 + 3 + 1 + 3
    assert all(c.verdict.status in ("confirmed", "not confirmed", "not applicable") for c in claims)
    (loss,) = _claims(e1_result, "loss curve")
    # at sigma0 = 1e-3 the float64 gap between the quadratic model and the M-flow is ~1e-10
    assert loss.measured is not None and loss.measured <= 1e-8
    switch = e1_result.data["switch"]
    # the quadratic model is the M-flow, to the step (closed form of docs/theory.md section 2)
    assert_allclose(switch["quadratic model"], switch["M-flow"], rtol=0, atol=0)
    # mode 1 of the tanh network is the quadratic model's at leading order
    network = _claims(e1_result, "tanh network's mode 1")[0]
    assert network.verdict.status == "confirmed"
    # modes 1-3 also carry the network's own prediction (predict's mean-field flow): a second verdict
    for k in range(3):
        (claim,) = _claims(e1_result, f"tanh network's mode {k + 1}")
        assert claim.network_predicted is not None and claim.network_verdict is not None
    assert network.network_predicted == pytest.approx(network.measured, rel=0.05)
    # thresholds are half the LV fixed point 2 s_k (sample-exact for the whitened staircase)
    assert_allclose(e1_result.data["fixed_point"], 2.0 * np.array(E1_TINY.singular_values), rtol=1e-10)


def test_e1_figures(e1_result, tmp_path):
    from nqf_paper.e1_staircase.figures import plot

    saved = check_saved(plot(e1_result, tmp_path), "E1")
    assert [f.png.name for f in saved] == ["E1_loss.png", "E1_occupations.png", "E1_switch_steps.png"]
    assert all(f.png.stat().st_size > 10_000 and f.pdf.is_file() for f in saved)


def test_plateau_losses_of_a_known_staircase():
    # flat levels 3, 2, 1 joined by linear ramps; switch-ons at the ramps' middles
    loss = np.concatenate(
        [np.full(10, 3.0), np.linspace(3, 2, 5), np.full(20, 2.0), np.linspace(2, 1, 5), np.full(10, 1.0)]
    )
    switch = np.array([12.0, 37.0, np.nan])
    out = plateau_losses(loss, switch)
    assert out[0] == 2.0 and math.isnan(out[1])


def test_e2_claims(e2_records):
    result = E2.summarise(E2_TINY, e2_records)
    assert len(result.claims) == 8 + 8 + 1 + 1
    assert all(c.verdict.status in ("confirmed", "not confirmed", "not applicable") for c in result.claims)
    # predicted slopes: 1/ln(1 + 2 lr c_k), c_k = s_k / 2 for the tanh perceptron
    s = np.array(E2_TINY.singular_values)
    slopes = [c for c in result.claims if "moves by" in c.claim and "quadratic model" in c.claim]
    assert_allclose([c.predicted for c in slopes], 1.0 / np.log1p(E2_TINY.lr * s), rtol=1e-10)
    # mode 4 spans 40 steps per unit ln(1/sigma0): integer rounding cannot move its slope by 3%
    assert slopes[3].verdict.status == "confirmed"
    (mflow,) = _claims(result, "M-flow predicts")
    assert mflow.measured == 0.0
    (flow,) = _claims(result, "discrete-step correction")
    assert flow.verdict.status == "confirmed"
    # the tanh network's slopes carry the network's own prediction: the mean-field flow's fitted slope
    network = [c for c in result.claims if "moves by" in c.claim and "tanh network" in c.claim]
    assert len(network) == 4 and all(c.network_verdict is not None for c in network)
    assert all(c.network_predicted is not None and np.isfinite(c.network_predicted) for c in network)
    # mode 1 switches on before the network leaves its quadratic form: the mean field's slope is the network's
    assert network[0].network_predicted == pytest.approx(network[0].measured, rel=1e-3)
    # (measured on this tiny config, sigma0 1e-2..1e-4 over 400 steps: modes 2-4 trained 10.64, 21.71, 39.52,
    # mean field 10.53, 21.06, 36.59, quadratic theory 10.49, 20.50, 40.50; docs/departure.md, part (c))
    assert all(c.network_verdict is None for c in slopes)  # the quadratic model is the theory's own


def test_e2_reports_a_failed_prediction(e2_records):
    records = json.loads(json.dumps(e2_records))
    predict = records["predict"]
    for name in ("mflow", "lv", "lv_continuous", "closed_form", "singular"):
        predict[name][-1] = [[None] * 4]
    predict["failures"] = [{"sigma0": 1e-4, "seed": 0, "error": "the M-flow diverged (non-finite loss)"}]
    result = E2.summarise(E2_TINY, records)
    (mflow,) = _claims(result, "M-flow predicts")
    assert "2 of 3 scales" in mflow.measured_what and "sigma0 = 0.0001 predict failed" in mflow.measured_what
    assert mflow.measured == 0.0
    assert "predict failed at sigma0 = 0.0001" in result.text


def test_e2_init_seeds_measure_how_far_one_inits_slope_moves(e2_records):
    """The init-seeds run repeats the claims' init (seed 0: the same trained steps as the sweep, the
    same mean-field steps as predict's) and adds others; the text gives each init's slopes and the
    prediction's gap to each, and the pooled slope is the seeds' mean slope (every step finite)."""
    over = e2_records["init-seeds"]
    assert over["seeds"] == list(E2_TINY.init_seeds) and over["seeds"][0] == E2_TINY.seeds[0] == 0
    trained, predicted = np.array(over["trained"], dtype=float), np.array(over["predicted"], dtype=float)
    assert trained.shape == predicted.shape == (3, len(E2_TINY.init_seeds), 4)
    np.testing.assert_array_equal(trained[:, 0], np.array(e2_records["sweep-network"]["switch_steps"])[:, 0])
    np.testing.assert_array_equal(predicted[:, 0], np.array(e2_records["predict"]["network_flow"])[:, 0])
    assert not np.array_equal(trained[:, 0], trained[:, 1])  # another init, other steps
    result = E2.summarise(E2_TINY, e2_records)
    slopes = result.data["init_seed_slopes"]
    x = np.log(1.0 / np.array(E2_TINY.sigma0s))
    for name, steps in (("trained", trained), ("predicted", predicted)):
        own = np.array([[np.polyfit(x, steps[:, j, k], 1)[0] for k in range(4)] for j in range(steps.shape[1])])
        assert_allclose(slopes[name], own, rtol=1e-10)
    assert "Over init seeds 0, 1, 2, 3 (the data fixed)" in result.text
    gap = slopes["predicted"].mean(axis=0)[3] / slopes["trained"].mean(axis=0)[3] - 1.0
    assert f"{gap:+.1%}" in result.text.split("pooled over the seeds by")[1].split("(")[0]


def test_e2_figures(e2_records, tmp_path):
    from nqf_paper.e2_init_sweep.figures import plot

    result = E2.summarise(E2_TINY, e2_records)
    saved = check_saved(plot(result, tmp_path), "E2")
    assert [f.png.name for f in saved] == ["E2_switch_steps.png", "E2_slopes.png", "E2_residuals.png"]


def test_fit_mode():
    sigma0s = np.array([1e-2, 1e-4, 1e-6, 1e-8])
    steps = np.round(3.0 + 7.0 * np.log(1.0 / sigma0s))[:, None]
    fit = fit_mode(sigma0s, steps, "mode 1")
    assert fit.problem == "" and abs(fit.slope - 7.0) < 0.05 and fit.max_residual <= 0.5
    steps[1, 0] = np.nan
    assert "never reached" in fit_mode(sigma0s, steps, "mode 1").problem


@pytest.mark.parametrize(
    "make",
    [
        lambda: StaircaseConfig(singular_values=(1.0, 2.0)),
        lambda: StaircaseConfig(data_seeds=()),
        lambda: InitSweepConfig(sigma0s=(1e-2, 1e-3)),
        lambda: InitSweepConfig(singular_values=(3.0, 3.0)),
        lambda: InitSweepConfig(init_seeds=()),
        lambda: InitSweepConfig(init_seeds=(0, 0)),
    ],
)
def test_bad_configs(make):
    with pytest.raises(NqfError):
        make()
