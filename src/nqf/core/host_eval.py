r"""Small JAX functions evaluated in numpy, without compiling: their jaxpr, interpreted.

A first prediction compiled a program for the expansion probe of the unit and two for the
data's moments (0.2 s each on the CPU, more than the arithmetic of the whole prediction at
the sizes researchers study). Tracing a function into its jaxpr costs milliseconds; this
module then walks the jaxpr's equations with numpy (measured on the README's staircase without
the network's prediction, fresh processes, the 2-core Intel Xeon: the first ``predict`` takes
0.47-0.56 s with it against 1.08-1.14 s with every such function compiled). Autodiff and vmap
have been applied by the tracing, so the equations are plain array operations (elementwise
functions, broadcasts, dot_general, reductions, slices).

What the host path accepts (the contract: an explicit table, consulted per equation with the
dtypes of the equation's operands and results when the function is traced, so that
:attr:`Traced.unsupported` names every refusal before anything is evaluated; one refused
equation sends the whole function to the compiler, :func:`host_or_compiled`):

* dtypes float32, float64, bool and the signed and unsigned integers of 8 to 64 bits. Any other
  dtype (float16, bfloat16, complex, PRNG keys, ...) is compiled.
* floats: the table's elementwise functions (arithmetic, exp, log, tanh, sin, cos, erf, pow,
  ...), comparisons, selects, products, reductions and structural primitives (broadcasts,
  reshapes, slices, pads, concatenations, iota).
* integers: wrapping arithmetic (add, sub, mul, neg, abs, sign, square, integer_pow with
  exponent >= 0, max, min, clamp), bitwise not/and/or/xor, comparisons, selects (also with an
  integer predicate), sums, products and max/min/and/or/xor reductions, dot_general into a
  result dtype at least as wide as its operands (cast first, then multiplied: XLA's
  preferred_element_type), structural primitives. Integer division is compiled (lax rounds
  toward zero and defines x/0 its own way).
* bool: not/and/or/xor, comparisons, max/min, all/any reductions, selects, structural primitives.
* convert_element_type between those dtypes, except float -> integer (XLA saturates and sends
  NaN to 0 on the CPU; another backend may not): compiled.
* calls (jit, custom_jvp, custom_vjp, checkpoint): their bodies, equation by equation.
* everything else is compiled: cond, while_loop, scan, gather, scatter, sort, cumsum, argmax,
  rem, shifts, erf_inv, reduce_precision, pow with an integer exponent, ...

Numbers: within the contract the results are XLA's bit for bit (wrapping integers, NaN and
inf, the sign of a zero out of max, min, sign, a sum or a product, the identity of an empty
reduction; ``tests/test_host_eval_dtypes.py``), except where rounding is not specified:
numpy's exp, log, tanh, sin, erf, pow, ... against XLA's own approximations (measured: at most
7 units in the last place; erfc 17, exp2 75, float64 log1p 124, about 3e-14 relative), sums
and products (reductions, dot_general) added in another order or fused into multiply-adds,
and XLA's rewrites of a whole program (x / c as x * (1/c) for a constant c: 1 unit; x + 0 as
x, which keeps -0). The tests hold the two paths to 1e-12 relative on every built-in
architecture (``tests/test_host_eval.py``). Subnormal numbers: XLA on the CPU flushes them to
zero, numpy keeps them; an evaluation that meets one (an argument, a constant, a result)
raises :class:`NotOnHost` and is compiled. Every result is cast to the dtype the jaxpr
declares, so numpy's promotion rules never widen a float32 computation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.extend import core as jax_core

from nqf.core.programs import LruCache

# Above this many numbers produced by a jaxpr's equations (all equations, every call), or this
# many multiply-adds in its products, the compiled program is cheaper than numpy's op-by-op run.
HOST_MAX_ELEMENTS = 1 << 23
HOST_MAX_FLOPS = 2e8


class NotOnHost(Exception):
    """The function holds an equation this evaluator does not compute exactly as XLA does."""


# -- the dtypes of the contract -------------------------------------------------------------------
FLOATS = frozenset(map(np.dtype, ("float32", "float64")))
INTEGERS = frozenset(map(np.dtype, ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")))
BOOL = frozenset({np.dtype(np.bool_)})
NUMBERS = FLOATS | INTEGERS
BITS = INTEGERS | BOOL  # bitwise on integers, logical on bool: the same numpy functions
HOST_DTYPES = FLOATS | INTEGERS | BOOL
_SMALLEST_NORMAL = {dtype: np.finfo(dtype).tiny for dtype in FLOATS}


def _has_subnormal(x: np.ndarray) -> bool:
    if x.dtype not in _SMALLEST_NORMAL or x.size == 0:
        return False
    magnitude = np.abs(x)
    return bool(np.any((magnitude < _SMALLEST_NORMAL[x.dtype]) & (magnitude > 0)))


def _refuse_subnormal(x: np.ndarray) -> np.ndarray:
    # XLA's CPU code runs with denormals flushed to zero (inputs and results); numpy does not
    if _has_subnormal(x):
        raise NotOnHost("a subnormal number (XLA flushes them to zero)")
    return x


def _cast(value, aval) -> np.ndarray:
    return np.asarray(value, dtype=aval.dtype)


# -- numpy implementations with XLA's semantics ----------------------------------------------------
def _broadcast_in_dim(x, *, shape, broadcast_dimensions, **_):
    expanded = [1] * len(shape)
    for axis, dim in zip(broadcast_dimensions, x.shape, strict=True):
        expanded[axis] = dim
    return np.broadcast_to(x.reshape(expanded), shape)


def _pad(x, value, *, padding_config, **_):
    value = np.asarray(value, dtype=x.dtype)
    for axis, (low, high, interior) in enumerate(padding_config):
        if interior < 0:
            raise NotOnHost("pad with negative interior padding")
        n = x.shape[axis]
        if interior > 0 and n > 1:  # dilate: interior copies of value between neighbours
            shape = list(x.shape)
            shape[axis] = n + (n - 1) * interior
            dilated = np.full(shape, value, dtype=x.dtype)
            dilated[(slice(None),) * axis + (slice(None, None, interior + 1),)] = x
            x = dilated
        widths = [(0, 0)] * x.ndim
        widths[axis] = (max(low, 0), max(high, 0))
        x = np.pad(x, widths, constant_values=value)
        stop = x.shape[axis] - max(-high, 0)
        x = x[(slice(None),) * axis + (slice(max(-low, 0), stop),)]  # negative edges crop
    return x


def _dot_general(a, b, *, dimension_numbers, preferred_element_type=None, **_):
    # XLA multiplies and accumulates in the result dtype: an int8 product into int32 must not
    # wrap at 8 bits (integer sums wrap the same in any order, so einsum's is exact)
    result = preferred_element_type if preferred_element_type is not None else np.result_type(a, b)
    a, b = a.astype(result, copy=False), b.astype(result, copy=False)
    (a_contract, b_contract), (a_batch, b_batch) = dimension_numbers
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    a_idx = [next(letters) for _ in range(a.ndim)]
    b_idx = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(a_contract, b_contract, strict=True):
        b_idx[j] = a_idx[i]
    for i, j in zip(a_batch, b_batch, strict=True):
        b_idx[j] = a_idx[i]
    batch = [a_idx[i] for i in a_batch]
    a_free = [a_idx[i] for i in range(a.ndim) if i not in a_contract and i not in a_batch]
    b_free = [b_idx[j] for j in range(b.ndim) if j not in b_contract and j not in b_batch]
    spec = f"{''.join(a_idx)},{''.join(b_idx)}->{''.join(batch + a_free + b_free)}"
    out = np.einsum(spec, a, b, optimize=a.ndim + b.ndim > 4)
    if out.dtype.kind != "f":
        return out
    # zeros: XLA accumulates from +0, but makes a product of one term a multiplication (whose
    # zero has the sign of the operands' signs multiplied); numpy's einsum signs them either way
    if math.prod(a.shape[i] for i in a_contract) != 1:
        return _signed_zeros(out, False)
    signs = [np.where(np.signbit(x), -1, 1).astype(np.int8) for x in (a, b)]
    return _signed_zeros(out, np.einsum(spec, *signs) < 0)


def _slice(x, *, start_indices, limit_indices, strides, **_):
    strides = strides or (1,) * x.ndim
    return x[tuple(slice(s, e, st) for s, e, st in zip(start_indices, limit_indices, strides, strict=True))]


def _split(x, *, sizes, axis, **_):
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _iota(*, dtype, shape, dimension, **_):
    ramp = np.arange(shape[dimension], dtype=dtype)
    expanded = [1] * len(shape)
    expanded[dimension] = shape[dimension]
    return np.broadcast_to(ramp.reshape(expanded), shape)


def _select_n(which, *cases, **_):
    if which.dtype == np.bool_:
        return cases[0] if len(cases) == 1 else np.where(which, cases[1], cases[0])
    # lax lowers an integer predicate to a tree of `which < k` selects: a value out of range
    # picks the first or the last case
    index = np.clip(which, 0, len(cases) - 1).astype(np.intp)
    stacked = np.stack(np.broadcast_arrays(*cases))
    index = np.broadcast_to(index, stacked.shape[1:])
    return np.take_along_axis(stacked, index[np.newaxis], axis=0)[0]


def _integer_pow(x, *, y, **_):
    # the products lax's lowering makes (square and multiply, then 1/x for y < 0): each rounds,
    # where numpy's power would round once
    if y == 0:
        return np.ones_like(x)
    acc, base, n = None, x, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else acc * base
        n >>= 1
        if n:
            base = base * base
    assert acc is not None  # y != 0
    return 1 / acc if y < 0 else acc


def _signed_zeros(out, negative):
    """``out`` with its zeros signed by ``negative`` (where True: -0): the sign XLA gives a zero
    result where numpy's differs (max, min, sums, products of one term)."""
    zeros = out == 0
    if out.dtype.kind != "f" or not np.any(zeros):
        return out
    return np.where(zeros, np.where(negative, -0.0, 0.0).astype(out.dtype), out)


