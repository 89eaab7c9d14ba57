r"""A user's Equinox or Flax module as one unit of a layer (docs/theory.md section 1).

The module is the unit: its trainable arrays are the unit's parameters w, everything
else about it (its structure, activation functions, integer fields, non-parameter
collections) stays fixed. With ``m(w)`` the module carrying the arrays w,

    phi(w, x) = m(w)(x) in R^K,     f(x; W) = sum_{i=1..n} phi(w_i, x),

and w is flattened in the module's PyTree leaf order (``Architecture.blocks`` names the
leaves by their attribute or dictionary path, e.g. ``a``, ``v``, ``Dense_0.kernel``).
The layer therefore has n copies of the module, each with its own arrays; A(x) =
(1/2) Hessian_w phi(0, x) comes from autodiff (``structure_matrix``) and
:func:`nqf.expansion_check` says whether the quadratic form holds, as for any unit.

- Equinox: the parameters are the module's inexact (floating-point) arrays,
  ``eqx.partition(module, eqx.is_inexact_array)``; the unit recombines them with the
  static rest (``eqx.combine``) and calls the module.
- Flax linen: the parameters are the ``params`` collection of ``module.init`` (or of the
  ``variables`` given); the unit is ``module.apply({..., "params": w}, x)``, other
  collections (e.g. ``batch_stats``) fixed at their values.
- Flax NNX: the parameters are the module's ``nnx.Param`` variables (``nnx.split``), named
  by their attribute path; the unit is ``nnx.merge(graphdef, w, rest)(x)``.

Each call returns a new Architecture whose unit is a new function: compiled runs are
cached per Architecture object (not across calls or processes), so build it once.

Flax is optional (``pip install 'nqf[flax]'``, from a clone ``pip install '.[flax]'``); importing nqf never imports it.
The module must take ONE input x of shape ``input_shape`` (no batch axis: callers vmap)
and return K = ``outputs`` numbers, shape (K,) (or () when K = 1). The values of the
module's arrays are not used: only their shapes (w starts from the layer's init).

An Equinox or Flax module whose output is a trainable readout of features, phi = R(w) g(w, x),
may declare it so that the layer is trained as matrix products (``network_batch``,
:class:`~nqf.architectures.architecture.Readout`). The class names the readout's block
and computes the features of a whole batch::

    class Perceptron(eqx.Module):
        a: jax.Array                      # (K, r): the readout R
        v: jax.Array                      # (r, D)
        readout_block: ClassVar[str] = "a"

        def __call__(self, x):            # one input: phi = a tanh(v x), (K,)
            return self.a @ jnp.tanh(self.v @ x)

        def features(self, X):            # a batch X (N, *input_shape): g, (N, r)
            return jnp.tanh(X @ self.v.T)

``readout_block`` is a block name as ``Architecture.blocks`` spells it (``a``,
``linear.weight``), read row-major as the (K, r) matrix R; a class that stores R^T, an
(r, K) matrix applied on the right (``g @ self.w_out``), also sets ``readout_transposed:
ClassVar[bool] = True``. ``features`` must agree with ``__call__``: ``__call__(x)`` =
R @ features(x[None])[0]. The tests compare the two for the built-in units; for a
user's module compare ``network_batch`` with ``network`` once.

A Flax module declares it the same way, with the same two names on its class:

- linen: ``features`` is called as ``module.apply({..., "params": w}, X, method="features")``,
  so it reaches the parameters through attributes that ``setup()`` defines
  (``self.a = self.param("a", ...)``, ``self.out = nn.Dense(K)``); a ``@nn.compact``
  ``__call__`` creates them where ``features`` cannot see them. Blocks are named by the
  ``params`` path: ``a``, ``out.kernel``. ``nn.Dense`` stores its kernel as (in, out) =
  (r, K), R^T: ``readout_block = "out.kernel"`` with ``readout_transposed = True``.
- NNX: ``features`` is a method of the module rebuilt from w (``nnx.merge``), reading its
  ``nnx.Param`` values (``self.v[...]``); blocks are named by attribute path (``a``,
  ``out.kernel``, again (r, K) for ``nnx.Linear``).

Flax layers often call their width ``features`` (``nn.Dense(features=...)``); a module
whose ``features`` is such a field, not a method, cannot declare a readout (an NqfError
says so).
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from nqf.architectures.architecture import Architecture, Readout, leaf_name
from nqf.core.errors import NqfError, install_hint

_MAX_MESSAGE = 400  # characters of a module's own error message kept in ours


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE - 3] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _is_count(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1


def _shapes(name: str, input_shape: Any, outputs: Any) -> tuple[tuple[int, ...], int]:
    """input_shape as a tuple of positive ints (an int D means (D,)) and outputs as a positive int."""
    if isinstance(input_shape, numbers.Integral) and not isinstance(input_shape, bool):
        input_shape = (input_shape,)
    if not isinstance(input_shape, Sequence) or isinstance(input_shape, str) or not all(map(_is_count, input_shape)):
        raise NqfError(f"{name}: input_shape must be a tuple of positive integers, got {input_shape!r}")
    if not _is_count(outputs):
        raise NqfError(f"{name}: outputs must be a positive integer, got {outputs!r}")
    return tuple(int(s) for s in input_shape), int(outputs)


def _template(params: Any) -> Any:
    """The parameter PyTree with every array replaced by its shape and dtype."""
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), params)


def _names(tree: Any, strip: str = "") -> list[tuple[str, tuple[int, ...]]]:
    """(block name, shape) of every leaf, in flattening order (names as ``Architecture.blocks``)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(leaf_name(path).removesuffix(strip), tuple(jnp.shape(leaf))) for path, leaf in leaves]


