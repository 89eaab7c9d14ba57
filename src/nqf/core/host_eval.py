r"""Small JAX functions evaluated in numpy, without compiling: their jaxpr, interpreted.

A first prediction compiled a program for the expansion probe of the unit and two for the
data's moments (0.2 s each on the CPU, more than the arithmetic of the whole prediction at
the sizes researchers study). Tracing a function into its jaxpr costs milliseconds; this
module then walks the jaxpr's equations with numpy. Autodiff and vmap have been applied by
the tracing, so the equations are plain array operations (elementwise functions, broadcasts,
dot_general, reductions, slices). A primitive outside the table below raises
:class:`NotOnHost`, and callers compile instead (:func:`host_or_compiled`).

Numbers: elementwise functions and products round as numpy rounds them, which may differ from
XLA's (its fused multiply-adds, its sums' order, its tanh) by a few units in the last place;
the tests hold the two paths to 1e-12 relative on every built-in architecture
(``tests/test_host_eval.py``). Every result is cast to the dtype the jaxpr declares, so
numpy's promotion rules never widen a float32 computation.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.extend import core as jax_core

# Above this many numbers produced by a jaxpr's equations (all equations, every call), or this
# many multiply-adds in its products, the compiled program is cheaper than numpy's op-by-op run.
HOST_MAX_ELEMENTS = 1 << 23
HOST_MAX_FLOPS = 2e8


class NotOnHost(Exception):
    """The jaxpr holds a primitive (or parameter) that this evaluator does not implement."""


def _cast(value, aval) -> np.ndarray:
    return np.asarray(value, dtype=aval.dtype)


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


def _dot_general(a, b, *, dimension_numbers, **_):
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
    return np.einsum(spec, a, b, optimize=a.ndim + b.ndim > 4)


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
    if len(cases) == 2 and which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0])
    return np.choose(np.asarray(which, dtype=np.int64), cases)


def _integer_pow(x, *, y, **_):
    return x**y


def _div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        raise NotOnHost("integer division")  # lax rounds toward zero, numpy toward -inf
    return a / b


def _reduce(fn):
    return lambda x, *, axes, **_: fn(x, axis=tuple(axes))


def _convert(x, *, new_dtype, **_):
    return np.asarray(x).astype(new_dtype)


def _elementwise(scalar_fn: Callable) -> Callable:
    """A float function of the math module over an array (no numpy ufunc exists for it)."""
    return lambda x: np.vectorize(scalar_fn, otypes=[x.dtype])(x) if x.size else x


_UNARY: dict[str, Callable] = {
    "neg": np.negative,
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "tanh": np.tanh,
    "sin": np.sin,
    "cos": np.cos,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "abs": np.abs,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "logistic": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "not": np.logical_not,
    "is_finite": np.isfinite,
    "square": np.square,
    "erf": _elementwise(math.erf),
    "erfc": _elementwise(math.erfc),
    "stop_gradient": lambda x: x,
    "copy": np.array,
    "copy_p": np.array,
    "optimization_barrier": lambda *xs: xs,
}
_BINARY: dict[str, Callable] = {
    "add": np.add,
    "add_any": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": _div,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "atan2": np.arctan2,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": lambda a, b: np.logical_and(a, b) if a.dtype == np.bool_ else np.bitwise_and(a, b),
    "or": lambda a, b: np.logical_or(a, b) if a.dtype == np.bool_ else np.bitwise_or(a, b),
}
_WITH_PARAMS: dict[str, Callable] = {
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": lambda x, *, new_sizes, **_: np.reshape(x, new_sizes),
    "squeeze": lambda x, *, dimensions, **_: np.squeeze(x, axis=tuple(dimensions)),
    "expand_dims": lambda x, *, dimensions, **_: np.expand_dims(x, axis=tuple(dimensions)),
    "transpose": lambda x, *, permutation, **_: np.transpose(x, permutation),
    "slice": _slice,
    "pad": _pad,
    "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
    "stack": lambda *xs, axis, **_: np.stack(xs, axis=axis),
    "split": _split,
    "iota": _iota,
    "dot_general": _dot_general,
    "select_n": _select_n,
    "integer_pow": _integer_pow,
    "convert_element_type": _convert,
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_prod": _reduce(np.prod),
    "reduce_and": _reduce(np.all),
    "reduce_or": _reduce(np.any),
    "clamp": lambda lo, x, hi, **_: np.clip(x, lo, hi),
    "rev": lambda x, *, dimensions, **_: np.flip(x, axis=tuple(dimensions)),
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


def _apply(eqn, args: list[np.ndarray]) -> list[np.ndarray]:
    name = eqn.primitive.name
    if name in _CALLS:
        sub = eqn.params.get(_CALLS[name])
        if sub is None:
            raise NotOnHost(f"{name} without its jaxpr")
        if isinstance(sub, jax_core.ClosedJaxpr):
            return _evaluate(sub.jaxpr, [np.asarray(c) for c in sub.consts], args)
        return _evaluate(sub, [], args)
    if name in _UNARY:
        out = _UNARY[name](*args)
    elif name in _BINARY:
        out = _BINARY[name](*args)
    elif name in _WITH_PARAMS:
        out = _WITH_PARAMS[name](*args, **eqn.params)
    else:
        raise NotOnHost(f"primitive {name}")
    outs = list(out) if eqn.primitive.multiple_results else [out]
    return [_cast(o, v.aval) for o, v in zip(outs, eqn.outvars, strict=True)]


def _evaluate(jaxpr, consts: list, args: list) -> list[np.ndarray]:
    env: dict[Any, np.ndarray] = {}

    def read(v):
        if isinstance(v, jax_core.Literal):
            return _cast(v.val, v.aval)
        return env[v]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = np.asarray(value)
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = _cast(value, var.aval)
    for eqn in jaxpr.eqns:
        with np.errstate(all="ignore"):  # inf and nan propagate as in XLA
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


def _primitives(jaxpr) -> set[str]:
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for sub in jax_core.jaxprs_in_params(eqn.params):
            names |= _primitives(sub)
    return names


_KNOWN = set(_UNARY) | set(_BINARY) | set(_WITH_PARAMS) | set(_CALLS)


@dataclass(frozen=True, eq=False)
class Traced:
    """A function traced once for arguments of given shapes: its jaxpr, output structure, and
    the work of one call (numbers its equations produce, multiply-adds of its products)."""

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
        """The function's outputs for ``args`` (of the traced shapes), numpy leaves."""
        flat = [np.asarray(a) for a in jax.tree.leaves(args)]
        outs = _evaluate(self.closed.jaxpr, [np.asarray(c) for c in self.closed.consts], flat)
        return jax.tree.unflatten(self.out_tree, outs)


