"""jaxtyping's shape annotations are checked at test time (tests/conftest.py installs jaxtyping's
import hook with beartype on the modules of src/nqf that import jaxtyping): a call whose arrays
disagree with the annotations raises jaxtyping.TypeCheckError. Without the hook these calls
return (a wrong answer) or raise nqf's own error, so these tests fail."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

import nqf
from nqf.architectures.architecture import network, order_parameter
from tests.conftest import SHAPE_CHECKED_MODULES, SHAPE_CHECKS

pytestmark = pytest.mark.skipif(not SHAPE_CHECKS, reason="NQF_SHAPE_CHECKS=0: jaxtyping's import hook is off")


def test_the_annotated_modules_are_loaded_through_the_hook():
    assert {"nqf.architectures.architecture", "nqf.theory.flow.maps", "nqf.theory.lotka_volterra.solve"} <= set(
        SHAPE_CHECKED_MODULES
    )
    for name in SHAPE_CHECKED_MODULES:
        module = importlib.import_module(name)
        assert type(module.__spec__.loader).__module__ == "jaxtyping._import_hook", name


def test_a_wrong_rank_is_refused():
    W = jnp.ones((4, 3))
    assert order_parameter(W).shape == (4, 4)
    with pytest.raises(jaxtyping.TypeCheckError, match="order_parameter"):
        order_parameter(jnp.ones(4))  # (d,) not (d, n): unchecked, W @ W.T is a scalar


def test_a_wrong_dtype_is_refused():
    with pytest.raises(jaxtyping.TypeCheckError):
        order_parameter(jnp.ones((4, 3), dtype=jnp.int32))  # Float[...]: not an integer array


def test_one_axis_name_is_one_size_across_the_arguments():
    arch = nqf.get_architecture("mlp", inputs=3, outputs=2)
    nqf.population_data_matrices(arch, np.eye(3), np.ones((2, 3)))
    # covariance (D, D) and teacher (K, D): D = 3 and 4 (unchecked: nqf's own NqfError)
    with pytest.raises(jaxtyping.TypeCheckError, match="population_data_matrices"):
        nqf.population_data_matrices(arch, np.eye(3), np.ones((2, 4)))


def test_jit_traced_calls_are_checked_when_traced():
    arch = nqf.get_architecture("mlp", inputs=3, outputs=2)
    W = jnp.ones((arch.dim, 5))
    assert jax.jit(lambda W: network(arch, W, jnp.ones(3)))(W).shape == (2,)
    with pytest.raises(jaxtyping.TypeCheckError, match="network"):
        jax.jit(lambda W: network(arch, W, jnp.ones(3)))(W[0])  # W: (d,), not (d, n)


@pytest.mark.no_shape_checks
def test_the_marker_turns_the_checks_off():
    assert jaxtyping.config.jaxtyping_disable
    assert order_parameter(jnp.ones(4)).shape == ()
