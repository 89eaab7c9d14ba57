"""The host path (``nqf.core.host_eval``) against XLA, dtype by dtype (issues 34 and 35).

Every primitive of the host path's table, and the unusual ones a user's unit may hold (cond,
while_loop, gather, sort, custom_jvp/vjp, integer division, rem, shifts, argmax, cumsum,
erf_inv, pow with an integer exponent, reduce_precision, ...), run on float32, float64, int8,
int32, uint8 and bool arguments (each dtype lax accepts for it) with edge values: zero and -0,
negatives, the dtype's largest and smallest numbers, NaN and infinities, the smallest normal
and a subnormal float, empty arrays. Required: ``host_or_compiled`` returns what ``jax.jit``
returns, exactly (dtype, shape, values, NaN where NaN, the sign of every zero), whether the host
path took the case or declined it; only numpy's transcendental functions may differ from XLA's
approximations, by at most MAX_ULPS units in the last place (a few more on ordinary arguments:
test_transcendental_functions_agree_to_a_few_ulps), and a mean by 1 (XLA divides by the count
as a multiplication by its reciprocal). And the contract of the module
docstring: the host path takes exactly the (primitive, dtype) pairs it lists (``host``
below), refusing the others when tracing (``Traced.unsupported``), so that float arithmetic
keeps the host path and nothing outside the contract is computed in numpy.

The tests run with jax_enable_x64 on (tests/conftest.py), as the whole suite does. One compiled
program per case holds every dtype and value set of the case (compiling is the slow part).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from nqf.core import host_eval

DTYPES = ("float32", "float64", "int8", "int32", "uint8", "bool")
FLOATS = frozenset({"float32", "float64"})
INTEGERS = frozenset({"int8", "int32", "uint8"})
NUMBERS = FLOATS | INTEGERS
BITS = INTEGERS | {"bool"}
EVERY = NUMBERS | {"bool"}
NOWHERE: frozenset[str] = frozenset()
# numpy's exp, log, tanh, sin, erf, pow, ... against XLA's approximations on the edge values
# (measured: at most 2)
MAX_ULPS = 4


def edge_values(dtype: str) -> np.ndarray:
    """Values whose sums, products and quotients two by two stay normal numbers (floats: exact
    dyadic numbers, so sums in any order agree), with each dtype's limits for the integers."""
    if dtype in FLOATS:
        return np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.0, np.inf, -np.inf, np.nan], dtype=dtype)
    if dtype == "bool":
        return np.array([False, True])
    info = np.iinfo(dtype)
    small = [0, 1, 2, 3, 7, 100] if info.min == 0 else [0, 1, -1, 2, -3, 7, 100, -100]
    return np.array([*small, info.max, info.min, info.max - 1, info.min + 1, info.max // 2 + 1], dtype=dtype)


def extreme_values(dtype: str) -> np.ndarray | None:
    """Floats at the ends of their range: their results overflow, underflow or are subnormal
    (XLA flushes subnormals to zero: the host path declines those at run time, and a subnormal
    argument, test_subnormal_numbers_are_compiled)."""
    if dtype not in FLOATS:
        return None
    info = np.finfo(dtype)
    return np.array([info.max, -info.max, info.tiny, -info.tiny, 1.0, -1.0, 0.0, 2.0, np.nan], dtype=dtype)


def _pairs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.repeat(values, len(values)), np.tile(values, len(values))


def _triples(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo, x, hi = np.meshgrid(values, values, values, indexing="ij")
    return lo.ravel(), x.ravel(), hi.ravel()


# -- how a case builds its arguments from a dtype's values: [(label, args)]. `exact_sums`: the
# values' sums and products are exact in any order (the edge values, integers); the extreme
# floats' are not, so their products and reductions combine two numbers at most.
def unary(values, exact_sums):
    return [("edge", (values,)), ("empty", (values[:0],))]


def edge_only(values, exact_sums):
    return [("edge", (values,))]


def binary(values, exact_sums):
    return [("edge", _pairs(values)), ("empty", (values[:0], values[:0]))]


def ternary(values, exact_sums):
    return [("edge", _triples(values)), ("empty", (values[:0],) * 3)]


def matrices(values, exact_sums):
    """(n, n) by (n, n), outer products (one product per result), empty contractions."""
    a, b = _pairs(values)
    n = len(values)
    square = [("edge", (a.reshape(n, n), b.reshape(n, n)))] if exact_sums else []
    return [
        *square,
        ("outer", (values[:, None], values[None, :])),
        ("empty", (values[:0].reshape(3, 0), values[:0].reshape(0, 2))),
    ]


def reduced(values, exact_sums):
    """Stacked pairs (2, m): every reduction of two values; one value (1, n); (n, n) for
    integers and bool (a float product of n numbers rounds by the order); empty axes."""
    a, b = _pairs(values)
    n = len(values)
    square = [("square", (b.reshape(n, n),))] if values.dtype.kind != "f" else []
    return [("pairs", (np.stack([a, b]),)), ("one", (values[None],)), *square, ("empty", (values[:0].reshape(0, 3),))]


@dataclass(frozen=True)
class Case:
    fn: Callable
    args: Callable  # (values, exact_sums) -> [(label, args)]
    host: frozenset[str]  # the dtypes the host path takes (those lax accepts); the others declined
    ulps: int = 0  # units in the last place numpy's float result may differ by (0: exactly)


def _reduce(fn):
    return lambda x: (fn(x, (0,)), fn(x[None], (0, 1)))  # one axis, a tuple of axes


@jax.custom_jvp
def _custom_jvp_product(a, b):
    return a * b


_custom_jvp_product.defjvp(lambda primals, tangents: (primals[0] * primals[1], tangents[0] * primals[1]))


@jax.custom_vjp
def _custom_vjp_product(a, b):
    return a * b


_custom_vjp_product.defvjp(lambda a, b: (a * b, (a, b)), lambda res, g: (g * res[1], g * res[0]))


CASES: dict[str, Case] = {
    # elementwise, one operand
    "neg": Case(lax.neg, unary, NUMBERS),
    "exp": Case(lax.exp, unary, FLOATS, MAX_ULPS),
    "exp2": Case(lax.exp2, unary, FLOATS, MAX_ULPS),
    "log": Case(lax.log, unary, FLOATS, MAX_ULPS),
    "log1p": Case(lax.log1p, unary, FLOATS, MAX_ULPS),
    "expm1": Case(lax.expm1, unary, FLOATS, MAX_ULPS),
    "tanh": Case(lax.tanh, unary, FLOATS, MAX_ULPS),
    "sin": Case(lax.sin, unary, FLOATS, MAX_ULPS),
    "cos": Case(lax.cos, unary, FLOATS, MAX_ULPS),
    "sqrt": Case(lax.sqrt, unary, FLOATS),
    "rsqrt": Case(lax.rsqrt, unary, FLOATS, MAX_ULPS),
    "abs": Case(lax.abs, unary, NUMBERS),
    "sign": Case(lax.sign, unary, NUMBERS),
    "floor": Case(lax.floor, unary, FLOATS),
    "ceil": Case(lax.ceil, unary, FLOATS),
    "logistic": Case(lax.logistic, unary, FLOATS, MAX_ULPS),
    "bitwise_not": Case(lax.bitwise_not, unary, BITS),
    "is_finite": Case(lax.is_finite, unary, FLOATS),
    "square": Case(lax.square, unary, NUMBERS),
    "erf": Case(lax.erf, unary, FLOATS, MAX_ULPS),
    "erfc": Case(lax.erfc, unary, FLOATS, MAX_ULPS),
    "stop_gradient": Case(lax.stop_gradient, unary, EVERY),
    "copy": Case(jnp.copy, unary, EVERY),
    "optimization_barrier": Case(lambda x: lax.optimization_barrier((x, x)), unary, EVERY),
    "integer_pow_0": Case(lambda x: lax.integer_pow(x, 0), unary, NUMBERS),
    "integer_pow_1": Case(lambda x: lax.integer_pow(x, 1), unary, NUMBERS),
    "integer_pow_2": Case(lambda x: lax.integer_pow(x, 2), unary, NUMBERS),
    "integer_pow_3": Case(lambda x: lax.integer_pow(x, 3), unary, NUMBERS),
    "integer_pow_7": Case(lambda x: lax.integer_pow(x, 7), unary, NUMBERS),
    "integer_pow_-1": Case(lambda x: lax.integer_pow(x, -1), unary, FLOATS),
    "integer_pow_-3": Case(lambda x: lax.integer_pow(x, -3), unary, FLOATS),
    "jnp_power_3": Case(lambda x: jnp.power(x, 3), unary, EVERY),
    # outside the table: compiled
    "erf_inv": Case(lax.erf_inv, unary, NOWHERE),
    "reduce_precision": Case(lambda x: lax.reduce_precision(x, 5, 10), unary, NOWHERE),
    "round": Case(lax.round, unary, NOWHERE),
    "tan": Case(lax.tan, unary, NOWHERE),
    "population_count": Case(lax.population_count, unary, NOWHERE),
    "cumsum": Case(jnp.cumsum, unary, NOWHERE),
    "argmax": Case(jnp.argmax, edge_only, NOWHERE),
    "sort": Case(jnp.sort, unary, NOWHERE),
    "gather": Case(lambda x: x[np.array([1, 0, 1])], edge_only, NOWHERE),
    "cond": Case(lambda x: lax.cond(jnp.all(x == x), lambda v: lax.rev(v, (0,)), lambda v: v, x), unary, NOWHERE),
    "while_loop": Case(
        lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, lax.rev(c[1], (0,))), (0, x))[1],
        unary,
        NOWHERE,
    ),
    "fori_loop": Case(lambda x: lax.fori_loop(0, 3, lambda i, v: lax.rev(v, (0,)), x), unary, NOWHERE),
    # elementwise, two or three operands
    "add": Case(lax.add, binary, NUMBERS),
    "add_any": Case(lambda a, b: jax.vjp(lambda v: (v, v), a)[1]((a, b))[0], binary, FLOATS),
    "sub": Case(lax.sub, binary, NUMBERS),
    "mul": Case(lax.mul, binary, NUMBERS),
    "div": Case(lax.div, binary, FLOATS),  # integer division: compiled
    "floor_divide": Case(jnp.floor_divide, binary, NOWHERE),
    "rem": Case(lax.rem, binary, NOWHERE),
    "max": Case(lax.max, binary, EVERY),
    "min": Case(lax.min, binary, EVERY),
    "pow": Case(lax.pow, binary, FLOATS, MAX_ULPS),
    "pow_integer_exponent": Case(lambda a, b: lax.pow(a, b.astype(np.int32)), binary, NOWHERE),
    "jnp_power_arrays": Case(jnp.power, binary, FLOATS, MAX_ULPS),  # of integers: shifts, compiled
    "atan2": Case(lax.atan2, binary, FLOATS, MAX_ULPS),
    "nextafter": Case(lax.nextafter, binary, NOWHERE),
    "eq": Case(lax.eq, binary, EVERY),
    "ne": Case(lax.ne, binary, EVERY),
    "lt": Case(lax.lt, binary, EVERY),
    "le": Case(lax.le, binary, EVERY),
    "gt": Case(lax.gt, binary, EVERY),
    "ge": Case(lax.ge, binary, EVERY),
    "and": Case(lax.bitwise_and, binary, BITS),
    "or": Case(lax.bitwise_or, binary, BITS),
    "xor": Case(lax.bitwise_xor, binary, BITS),
    "logical_ops": Case(lambda a, b: (jnp.logical_and(a, b), jnp.logical_or(a, b), jnp.logical_not(a)), binary, EVERY),
    "shift_left": Case(lax.shift_left, binary, NOWHERE),
    "shift_right_arithmetic": Case(lax.shift_right_arithmetic, binary, NOWHERE),
    "shift_right_logical": Case(lax.shift_right_logical, binary, NOWHERE),
    "select_n_bool": Case(lambda a, b: lax.select_n(a < b, a, b), binary, EVERY),
    "where": Case(lambda a, b: jnp.where(a == b, a, b), binary, EVERY),
    # an int32 predicate (out of range too: the first or the last case, as lax lowers it)
    "select_n_int32": Case(
        lambda a, b: lax.select_n(np.arange(a.size, dtype=np.int32) % 7 - 2, a, b, lax.rev(a, (0,))),
        binary,
        EVERY,
    ),
    "clamp": Case(lax.clamp, ternary, NUMBERS),
    "custom_jvp": Case(_custom_jvp_product, binary, EVERY),
    "custom_vjp": Case(_custom_vjp_product, binary, EVERY),
    # structural
    "broadcast_in_dim": Case(lambda x: lax.broadcast_in_dim(x, (2, x.shape[0], 3), (1,)), unary, EVERY),
    "reshape_transpose": Case(lambda x: lax.reshape(x, (1, x.shape[0])).T, unary, EVERY),
    "squeeze_expand_dims": Case(lambda x: lax.squeeze(lax.expand_dims(x, (0, 2)), (0,)), unary, EVERY),
    "slice_strided": Case(lambda x: lax.slice(x, (1,), (x.shape[0],), (2,)) if x.size else x, unary, EVERY),
    "pad": Case(lambda a, b: lax.pad(a, lax.reduce_max(b, (0,)), [(2, -1, 1)]), binary, EVERY),
    "concatenate": Case(lambda a, b: lax.concatenate([a, b, a], 0), binary, EVERY),
    "stack": Case(lambda a, b: jnp.stack([a, b], axis=1), binary, EVERY),
    "split": Case(lambda x: lax.split(x, [x.shape[0] // 2, x.shape[0] - x.shape[0] // 2]), unary, EVERY),
    "rev": Case(lambda x: lax.rev(x, (0,)), unary, EVERY),
    "iota": Case(lambda x: lax.iota(x.dtype, x.shape[0]), unary, NUMBERS),
    "iota_300": Case(lambda x: lax.iota(x.dtype, 300), unary, FLOATS | {"int32"}),  # int8, uint8: 299 does not fit
    # products and reductions
    "dot_general": Case(lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))), matrices, NUMBERS),
    "dot_general_batched": Case(
        lambda a, b: lax.dot_general(a[None], b[None], (((2,), (1,)), ((0,), (0,)))), matrices, NUMBERS
    ),
    "dot_general_into_int32": Case(
        lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32),
        matrices,
        INTEGERS,
    ),
    "dot_general_into_float64": Case(
        lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float64),
        matrices,
        FLOATS,  # integers into a float: compiled
    ),
    "reduce_sum": Case(_reduce(lax.reduce_sum), reduced, NUMBERS),
    "reduce_prod": Case(_reduce(lax.reduce_prod), reduced, NUMBERS),
    "reduce_max": Case(_reduce(lax.reduce_max), reduced, EVERY),
    "reduce_min": Case(_reduce(lax.reduce_min), reduced, EVERY),
    "reduce_and": Case(_reduce(lax.reduce_and), reduced, BITS),
    "reduce_or": Case(_reduce(lax.reduce_or), reduced, BITS),
    "reduce_xor": Case(_reduce(lax.reduce_xor), reduced, BITS),
    # XLA divides by the count as a multiplication by its reciprocal (rounded): 1 ulp
    "jnp_sum_mean": Case(lambda x: (jnp.sum(x, axis=0), jnp.mean(x, axis=0)), reduced, EVERY, 1),
    "jnp_bitwise_and_reduce": Case(lambda x: jnp.bitwise_and.reduce(x, axis=0), reduced, BITS),
    # conversions (the source dtype is the case's dtype)
    **{
        f"convert_to_{target}": Case(
            lambda x, target=target: lax.convert_element_type(x, np.dtype(target)),
            unary,
            EVERY if target in FLOATS | {"bool"} else BITS,  # float -> integer: compiled
        )
        for target in (*DTYPES, "int64", "uint32")
    },
    "convert_to_float16": Case(lambda x: lax.convert_element_type(x, np.float16), unary, NOWHERE),
    "convert_to_bfloat16": Case(lambda x: lax.convert_element_type(x, jnp.bfloat16), unary, NOWHERE),
}


