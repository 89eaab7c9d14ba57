"""Transformations of results are exact (issue 35): a Prediction or a Comparison passed through
``jax.tree.map``, ``jax.jit``, ``jax.vmap`` or ``jax.device_put`` keeps every number in its place,
and its ``to_json`` stays the same plain JSON whatever arrays its leaves became."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.core.pytrees import json_value


@pytest.fixture(scope="module")
def predictions():
    """Two predictions that differ only in sigma0: equal metadata, so one tree structure."""
    X, Y = nqf.get_task("staircase").generate(0)
    arch = nqf.get_architecture("mlp", activation="tanh")
    return tuple(
        nqf.predict(arch, X, Y, nqf.PredictConfig(width=8, lr=0.05, steps=200, sigma0=sigma0))
        for sigma0 in (1e-6, 1e-7)
    )


@pytest.fixture(scope="module")
def stacked(predictions):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *predictions)


@pytest.fixture(scope="module")
def comparison():
    return nqf.compare("staircase", None, nqf.CompareConfig(width=8, lr=0.05, steps=200, sigma0=1e-4))


def _json(result) -> str:
    return json.dumps(result.to_json(), sort_keys=True, allow_nan=False)


def _assert_same_leaves(result, other) -> None:
    """The same key paths, and at each the same shape and the same numbers."""
    leaves = jax.tree_util.tree_flatten_with_path(result)[0]
    other_leaves = jax.tree_util.tree_flatten_with_path(other)[0]
    assert [jax.tree_util.keystr(path) for path, _ in other_leaves] == [
        jax.tree_util.keystr(path) for path, _ in leaves
    ]
    for (path, leaf), (_, other_leaf) in zip(leaves, other_leaves, strict=True):
        assert np.shape(other_leaf) == np.shape(leaf), jax.tree_util.keystr(path)
        np.testing.assert_array_equal(other_leaf, leaf, err_msg=jax.tree_util.keystr(path))


def _event_times(prediction) -> np.ndarray:
    return np.asarray([event[0] for event in prediction.singular.events])


def test_identity_tree_map_round_trips_every_leaf(predictions, stacked, comparison):
    for result in (*predictions, stacked, comparison):
        _assert_same_leaves(result, jax.tree.map(lambda x: x, result))
    # the stacked limit: event i holds the times of event i of both predictions, in stack order
    expected = np.stack([_event_times(p) for p in predictions], axis=-1)
    assert len(predictions[0].singular.events) > 2  # more events than stacked predictions
    np.testing.assert_array_equal(_event_times(stacked), expected)
    np.testing.assert_array_equal(_event_times(jax.tree.map(lambda x: x, stacked)), expected)


def test_jit_returns_the_prediction_it_was_given(predictions):
    prediction = predictions[0]
    same = jax.jit(lambda p: p)(prediction)
    assert type(same) is nqf.Prediction and _json(same) == _json(prediction)
    _assert_same_leaves(prediction, same)
    _assert_same_leaves(prediction, jax.jit(lambda p: jax.tree.map(lambda x: x, p))(prediction))


def test_jit_builds_a_prediction_from_traced_leaves(predictions):
    """A config rebuilt inside jit: its checks meet a traced learning rate."""
    prediction = predictions[0]

    def doubled_lr(p):
        return dataclasses.replace(p, config=dataclasses.replace(p.config, lr=2 * p.config.lr))

    rebuilt = jax.jit(doubled_lr)(prediction)
    assert float(rebuilt.config.lr) == 2 * prediction.config.lr
    restored = dataclasses.replace(rebuilt, config=dataclasses.replace(rebuilt.config, lr=prediction.config.lr))
    assert _json(restored) == _json(prediction)


def test_jit_returns_the_comparison_it_was_given(comparison):
    same = jax.jit(lambda c: c)(comparison)
    assert _json(same) == _json(comparison)
    _assert_same_leaves(comparison, same)


def test_vmap_over_stacked_predictions(predictions, stacked):
    final = jax.vmap(lambda p: p.lv_loss[-1] + p.singular.events[-1][0])(stacked)
    np.testing.assert_array_equal(final, [p.lv_loss[-1] + p.singular.events[-1][0] for p in predictions])
    _assert_same_leaves(stacked, jax.vmap(lambda p: p)(stacked))


def test_to_json_after_device_put(predictions, comparison):
    for result in (predictions[0], comparison):
        assert _json(jax.device_put(result)) == _json(result)


def test_to_json_after_tree_map_to_numpy(predictions, comparison):
    for result in (predictions[0], comparison):
        assert _json(jax.tree.map(np.asarray, result)) == _json(result)


def test_json_value_makes_plain_numbers_of_any_array():
    values = {
        "python": (1, 2.5, True),
        "numpy": (np.int64(3), np.float32(0.5), np.bool_(False), np.array(7), np.array([[1.0, np.nan]])),
        "jax": (jnp.asarray(4), jnp.asarray(0.25), jnp.asarray([np.inf, -1.0])),
        "other": ("text", None),
    }
    plain = json_value(values)
    assert plain == {
        "python": [1, 2.5, True],
        "numpy": [3, 0.5, False, 7, [[1.0, None]]],
        "jax": [4, 0.25, [None, -1.0]],
        "other": ["text", None],
    }
    assert [type(v) for v in plain["numpy"][:3] + plain["jax"][:2]] == [int, float, bool, int, float]
