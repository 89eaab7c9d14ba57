"""Compiled programs kept in process (``nqf.core.programs``): a program compiled in the background
against the same function run by jit, its cache, and its tracing in the caller's configuration."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nqf.core import programs
from nqf.core.programs import background_compile, bucket_length


@partial(jax.jit, static_argnames=("power",))
def _scaled_power(power, x, scale):
    return scale * x**power + 0.5


@jax.jit
def _plus_default_zeros(x):
    return x + jnp.zeros(x.shape)  # zeros of the default float: the result's dtype follows the configuration


def _shapes(*arrays):
    return tuple(jax.ShapeDtypeStruct(np.shape(a), jnp.asarray(a).dtype) for a in arrays)


def test_background_compile_equals_jit_and_is_kept():
    """The background program gives jit's numbers to the bit; the same function, static arguments
    and shapes return the very same future (nothing compiled again); other shapes or another static
    argument compile another program."""
    x, scale = np.linspace(-2.0, 3.0, 7), np.float64(1.7)
    first = background_compile(_scaled_power, (3,), _shapes(x, scale))
    assert np.array_equal(np.asarray(first.result()(x, scale)), np.asarray(_scaled_power(3, x, scale)))
    assert background_compile(_scaled_power, (3,), _shapes(x, scale)) is first
    assert background_compile(_scaled_power, (2,), _shapes(x, scale)) is not first
    longer = np.linspace(0.0, 1.0, 9)
    other = background_compile(_scaled_power, (3,), _shapes(longer, scale))
    assert other is not first
    assert np.array_equal(np.asarray(other.result()(longer, scale)), np.asarray(_scaled_power(3, longer, scale)))


def test_background_compile_traces_in_the_callers_configuration():
    """Traced in the caller's thread: a thread-local configuration (jax.enable_x64(False) inside a
    float64 process) reaches the program, as it reaches jit (traced in the worker thread the
    program would compute in float64), and it is kept apart from the float64 program."""
    assert jnp.result_type(float) == jnp.float64  # the test process's setting (conftest)
    x = np.ones(3, dtype=np.float32)
    with jax.enable_x64(False):
        narrow = background_compile(_plus_default_zeros, (), _shapes(x)).result()
        assert narrow(x).dtype == np.float32 == _plus_default_zeros(x).dtype
    wide = background_compile(_plus_default_zeros, (), _shapes(x)).result()
    assert wide is not narrow and wide(x).dtype == np.float64 == _plus_default_zeros(x).dtype


class _FailsOnce:
    """A stand-in for a jitted function whose first compile fails (as XLA out of memory would)."""

    def __init__(self):
        self.compiles = 0

    def lower(self, *args):
        return self

    def compile(self):
        self.compiles += 1
        if self.compiles == 1:
            raise RuntimeError("compile failed")
        return lambda *a: "compiled"


def test_a_failed_background_compile_is_tried_again():
    flaky = _FailsOnce()
    shapes = (jax.ShapeDtypeStruct((2,), jnp.float64),)
    failed = background_compile(flaky, (), shapes)
    with pytest.raises(RuntimeError, match="compile failed"):
        failed.result()
    again = background_compile(flaky, (), shapes)
    assert again is not failed and again.result()() == "compiled" and flaky.compiles == 2
    assert background_compile(flaky, (), shapes) is again  # kept once it succeeded


def test_bucket_length():
    assert [bucket_length(n) for n in (1, 64, 65, 800, 900, 1025)] == [64, 64, 128, 1024, 1024, 2048]
    assert bucket_length(5, floor=1) == 8 and bucket_length(900, cap=950) == 950
    assert bucket_length(1000, cap=950) == 1000  # beyond the cap: n itself


def test_program_cache_is_bounded():
    """The background programs are the 16 most recently used."""
    for n in range(1, 20):
        background_compile(_scaled_power, (1,), _shapes(np.zeros(n), np.float64(1.0))).result()
    assert len(programs._PROGRAMS.entries) <= programs._PROGRAMS.size == 16


def test_background_compile_under_disable_jit_runs_the_function_eagerly():
    """jax.disable_jit() (a user debugging their unit) gets the function itself, as jit gives it there:
    the same numbers, nothing compiled or kept."""
    x, scale = np.linspace(-1.0, 1.0, 5), np.float64(0.3)
    kept = len(programs._PROGRAMS.entries)
    with jax.disable_jit():
        eager = background_compile(_scaled_power, (3,), _shapes(x, scale)).result()
        assert_allclose = np.testing.assert_allclose
        assert_allclose(np.asarray(eager(x, scale)), scale * x**3 + 0.5, rtol=1e-15)
    assert len(programs._PROGRAMS.entries) == kept


def test_background_calls_keep_the_order_and_run_side_by_side():
    """Each call in its own thread, the results in the calls' order; compiled programs release the
    GIL, so two of them overlap (each waits for the other to have started)."""
    import threading

    from nqf.core.programs import background_calls

    def results(calls):
        return [future.result(timeout=30) for future in background_calls(calls)]

    assert results([]) == [] and results([lambda: 3]) == [3]
    both = threading.Barrier(2, timeout=30)

    def call(value):
        both.wait()  # raises BrokenBarrierError when the calls run one after the other
        return value * value

    assert results([partial(call, 2), partial(call, 5)]) == [4, 25]


def test_background_calls_return_before_the_calls_end():
    """The futures come back while the calls still run (each waits for an event set after
    background_calls returned: run in place, it would time out and return False); under
    jax.disable_jit() they run in the caller's thread, done on return, an exception kept in its
    future."""
    import threading

    from nqf.core.programs import background_calls

    released = threading.Event()
    futures = background_calls([partial(released.wait, 30), partial(released.wait, 30)])
    assert not any(future.done() for future in futures)
    released.set()
    assert [future.result(timeout=30) for future in futures] == [True, True]

    caller = threading.get_ident()

    def fails():
        raise ValueError("kept")

    with jax.disable_jit():
        here, failed = background_calls([threading.get_ident, fails])
    assert here.done() and here.result() == caller
    with pytest.raises(ValueError, match="kept"):
        failed.result()