def _accepted_by_lax(fn, args) -> bool:
    try:
        jax.eval_shape(fn, *args)
    except (TypeError, ValueError):
        return False
    return True


def assert_same(host, compiled, ulps: int, what: str) -> None:
    """Equal leaves: dtype, shape, values (NaN equal to NaN), zeros' signs; floats within
    ``ulps`` units in the last place when ``ulps`` > 0 (infinities and NaN still exactly)."""
    host_leaves, compiled_leaves = jax.tree.leaves(host), jax.tree.leaves(compiled)
    assert len(host_leaves) == len(compiled_leaves), what
    for h, c in zip(host_leaves, compiled_leaves, strict=True):
        h, c = np.asarray(h), np.asarray(c)
        assert (h.dtype, h.shape) == (c.dtype, c.shape), f"{what}: {h.dtype}{h.shape} != {c.dtype}{c.shape}"
        if ulps and h.dtype.kind == "f":
            finite = np.isfinite(h) & np.isfinite(c)
            np.testing.assert_array_equal(h[~finite], c[~finite], err_msg=what)
            try:
                np.testing.assert_array_max_ulp(h[finite], c[finite], maxulp=ulps)
            except AssertionError as error:
                raise AssertionError(f"{what}: {error}") from None
        else:
            np.testing.assert_array_equal(h, c, err_msg=what, strict=True)
        if h.dtype.kind == "f":
            zeros = (h == 0) & (c == 0)
            np.testing.assert_array_equal(np.signbit(h[zeros]), np.signbit(c[zeros]), err_msg=f"{what}: -0 and +0")


