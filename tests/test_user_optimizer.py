"""A user's own optax GradientTransformation trains the network (issue 32, item 4): ``nqf.train``
through ``TrainConfig(optimizer=...)``, ``nqf.compare`` through ``CompareConfig(optimizers=...)``.

It trains exactly as the built-in optimizer it equals; two transformations never share a
compiled run (the cache keys them by the object); the theory has no M-flow for one, which
``compare`` says in one note (its rows carry the network alone) and ``predict`` refuses in one line.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import optax
import pytest

import nqf
from nqf.core.errors import NqfError
from nqf.training.grid import train_grid
from nqf.training.runs import _clear_compiled, _trace_count
from tests.conftest import assert_allclose

STAIRCASE = nqf.get_task("staircase")
X, Y = STAIRCASE.generate(0, "float64")
ARCH = STAIRCASE.architecture()
CONFIG = nqf.TrainConfig(lr=0.05, steps=120, width=8, sigma0=1e-2, dtype="float64")


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and text, text
    return text


def test_optax_sgd_as_an_object_trains_as_gd():
    named = nqf.train(ARCH, X, Y, CONFIG)
    own = nqf.train(ARCH, X, Y, replace(CONFIG, optimizer=optax.sgd(0.05)))
    assert_allclose(own.loss, named.loss, rtol=0, atol=1e-12)  # measured: equal to the bit (0.0)
    assert_allclose(own.W_final, named.W_final, rtol=0, atol=1e-12)
    assert named.loss[-1] < 0.5 * named.loss[0]  # it trained


def test_optax_adam_trains_and_differs_from_sgd():
    sgd = nqf.train(ARCH, X, Y, replace(CONFIG, optimizer=optax.sgd(0.01)))
    adam = nqf.train(ARCH, X, Y, replace(CONFIG, optimizer=optax.adam(0.01)))
    named = nqf.train(ARCH, X, Y, replace(CONFIG, optimizer="adam", lr=0.01))
    assert adam.loss[-1] < 0.5 * adam.loss[0] and not adam.diverged
    assert np.max(np.abs(adam.loss - sgd.loss)) > 1e-2  # measured: about 1.5
    assert_allclose(adam.loss, named.loss, rtol=1e-12, atol=0)  # optax.adam is nqf's adam (b1 0.9)


def test_two_transformations_in_one_process_keep_their_own_training():
    """Alike transformations (one optax function, another learning rate) are two cache keys;
    the same object reuses its compiled run."""
    _clear_compiled()
    slow, fast = optax.sgd(0.02), optax.sgd(0.05)
    first = nqf.train(ARCH, X, Y, replace(CONFIG, optimizer=slow))
    second = nqf.train(ARCH, X, Y, replace(CONFIG, optimizer=fast))
    assert np.max(np.abs(first.loss - second.loss)) > 1e-2
    assert_allclose(first.loss, nqf.train(ARCH, X, Y, replace(CONFIG, lr=0.02)).loss, rtol=0, atol=1e-12)
    assert_allclose(second.loss, nqf.train(ARCH, X, Y, CONFIG).loss, rtol=0, atol=1e-12)
    traced = _trace_count()
    again = nqf.train(ARCH, X, Y, replace(CONFIG, optimizer=slow, seed=3))
    assert _trace_count() == traced  # the same object: its compiled run, not traced again
    assert not np.array_equal(again.loss, first.loss)  # another W0
    for batching in ("loop", "vmap"):  # a sweep keys the same way
        swept = train_grid(ARCH, X, Y, replace(CONFIG, optimizer=fast), [1e-2], [0], batching=batching)
        assert_allclose(swept.loss[0, 0], second.loss, rtol=1e-12, atol=1e-15)


def test_compare_reports_the_network_and_says_there_is_no_mflow():
    config = nqf.CompareConfig(
        width=8, sigma0=1e-3, lr=0.05, steps=300, optimizers=("gd", optax.adam(0.01)), include_quadratic=False
    )
    assert config.optimizers == ("gd", "custom") and config.own.keys() == {"custom"}
    c = nqf.compare(STAIRCASE, None, config)
    result = c.to_json()
    notes = [note for note in result["notes"] if note.startswith("custom:")]
    assert len(notes) == 1 and "no M-flow" in notes[0], result["notes"]
    assert "custom" not in result["reference_only"] and result["learning_rates"] == {"gd": 0.05, "custom": None}
    assert result["config"]["optimizers"] == ["gd", "custom"] and result["config"]["own_optimizers"] == ["custom"]
    for row in result["modes"]:
        assert row["predicted_by_optimizer"]["custom"] == {
            "mflow": None,
            "mean_field": None,  # no flow: no mean-field prediction either
            "mean_field_plateau_loss": None,
            "mean_field_plateau_timing": None,
            "flow": None,
            "reference": False,
        }
        assert row["relative_error"]["network"]["custom"] is None
        assert row["measured"]["network"]["custom"] is not None  # the network switched on
    assert set(c.predictions) == {"gd"}  # no theory invented for it
    alone = nqf.train(ARCH, X, Y, nqf.TrainConfig(optimizer=config.own["custom"], steps=300, width=8, sigma0=1e-3))
    assert_allclose(c.network["custom"].loss[0, 0], alone.loss, rtol=1e-12, atol=1e-15)


def test_the_compare_figure_and_tables_take_a_users_transformation(tmp_path):
    from nqf.report.compare_plot import plot_comparison

    config = nqf.CompareConfig(
        width=8, sigma0=1e-3, lr=0.05, steps=200, optimizers=(optax.sgd(0.05),), include_quadratic=False, closure=False
    )
    c = nqf.compare(STAIRCASE, None, config)
    plot_comparison(c, tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 0
    # sgd(0.05) is gd at 0.05: the network's steps equal the GD network's, with no M-flow beside them
    gd = nqf.compare(STAIRCASE, None, replace(config, optimizers=("gd",), transforms=()))
    assert_allclose(c.network_switch["custom"], gd.network_switch["gd"], rtol=0, atol=0)
    assert np.all(np.isnan(c.flow_switch["custom"]))


def test_predict_refuses_a_transformation_in_one_line():
    with pytest.raises(NqfError) as err:
        nqf.PredictConfig(width=8, lr=0.05, steps=100, sigma0=1e-3, optimizer=optax.sgd(0.05))
    text = _one_line(err)
    assert "M-flow exists only for the named optimizers gd, sgd, momentum" in text


@pytest.mark.no_shape_checks
@pytest.mark.parametrize("bad", ["rmsprop", 5, object(), optax.sgd])
def test_a_bad_optimizer_is_one_line(bad):
    for make in (
        lambda: nqf.TrainConfig(optimizer=bad),
        lambda: nqf.CompareConfig(optimizers=("gd", bad)),
    ):
        with pytest.raises(NqfError) as err:
            make()
        text = _one_line(err)
        assert text.startswith("unknown optimizer") and "GradientTransformation" in text, text


def test_a_transformation_takes_no_beta_eps_or_rate_of_nqf():
    with pytest.raises(NqfError) as err:
        nqf.TrainConfig(optimizer=optax.adam(0.01), beta=0.9)
    assert "beta is not used" in _one_line(err) and "your own optax transformation" in str(err.value)
    with pytest.raises(NqfError) as err:
        nqf.TrainConfig(optimizer=optax.adam(0.01), eps=1e-8)
    assert "eps is not used" in _one_line(err) and "your own optax transformation" in str(err.value)
    with pytest.raises(NqfError) as err:
        nqf.CompareConfig(optimizers=(optax.adam(0.01),), learning_rates=(("custom", 0.1),))
    assert "set it there" in _one_line(err)
    transform = optax.adam(0.01)
    with pytest.raises(NqfError) as err:
        nqf.CompareConfig(optimizers=(transform, transform))
    assert "listed twice" in _one_line(err)
    two = nqf.CompareConfig(optimizers=(optax.adam(0.01), optax.sgd(0.1), "gd"))
    assert two.optimizers == ("custom1", "custom2", "gd")
    assert replace(two, width=4).own == two.own  # replace keeps the transformations