# XLA's max and min order -0 below +0 (IEEE 754-2019); numpy returns whichever zero came first.
def _maximum(a, b):
    return _signed_zeros(np.maximum(a, b), np.signbit(a) & np.signbit(b))


def _minimum(a, b):
    return _signed_zeros(np.minimum(a, b), np.signbit(a) | np.signbit(b))


def _lowest(dtype):
    if dtype.kind == "f":
        return -np.inf
    return False if dtype == np.bool_ else np.iinfo(dtype).min


def _highest(dtype):
    if dtype.kind == "f":
        return np.inf
    return True if dtype == np.bool_ else np.iinfo(dtype).max


# An empty reduction gives the reduction's identity, as XLA's does (numpy's max refuses it).
def _reduce_max(x, *, axes, **_):
    out = np.max(x, axis=tuple(axes), initial=_lowest(x.dtype))
    return _signed_zeros(out, np.all(np.signbit(x), axis=tuple(axes))) if x.dtype.kind == "f" else out


def _reduce_min(x, *, axes, **_):
    out = np.min(x, axis=tuple(axes), initial=_highest(x.dtype))
    return _signed_zeros(out, np.any(np.signbit(x), axis=tuple(axes))) if x.dtype.kind == "f" else out


def _reduce_bits(ufunc, all_ones: bool):
    """and/or/xor over axes: bitwise on integers, logical on bool, as XLA's reductions are."""

    def reduce(x, *, axes, **_):
        zero = np.zeros((), dtype=x.dtype)
        return ufunc.reduce(x, axis=tuple(axes), initial=np.invert(zero) if all_ones else zero)

    return reduce