@pytest.mark.parametrize("name", sorted(CASES))
def test_host_path_equals_compiled_on_every_dtype(name):
    case = CASES[name]
    runs = []  # (dtype, label, args, host path required)
    for dtype in DTYPES:
        # the host path must take the edge values when the dtype is in the contract; the extreme
        # ones may meet a subnormal and be declined when evaluated: compared, not required
        variants = [(label, args, True) for label, args in case.args(edge_values(dtype), True)]
        extremes = extreme_values(dtype)
        if extremes is not None:
            variants += [(f"extreme-{label}", args, False) for label, args in case.args(extremes, False)]
        if _accepted_by_lax(case.fn, variants[0][1]):
            runs += [(dtype, *variant) for variant in variants]
    assert runs, f"{name}: lax accepts none of {DTYPES}"
    # the reference: jax.jit of the same function, every run in one program
    compiled = jax.jit(lambda all_args: [case.fn(*args) for args in all_args])([args for _, _, args, _ in runs])
    for (dtype, label, args, required), reference in zip(runs, compiled, strict=True):
        what = f"{name} on {dtype} ({label})"
        in_contract = dtype in case.host
        refused = host_eval.traced(case.fn, *args).unsupported
        assert (not refused) == in_contract, f"{what}: refused {sorted(refused)}, contract {sorted(case.host)}"
        out, on_host = host_eval.host_or_compiled(case.fn, *args, compiled=lambda *_, ref=reference: ref)
        assert_same(out, reference, case.ulps, what)
        if required:
            assert on_host == in_contract, f"{what}: on host {on_host}, contract {sorted(case.host)}"
        # the host path itself, where it runs: the same numbers as evaluate_on_host's
        if on_host:
            assert_same(host_eval.evaluate_on_host(case.fn, *args), reference, case.ulps, what)


