"""Random draws shared by training and the theory: the minibatches (training and the SGD map on M
see the same batches), the training keys and the init draw W0.

The keys and the random bits of the init draw are integer arithmetic (the Threefry-2x32 hash
that ``jax.random`` uses), computed here in numpy when the seed is a Python integer: JAX
would compile a program for the key, one for the split and one (the largest, 0.25 s on CPU)
for the bits and their transform. Only the transform of bits into normal floats (uniform
mantissa, then sqrt(2) erfinv, whose float rounding XLA decides, fused multiply-adds
included) stays a compiled program, one per dtype and size bucket. Both give
``jax.random.normal(training_keys(seed)[0], shape)`` bit for bit
(``tests/test_sampling.py``); a traced seed or key takes ``jax.random`` itself.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from nqf.core.errors import NqfError
from nqf.core.precision import jax_option
from nqf.core.programs import background_compile, bucket_length, to_device

_U32 = np.uint32
_THREEFRY_PARITY = _U32(0x1BD11BDA)
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
# the bit widths and mantissa lengths of the floats the host draw serves (others: jax.random)
_FLOAT_BITS = {np.dtype(np.float64): (64, 52), np.dtype(np.float32): (32, 23)}
# Draws of up to this many numbers take the host's bits (0.009 s for 2^18 in numpy); larger ones
# jax.random's compiled hash, which a first call compiles in 0.3 s and then runs 4x faster than
# numpy's (measured at 3.2e6 numbers: 0.08 s for the draw against 0.33 s for numpy's bits alone),
# the same numbers either way.
HOST_DRAW_MAX = 1 << 18


def minibatch_indices(key: jax.Array, num_samples: int, batch_size: int, steps: int) -> jax.Array:
    """Indices of the minibatch used at each step, shape (steps, batch_size).

    Each step draws ``batch_size`` distinct samples uniformly (without replacement
    within the step, independently across steps) from ``jax.random.fold_in(key, step)``.
    """
    return jax.vmap(lambda step: minibatch_row(key, num_samples, batch_size, step))(jnp.arange(steps))


def minibatch_row(key: jax.Array, num_samples: int, batch_size: int, step) -> jax.Array:
    """Row ``step`` of :func:`minibatch_indices` (batch_size,): the batch of that step alone, for
    a loop that draws its batches as it goes (the mean-field flow under SGD)."""
    if not 1 <= batch_size <= num_samples:
        raise NqfError(f"batch size must be between 1 and the number of samples {num_samples}, got {batch_size}")
    return jax.random.choice(jax.random.fold_in(key, step), num_samples, (batch_size,), replace=False)


def training_keys(seed: int | jax.Array) -> tuple[jax.Array, jax.Array]:
    """(init_key, batch_key) = split(PRNGKey(seed)): W0 ~ init_key, minibatches ~ batch_key.

    Raw uint32 keys of shape (2,); for a Python (or numpy) integer seed computed on the host
    (:func:`host_training_keys`), equal to JAX's."""
    host = host_training_keys(seed)
    if host is not None:
        return to_device(host[0]), to_device(host[1])
    keys = jax.random.split(jax.random.PRNGKey(seed))
    return keys[0], keys[1]


def _host_threefry_applies() -> bool:
    """Whether JAX's default generator is the one the host functions reproduce."""
    return jax_option("jax_default_prng_impl") == "threefry2x32" and bool(jax_option("jax_threefry_partitionable"))


