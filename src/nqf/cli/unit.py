"""``--unit FILE.py:FUNCTION``: a user's own unit on the command line (structure, predict, compare).

The file is run as a fresh module (its own name, no bytecode written next to it) and
FUNCTION is called. It returns one of

- an :class:`nqf.Architecture` (e.g. from ``nqf.from_equinox``, or built by hand);
- an Equinox or Flax module (``nqf.from_equinox`` / ``nqf.from_flax`` make it the unit),
  its input shape and outputs taken from the data (or ``--inputs`` / ``--outputs``);
- a tuple ``(module, input_shape, outputs)``.

FUNCTION takes no arguments, or the keyword arguments ``input_shape`` (a tuple of
ints) and ``outputs`` (an int), given the values the command knows: ``--inputs D``
(or ``D1,D2,...``) and ``--outputs K`` if given, else the data's (predict: X's shape
after the samples and Y's columns, the largest integer label + 1 for labels (N,);
compare: the task's, for ``--task npz`` its file's). A unit whose shapes disagree
with the data's is an error. Every failure is one ``error:`` line and exit 2: a
missing file, not a .py file, no ``:FUNCTION`` part, no such function, an exception
while running the file or the function (its type and message), a result of another
kind, a module without floating-point arrays, a call of ``os._exit`` (:func:`user_code`).
What the file and the function print goes to stderr: nqf's stdout (``--json``) stays nqf's.

Outputs name the unit ``FILE.py:FUNCTION`` (the file's name, without its folder; a
returned Architecture keeps its own name). The file's folder is not added to
``sys.path``; the file runs with the command's working directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import itertools
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from nqf.core.errors import NqfError

from .options import check_task_file, parse_factory_options, resolve_task_and_arch

UNIT_HELP = (
    "Your own unit instead of --arch: FILE.py:FUNCTION, where FUNCTION returns an nqf.Architecture, an Equinox or "
    "Flax module, or (module, input_shape, outputs); it may take keyword arguments input_shape and outputs "
    "(from --inputs D[,D2..] / --outputs K, else from the data)."
)
UnitOption = Annotated[str | None, typer.Option("--unit", help=UNIT_HELP)]  # predict's and compare's
OPTIONS = {"inputs": None, "outputs": None}  # the options of a --unit (shapes; None: a number or text)
_LABEL = "--unit"
_COUNTER = itertools.count()
_SHAPE_PARAMETERS = ("input_shape", "outputs")


def parse_unit_spec(spec: str) -> tuple[Path, str]:
    """``FILE.py:FUNCTION`` -> (path, function name); checks the file exists. NqfError when not."""
    if ":" not in spec:
        raise NqfError(f"--unit takes FILE.py:FUNCTION, got {spec!r} (no :FUNCTION part)")
    text, function = spec.rsplit(":", 1)
    if not function.isidentifier():
        raise NqfError(f"--unit {spec}: {function!r} is not a function name (FILE.py:FUNCTION)")
    path = Path(text)
    if path.suffix != ".py":
        raise NqfError(f"--unit {spec}: {text!r} is not a .py file")
    if not path.exists():
        raise NqfError(f"--unit {spec}: {path} does not exist")
    if not path.is_file():
        raise NqfError(f"--unit {spec}: {path} is not a file")
    return path, function


def check_unit_option(arch: str | None, unit: str | None) -> None:
    """``--unit`` (if given) without ``--arch``, its FILE.py:FUNCTION checked before JAX starts."""
    if unit is None:
        return
    if arch is not None:
        raise NqfError("give --arch NAME or --unit FILE.py:FUNCTION, not both")
    parse_unit_spec(unit)


class UnitExited(Exception):
    """A user's unit called ``os._exit``, which nqf turns into this error while the unit's code runs."""


@contextlib.contextmanager
def output_to_stderr() -> Iterator[None]:
    """What is printed inside the block goes to stderr, never into nqf's output on stdout
    (``--json``): ``sys.stdout`` and file descriptor 1 both (C extensions, ``os.write(1, ...)``)."""
    sys.stdout.flush()
    saved_fd = _point_stdout_at_stderr()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved_fd is not None:
            os.dup2(saved_fd, 1)
            os.close(saved_fd)


def unit_computing(unit: str | None) -> contextlib.AbstractContextManager:
    """For a command run with ``--unit``: :func:`output_to_stderr` around its computations, where
    the unit's own code runs again (a ``print`` in its ``__call__`` runs whenever JAX traces it)."""
    return output_to_stderr() if unit is not None else contextlib.nullcontext()


