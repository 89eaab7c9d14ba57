"""The expansion check (docs/theory.md section 1) against what the Taylor series of each unit predicts.

Remainder orders follow from the unit's series at w = 0 (|w| = eps):
- a sigma(v.x) with sigma''(0) != 0 (gelu, silu): cubic remainder a sigma''(0)/2 (v.x)^2, order 1;
- odd sigma (tanh, sin): quartic remainder a sigma'''(0)/6 (v.x)^3, order 2;
- 1 - cos(v.x): (v.x)^2/2 - (v.x)^4/24, order 2; (v.x)^2/2 and linear attention: exact (inf);
- softmax attention: the scores are bilinear in (W_Q, W_K), so alpha - 1/T = O(eps^2) and the
  remainder is quartic, order 2;
- softmax mixture of experts: the gate is 1/E + O(eps), so the layer's remainder is cubic, order 1.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nqf import ARCHITECTURES, Architecture, TheoryDoesNotApply, get_architecture
from nqf.architectures.expansion import ExpansionReport, expansion_check, require_expansion
from tests.conftest import assert_allclose

ORDER_TOLERANCE = 0.05  # fitted log-log slopes over eps = 1e-1 ... 1e-4 in float64


def _arch(name, **options):
    if name not in ARCHITECTURES:
        pytest.skip(f"architecture {name} is not registered")
    return get_architecture(name, **options)


@functools.cache
def _cached_report(name, options):
    return expansion_check(_arch(name, **dict(options)))


def _report(name, **options):
    """The float64 check of a built-in architecture, computed once per configuration."""
    return _cached_report(name, tuple(sorted(options.items())))


@pytest.mark.parametrize(
    "name, options, order",
    [
        ("mlp", {"activation": "tanh"}, 2.0),
        ("mlp", {"activation": "gelu"}, 1.0),
        ("mlp", {"activation": "sin"}, 2.0),
        ("mlp", {"activation": "silu"}, 1.0),
        ("mlp-fixed", {"activation": "square"}, math.inf),
        ("mlp-fixed", {"activation": "one_minus_cos"}, 2.0),
        ("attention", {}, 2.0),
        ("linear-attention", {}, math.inf),
        ("moe", {"routing": "softmax"}, 2.0),
        ("conv1d", {"activation": "tanh"}, 2.0),
        ("conv2d", {"activation": "tanh"}, 2.0),
    ],
)
def test_applies_with_the_predicted_remainder_order(name, options, order):
    report = _report(name, **options)
    assert isinstance(report, ExpansionReport)
    assert report.applies, report.reason
    assert report.kind == "applies"
    assert report.value_at_zero == 0.0 and report.gradient_at_zero == 0.0
    if math.isinf(order):
        assert math.isinf(report.remainder_order), report.ratios
        assert max(report.ratios) < 1e-13
    else:
        assert abs(report.remainder_order - order) < ORDER_TOLERANCE, report.ratios
    assert_allclose(report.leading_order, 2.0, rtol=0, atol=0.02)


def test_softmax_gate_enters_the_layer_at_third_order():
    report = _report("moe", routing="softmax")
    assert report.applies
    assert len(report.layer_ratios) == len(report.eps)
    assert abs(report.layer_order - 1.0) < ORDER_TOLERANCE, report.layer_ratios


def test_relu_is_not_smooth_and_its_ratio_stays_order_one():
    report = _report("mlp", activation="relu")
    assert not report.applies
    assert report.kind == "not smooth"
    assert report.reason.startswith("not smooth at w = 0")
    # autodiff gives relu'(0) = 0, so A = 0 and the ratio is phi(eps w)/eps^2 = a relu(v.x), constant
    assert_allclose(report.ratios, np.ones(len(report.eps)), rtol=1e-12)
    assert abs(report.remainder_order) < ORDER_TOLERANCE


def test_abs_fixed_readout_is_not_smooth_although_autodiff_gives_a_gradient():
    # jax differentiates |z| at 0 as 1: a linear term by autodiff, but |eps v.x| is not eps v.x
    report = expansion_check(_arch("mlp-fixed", activation="abs"))
    assert not report.applies
    assert report.kind == "not smooth"


@pytest.mark.parametrize("activation, slope_at_zero", [("softplus", math.log(2.0)), ("sigmoid", 0.5)])
def test_softplus_and_sigmoid_have_a_linear_term(activation, slope_at_zero):
    report = expansion_check(_arch("mlp", activation=activation))
    assert not report.applies
    assert report.kind == "linear term"
    assert report.reason.startswith("linear term present")
    # phi = a sigma(v.x): phi(0) = 0, grad_a phi_c(0) = sigma(0) e_c, so |grad phi_c(0)| = sigma(0)
    assert report.value_at_zero == 0.0
    assert_allclose(report.gradient_at_zero, slope_at_zero, rtol=1e-12)
    assert abs(report.remainder_order + 1.0) < ORDER_TOLERANCE  # the ratio grows like 1/eps


def test_fixed_readout_softplus_has_a_constant_term():
    report = expansion_check(_arch("mlp-fixed", activation="softplus"))
    assert report.kind == "linear term"
    assert_allclose(report.value_at_zero, math.log(2.0), rtol=1e-12)
    assert abs(report.remainder_order + 2.0) < 0.1  # constant term: the ratio grows like 1/eps^2


def test_square_with_trainable_readout_has_a_cubic_leading_order():
    report = expansion_check(_arch("mlp", activation="square"))
    assert not report.applies
    assert report.kind == "vanishing form"
    assert report.reason.startswith("quadratic form vanishes; leading order is cubic")
    assert_allclose(report.leading_order, 3.0, rtol=0, atol=0.02)


def test_topk_routing_is_not_smooth_across_units():
    report = expansion_check(_arch("moe", routing="topk"))
    assert not report.applies
    assert report.kind == "not smooth"
    assert "gate" in report.reason
    # each expert alone is smooth; only the layer (routing across units) fails
    assert abs(report.remainder_order - 2.0) < ORDER_TOLERANCE
    assert min(report.layer_ratios) > 0.05 and abs(report.layer_order) < ORDER_TOLERANCE


def _user_arch(unit, dim=5):
    template = {"p": jax.ShapeDtypeStruct((dim,), jnp.float32), "q": jax.ShapeDtypeStruct((dim,), jnp.float32)}
    return Architecture(name="user", unit=unit, template=template, input_shape=(dim,), outputs=1)


def test_user_written_units():
    # tanh(p.x) sin(q.x) = (p.x)(q.x) - (p.x)^3 (q.x)/3 - (p.x)(q.x)^3/6 + ...: quartic remainder
    smooth = _user_arch(lambda w, x: (jnp.tanh(w["p"] @ x) * jnp.sin(w["q"] @ x))[None])
    report = expansion_check(smooth)
    assert report.applies and abs(report.remainder_order - 2.0) < ORDER_TOLERANCE
    exact = _user_arch(lambda w, x: ((w["p"] @ x) * (w["q"] @ x))[None])
    assert math.isinf(expansion_check(exact).remainder_order)
    cubic = _user_arch(lambda w, x: ((w["p"] @ x) ** 2 * (w["q"] @ x))[None])
    assert expansion_check(cubic).kind == "vanishing form"
    kinked = _user_arch(lambda w, x: (jnp.abs(w["p"] @ x) * (w["q"] @ x))[None])
    assert expansion_check(kinked).kind == "not smooth"


def test_require_expansion_raises_one_line_with_the_reason():
    assert require_expansion(_arch("mlp", activation="tanh")).applies
    with pytest.raises(TheoryDoesNotApply) as info:
        require_expansion(_arch("mlp", activation="relu"))
    message = str(info.value)
    assert "\n" not in message
    assert "mlp (inputs=8, outputs=4, activation=relu)" in message and "not smooth at w = 0" in message


def test_float32_verdicts_survive_rounding():
    # 1 - cos(z) cancels in float32; the rounding floor must keep it from looking non-smooth
    with jax.enable_x64(False):
        cases = {
            ("mlp-fixed", "one_minus_cos"): "applies",
            ("mlp", "tanh"): "applies",
            ("mlp", "relu"): "not smooth",
            ("mlp", "softplus"): "linear term",
        }
        for (name, activation), kind in cases.items():
            report = expansion_check(_arch(name, activation=activation))
            assert report.dtype == "float32"
            assert report.kind == kind, (name, activation, report.reason)