# -- five integer cases where the host path once differed from the compiled program --------------------
def _host_and_compiled(fn, *args):
    out, on_host = host_eval.host_or_compiled(fn, *args)
    return out, on_host, jax.tree.map(np.asarray, jax.jit(fn)(*args))


def test_bitwise_not_on_integers_is_bitwise():
    x = np.array([0, 0, 2, 0], dtype=np.int32)  # was host [1 1 0 1], compiled [-1 -1 -3 -1]
    out, on_host, compiled = _host_and_compiled(jnp.bitwise_not, x)
    assert on_host
    np.testing.assert_array_equal(out, compiled, strict=True)
    np.testing.assert_array_equal(out, np.array([-1, -1, -3, -1], dtype=np.int32), strict=True)


@pytest.mark.parametrize(
    "reduce_and", [lambda x: jnp.bitwise_and.reduce(x), lambda x: lax.reduce_and(x, (0,))], ids=["jnp", "lax"]
)
def test_and_reduction_on_integers_is_bitwise(reduce_and):
    x = np.array([7, 7, 15], dtype=np.int32)  # was host 1 (numpy's all), compiled 7
    out, on_host, compiled = _host_and_compiled(reduce_and, x)
    assert on_host
    np.testing.assert_array_equal(out, compiled, strict=True)
    assert out == 7