@contextlib.contextmanager
def user_code(spec: str) -> Iterator[None]:
    """Run a user's file or function: what it prints goes to stderr (:func:`output_to_stderr`),
    and ``os._exit``, which would end nqf at once with the status the unit chose and no output,
    raises :class:`UnitExited` instead (a one-line error). The limit: only ``os._exit`` (and
    ``posix._exit``, the same function) while the file runs, the function is called and the unit
    is first evaluated; other ways to end a process (``os.kill``, ``os.abort``, a crash in C) end
    nqf as they would any program, with their own status, never 0."""
    real_exit = os._exit

    def refuse_exit(status: int) -> NoReturn:
        raise UnitExited(f"--unit {spec}: the unit called os._exit({status}), which would end nqf without its output")

    native = sys.modules.get(os.name)  # posix (or nt): where os._exit comes from, reachable as well
    patched = [m for m in (os, native) if m is not None and getattr(m, "_exit", None) is real_exit]
    for module in patched:
        module._exit = refuse_exit  # type: ignore[attr-defined]
    try:
        with output_to_stderr():
            yield
    finally:
        for module in patched:
            module._exit = real_exit  # type: ignore[attr-defined]


@contextlib.contextmanager
def _running(
    spec: str, doing: str, exited: str = "", passes: tuple[type[BaseException], ...] = (KeyboardInterrupt,)
) -> Iterator[None]:
    """:func:`user_code` with whatever the user's code raises, but ``passes``, as one NqfError line:
    ``--unit SPEC: {doing} raised TYPE: message``; ``os._exit`` as its own line, then ``exited``."""
    try:
        with user_code(spec):
            yield
    except passes:
        raise
    except UnitExited as err:
        raise NqfError(f"{err}{exited}") from None
    except BaseException as err:  # SystemExit, GeneratorExit, ...: a user's code, one line
        raise NqfError(f"--unit {spec}: {doing} raised {_error(err)}") from None


def _point_stdout_at_stderr() -> int | None:
    """Descriptor 1 pointed at descriptor 2; returns a copy of the old descriptor 1 (None when
    there is none to move: then only Python-level writes are redirected)."""
    try:
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


