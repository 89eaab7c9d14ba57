"""Tests run in float64 (the library itself never flips jax_enable_x64)."""

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)


def assert_allclose(actual, desired, rtol, atol=0.0, err_msg=""):
    """The one tolerance helper: explicit rtol/atol at every call site."""
    np.testing.assert_allclose(np.asarray(actual), np.asarray(desired), rtol=rtol, atol=atol, err_msg=err_msg)