def test_float_to_int_out_of_range_is_compiled():
    x = np.array([1e20, -1e20, np.nan, np.inf, -np.inf, 2.5, -2.5, 2.0**31])
    fn = lambda v: v.astype(jnp.int32)  # noqa: E731
    assert host_eval.traced(fn, x).unsupported == {"convert_element_type(float64 -> int32)"}
    out, on_host, compiled = _host_and_compiled(fn, x)
    assert not on_host
    np.testing.assert_array_equal(out, compiled, strict=True)
    with pytest.raises(host_eval.NotOnHost, match="convert_element_type"):
        host_eval.evaluate_on_host(fn, x)


def test_int8_dot_into_int32_does_not_wrap_at_8_bits():
    a, b = np.array([[100, 9]], dtype=np.int8), np.array([[45], [1]], dtype=np.int8)
    fn = lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32)  # noqa: E731
    out, on_host, compiled = _host_and_compiled(fn, a, b)  # was host -99, compiled 4509
    assert on_host
    np.testing.assert_array_equal(out, compiled, strict=True)
    np.testing.assert_array_equal(out, np.array([[4509]], dtype=np.int32), strict=True)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int8", "uint8", "bool"])
def test_empty_max_reduction_is_the_identity(dtype):
    x = np.zeros((0, 3), dtype=dtype)  # numpy's max raised on the host path
    out, on_host, compiled = _host_and_compiled(lambda v: lax.reduce_max(v, (0,)), x)
    assert on_host
    np.testing.assert_array_equal(out, compiled, strict=True)
    lowest = {"float64": -np.inf, "float32": -np.inf, "int8": -128, "uint8": 0, "bool": False}[dtype]
    np.testing.assert_array_equal(out, np.full(3, lowest, dtype=dtype), strict=True)