def _error(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def load_function(spec: str):
    """Run FILE.py as a new module and return its FUNCTION."""
    path, function = parse_unit_spec(spec)
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"_nqf_unit_{digest}_{next(_COUNTER)}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise NqfError(f"--unit {spec}: {path} cannot be loaded as Python")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses (equinox modules) look their module up here
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # nothing written next to the user's file
    try:
        with _running(spec, f"running {path}", f" (while running {path})"):
            module_spec.loader.exec_module(module)
    except NqfError:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.dont_write_bytecode = dont_write
    fn = getattr(module, function, None)
    if fn is None:
        raise NqfError(f"--unit {spec}: {path} has no function {function!r}")
    if not callable(fn):
        raise NqfError(f"--unit {spec}: {function} in {path} is a {type(fn).__name__}, not a function")
    return fn


def _call(spec: str, fn, input_shape, outputs):
    """fn(), or fn(input_shape=..., outputs=...) for the keyword arguments it declares."""
    known = {"input_shape": input_shape, "outputs": outputs}
    kwargs = {}
    parameters: Iterable[inspect.Parameter]
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        parameters = ()
    for p in parameters:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in _SHAPE_PARAMETERS and p.kind != p.POSITIONAL_ONLY:
            if known[p.name] is not None:
                kwargs[p.name] = known[p.name]
            elif p.default is p.empty:
                flag = "--inputs" if p.name == "input_shape" else "--outputs"
                raise NqfError(f"--unit {spec}: the function takes {p.name}, which is not known here; give {flag}")
        elif p.default is p.empty:
            raise NqfError(
                f"--unit {spec}: the function takes an argument {p.name!r}; a unit function takes none, "
                "or the keyword arguments input_shape and outputs"
            )
    with _running(spec, "the function"):
        return fn(**kwargs)


def _architecture(spec: str, result: Any, input_shape, outputs):
    from nqf.architectures.architecture import Architecture
    from nqf.architectures.modules import framework_of, from_module

    path, function = spec.rsplit(":", 1)
    name = f"{Path(path).name}:{function}"  # never a built-in's name (``mlp`` has closed forms keyed by name)
    if isinstance(result, Architecture):
        return result
    if isinstance(result, tuple) and len(result) == 3 and framework_of(result[0]) is not None:
        _note_precision(spec, result[0])
        return from_module(result[0], result[1], result[2], name=name)
    if framework_of(result) is not None:
        _note_precision(spec, result)
        if input_shape is None or outputs is None:
            missing = "--inputs" if input_shape is None else "--outputs"
            raise NqfError(
                f"--unit {spec}: the function returned a module without its shapes; give {missing}, "
                "or return (module, input_shape, outputs)"
            )
        return from_module(result, input_shape, outputs, name=name)
    kind = type(result).__name__ if not isinstance(result, tuple) else f"a tuple of {len(result)}"
    raise NqfError(
        f"--unit {spec}: the function returned {kind}; expected an nqf.Architecture, an Equinox or Flax module, "
        "or (module, input_shape, outputs)"
    )


def _note_precision(spec: str, module: Any) -> None:
    """A ``note:`` line when the module holds floating arrays narrower than float64: nqf takes
    only their shapes (it draws its own weights) and computes in float64, which may surprise."""
    import jax
    import numpy as np

    narrow = sorted(
        {
            str(leaf.dtype)
            for leaf in jax.tree_util.tree_leaves(module)
            if hasattr(leaf, "dtype") and np.issubdtype(leaf.dtype, np.floating) and np.dtype(leaf.dtype).itemsize < 8
        }
    )
    if narrow:
        print(
            f"note: --unit {spec}: the module's arrays are {', '.join(narrow)}; nqf takes their shapes only "
            "(it draws its own weights) and computes in float64",
            file=sys.stderr,
        )


def _shape_option(value: Any) -> tuple[int, ...] | None:
    """``--inputs`` as a shape: 8 -> (8,), "4,3" -> (4, 3)."""
    if value is None:
        return None
    parts = str(value).split(",")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(s < 1 for s in shape):
        raise NqfError(f"--unit: option --inputs takes a positive integer or a shape D1,D2,..., got {value!r}")
    return shape


def _outputs_option(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or value < 1:
        raise NqfError(f"--unit: option --outputs takes a positive integer, got {value!r}")
    return value


def _merge(spec: str, given, inferred, what: str, source: str):
    if given is not None and inferred is not None and given != inferred:
        raise NqfError(f"--unit {spec}: --{what} {_show(given)} disagrees with {source}, which has {_show(inferred)}")
    return given if given is not None else inferred


def _show(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def unit_architecture(spec: str, options: dict[str, Any], data: tuple | None = None, source: str = "the data"):
    """The Architecture of ``--unit spec``.

    options: the parsed ``--inputs`` / ``--outputs`` (values or None); data: (input_shape,
    outputs) the command infers from its data, or None (``nqf structure``); source names
    the data in messages. NqfError (one line) for every failure (module docstring).
    """
    input_shape, outputs = _shape_option(options.get("inputs")), _outputs_option(options.get("outputs"))
    if data is not None:
        input_shape = _merge(spec, input_shape, tuple(data[0]), "inputs", source)
        outputs = _merge(spec, outputs, None if data[1] is None else int(data[1]), "outputs", source)
    fn = load_function(spec)
    arch = _architecture(spec, _call(spec, fn, input_shape, outputs), input_shape, outputs)
    if input_shape is not None and tuple(arch.input_shape) != input_shape:
        raise NqfError(
            f"--unit {spec}: the unit takes inputs of shape {tuple(arch.input_shape)}, but {_where(data, source)} "
            f"has inputs of shape {input_shape}"
        )
    if outputs is not None and arch.outputs != outputs:
        raise NqfError(f"--unit {spec}: the unit has {arch.outputs} outputs, but {_where(data, source)} has {outputs}")
    check_finite_at_zero(spec, arch)
    return arch


def check_finite_at_zero(spec: str, arch) -> None:
    """NqfError unless phi(0, x) and A(x) = (1/2) Hessian at w = 0 are finite at a probe input x
    (standard normal, seeded): the theory expands the unit about w = 0, and a unit that is NaN
    or infinite there (a log or a division by the weights, sqrt|w| whose second derivative
    blows up) has no such expansion. Whatever the unit raises is one line too."""
    import jax.numpy as jnp
    import numpy as np

    from nqf.architectures.architecture import structure_matrix

    x = jnp.asarray(np.random.default_rng(0).standard_normal(arch.input_shape))
    # the unit's own code runs (traced) here for the first time
    with _running(spec, "evaluating the unit at w = 0", passes=(KeyboardInterrupt, NqfError)):
        value = np.asarray(arch.effective_unit(jnp.zeros((arch.dim,), dtype=x.dtype), x))
        second = np.asarray(structure_matrix(arch, x))
    if not np.all(np.isfinite(value)):
        bad = value.ravel()[~np.isfinite(value.ravel())][0]
        raise NqfError(
            f"--unit {spec}: the unit is not finite at w = 0 (phi(0, x) = {bad} at a standard normal x); "
            "the theory expands the unit about w = 0"
        )
    if not np.all(np.isfinite(second)):
        raise NqfError(
            f"--unit {spec}: the unit's second derivative at w = 0 (A(x)) is not finite at a standard normal x "
            "(e.g. sqrt|w| or log of the weights); the theory expands the unit about w = 0"
        )


def _where(data, source: str) -> str:
    return source if data is not None else "the command line"


def parse_unit_options(args: list[str]) -> dict[str, Any]:
    """``--inputs`` / ``--outputs`` from the extra arguments of a command run with --unit."""
    return parse_factory_options(args, {_LABEL: OPTIONS})[_LABEL]


def data_shapes(X, Y, loss: str = "squared") -> tuple[tuple[int, ...], int]:
    """(input_shape, outputs) of data X (N, ...), Y (N,) or (N, K): integer labels (N,) give the
    largest label + 1 outputs (one-hot classes), other Y (N,) one output."""
    import numpy as np

    from nqf.architectures import outputs_for_targets

    return tuple(int(s) for s in np.shape(X)[1:]), outputs_for_targets(Y, loss)


def resolve_task_and_unit(task_name: str, spec: str, args: list[str]):
    """compare: the Task and the ``--unit`` Architecture, extra options split between them
    (``--inputs`` goes to both when the task has it too)."""
    from nqf.training.tasks import get_task, task_options
    from nqf.training.tasks.npz import Npz

    task_label = f"task {task_name}"
    parsed = parse_factory_options(args, {task_label: task_options(task_name), _LABEL: OPTIONS})
    check_task_file(task_name, parsed[task_label])
    task = get_task(task_name, **parsed[task_label])
    if isinstance(task, Npz):
        X, Y = task.load()
        data, source = data_shapes(X, Y), f"task npz {task.path}"
    else:
        natural = task.architecture()
        data, source = (tuple(natural.input_shape), natural.outputs), f"task {task_name}"
    return task, unit_architecture(spec, parsed[_LABEL], data, source)


def unit_for_data(spec: str, options: dict[str, Any], X, Y, loss: str, source: str):
    """predict: the ``--unit`` Architecture for data X, Y read from ``source``.

    Shapes default to the data's (:func:`data_shapes`); for integer labels (N,) an explicit
    ``--outputs`` wins (labels only bound K from below; the data checks then apply).
    """
    import numpy as np

    input_shape, data_outputs = data_shapes(X, Y, loss)
    outputs: int | None = data_outputs
    Y = np.asarray(Y)
    labels = Y.ndim == 1 and (np.issubdtype(Y.dtype, np.integer) or np.issubdtype(Y.dtype, np.bool_))
    if labels and options.get("outputs") is not None:
        outputs = None
    return unit_architecture(spec, options, (input_shape, outputs), f"the data {source}")


def resolve_task(task_name: str, arch: str | None, unit: str | None, args: list[str]):
    """compare and predict with ``--task``: the Task and the Architecture, ``--unit spec``
    (:func:`resolve_task_and_unit`) or ``--arch`` (default: the task's natural one;
    ``nqf.cli.options.resolve_task_and_arch``), the extra options split between them."""
    if unit is not None:
        return resolve_task_and_unit(task_name, unit, args)
    return resolve_task_and_arch(task_name, arch, args)