# In the operand's dtype: integers wrap as XLA's do (numpy would widen them to 64 bits).
def _reduce_sum(x, *, axes, **_):
    out = np.sum(x, axis=tuple(axes), dtype=x.dtype)
    if x.dtype.kind != "f":
        return out
    # zeros: XLA adds to +0, except over a single number, which it returns as it is
    single = math.prod(x.shape[i] for i in axes) == 1
    return _signed_zeros(out, np.all(np.signbit(x), axis=tuple(axes)) if single else False)


def _reduce_prod(x, *, axes, **_):
    return np.prod(x, axis=tuple(axes), dtype=x.dtype)


def _convert(x, *, new_dtype, **_):
    return np.asarray(x).astype(new_dtype)  # to bool: x != 0, NaN included, as lax lowers it


def _elementwise(scalar_fn: Callable) -> Callable:
    """A float function of the math module over an array (no numpy ufunc exists for it)."""
    return lambda x, **_: np.vectorize(scalar_fn, otypes=[x.dtype])(x) if x.size else x


def _operands(fn: Callable) -> Callable:
    """A numpy function of the equation's operands alone (its params change nothing)."""
    return lambda *xs, **_: fn(*xs)


# primitive -> (numpy implementation called with the operands and the equation's params, the
# dtypes its operands may have); results must be HOST_DTYPES, and _PARAM_RULES check the rest
_TABLE: dict[str, tuple[Callable, frozenset]] = {
    # elementwise, one operand
    "neg": (_operands(np.negative), NUMBERS),
    "exp": (_operands(np.exp), FLOATS),
    "exp2": (_operands(np.exp2), FLOATS),
    "log": (_operands(np.log), FLOATS),
    "log1p": (_operands(np.log1p), FLOATS),
    "expm1": (_operands(np.expm1), FLOATS),
    "tanh": (_operands(np.tanh), FLOATS),
    "sin": (_operands(np.sin), FLOATS),
    "cos": (_operands(np.cos), FLOATS),
    "sqrt": (_operands(np.sqrt), FLOATS),
    "rsqrt": (_operands(lambda x: 1.0 / np.sqrt(x)), FLOATS),
    "abs": (_operands(np.abs), NUMBERS),
    "sign": (_operands(lambda x: np.where(x == 0, x, np.sign(x))), NUMBERS),  # XLA keeps -0's sign
    "floor": (_operands(np.floor), FLOATS),
    "ceil": (_operands(np.ceil), FLOATS),
    "logistic": (_operands(lambda x: 1.0 / (1.0 + np.exp(-x))), FLOATS),
    "not": (_operands(np.invert), BITS),
    "is_finite": (_operands(np.isfinite), FLOATS),
    "square": (_operands(np.square), NUMBERS),
    "erf": (_elementwise(math.erf), FLOATS),
    "erfc": (_elementwise(math.erfc), FLOATS),
    "stop_gradient": (_operands(lambda x: x), HOST_DTYPES),
    "copy": (_operands(np.array), HOST_DTYPES),
    "copy_p": (_operands(np.array), HOST_DTYPES),
    "optimization_barrier": (_operands(lambda *xs: xs), HOST_DTYPES),
    # elementwise, two or three operands
    "add": (_operands(np.add), NUMBERS),
    "add_any": (_operands(np.add), NUMBERS),
    "sub": (_operands(np.subtract), NUMBERS),
    "mul": (_operands(np.multiply), NUMBERS),
    "div": (_operands(np.divide), FLOATS),
    "max": (_operands(_maximum), HOST_DTYPES),
    "min": (_operands(_minimum), HOST_DTYPES),
    "pow": (_operands(np.power), FLOATS),
    "atan2": (_operands(np.arctan2), FLOATS),
    "eq": (_operands(np.equal), HOST_DTYPES),
    "ne": (_operands(np.not_equal), HOST_DTYPES),
    "lt": (_operands(np.less), HOST_DTYPES),
    "le": (_operands(np.less_equal), HOST_DTYPES),
    "gt": (_operands(np.greater), HOST_DTYPES),
    "ge": (_operands(np.greater_equal), HOST_DTYPES),
    "and": (_operands(np.bitwise_and), BITS),
    "or": (_operands(np.bitwise_or), BITS),
    "xor": (_operands(np.bitwise_xor), BITS),
    "clamp": (_operands(lambda lo, x, hi: _minimum(_maximum(x, lo), hi)), NUMBERS),  # XLA's definition
    "select_n": (_select_n, HOST_DTYPES),
    "integer_pow": (_integer_pow, NUMBERS),
    "convert_element_type": (_convert, HOST_DTYPES),
    # structural
    "broadcast_in_dim": (_broadcast_in_dim, HOST_DTYPES),
    "reshape": (lambda x, *, new_sizes, **_: np.reshape(x, new_sizes), HOST_DTYPES),
    "squeeze": (lambda x, *, dimensions, **_: np.squeeze(x, axis=tuple(dimensions)), HOST_DTYPES),
    "expand_dims": (lambda x, *, dimensions, **_: np.expand_dims(x, axis=tuple(dimensions)), HOST_DTYPES),
    "transpose": (lambda x, *, permutation, **_: np.transpose(x, permutation), HOST_DTYPES),
    "slice": (_slice, HOST_DTYPES),
    "pad": (_pad, HOST_DTYPES),
    "concatenate": (lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension), HOST_DTYPES),
    "stack": (lambda *xs, axis, **_: np.stack(xs, axis=axis), HOST_DTYPES),
    "split": (_split, HOST_DTYPES),
    "rev": (lambda x, *, dimensions, **_: np.flip(x, axis=tuple(dimensions)), HOST_DTYPES),
    "iota": (_iota, HOST_DTYPES),
    # products and reductions
    "dot_general": (_dot_general, NUMBERS),
    "reduce_sum": (_reduce_sum, NUMBERS),
    "reduce_prod": (_reduce_prod, NUMBERS),
    "reduce_max": (_reduce_max, HOST_DTYPES),
    "reduce_min": (_reduce_min, HOST_DTYPES),
    "reduce_and": (_reduce_bits(np.bitwise_and, all_ones=True), BITS),
    "reduce_or": (_reduce_bits(np.bitwise_or, all_ones=False), BITS),
    "reduce_xor": (_reduce_bits(np.bitwise_xor, all_ones=False), BITS),
}
# equations whose results are numbers of their operands, moved: nothing new to check for subnormals
_MOVES_NUMBERS = {
    "stop_gradient",
    "copy",
    "copy_p",
    "optimization_barrier",
    "select_n",
    "broadcast_in_dim",
    "reshape",
    "squeeze",
    "expand_dims",
    "transpose",
    "slice",
    "pad",
    "concatenate",
    "stack",
    "split",
    "rev",
}
# primitives that call a sub-jaxpr with the equation's operands (the parameter holding it)
_CALLS = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "remat": "jaxpr",
    "checkpoint": "jaxpr",
}


