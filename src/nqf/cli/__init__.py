"""The ``nqf`` command line: thin wrappers that parse, call the library and print.

Every command lives in its own module and registers itself on ``app``. Errors of
type :class:`nqf.NqfError` (bad input, theory does not apply) are printed as one line
on stderr with exit status 2.
"""

from __future__ import annotations

import sys

import typer

from .._errors import NqfError

app = typer.Typer(
    name="nqf",
    help="Neural Quadratic Forms: structure matrices, training predictions and their comparison with training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Neural Quadratic Forms."""


# Command modules register themselves on `app` when imported.
from . import structure as _structure  # noqa: E402,F401
from . import predict as _predict  # noqa: E402,F401
from . import compare as _compare  # noqa: E402,F401
from . import reproduce as _reproduce  # noqa: E402,F401


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the app, turning NqfError into one line and exit 2."""
    try:
        # without standalone mode a raised typer.Exit comes back as the return value
        code = app(args=argv, standalone_mode=False)
    except NqfError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as err:
        sys.exit(err.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as err:  # click usage errors (typer vendors click as typer._click)
        message = err.format_message().strip()
        if message:  # empty for a bare `nqf`: rich has already printed the help
            print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        sys.exit(code)
