"""Every prediction knows its own validity (issue 15): the one theory gate, init underflow,
an init too large for the vanishing-init limit, zero init, the M-flow's rounding floor and
divergence of the trained networks.

Tolerances: switch steps of "never" are NaN exactly (no tolerance); the smallest sigma0
the underflow message suggests must pass and sigma0 / 1.1 below it must be refused; the
M-flow of a resolved mode agrees with the LV map to 1% (module ``nqf.theory.predict.pipeline``).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
import nqf.architectures.expansion as expansion
from nqf.architectures import get_architecture
from nqf.architectures.architecture import Architecture
from nqf.architectures.expansion import GATE_SEED, cached_expansion_check, expansion_check, theory_gate
from nqf.comparison.compare import CompareConfig, compare
from nqf.core.errors import NqfError, TheoryDoesNotApply
from nqf.theory.lotka_volterra.system import LotkaVolterra
from nqf.theory.predict.pipeline import MFLOW_RESOLUTION, PredictConfig, predict
from nqf.theory.singular_limit import singular_limit
from nqf.training.config import DIVERGENCE_FACTOR, TrainConfig
from nqf.training.runs import train
from nqf.training.tasks import get_task
from tests.conftest import assert_allclose, predict_args, run_nqf

TASK = get_task("staircase")
X, Y = TASK.generate(0, dtype="float64")
ARCH = TASK.architecture()
INAPPLICABLE = ("relu", "abs", "sigmoid", "softplus")


def _config(**kw) -> PredictConfig:
    return PredictConfig(**{"width": 32, "lr": 0.05, "steps": 1500, **kw})


def _mlp(activation: str):
    return get_architecture("mlp", inputs=8, outputs=4, activation=activation)


def _user_unit(activation):
    """A user's perceptron unit (not from the registry): phi = a * activation(v . x)."""
    template = {"a": jnp.zeros(4), "v": jnp.zeros(8)}
    return Architecture(
        name="my-unit",
        unit=lambda w, x: w["a"] * activation(w["v"] @ x),
        template=template,
        input_shape=(8,),
        outputs=4,
    )


# -- one theory gate ------------------------------------------------------------------------


@pytest.mark.parametrize("activation", INAPPLICABLE)
def test_predict_refuses_an_inapplicable_unit_with_the_expansion_reason(activation):
    arch = _mlp(activation)
    reason = expansion_check(arch, key=jax.random.key(GATE_SEED)).reason
    with pytest.raises(TheoryDoesNotApply) as err:
        predict(arch, X, Y, _config())
    message = str(err.value)
    assert "\n" not in message
    assert reason in message and f"activation={activation}" in message and "allow_inapplicable=True" in message


@pytest.mark.parametrize("activation", ["sigmoid", "softplus"])
def test_allow_inapplicable_runs_and_reports_the_verdict(activation):
    p = predict(_mlp(activation), X, Y, _config(allow_inapplicable=True, steps=300))
    out = json.loads(json.dumps(p.to_json(), allow_nan=False))
    assert out["expansion"]["applies"] is False and out["expansion"]["kind"] == "linear term"
    assert out["expansion"]["reason"].startswith("linear term present")
    assert out["config"]["allow_inapplicable"] is True
    assert out["config"]["arch"] == "mlp" and out["config"]["arch_options"]["activation"] == activation
    assert any("does not apply" in note and "allow_inapplicable" in note for note in out["notes"])


def test_allowed_relu_has_no_quadratic_form_and_says_why():
    # autodiff gives relu''(0) = relu'(0) = 0: A(x) = 0, so C = 0 and nothing grows
    with pytest.raises(NqfError, match="no mode grows.*[(]the theory does not apply to mlp: not smooth at w = 0"):
        predict(_mlp("relu"), X, Y, _config(allow_inapplicable=True, steps=100))


def test_allowed_abs_reproduces_tanh_numbers_which_is_why_the_verdict_is_reported():
    # autodiff's abs'(0) = 1 = tanh'(0): the quadratic forms of abs and tanh coincide, so an
    # ungated predict would print tanh's numbers for a unit with a kink at 0
    p_abs = predict(_mlp("abs"), X, Y, _config(allow_inapplicable=True, steps=300))
    p_tanh = predict(_mlp("tanh"), X, Y, _config(steps=300))
    np.testing.assert_array_equal(p_abs.mflow_switch_steps, p_tanh.mflow_switch_steps)
    out = p_abs.to_json()
    assert out["expansion"]["kind"] == "not smooth" and out["config"]["arch_options"]["activation"] == "abs"
    assert p_tanh.to_json()["config"]["arch_options"]["activation"] == "tanh"