def _dtype(var) -> Any:
    return getattr(var.aval, "dtype", None)  # None (a token, a reference): not a host dtype


def _convert_is_exact(eqn) -> bool:
    (operand,), (result,) = map(_dtype, eqn.invars), map(_dtype, eqn.outvars)
    return not (operand in FLOATS and result in INTEGERS)  # out of range and NaN: backend-defined


def _dot_is_exact(eqn) -> bool:
    operands, result = [_dtype(v) for v in eqn.invars], _dtype(eqn.outvars[0])
    # floats into a float at least as wide; integers into an integer that holds every operand value
    kind = FLOATS if result in FLOATS else INTEGERS
    return all(d in kind and np.can_cast(d, result, "safe") for d in operands)


def _iota_is_exact(eqn) -> bool:
    dtype, length = np.dtype(eqn.params["dtype"]), eqn.params["shape"][eqn.params["dimension"]]
    if dtype in FLOATS:
        return length <= 2 ** (np.finfo(dtype).nmant + 1)  # every index a float exactly
    return dtype in INTEGERS and length - 1 <= np.iinfo(dtype).max


_PARAM_RULES: dict[str, Callable[[Any], bool]] = {
    "convert_element_type": _convert_is_exact,
    "dot_general": _dot_is_exact,
    "iota": _iota_is_exact,
    "integer_pow": lambda eqn: eqn.params["y"] >= 0 or _dtype(eqn.invars[0]) in FLOATS,  # 1/x: integer division
}