def _check_readout(name: str, readout: Readout, template: Any, input_shape: tuple[int, ...], outputs: int) -> None:
    """The declared readout names a block of the module, and ``features`` gives (N, r) with K r = |block|."""
    blocks = dict(_names(template))
    if readout.block not in blocks:
        raise NqfError(
            f"{name}: readout_block {readout.block!r} is not a parameter block of the module; its blocks are "
            f"{', '.join(blocks)}"
        )
    size = math.prod(blocks[readout.block])
    X = jax.ShapeDtypeStruct((2, *input_shape), jnp.result_type(float))
    try:
        out = jax.eval_shape(readout.features, template, X)
    except Exception as err:  # the user's method
        raise NqfError(f"{name}: features on a batch of shape {(2, *input_shape)} raised {_one_line(err)}") from None
    shape = tuple(getattr(out, "shape", ()))
    if len(shape) != 2 or shape[0] != 2 or shape[1] * outputs != size:
        raise NqfError(
            f"{name}: features(X) must return (N, r) with outputs x r = {size} (the size of readout block "
            f"{readout.block!r}), got shape {shape} for a batch of shape {(2, *input_shape)}"
        )


def _build(name, framework, type_name, unit, template, input_shape, outputs, readout=None) -> Architecture:
    """The Architecture of a module's unit, after checking what the module returns for one input."""
    if not jax.tree_util.tree_leaves(template):
        raise NqfError(
            f"{name}: the {framework} module {type_name} has no trainable (floating-point) arrays, so a unit "
            "made of it has no parameters"
        )
    x = jax.ShapeDtypeStruct(input_shape, jnp.result_type(float))
    try:
        out = jax.eval_shape(unit, template, x)
    except Exception as err:  # the user's module: any error is theirs, said in one line
        raise NqfError(
            f"{name}: calling the {framework} module {type_name} on one input of shape {input_shape} raised "
            f"{_one_line(err)}"
        ) from None
    if not isinstance(out, jax.ShapeDtypeStruct) or not jnp.issubdtype(out.dtype, jnp.inexact):
        raise NqfError(f"{name}: the module must return one floating-point array of shape ({outputs},), got {out}")
    if tuple(out.shape) != (outputs,) and not (outputs == 1 and tuple(out.shape) == ()):
        raise NqfError(
            f"{name}: the module returns shape {tuple(out.shape)} for one input of shape {input_shape}, "
            f"but outputs = {outputs} asks for shape ({outputs},)"
        )
    if readout is not None:
        _check_readout(name, readout, template, input_shape, outputs)
    return Architecture(
        name=name,
        unit=unit,
        template=template,
        input_shape=input_shape,
        outputs=outputs,
        options=(("framework", framework), ("input_shape", input_shape), ("outputs", outputs)),
        description=f"a user's {framework} module {type_name} as the unit",
        readout=readout,
    )


