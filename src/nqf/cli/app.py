"""The typer app every command registers on, and the JAX start-up of the commands that compute.

Kept apart from ``nqf/cli/__init__.py`` (which imports the command modules) so a command
module imports this, not the package that imports it: no import circle.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from nqf.core.memory import usable_cores

_CACHE_HELP = (
    "structure, predict and compare keep their compiled programs on disk, so repeated runs skip "
    "compilation: in $NQF_CACHE_DIR, else $XDG_CACHE_HOME/nqf/jax, else ~/.cache/nqf/jax. "
    'NQF_CACHE_DIR="" or --no-cache switches the cache off; a location that cannot be written, '
    "or a damaged cache, only costs a recompile."
)


class _NqfGroup(TyperGroup):
    """The root group: tidies the help of every command below it as typer builds them (:func:`tidy_help`)."""

    def __init__(self, **attrs) -> None:
        super().__init__(**attrs)
        tidy_help(self)


def tidy_help(command) -> None:
    """The ``--help`` screens of ``command`` and the commands below it, tidied for rich's panels.

    A flag (an option that takes no value: ``--json``, ``--quick/--full``, ``--help``) shows no
    type: typer's rich help would show ``<bool>`` as though it took one. A command's help
    paragraphs are joined into one line each, for rich to wrap at the terminal's width
    (typer's rich help keeps the line breaks of the docstring's later paragraphs, which
    break mid-phrase once rewrapped); a paragraph that starts with ``\\b`` keeps its lines.
    """
    if command.help:
        command.help = _joined_paragraphs(command.help)
    # the help option is made on first use, then kept: made here, and tidied with the others
    helper = command.get_help_option(command.context_class(command))
    for param in [*command.params, *([helper] if helper is not None else [])]:
        if getattr(param, "is_flag", False) and not getattr(param, "count", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub)


def _joined_paragraphs(text: str) -> str:
    """``text`` (a docstring) with each paragraph on one line, but for ``\\b`` paragraphs (click's verbatim mark)."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


app = typer.Typer(
    name="nqf",
    cls=_NqfGroup,
    help="Neural Quadratic Forms: structure matrices, training predictions and their comparison with training.\n\n"
    + _CACHE_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# set by the root callback, read by start_jax(); reset on every invocation of the app
_settings: dict[str, object] = {"cache": True, "cache_dir": None, "pruned": False}


def package_version() -> str:
    """The installed distribution's version (the one pip and bug reports see), else the
    package's own string (a source tree on sys.path, never installed). Reading it imports no JAX."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nqf")
    except PackageNotFoundError:
        from nqf.core.version import __version__

        return __version__


def _print_version(value: bool) -> None:
    """``--version``: eager, so it answers before any command is looked for (and JAX is never loaded)."""
    if value:
        typer.echo(f"nqf {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    no_cache: Annotated[
        bool,
        typer.Option(
            "--no-cache",
            help="Do not use the on-disk compilation cache (see NQF_CACHE_DIR above); every run compiles afresh.",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Neural Quadratic Forms."""
    _settings.update(cache=not no_cache, cache_dir=None, pruned=False)


# what an interrupted command keeps, for its ``interrupted: ...`` line (printed by ``nqf.cli.main``,
# or by its watcher thread while the main thread is stuck in compiled code): a command that
# stores results as it goes sets a function saying what is stored; the others write their files
# at the end, atomically, so nothing was written
_kept_on_interrupt: list[Callable[[], str]] = []


def on_interrupt_keeps(kept: Callable[[], str] | None) -> None:
    """Set (or with None clear) the function that says what an interrupt leaves stored."""
    _kept_on_interrupt[:] = [] if kept is None else [kept]


def interrupted_line() -> str:
    """The line printed after Ctrl-C: what was kept (``on_interrupt_keeps``), else that nothing was written."""
    if not _kept_on_interrupt:
        return "interrupted: nothing was written"
    try:
        return f"interrupted: {_kept_on_interrupt[0]()}"
    except Exception:  # counting what was stored failed (a store removed meanwhile): say it plainly
        return "interrupted: what was stored before the interrupt is kept; run the same command again to resume"


# worker processes per core that --jobs may ask for: each worker is a Python process with its own
# JAX (~0.3 GiB), so far more than the cores only adds memory and contention
JOBS_PER_CORE = 4


def check_jobs(jobs: int) -> int:
    """``--jobs`` when it is positive and at most ``JOBS_PER_CORE`` workers per usable core; else NqfError."""
    from nqf.core.errors import NqfError

    if jobs < 1:
        raise NqfError(f"--jobs must be a positive integer, got {jobs}")
    cores = usable_cores()
    if jobs > JOBS_PER_CORE * cores:
        raise NqfError(
            f"--jobs {jobs} is more workers than this machine runs well: at most {JOBS_PER_CORE * cores} "
            f"({JOBS_PER_CORE} per core, {cores} core(s)); each worker is a process of its own"
        )
    return jobs


def start_jax() -> None:
    """Prepare JAX for a command that computes; call it after the arguments are parsed.

    Switches the persistent compilation cache on (unless switched off, :func:`start_cache`),
    then float64 (the CLI is an application; the library never flips it). With the cache on,
    ``EQX_ON_ERROR`` defaults to ``nan``: equinox's runtime checks inside diffrax's ODE
    solves then need no Python callback, which JAX cannot store in the cache (the
    checks concern arrays nqf builds and validates itself, and nqf calls diffrax with
    ``throw=False``).
    """
    if start_cache():
        os.environ.setdefault("EQX_ON_ERROR", "nan")  # read by equinox when first imported
    import jax

    jax.config.update("jax_enable_x64", True)


def start_cache() -> bool:
    """The persistent compilation cache on (at ``NQF_CACHE_DIR`` or its default) unless
    ``--no-cache``; returns whether it is on. The choice goes into the environment, so that
    spawned workers (reproduce, sweep) use the same cache, or none: the library would
    otherwise switch its default on (``nqf.core.cache.ensure_default_cache``). Cache read/write
    problems are silenced; at the first unreadable entry the cache's unreadable entries are
    removed, so that this run stores them afresh.
    """
    from nqf.core.cache import CACHE_WARNING, ENV_VAR, enable_compilation_cache

    if not _settings["cache"]:
        os.environ[ENV_VAR] = ""
        return False
    if _settings["cache_dir"] is None:
        path = enable_compilation_cache()
        if path is None:
            return False
        _settings["cache_dir"] = path
        os.environ[ENV_VAR] = str(path)
        _watch_cache_warnings(CACHE_WARNING)
    return True


def _watch_cache_warnings(pattern) -> None:
    """Swallow JAX's warnings about unreadable or unwritable cache entries; prune at the first unreadable one."""
    # "default" ahead of other filters: shown to our hook even under -W error, not raised
    warnings.filterwarnings("default", message=pattern.pattern, category=UserWarning)
    previous = warnings.showwarning
    if getattr(previous, "_nqf_cache_hook", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UserWarning) and pattern.search(str(message)):
            if "reading" in str(message):
                _prune_once()
            return
        previous(message, category, filename, lineno, file, line)

    show._nqf_cache_hook = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def _prune_once() -> None:
    """Remove the entries JAX cannot read (JAX never overwrites an entry, so each would be
    recompiled on every run); the recompilation in progress then stores its entry afresh."""
    path = _settings["cache_dir"]
    if not _settings["pruned"] and isinstance(path, Path):
        _settings["pruned"] = True
        from nqf.core.cache import prune_unreadable_entries

        prune_unreadable_entries(path)