def _called(eqn) -> tuple[Any, list] | None:
    """(sub-jaxpr, its constants) of a call equation, or None."""
    sub = eqn.params.get(_CALLS[eqn.primitive.name])
    if isinstance(sub, jax_core.ClosedJaxpr):
        return sub.jaxpr, [np.asarray(c) for c in sub.consts]
    return None if sub is None else (sub, [])


def _refusal(eqn) -> str | None:
    """Why the table does not compute this equation exactly as XLA does (None: it does)."""
    name = eqn.primitive.name
    if name in _CALLS:
        return None if _called(eqn) is not None else f"{name} without its jaxpr"
    if name not in _TABLE:
        return name
    operands, results = [_dtype(v) for v in eqn.invars], [_dtype(v) for v in eqn.outvars]
    _, operand_dtypes = _TABLE[name]
    rule = _PARAM_RULES.get(name)
    exact = (
        all(d in operand_dtypes for d in operands)
        and all(d in HOST_DTYPES for d in results)
        and (rule is None or rule(eqn))
    )
    if not exact:
        return f"{name}({', '.join(map(str, operands))} -> {', '.join(map(str, results))})"
    if any(isinstance(v, jax_core.Literal) and _has_subnormal(_cast(v.val, v.aval)) for v in eqn.invars):
        return f"{name} of a subnormal literal"
    return None


