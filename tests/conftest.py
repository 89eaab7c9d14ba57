"""Tests run in float64 (the library itself never flips jax_enable_x64)."""

import atexit
import os
import shutil
import tempfile

import jax
import numpy as np

# The CLI keeps compiled computations in a persistent cache: one per test session, not the
# user's ~/.cache (tests of the cache itself set NQF_CACHE_DIR explicitly).
if "NQF_CACHE_DIR" not in os.environ:
    os.environ["NQF_CACHE_DIR"] = tempfile.mkdtemp(prefix="nqf-test-cache-")
    atexit.register(shutil.rmtree, os.environ["NQF_CACHE_DIR"], ignore_errors=True)

jax.config.update("jax_enable_x64", True)


def assert_allclose(actual, desired, rtol, atol=0.0, err_msg=""):
    """The one tolerance helper: explicit rtol/atol at every call site."""
    np.testing.assert_allclose(np.asarray(actual), np.asarray(desired), rtol=rtol, atol=atol, err_msg=err_msg)