def from_equinox(module: Any, input_shape: int | Sequence[int], outputs: int, name: str | None = None) -> Architecture:
    """An Equinox module as one unit: phi(w, x) = module(x) with its inexact arrays replaced by w.

    Args:
        module: an ``equinox.Module`` mapping one input x of shape ``input_shape`` to (outputs,).
        input_shape: shape of one input (an int D means (D,)).
        outputs: K, the number of outputs.
        name: the architecture's name (default: the module's class name).

    The parameters are ``eqx.partition(module, eqx.is_inexact_array)[0]`` (every
    floating-point array, also ones the user may think of as buffers), flattened in the
    module's leaf order; the rest is kept as it is. A module class that declares
    ``readout_block`` (and ``features(self, X)``; see the module docstring) gets a
    :class:`~nqf.architectures.architecture.Readout`, so the layer trains as matrix products.
    Raises NqfError (one line) for a module without floating-point arrays, one that fails
    on, or returns the wrong shape for, one input, and for a readout declaration whose block
    does not exist or whose features do not have shape (N, r) with outputs x r = the block's size.
    """
    import equinox as eqx

    type_name = type(module).__name__
    name = name or type_name
    if not isinstance(module, eqx.Module):
        raise NqfError(f"{name}: from_equinox takes an equinox.Module, got {type_name}")
    input_shape, outputs = _shapes(name, input_shape, outputs)
    params, static = eqx.partition(module, eqx.is_inexact_array)

    def unit(w, x):
        return eqx.combine(w, static)(x)

    def features(w, X):
        return eqx.combine(w, static).features(X)

    readout = _declared_readout(name, module, features)
    return _build(name, "equinox", type_name, unit, _template(params), input_shape, outputs, readout)


def _declared_readout(name: str, module: Any, features: Any) -> Readout | None:
    """The Readout a module class declares with ``readout_block`` and ``features(self, X)``, or None.

    ``features(w, X) -> (N, r)`` is the framework's way of calling the method on the module
    rebuilt from one unit's parameters w (a template-shaped PyTree) for a batch X
    (N, *input_shape); ``_build`` checks its shape against the block once, before any training.
    """
    block = getattr(module, "readout_block", None)
    if block is None:
        return None
    if not isinstance(block, str):
        raise NqfError(f"{name}: readout_block must be the name of a parameter block (a str), got {block!r}")
    method = getattr(module, "features", None)
    if not callable(method):
        # in Flax ``features`` is also the usual name of a layer's width (nn.Dense(features=...))
        found = "" if method is None else f"; its features is of type {type(method).__name__}, not a method"
        raise NqfError(f"{name}: a module that declares readout_block must define features(self, X) -> (N, r){found}")
    return Readout(block, features, transposed=bool(getattr(module, "readout_transposed", False)))


def _import_flax():
    try:
        import flax  # noqa: F401
    except ImportError:
        raise NqfError(f"Flax modules need Flax, which is not installed: {install_hint('flax')}") from None