def _refusals(jaxpr, consts) -> set[str]:
    """Every refused equation of ``jaxpr`` and of the jaxprs it calls (empty: it runs on the host)."""
    found = {"a subnormal constant"} if any(_has_subnormal(np.asarray(c)) for c in consts) else set()
    for eqn in jaxpr.eqns:
        reason = _refusal(eqn)
        called = _called(eqn) if eqn.primitive.name in _CALLS else None
        if reason is not None:
            found.add(reason)
        elif called is not None:
            found |= _refusals(*called)
    return found


def _apply(eqn, args: list[np.ndarray]) -> list[np.ndarray]:
    # every equation here passed _refusal (Traced.evaluate runs no function with a refusal)
    name = eqn.primitive.name
    if name in _CALLS:
        called = _called(eqn)
        assert called is not None
        return _evaluate(*called, args)
    out = _TABLE[name][0](*args, **eqn.params)
    outs = list(out) if eqn.primitive.multiple_results else [out]
    outs = [_cast(o, v.aval) for o, v in zip(outs, eqn.outvars, strict=True)]
    return outs if name in _MOVES_NUMBERS else [_refuse_subnormal(o) for o in outs]


def _evaluate(jaxpr, consts: list, args: list) -> list[np.ndarray]:
    env: dict[Any, np.ndarray] = {}

    def read(v):
        if isinstance(v, jax_core.Literal):
            return _cast(v.val, v.aval)
        return env[v]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = np.asarray(value)
    with np.errstate(all="ignore"):  # inf, nan and wrapping integers propagate as in XLA
        for var, value in zip(jaxpr.invars, args, strict=True):
            env[var] = _cast(value, var.aval)
        for eqn in jaxpr.eqns:
            outs = _apply(eqn, [read(v) for v in eqn.invars])
            for var, value in zip(eqn.outvars, outs, strict=True):
                if not isinstance(var, jax_core.DropVar):
                    env[var] = value
    return [read(v) for v in jaxpr.outvars]