_TRACE_CACHE_SIZE = 32
_TRACES: OrderedDict = OrderedDict()


def traced(fn: Callable, *args) -> Traced:
    """``fn`` traced for the shapes and dtypes of ``args`` (remembered per function and shapes)."""
    leaves, tree = jax.tree.flatten(args)
    structs = [jax.ShapeDtypeStruct(np.shape(a), a.dtype if hasattr(a, "dtype") else np.result_type(a)) for a in leaves]
    key = (fn, tree, tuple((s.shape, s.dtype) for s in structs))
    hit = _TRACES.get(key)
    if hit is not None:
        _TRACES.move_to_end(key)
        return hit
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*jax.tree.unflatten(tree, structs))
    elements, flops = _work(closed.jaxpr)
    result = Traced(closed, jax.tree.structure(shapes), elements, flops, frozenset(_primitives(closed.jaxpr) - _KNOWN))
    _TRACES[key] = result
    while len(_TRACES) > _TRACE_CACHE_SIZE:
        _TRACES.popitem(last=False)
    return result


def evaluate_on_host(fn: Callable, *args) -> Any:
    """fn(*args) with numpy arrays for every output leaf, computed by interpreting fn's jaxpr.

    Raises :class:`NotOnHost` when the jaxpr holds a primitive this module does not evaluate.
    """
    trace = traced(fn, *args)
    if trace.unsupported:
        raise NotOnHost(f"primitives {', '.join(sorted(trace.unsupported))}")
    return trace.evaluate(*args)


def host_or_compiled(fn: Callable, *args, compiled: Callable | None = None, calls: int = 1) -> tuple[Any, bool]:
    """(fn(*args), whether it ran on the host): interpreted in numpy when :meth:`Traced.fits` (its
    equations produce at most HOST_MAX_ELEMENTS numbers and HOST_MAX_FLOPS multiply-adds over
    ``calls`` calls of this size, every primitive implemented); else ``compiled(*args)``
    (default ``jax.jit(fn)``), with numpy outputs."""
    trace = traced(fn, *args)
    if trace.fits(calls):
        try:
            return trace.evaluate(*args), True
        except NotOnHost:  # a parameter the table does not take (integer division, ...)
            pass
    run = compiled if compiled is not None else jax.jit(fn)
    return jax.tree.map(np.asarray, run(*args)), False