def test_applicable_prediction_carries_the_verdict_and_echoes_every_option():
    out = predict(ARCH, X, Y, _config(steps=300)).to_json()
    assert out["expansion"] == {
        "applies": True,
        "kind": "applies",
        "reason": out["expansion"]["reason"],
        "remainder_order": out["expansion"]["remainder_order"],
        "dtype": "float64",
    }
    assert out["config"]["arch_options"] == {k: v for k, v in ARCH.options}
    assert out["config"]["allow_inapplicable"] is False


@pytest.mark.parametrize("activation", INAPPLICABLE)
def test_compare_refuses_an_inapplicable_unit(activation):
    with pytest.raises(TheoryDoesNotApply, match=f"activation={activation}.*allow_inapplicable=True"):
        compare(TASK, _mlp(activation), CompareConfig(steps=100))


def test_compare_allowed_inapplicable_reports_verdict_and_options():
    config = CompareConfig(steps=200, closure=False, include_quadratic=False, allow_inapplicable=True)
    out = compare(TASK, _mlp("sigmoid"), config).to_json()
    assert out["expansion"]["applies"] is False and out["expansion"]["kind"] == "linear term"
    assert out["config"]["arch"] == "mlp" and out["config"]["arch_options"]["activation"] == "sigmoid"
    assert out["config"]["allow_inapplicable"] is True
    json.dumps(out, allow_nan=False)


def test_a_users_own_architecture_is_gated_too():
    with pytest.raises(TheoryDoesNotApply, match="my-unit.*not smooth"):
        predict(_user_unit(jax.nn.relu), X, Y, _config())
    p = predict(_user_unit(jnp.tanh), X, Y, _config(steps=300))
    assert p.expansion.applies and p.to_json()["config"]["arch"] == "my-unit"