def _work(jaxpr) -> tuple[int, float]:
    """(numbers produced by the equations, multiply-adds of the dot_generals), sub-jaxprs included."""
    elements, flops = 0, 0.0
    for eqn in jaxpr.eqns:
        for sub in jax_core.jaxprs_in_params(eqn.params):
            e, f = _work(sub)
            elements, flops = elements + e, flops + f
        for var in eqn.outvars:
            elements += math.prod(getattr(var.aval, "shape", ()))
        if eqn.primitive.name == "dot_general":
            (a_contract, _), _ = eqn.params["dimension_numbers"]
            a_shape = eqn.invars[0].aval.shape
            out_size = math.prod(eqn.outvars[0].aval.shape)
            flops += out_size * math.prod(a_shape[i] for i in a_contract)
    return elements, flops


@dataclass(frozen=True, eq=False)
class Traced:
    """A function traced once for arguments of given shapes: its jaxpr, output structure, the
    work of one call (numbers its equations produce, multiply-adds of its products), and the
    equations the host path refuses (primitive and dtypes; empty when it evaluates them all)."""

    closed: Any
    out_tree: Any
    elements: int
    flops: float
    unsupported: frozenset[str]

    def fits(self, calls: int = 1) -> bool:
        """Whether ``calls`` calls are cheaper on the host than compiling (and it can run there)."""
        small = self.elements * calls <= HOST_MAX_ELEMENTS and self.flops * calls <= HOST_MAX_FLOPS
        return small and not self.unsupported

    def evaluate(self, *args) -> Any:
        """The function's outputs for ``args`` (of the traced shapes), numpy leaves.

        Raises :class:`NotOnHost` when an equation is refused, or a subnormal number turns up."""
        if self.unsupported:
            raise NotOnHost(f"not on the host: {', '.join(sorted(self.unsupported))}")
        invars = self.closed.jaxpr.invars
        with np.errstate(all="ignore"):  # in the traced dtypes (float64 -> float32 without x64), as jit casts
            flat = [_refuse_subnormal(_cast(a, v.aval)) for a, v in zip(jax.tree.leaves(args), invars, strict=True)]
        outs = _evaluate(self.closed.jaxpr, [np.asarray(c) for c in self.closed.consts], flat)
        return jax.tree.unflatten(self.out_tree, outs)


_TRACES = LruCache(32)


def traced(fn: Callable, *args) -> Traced:
    """``fn`` traced for the shapes and dtypes of ``args`` (remembered per function and shapes)."""
    leaves, tree = jax.tree.flatten(args)
    structs = [jax.ShapeDtypeStruct(np.shape(a), a.dtype if hasattr(a, "dtype") else np.result_type(a)) for a in leaves]
    key = (fn, tree, tuple((s.shape, s.dtype) for s in structs))

    def trace() -> Traced:
        closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*jax.tree.unflatten(tree, structs))
        elements, flops = _work(closed.jaxpr)
        refused = frozenset(_refusals(closed.jaxpr, [np.asarray(c) for c in closed.consts]))
        return Traced(closed, jax.tree.structure(shapes), elements, flops, refused)

    return _TRACES.get(key, trace)


def evaluate_on_host(fn: Callable, *args) -> Any:
    """fn(*args) with numpy arrays for every output leaf, computed by interpreting fn's jaxpr.

    Raises :class:`NotOnHost` when the jaxpr holds an equation outside the contract (module
    docstring), or the evaluation meets a subnormal number.
    """
    return traced(fn, *args).evaluate(*args)


def host_or_compiled(fn: Callable, *args, compiled: Callable | None = None, calls: int = 1) -> tuple[Any, bool]:
    """(fn(*args), whether it ran on the host): interpreted in numpy when :meth:`Traced.fits` (its
    equations produce at most HOST_MAX_ELEMENTS numbers and HOST_MAX_FLOPS multiply-adds over
    ``calls`` calls of this size, every equation within the contract); else ``compiled(*args)``
    (default ``jax.jit(fn)``), with numpy outputs."""
    trace = traced(fn, *args)
    if trace.fits(calls):
        try:
            return trace.evaluate(*args), True
        except NotOnHost:  # a subnormal number: XLA flushes it, numpy would not
            pass
    run = compiled if compiled is not None else jax.jit(fn)
    return jax.tree.map(np.asarray, run(*args)), False
