"""A Prediction is a pytree of its numbers (issue 20): flatten and rebuild give the same
prediction, every leaf is an array or a number, ``jax.jit`` takes one, and predictions whose
metadata agree stack with ``jax.tree.map``."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

import nqf
from nqf.theory.departure.estimate import Departure


@pytest.fixture(scope="module")
def staircase():
    X, Y = nqf.get_task("staircase").generate(0)
    return nqf.get_architecture("mlp", activation="tanh"), X, Y


def _predict(staircase, **settings):
    arch, X, Y = staircase
    return nqf.predict(arch, X, Y, nqf.PredictConfig(**{"width": 32, "lr": 0.05, "steps": 800, **settings}))


def _json(p) -> str:
    return json.dumps(p.to_json(), sort_keys=True)


def test_flatten_and_rebuild_give_the_same_prediction(staircase):
    p = _predict(staircase, sigma0=1e-6)
    leaves, tree = jax.tree.flatten(p)
    assert all(isinstance(leaf, (np.ndarray, jax.Array, float, int, np.number)) for leaf in leaves)
    rebuilt = jax.tree.unflatten(tree, leaves)
    assert type(rebuilt) is nqf.Prediction and _json(rebuilt) == _json(p)
    paths = {jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(p)[0]}
    assert {".lv_loss", ".flow.loss", ".modes.growth", ".lv.c", ".singular.switch_times", ".config.sigma0"} <= paths
    hash(tree)  # the metadata is hashable: a Prediction can be an argument of a jitted function


def test_tree_map_and_jit(staircase):
    p = _predict(staircase, sigma0=1e-6)
    as_numpy = jax.tree.map(np.asarray, p)
    assert _json(as_numpy) == _json(p)
    final = jax.jit(lambda q: q.lv_loss[-1] - q.lv_plateau_losses[-1] + q.config.lr)(p)
    assert float(final) == pytest.approx(p.lv_loss[-1] - p.lv_plateau_losses[-1] + p.config.lr, rel=1e-15)


def test_predictions_with_equal_metadata_stack(staircase):
    """sigma0 scales W0 without changing its directions: the same notes, so one tree structure."""
    small, large = _predict(staircase, sigma0=1e-7), _predict(staircase, sigma0=1e-6)
    assert jax.tree.structure(small) == jax.tree.structure(large)
    stacked = jax.tree.map(lambda *a: np.stack(a), small, large)
    np.testing.assert_array_equal(stacked.config.sigma0, [1e-7, 1e-6])
    np.testing.assert_array_equal(stacked.mflow_switch_steps, [small.mflow_switch_steps, large.mflow_switch_steps])
    assert stacked.mflow_switch_steps[0, 0] > stacked.mflow_switch_steps[1, 0]  # a smaller init switches later


def test_departure_is_part_of_the_tree(staircase):
    p = _predict(staircase, sigma0=1e-6)
    departure = Departure(
        steps=np.arange(3.0),
        relative_gap=np.full(3, 1e-3),
        network_loss=np.ones(3),
        quadratic_loss=np.ones(3),
        samples=256,
        subsampled=False,
    )
    with_departure = dataclasses.replace(p, departure=departure)
    doubled = jax.tree.map(lambda a: 2 * a, with_departure)
    np.testing.assert_array_equal(doubled.departure.relative_gap, 2e-3)
    np.testing.assert_array_equal(doubled.departure.network_loss, 2.0)
    assert doubled.departure.samples == 256  # metadata, not a leaf


@pytest.mark.slow  # 3.4-5.9 s
def test_comparison_is_a_pytree_of_what_it_measured():
    """A Comparison's leaves reach its predictions, trained runs and closure checks; rebuilt from
    them it gives the same JSON."""
    config = nqf.CompareConfig(width=16, lr=0.05, steps=200, sigma0=1e-4, optimizers=("gd", "momentum"))
    comparison = nqf.compare("staircase", None, config)
    leaves, tree = jax.tree.flatten(comparison)
    assert all(isinstance(leaf, (np.ndarray, jax.Array, float, int, np.number)) for leaf in leaves)
    rebuilt = jax.tree.unflatten(tree, leaves)
    assert json.dumps(rebuilt.to_json(), sort_keys=True) == json.dumps(comparison.to_json(), sort_keys=True)
    paths = {jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(comparison)[0]}
    assert ".network['gd'].loss" in paths and ".closure['momentum'].m_defect" in paths
    assert any(p.startswith(".predictions['gd'][0].flow.loss") for p in paths)