# -- the contract's edges --------------------------------------------------------------------------
def test_refusals_are_known_when_traced_and_name_primitive_and_dtypes():
    trace = host_eval.traced(
        lambda a, b: (lax.div(a, b), lax.rem(a, b), jnp.sin(a.astype(float))), *[np.ones(3, int)] * 2
    )
    assert trace.unsupported == {"div(int64, int64 -> int64)", "rem"}
    assert not trace.fits()
    with pytest.raises(host_eval.NotOnHost, match="div"):
        trace.evaluate(np.ones(3, int), np.ones(3, int))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_subnormal_numbers_are_compiled(dtype):
    """XLA on the CPU flushes subnormals to zero; numpy keeps them: a subnormal argument, or a
    result that would be one, sends the call to the compiler (decided when evaluated)."""
    tiny = np.finfo(dtype).tiny
    halve = lambda v: v * np.asarray(0.5, dtype)  # noqa: E731
    for x in (np.array([tiny, 1.0], dtype), np.array([np.finfo(dtype).smallest_subnormal, 1.0], dtype)):
        assert not host_eval.traced(halve, x).unsupported
        out, on_host, compiled = _host_and_compiled(halve, x)
        assert not on_host
        np.testing.assert_array_equal(out, compiled, strict=True)
        with pytest.raises(host_eval.NotOnHost, match="subnormal"):
            host_eval.evaluate_on_host(halve, x)
    out, on_host, _ = _host_and_compiled(halve, np.array([2 * tiny, 1.0], dtype))
    assert on_host and out[0] == tiny