def test_the_gate_is_deterministic_and_cached_in_process(monkeypatch):
    arch = _mlp("tanh")
    first = expansion_check(arch, key=jax.random.key(GATE_SEED))
    assert _same(expansion_check(arch, key=jax.random.key(GATE_SEED)), first)  # same draws, same ratios
    expansion._clear_gate_cache()
    calls = []
    real = expansion.expansion_check
    monkeypatch.setattr(expansion, "expansion_check", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(expansion, "_verdict_folder", lambda: None)
    assert _same(theory_gate(arch), first)
    # an equal architecture built again (a new object) hits the same entry: keyed by description
    assert theory_gate(_mlp("tanh")) is theory_gate(arch)
    assert len(calls) == 1


def _same(a, b) -> bool:
    """Reports equal field by field (NaN equal to NaN)."""
    import dataclasses

    return json.dumps(dataclasses.asdict(a)) == json.dumps(dataclasses.asdict(b))


def test_verdicts_are_kept_on_disk(monkeypatch, tmp_path):
    monkeypatch.setattr(expansion, "_verdict_folder", lambda: str(tmp_path))
    expansion._clear_gate_cache()
    report = cached_expansion_check(_mlp("relu"))
    files = list((tmp_path / "nqf-expansion").glob("*.json"))
    assert len(files) == 1 and not report.applies
    # a fresh process (memory cleared) reads it back instead of checking again
    expansion._clear_gate_cache()
    real = expansion.expansion_check
    monkeypatch.setattr(expansion, "expansion_check", lambda *a, **k: pytest.fail("checked again"))
    assert _same(cached_expansion_check(_mlp("relu")), report)
    # a damaged file is a miss: checked again and rewritten
    files[0].write_text("{not json")
    expansion._clear_gate_cache()
    monkeypatch.setattr(expansion, "expansion_check", real)
    assert _same(cached_expansion_check(_mlp("relu")), report)
    assert json.loads(files[0].read_text())["kind"] == "not smooth"
    # a user's unit is kept too, keyed by what it computes: its own file, its own verdict
    expansion._clear_gate_cache()
    assert cached_expansion_check(_user_unit(jnp.tanh)).applies
    assert not cached_expansion_check(_user_unit(jax.nn.relu)).applies
    assert len(list((tmp_path / "nqf-expansion").glob("*.json"))) == 3
    expansion._clear_gate_cache()
    monkeypatch.setattr(expansion, "expansion_check", lambda *a, **k: pytest.fail("checked again"))
    assert cached_expansion_check(_user_unit(jnp.tanh)).applies
    expansion._clear_gate_cache()


# -- the init must be resolvable --------------------------------------------------------------


def _suggested_sigma0(message: str) -> float:
    return float(re.search(r"use sigma0 >= ([0-9.e+-]+)", message).group(1))


def test_float64_underflow_is_refused_with_its_numbers_and_the_float64_remedy():
    with pytest.raises(NqfError) as err:
        predict(ARCH, X, Y, _config(sigma0=1e-300))
    message = str(err.value)
    assert "sigma0 = 1e-300" in message and "3.2e-599" in message and "float64" in message
    assert "tiny / u = 1e-292" in message
    assert "enable float64" not in message and "dtype float64" not in message  # the run is float64 already
    smallest = _suggested_sigma0(message)
    assert 1e-148 < smallest < 1e-146  # sqrt(1e-292 / 32) = 1.8e-147, times this draw's chi^2 factor
    with pytest.raises(NqfError, match="underflows float64"):
        predict(ARCH, X, Y, _config(sigma0=smallest / 1.1))
    p = predict(ARCH, X, Y, _config(sigma0=smallest, steps=100))  # the suggested value passes
    assert p.initial_occupations[: p.num_growing].min() >= 1e-292


def test_an_init_whose_occupations_overflow_is_refused_with_its_numbers(recwarn):
    """The other end: m_k(0) beyond float64's largest number (W0 W0^T and the LV would hold inf;
    before, a warning and 'LotkaVolterra: m0 has non-finite entries')."""
    with pytest.raises(NqfError) as err:
        predict(ARCH, X, Y, _config(sigma0=1e200))
    message = str(err.value)
    assert "sigma0 = 1e+200" in message and "overflows float64 (largest 1.8e+308)" in message
    assert "lower sigma0" in message and "\n" not in message
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    with pytest.raises(NqfError, match="overflows float64"):
        nqf.predict_grid(ARCH, X, Y, _config(sigma0=1e-6), sigma0s=[1e-6, 1e200])


def test_compare_and_train_name_the_right_remedy_in_float64():
    with pytest.raises(NqfError) as err:
        compare(TASK, None, CompareConfig(sigma0=1e-300, steps=100, closure=False))
    assert "use sigma0 >=" in str(err.value) and "dtype float64" not in str(err.value)
    with pytest.raises(NqfError) as err:
        train(ARCH, X, Y, TrainConfig(sigma0=1e-300, steps=10, dtype="float64"))
    assert "underflows float64" in str(err.value) and "use sigma0 >= 1.8e-147" in str(err.value)
    assert "enable float64" not in str(err.value)


_FLOAT32_SCRIPT = textwrap.dedent(
    """
    import json, jax
    assert not jax.config.jax_enable_x64
    from nqf.core.errors import NqfError
    from nqf.theory.predict.pipeline import PredictConfig, predict
    from nqf.training.tasks import get_task
    from nqf.training.runs import TrainConfig, train
    task = get_task("staircase")
    X, Y = task.generate(0)
    arch = task.architecture()
    out = {}
    for name, call in (
        ("predict", lambda: predict(arch, X, Y, PredictConfig(width=32, lr=0.05, steps=400, sigma0=1e-20))),
        ("train", lambda: train(arch, X, Y, TrainConfig(sigma0=1e-20, steps=10))),
    ):
        try:
            call()
            out[name] = None
        except NqfError as err:
            out[name] = str(err)
    p = predict(arch, X, Y, PredictConfig(width=32, lr=0.05, steps=400, sigma0=1e-6))
    out["ok"] = [None if s != s else float(s) for s in p.mflow_switch_steps]
    out["dtype"] = str(p.flow.loss.dtype)
    print(json.dumps(out))
    """
)


@pytest.mark.slow  # 3.4-5.9 s
def test_float32_underflow_is_refused_with_the_enable_float64_remedy():
    # conftest enables float64 in this process: the float32 library runs in a subprocess
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    result = subprocess.run(
        [sys.executable, "-c", _FLOAT32_SCRIPT], capture_output=True, text=True, env=env, timeout=300, check=True
    )
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["dtype"] == "float32"
    for name in ("predict", "train"):
        message = out[name]
        assert message is not None, name
        assert "underflows float32" in message and "jax.config.update('jax_enable_x64', True)" in message
        assert "use sigma0 >=" in message
    assert "3.2e-39" in out["predict"] and "tiny / u = 9.9e-32" in out["predict"]
    # a resolvable float32 init (sigma0 = 1e-6) is computed: modes 1-3 switch at ~91, 132, 260
    # (float32 measurement; mode 4 comes at ~490, after this horizon)
    assert all(s is not None for s in out["ok"][:3]) and out["ok"][3] is None


# -- an init that is not small: the prediction without the vanishing-init limit ----------------

OUTPUTS = 4  # of mlp_data's Y (mlp's default)


@pytest.mark.slow  # through the console script
def test_predict_at_a_large_init_gives_the_flows_and_says_why_there_is_no_limit(mlp_data):
    """Was ``error: singular_limit: eps must be positive (m0 < 1), got -1.27...``: the M-flow and
    the LV rest on no small init and are given; the limit's steps and plateaus are empty (null)."""
    done = run_nqf(*predict_args(mlp_data["ok"], "--json", width=16, sigma0="0.5"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    limit = result["singular_limit"]
    assert limit["eps"] is None and limit["order"] == [] and limit["switch_steps"] == [None] * OUTPUTS
    assert result["lv"]["plateau_losses"] == [None] * OUTPUTS
    assert all(step is not None for step in result["mflow"]["switch_steps"])  # the modes start near m*/2
    (note,) = [n for n in result["notes"] if n.startswith("no vanishing-init limit")]
    assert "eps = -1.27" in note and "the M-flow and the LV stand" in note, note
    # the bound it gives: eps = -mean ln m_k(0) moves by -2 ln(sigma0 ratio) for this draw
    bound = float(re.search(r"take sigma0 below ([0-9.e-]+) \(this draw\)", note).group(1))
    assert_allclose(bound, 0.5 * math.exp(-1.27 / 2), rtol=5e-3)  # 0.265 (eps -1.2728 here)
    arch = nqf.get_architecture("mlp")
    for scale, has_limit in ((0.98 * bound, True), (1.02 * bound, False)):
        config = nqf.PredictConfig(width=16, lr=0.1, steps=50, sigma0=scale)
        prediction = nqf.predict(arch, mlp_data["X"], mlp_data["Y"], config)
        assert np.isfinite(prediction.singular.eps) == has_limit, scale
        assert np.isfinite(prediction.singular_switch_steps).any() == has_limit, scale


def test_singular_limit_itself_says_what_it_needs():
    """The library function still refuses (its eps is its input), in words a researcher reads."""
    system = LotkaVolterra(c=np.array([1.0, 0.5]), K=np.diag([1.0, 1.0]), m0=np.array([2.0, 3.0]), lr=0.1, loss0=1.0)
    with pytest.raises(NqfError, match=r"needs a small init, eps = -mean ln m_k\(0\) > 0 .*got eps = -0.8959"):
        nqf.singular_limit(system)


def test_predict_grid_point_at_a_large_init_is_what_predict_gives(mlp_data):
    arch = nqf.get_architecture("mlp")
    config = nqf.PredictConfig(width=16, lr=0.1, steps=50, sigma0=1e-3)
    grid = nqf.predict_grid(arch, mlp_data["X"], mlp_data["Y"], config, sigma0s=[1e-3, 0.5])
    assert np.isfinite(grid.singular_switch_steps[0, 0, 0]).all()
    assert np.isnan(grid.singular_switch_steps[0, 1, 0]).all()
    point = grid.prediction(0, 1, 0)
    alone = nqf.predict(arch, mlp_data["X"], mlp_data["Y"], nqf.PredictConfig(width=16, lr=0.1, steps=50, sigma0=0.5))
    assert point.notes == alone.notes and any(n.startswith("no vanishing-init limit") for n in point.notes)


# -- a zero init never switches, in every source ---------------------------------------------


def test_zero_init_gives_no_switch_step_anywhere():
    p = predict(ARCH, X, Y, _config(), W0=np.zeros((ARCH.dim, 32)))
    for name in (
        "mflow_switch_steps",
        "lv_switch_steps",
        "lv_continuous_switch_steps",
        "closed_form_switch_steps",
        "singular_switch_steps",
    ):
        assert np.all(np.isnan(getattr(p, name))), name
    assert p.singular.step_times.size == 0
    out = json.loads(json.dumps(p.to_json(), allow_nan=False))
    assert out["singular_limit"]["eps"] is None and out["singular_limit"]["order"] == []
    for block in ("mflow", "lv", "singular_limit"):
        assert out[block]["switch_steps"] == [None] * 4
    assert out["lv"]["initial_occupations"] == [0.0] * 4
    assert any("no component along every growing mode" in note for note in out["notes"])


def test_singular_limit_never_mask_equals_the_subsystem():
    c = np.array([1.0, 0.7, 0.4])
    K = np.array([[1.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.0]])
    m0 = np.array([1e-12, 2e-12, 5e-13])
    lv = LotkaVolterra(c, K, m0, 0.05)
    never = np.array([True, False, False])
    limit = singular_limit(lv, never=never)
    sub = singular_limit(LotkaVolterra(c[1:], K[1:, 1:], m0[1:], 0.05), eps=limit.eps)
    assert math.isnan(limit.switch_times[0]) and 0 not in limit.activation_order
    np.testing.assert_allclose(limit.switch_times[1:], sub.switch_times, rtol=1e-12)
    assert limit.suppressed == ()
    nothing = singular_limit(lv, never=np.ones(3, dtype=bool))
    assert nothing.step_times.size == 0 and np.all(np.isnan(nothing.switch_times))


# -- the M-flow's rounding floor ---------------------------------------------------------------


def test_a_mode_below_the_mflow_rounding_floor_is_left_out_with_a_note():
    # sigma0 = 1e-22: mode 4's weight share falls to ~0.008 u before it switches (M-flow 6% early)
    p = predict(ARCH, X, Y, _config(sigma0=1e-22, steps=2200))
    assert p.mflow_resolution[3] < MFLOW_RESOLUTION <= p.mflow_resolution[:3].min()
    assert np.isnan(p.mflow_switch_steps[3]) and np.isfinite(p.lv_switch_steps[3])
    assert any("cannot resolve mode(s) 4" in note for note in p.notes)
    # the resolved modes agree with the LV map to 1%
    np.testing.assert_allclose(p.mflow_switch_steps[:3], p.lv_switch_steps[:3], rtol=0.01)
    # and at sigma0 = 1e-6 every mode is resolved, no note
    q = predict(ARCH, X, Y, _config(steps=600))
    assert np.all(q.mflow_resolution >= MFLOW_RESOLUTION) and not any("cannot resolve" in n for n in q.notes)


# -- divergence ---------------------------------------------------------------------------------


def test_adam_at_lr_100_is_reported_as_diverged_without_switches():
    config = CompareConfig(
        optimizers=("adam",), learning_rates={"adam": 100.0}, steps=200, closure=False, include_quadratic=False
    )
    comparison = compare(TASK, None, config)
    out = json.loads(json.dumps(comparison.to_json(), allow_nan=False))
    assert out["diverged"] == {"adam": [0]} and out["divergence_factor"] == DIVERGENCE_FACTOR
    assert all(row["measured"]["network"]["adam"] is None for row in out["modes"])
    assert any("adam" in n and "diverged" in n and f"{DIVERGENCE_FACTOR:g} x" in n for n in out["notes"])
    sweep = comparison.network["adam"]
    d = int(sweep.diverged_at[0, 0])
    loss = sweep.loss[0, 0]
    assert np.all(np.isnan(loss[sweep.steps >= d])) and np.all(loss[sweep.steps < d] <= DIVERGENCE_FACTOR * loss[0])


def test_training_flags_a_loss_above_the_divergence_factor():
    # Adam at lr 100: the loss stays finite but explodes by ~1e3
    result = train(ARCH, X, Y, TrainConfig(optimizer="adam", lr=100.0, steps=50, dtype="float64"))
    assert result.diverged and result.diverged_at <= 10
    assert np.all(np.isnan(result.loss[result.diverged_at :]))


def test_a_stable_run_is_not_flagged():
    config = CompareConfig(optimizers=("gd", "adam"), learning_rates={"adam": 1e-3}, steps=300, closure=False)
    out = compare(TASK, None, config).to_json()
    assert out["diverged"] == {"gd": [], "adam": []}
    assert not any("diverged" in note for note in out["notes"])