def threefry2x32(key: np.ndarray, x1: np.ndarray, x2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Threefry-2x32 hash (20 rounds) of the counter pairs (x1, x2) under ``key`` (2,),
    all uint32 numpy arrays; what ``jax.random``'s threefry2x32 primitive computes."""
    k1, k2 = _U32(key[0]), _U32(key[1])
    schedule = (k1, k2, k1 ^ k2 ^ _THREEFRY_PARITY)
    with np.errstate(over="ignore"):  # uint32 arithmetic wraps, as the hash intends
        a, b = x1 + schedule[0], x2 + schedule[1]
        for i in range(5):
            for r in _THREEFRY_ROTATIONS[i % 2]:
                a = a + b
                b = a ^ ((b << _U32(r)) | (b >> _U32(32 - r)))  # b rotated left by r
            a = a + schedule[(i + 1) % 3]
            b = b + schedule[(i + 2) % 3] + _U32(i + 1)
    return a, b


def _counters(size: int) -> tuple[np.ndarray, np.ndarray]:
    """The 64-bit counters 0..size-1 as (high, low) uint32 halves (JAX's iota_2x32_shape)."""
    count = np.arange(size, dtype=np.uint64)
    return (count >> np.uint64(32)).astype(_U32), (count & np.uint64(0xFFFFFFFF)).astype(_U32)


def host_training_keys(seed) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`training_keys` of an integer seed in [0, 2^31) as two uint32 numpy arrays (2,), or
    None (a traced seed, another range, another generator: the caller uses JAX)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= int(seed) < 2**31:
        return None
    if not _host_threefry_applies():
        return None
    high, low = _counters(2)
    bits1, bits2 = threefry2x32(np.array([0, int(seed)], dtype=_U32), high, low)
    return np.array([bits1[0], bits2[0]], dtype=_U32), np.array([bits1[1], bits2[1]], dtype=_U32)


def host_key_data(key) -> np.ndarray | None:
    """The (2,) uint32 data of a concrete raw threefry key (a numpy or JAX array), else None."""
    if isinstance(key, jax.core.Tracer) or not _host_threefry_applies():
        return None
    try:
        data = np.asarray(key)
    except (TypeError, jax.errors.JAXTypeError):  # a typed key array: its data are jax.random.key_data
        return None
    if data.shape != (2,) or data.dtype != _U32:
        return None
    return data


def standard_normal(key, shape: tuple[int, ...], dtype) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)``, bit for bit, with the bits drawn on the host when
    ``key`` is a concrete raw threefry key, ``dtype`` float32 or float64 and the draw at most
    HOST_DRAW_MAX numbers (then only the transform of bits into floats compiles, once per dtype
    and size bucket)."""
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    data = host_key_data(key) if size <= HOST_DRAW_MAX else None
    if data is None or dtype not in _FLOAT_BITS:
        return jax.random.normal(key, shape, dtype=dtype)
    high, low = _counters(size)
    bits1, bits2 = threefry2x32(data, high, low)
    nbits, _ = _FLOAT_BITS[dtype]
    bits = (bits1.astype(np.uint64) << np.uint64(32)) | bits2.astype(np.uint64) if nbits == 64 else bits1 ^ bits2
    padded = np.zeros(bucket_length(size, floor=256), dtype=bits.dtype)
    padded[:size] = bits
    normal = np.asarray(_normal_program(size, dtype).result()(to_device(padded)))[:size].reshape(shape)
    return to_device(normal)


def prepare_standard_normal(size: int, dtype) -> None:
    """Start compiling, in the background, the program :func:`standard_normal` runs for a draw of
    ``size`` numbers of ``dtype`` from a host key (nothing where it would not run one), so that a
    caller that draws later (``predict``: its init, after the expansion check and the data's
    moments) does not wait for it: about 0.2 s of a first ``predict`` of 0.65 s on the 2-core AMD
    EPYC, the erf_inv of the transform compiling (its numpy twin would not be bit for bit: XLA
    contracts multiply-adds)."""
    dtype = np.dtype(dtype)
    if size <= HOST_DRAW_MAX and dtype in _FLOAT_BITS and _host_threefry_applies():
        _normal_program(size, dtype)


def _normal_program(size: int, dtype: np.dtype):
    """The future of :func:`_normal_of_bits` compiled for ``size``'s bucket (``nqf.core.programs``)."""
    nbits, _ = _FLOAT_BITS[dtype]
    bits = jax.ShapeDtypeStruct((bucket_length(size, floor=256),), np.uint64 if nbits == 64 else np.uint32)
    return background_compile(_normal_of_bits, (dtype,), (bits,))


@functools.partial(jax.jit, static_argnums=0)
def _normal_of_bits(dtype, bits: jax.Array) -> jax.Array:
    """Random bits (uint64 for float64, uint32 for float32) to N(0, 1) floats, the operations of
    ``jax.random.uniform`` on (nextafter(-1, 0), 1) and ``jax.random.normal`` in their order."""
    nbits, nmant = _FLOAT_BITS[np.dtype(dtype)]
    uint = bits.dtype
    one_bits = jnp.asarray(np.array(1.0, dtype).view(uint), dtype=uint)
    mantissa = jax.lax.shift_right_logical(bits, jnp.asarray(nbits - nmant, dtype=uint))
    floats = jax.lax.bitcast_convert_type(mantissa | one_bits, dtype) - jnp.array(1.0, dtype)
    low = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype), dtype=dtype)
    high = np.array(1.0, dtype)
    uniform = jax.lax.max(low, floats * (high - low) + low)
    return jax.lax.mul(np.array(np.sqrt(2), dtype), jax.lax.erf_inv(uniform))