def test_float_arithmetic_keeps_the_host_path():
    """What the library runs on the host (moments, expansion probes): float32 and float64
    arithmetic with its int64 index arithmetic and bool masks."""

    def unit(w, x):
        h = jnp.tanh(x @ w) * jnp.where(x[:, :1] > 0, 1.0, 0.5).astype(x.dtype)
        onehot = (jnp.arange(3)[:, None] == jnp.arange(3)[None, :]).astype(x.dtype)
        return jax.grad(lambda w: jnp.sum((jnp.tanh(x @ w) @ onehot) ** 2))(w), jnp.mean(h, axis=0)

    rng = np.random.default_rng(0)
    for dtype in ("float32", "float64"):
        w, x = rng.standard_normal((4, 3)).astype(dtype), rng.standard_normal((5, 4)).astype(dtype)
        out, on_host, compiled = _host_and_compiled(unit, w, x)
        assert on_host, host_eval.traced(unit, w, x).unsupported
        for a, b in zip(out, compiled, strict=True):
            assert a.dtype == b.dtype == np.dtype(dtype)
            np.testing.assert_allclose(a, b, rtol=1e-5 if dtype == "float32" else 1e-13)


# numpy's transcendental functions against XLA's approximations on ordinary arguments: a few ulps
# (measured with jax 0.10 and numpy 2.4: at most 7), more where XLA's approximation loses digits:
# erfc (17), exp2 (75, growing with |x|) and float64 log1p near -0.41 (124); the budgets below
# are about twice those
TRANSCENDENTAL = {
    "exp": lambda x: lax.exp(x * 0.5),  # results above float32's smallest normal, 1e-38 (else: compiled)
    "exp2": lax.exp2,
    "log": lambda x: lax.log(jnp.abs(x)),
    "log1p": lambda x: lax.log1p(jnp.maximum(x, -0.99)),
    "expm1": lax.expm1,
    "tanh": lax.tanh,
    "sin": lax.sin,
    "cos": lax.cos,
    "rsqrt": lambda x: lax.rsqrt(jnp.abs(x)),
    "logistic": lax.logistic,
    "erf": lax.erf,
    "erfc": lambda x: lax.erfc(jnp.abs(x) * 0.05),
    "pow": lambda x: lax.pow(jnp.abs(x), x * 0.1),
    "atan2": lambda x: lax.atan2(x, x[::-1]),
}
TRANSCENDENTAL_ULPS = {"erfc": 32, "exp2": 128, "log1p": 256}  # else 8


@pytest.mark.parametrize("dtype", sorted(FLOATS))
def test_transcendental_functions_agree_to_a_few_ulps(dtype):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(2000) * scale for scale in (0.01, 1.0, 5.0, 30.0)]).astype(dtype)
    compiled = jax.jit(lambda x: {name: fn(x) for name, fn in TRANSCENDENTAL.items()})(x)
    for name, fn in TRANSCENDENTAL.items():
        out, on_host = host_eval.host_or_compiled(fn, x)
        assert on_host, f"{name} on {dtype}"
        assert_same(out, compiled[name], TRANSCENDENTAL_ULPS.get(name, 8), f"{name} on {dtype}")
