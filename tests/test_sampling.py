"""The host draw (``nqf.core.sampling``) against ``jax.random``: keys and init draws bit for bit."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from nqf.architectures import get_architecture
from nqf.architectures.architecture import init_weights
from nqf.core import sampling

SEEDS = (0, 1, 2, 7, 123, 99999, 2**31 - 1)
SHAPES = ((13, 32), (7, 64), (1, 1), (3, 5), (100,), (794, 256), (600, 512))  # the last: above HOST_DRAW_MAX


def _jax_keys(seed: int):
    keys = jax.random.split(jax.random.PRNGKey(seed))
    return keys[0], keys[1]


@pytest.mark.parametrize("seed", SEEDS)
def test_training_keys_equal_jax_split(seed):
    host = sampling.host_training_keys(seed)
    assert host is not None
    for mine, theirs in zip(sampling.training_keys(seed), _jax_keys(seed), strict=True):
        assert np.asarray(mine).dtype == np.uint32 and np.array_equal(np.asarray(mine), np.asarray(theirs))
    assert np.array_equal(host[0], np.asarray(_jax_keys(seed)[0]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_standard_normal_equals_jax_random_normal_bit_for_bit(dtype):
    for seed in SEEDS:
        key = _jax_keys(seed)[0]
        for shape in SHAPES:
            mine = np.asarray(sampling.standard_normal(key, shape, dtype))
            theirs = np.asarray(jax.random.normal(key, shape, dtype=dtype))
            assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
            assert np.array_equal(mine, theirs), (seed, shape, int(np.sum(mine != theirs)))


def test_init_weights_equal_the_jax_product():
    arch = get_architecture("mlp", inputs=4, outputs=3)
    for seed, sigma0 in ((0, 1e-6), (5, 0.3), (11, 1)):
        key = _jax_keys(seed)[0]
        expected = sigma0 * jax.random.normal(key, (arch.dim, 16), dtype=np.float64)
        got = init_weights(arch, sampling.training_keys(seed)[0], 16, sigma0, np.float64)
        assert np.array_equal(np.asarray(got), np.asarray(expected))


def test_traced_keys_and_other_seeds_take_jax_random():
    assert sampling.host_training_keys(-1) is None and sampling.host_training_keys(2**31) is None
    assert sampling.host_training_keys(True) is None and sampling.host_training_keys(1.0) is None
    # inside jit the key is a tracer: jax.random itself, the same numbers
    key = _jax_keys(3)[0]
    traced = jax.jit(lambda k: sampling.standard_normal(k, (4, 6), np.float64))(key)
    assert np.array_equal(np.asarray(traced), np.asarray(jax.random.normal(key, (4, 6), dtype=np.float64)))
    # a seed beyond the host range still gives JAX's keys
    for mine, theirs in zip(sampling.training_keys(2**31 + 5), _jax_keys(2**31 + 5), strict=True):
        assert np.array_equal(np.asarray(mine), np.asarray(theirs))


def test_host_bits_equal_jax_bits_above_the_host_size():
    # the host hash itself at a size the draw leaves to jax.random: the same bits
    key = np.asarray(_jax_keys(4)[0])
    low = np.arange(300_000, dtype=np.uint32)  # the counters 0..N-1: high halves 0
    bits1, bits2 = sampling.threefry2x32(key, np.zeros_like(low), low)
    theirs = np.asarray(jax.random.bits(_jax_keys(4)[0], (300_000,), dtype=np.uint32))
    assert np.array_equal(bits1 ^ bits2, theirs)


def test_threefry_known_answer():
    # the Random123 known-answer vector for Threefry-2x32 with 20 rounds: key = counter = 0
    a, b = sampling.threefry2x32(np.zeros(2, np.uint32), np.zeros(1, np.uint32), np.zeros(1, np.uint32))
    assert (int(a[0]), int(b[0])) == (0x6B200159, 0x99BA4EFE)
