"""E7 (real data: digits): runs, claims and figures on a tiny config.

The tiny config takes 200 of the digits and 300 steps (every mode switches on by step
~260 at lr 0.25). Closed forms it is checked against: for the tanh perceptron (tanh'(0) = 1)
C = E[y A(x)] has eigenvalues +-s_k/2, s_k the singular values of E[y x^T] (docs/theory.md
section 3), and the quadratic model is the M-flow to the step (section 2).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from nqf.core.errors import NqfError
from nqf.report.style import check_saved
from nqf.store.results import to_jsonable
from nqf_paper import EXPERIMENTS
from nqf_paper.e7_digits import E7, DigitsConfig, relative_loss_gap
from tests.conftest import assert_allclose

pytestmark = pytest.mark.slow  # runs the experiment

TINY = dataclasses.replace(DigitsConfig.quick(), samples=200, steps=300, width=16)


@pytest.fixture(scope="module")
def records() -> dict[str, dict]:
    """Every run computed and read back as the store would (JSON round trip)."""
    out = {}
    for spec in E7.run_specs(TINY):
        record = spec.compute(dict(spec.config))
        out[spec.name] = json.loads(json.dumps(to_jsonable(record)))
    return out


@pytest.fixture(scope="module")
def result(records):
    return E7.summarise(TINY, records)


def test_registered_and_configs():
    assert EXPERIMENTS["E7"] is E7
    quick, full = E7.config("quick"), E7.config("full")
    assert quick.samples == 512 and quick.seeds == (0,) and quick.steps == 500
    assert full.samples is None and full.seeds == (0, 1, 2) and full.steps == 1000
    assert [s.name for s in E7.run_specs(full)][:3] == ["predict-s0", "network-s0", "quadratic-s0"]
    for bad in ({"samples": 1798}, {"samples": 8}, {"seeds": ()}, {"seeds": (1, 1)}, {"lr": 0.0}, {"sigma0": 1.0}):
        with pytest.raises(NqfError):
            DigitsConfig(**bad)


def test_claims(result, records):
    claims = result.claims
    # one loss claim, network modes 1-3, the data defect, LV against the M-flow; every verdict is computed
    assert len(claims) == 1 + 3 + 1 + 1
    assert all(c.verdict.status in ("confirmed", "not confirmed", "not applicable") for c in claims)
    loss = claims[0]
    assert "loss curve" in loss.claim
    # the M-flow is the exact GD map of the quadratic model: float64 leaves ~1e-11
    assert loss.measured is not None and loss.measured <= 1e-8 and loss.verdict.status == "confirmed"
    switch = result.data["switch"]
    assert_allclose(switch["quadratic model"], switch["M-flow"], rtol=0, atol=0)
    # the network's claims compare its steps with the M-flow's, mode by mode
    for k, claim in enumerate(claims[1:4]):
        assert claim.predicted == switch["M-flow"][k] and claim.measured == switch["network"][k]
    # and each carries the network's own prediction, predict's mean-field flow: a second verdict
    own = np.asarray(records["predict-s0"]["network_switch"], dtype=float)
    assert np.isfinite(own[:3]).all()
    for k, claim in enumerate(claims[1:4]):
        assert claim.network_predicted == own[k] and claim.network_verdict is not None
    assert all(c.network_verdict is None for c in (claims[0], *claims[4:]))  # not about the network
    # digits are not whitened: the defect is far above predict's exactness threshold
    defect = claims[4]
    assert defect.measured > 0.1 and defect.verdict.status == "confirmed"
    assert result.data["whitening_defect"] > 0.5
    lv = claims[5]
    errors = np.abs(result.data["error"]["LV"])
    assert lv.measured == pytest.approx(float(np.max(errors)), rel=1e-12)
    assert "Closing note" in result.text and "Modes 1-3" in result.text


def test_growth_is_half_the_singular_values_of_the_cross_moment(result):
    import jax

    from nqf.training.tasks import get_task

    with jax.enable_x64(True):
        X, Y = get_task("digits", samples=TINY.samples).generate(TINY.data_seed, "float64")
    X, Y = np.asarray(X), np.asarray(Y)
    s = np.linalg.svd(Y.T @ X / X.shape[0], compute_uv=False)
    growth = np.asarray(result.data["growth"])
    # centred targets sum to zero over the 10 outputs: rank 9
    assert growth.size == 9 and s[9] < 1e-12 * s[0]
    assert_allclose(growth, s[:9] / 2.0, rtol=1e-10, atol=0)
    c_all = np.asarray(result.data["c_spectrum"])
    assert_allclose(np.sort(c_all[c_all > 1e-10]), np.sort(s[:9] / 2.0), rtol=1e-10, atol=0)


def test_a_mode_that_never_switches_is_not_applicable(records):
    broken = json.loads(json.dumps(records))
    occupations = np.asarray(broken["network-s0"]["occupations"], dtype=float)
    occupations[:, 1] = 0.0  # mode 2 of the network never reaches its threshold
    broken["network-s0"]["occupations"] = occupations.tolist()
    claim = E7.summarise(TINY, broken).claims[2]
    assert claim.measured is None and claim.verdict.status == "not applicable"
    assert "never reached" in claim.why_missing


def test_a_withheld_network_step_says_why(records):
    broken = json.loads(json.dumps(records))
    note = "network (mean field): mode 2 has no step: its two particle sets disagree (90 and 110 steps)"
    broken["predict-s0"]["network_switch"][1] = float("nan")
    broken["predict-s0"]["network_notes"] = [note, "network (mean field): the plateau after mode 3 has no loss: x"]
    claims = E7.summarise(TINY, broken).claims
    claim = claims[2]
    assert claim.network_predicted is None and claim.network_why_missing == note
    assert claim.network_verdict.status == "not applicable" and claim.verdict.status != "not applicable"
    assert claims[1].network_predicted is not None and claims[3].network_predicted is not None


def test_relative_loss_gap():
    flow = np.array([1.0, 0.5, 0.25, 1e-14])
    quad = flow * (1.0 + np.array([0.0, 1e-9, -3e-9, 0.5]))
    gap, step, last = relative_loss_gap(quad, flow)
    # the last record lies below the 1e-12 L(0) floor and is not compared
    assert gap == pytest.approx(3e-9, rel=1e-6) and step == 2 and last == 2
    with pytest.raises(NqfError):
        relative_loss_gap(quad[:3], flow)


def test_figures(result, tmp_path):
    from nqf_paper.e7_digits.figures import plot

    saved = check_saved(plot(result, tmp_path), "E7")
    assert [f.png.name for f in saved] == ["E7_loss.png", "E7_spectrum.png", "E7_switch_steps.png"]
    assert all(f.png.stat().st_size > 10_000 and f.pdf.is_file() for f in saved)