def from_flax(
    module: Any,
    input_shape: int | Sequence[int],
    outputs: int,
    name: str | None = None,
    variables: Mapping[str, Any] | None = None,
) -> Architecture:
    """A Flax module (linen or NNX) as one unit: phi(w, x) = module(x) with its parameters replaced by w.

    Args:
        module: a ``flax.linen.Module`` or a ``flax.nnx.Module`` mapping one input x of shape
            ``input_shape`` to (outputs,).
        input_shape: shape of one input (an int D means (D,)).
        outputs: K, the number of outputs.
        name: the architecture's name (default: the module's class name).
        variables: linen only: the module's variables; default ``module.init(key(0), zeros)``.
            Their ``params`` collection gives the parameter shapes; other collections
            (``batch_stats``, ...) are kept fixed at these values.

    Linen: phi(w, x) = module.apply({**variables, "params": w}, x). NNX: the parameters are
    the ``nnx.Param`` variables, phi(w, x) = nnx.merge(graphdef, w, rest)(x). A module class
    that declares ``readout_block`` (and ``features(self, X)``; see the module docstring) gets
    a :class:`~nqf.architectures.architecture.Readout`, g(w, X) = the same call with
    ``features`` on the batch X (N, *input_shape) -> (N, r), so the layer trains as matrix
    products. Raises NqfError when Flax is not installed ("pip install 'nqf[flax]'"), for a
    module without parameters, for one that fails on, or returns the wrong shape for, one
    input, and for a readout declaration whose block does not exist or whose features do not
    have shape (N, r) with outputs x r = the block's size.
    """
    _import_flax()
    from flax import linen, nnx

    type_name = type(module).__name__
    name = name or type_name
    input_shape, outputs = _shapes(name, input_shape, outputs)
    if isinstance(module, linen.Module):
        if variables is None:
            try:
                variables = module.init(jax.random.key(0), jnp.zeros(input_shape, jnp.result_type(float)))
            except Exception as err:
                raise NqfError(
                    f"{name}: initialising the flax module {type_name} on one input of shape {input_shape} raised "
                    f"{_one_line(err)}"
                ) from None
        variables = dict(variables)
        params = variables.pop("params", {})
        rest = variables

        def unit(w, x):
            return module.apply({**rest, "params": w}, x)

        # linen methods run only inside apply, bound to the variables; by name, as apply allows
        def linen_features(w, X):
            return module.apply({**rest, "params": w}, X, method="features")

        readout = _declared_readout(name, module, linen_features)
        return _build(name, "flax", type_name, unit, _template(params), input_shape, outputs, readout)
    if isinstance(module, nnx.Module):
        if variables is not None:
            raise NqfError(f"{name}: variables are for flax.linen modules; an nnx module carries its own")
        graphdef, params, rest = nnx.split(module, nnx.Param, ...)  # type: ignore[misc]  # two filters: three parts
        # the template is the plain nested dict of the Params' arrays (blocks named ``a``, not
        # ``a.value``); the unit puts w's leaves back into the State, in the same leaf order
        state_def = jax.tree_util.tree_structure(params)
        template = _template(nnx.to_pure_dict(params))
        if _names(params, strip=".value") != _names(template):  # not expected; then the State itself is the template
            template = _template(params)

        def module_of(w):
            state = jax.tree_util.tree_unflatten(state_def, jax.tree_util.tree_leaves(w))
            return nnx.merge(graphdef, state, rest)

        def unit(w, x):
            return module_of(w)(x)

        def nnx_features(w, X):
            return module_of(w).features(X)

        readout = _declared_readout(name, module, nnx_features)
        return _build(name, "flax", type_name, unit, template, input_shape, outputs, readout)
    raise NqfError(f"{name}: from_flax takes a flax.linen.Module or a flax.nnx.Module, got {type_name}")


def framework_of(obj: Any) -> str | None:
    """``equinox`` or ``flax`` when ``obj`` is a module of one (looked up among loaded modules only), else None."""
    eqx = sys.modules.get("equinox")
    if eqx is not None and isinstance(obj, eqx.Module):
        return "equinox"
    for module_name in ("flax.linen", "flax.nnx"):
        flax_module = sys.modules.get(module_name)
        if flax_module is not None and isinstance(obj, flax_module.Module):
            return "flax"
    return None


def from_module(module: Any, input_shape, outputs, name: str | None = None) -> Architecture:
    """:func:`from_equinox` or :func:`from_flax`, whichever framework ``module`` belongs to."""
    framework = framework_of(module)
    if framework == "equinox":
        return from_equinox(module, input_shape, outputs, name=name)
    if framework == "flax":
        return from_flax(module, input_shape, outputs, name=name)
    raise NqfError(f"{name or type(module).__name__}: not an Equinox or Flax module (got {type(module).__name__})")
