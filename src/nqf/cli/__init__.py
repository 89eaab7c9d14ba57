"""The ``nqf`` command line: thin wrappers that parse, call the library and print.

Every command lives in its own module and registers itself on ``app``. Errors of
type :class:`nqf.NqfError` (bad input, theory does not apply) are printed as one line
on stderr with exit status 2.

Startup is kept light: the command modules import the library (and with it numpy and
JAX) inside the command functions, after the arguments are parsed, so ``nqf --help``,
``nqf CMD --help`` and usage errors never load JAX. ``structure``, ``predict`` and
``compare`` call :func:`start_jax` first: float64, and JAX's persistent compilation cache
(``nqf.core.cache``) unless ``--no-cache`` is given or ``NQF_CACHE_DIR`` is set to an empty
string. ``reproduce`` does not use the cache (its results store resumes runs instead).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import warnings

import typer

# Command modules register themselves on `app` when imported; they import the library lazily.
from nqf.cli import compare as _compare  # noqa: E402,F401
from nqf.cli import predict as _predict  # noqa: E402,F401
from nqf.cli import reproduce as _reproduce  # noqa: E402,F401
from nqf.cli import store as _store  # noqa: E402,F401
from nqf.cli import structure as _structure  # noqa: E402,F401
from nqf.cli import sweep as _sweep  # noqa: E402,F401
from nqf.cli.app import app, interrupted_line, on_interrupt_keeps, start_jax  # noqa: F401 (the package's API)
from nqf.core.errors import NqfError

# os._exit as it was at start: while a --unit's code runs, os._exit raises (nqf.cli.unit.user_code),
# and the interrupt paths below must still be able to leave at once
_exit_now = os._exit

# Warnings of these categories from numerical code are noise for a CLI user: bad input is
# reported as an error of its own, and results carry their own flags (diverged runs, notes)
_NUMERICAL_WARNINGS = (RuntimeWarning, FloatingPointError)


def _numerical(message: warnings.WarningMessage) -> bool:
    np = sys.modules.get("numpy")  # a ComplexWarning can only come from a loaded numpy
    complex_warning = getattr(getattr(np, "exceptions", np), "ComplexWarning", RuntimeWarning)
    return issubclass(message.category, _NUMERICAL_WARNINGS + (complex_warning,))


def _show_kept(caught: list[warnings.WarningMessage]) -> None:
    """After a successful command: show each distinct non-numerical warning once, as Python would."""
    seen = set()
    for message in caught:
        key = (message.category, str(message.message))
        if key in seen or _numerical(message):
            continue
        seen.add(key)
        warnings.showwarning(message.message, message.category, message.filename, message.lineno)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the app, turning NqfError into one line and exit 2.

    Warnings raised during the command are held back: dropped when the command ends in an
    error (the error line says what went wrong), else shown once each after the command,
    except numerical ones (RuntimeWarning such as overflow, ComplexWarning), which never
    reach the user. Ctrl-C (SIGINT) prints ``interrupted: ...`` and exits 130, no traceback:
    outputs are written at the end (atomically), so nothing was written, unless the command
    stores results as it goes (``nqf sweep``), which then says what is stored
    (``nqf.cli.app.on_interrupt_keeps``).
    """
    if _stdout_closed(console_script=argv is None):
        # started with `>&-`: nothing could take the results, and the first file opened would
        # become descriptor 1, where anything printed would land; refuse before any work
        _stdout_to_devnull()
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives until exit)
        print("error: the standard output is closed; nqf prints its results there (redirect it to a file "
              "or to /dev/null)", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    interrupted: list[bool] = []
    on_interrupt_keeps(None)  # a command that stores as it goes says so again (tests call main repeatedly)
    if argv is None and not isinstance(sys.stdout, _StdoutReaderMayLeave):  # the console script
        sys.stdout = _StdoutReaderMayLeave(sys.stdout)
    restore = _watch_interrupt(interrupted, stuck_exit=argv is None)
    code: str | int | None  # SystemExit.code: an exit status or a message
    try:
        with warnings.catch_warnings(record=True) as caught:
            try:
                code = _run(argv)
            except KeyboardInterrupt:
                interrupted.append(True)
                code = 130
            except SystemExit as stop:
                code = stop.code
            failed = code not in (0, None)
    finally:
        if restore is not None:
            restore()
    if interrupted and code == 130:
        print(interrupted_line(), file=sys.stderr)
        if argv is None:  # the console script: nothing is left to clean up
            # JAX's threads may still be compiling or computing; interpreter shutdown under
            # them can crash (seen: SIGSEGV, exit -11, after Ctrl-C in `nqf compare`), so
            # leave without it
            sys.stdout.flush()
            sys.stderr.flush()
            _exit_now(130)
    if not failed:
        _show_kept(caught)
    if code not in (0, None):
        sys.exit(code)


# options that may be given more than once (typer list options)
_REPEATABLE = frozenset({"--set"})


def _repeated_option(argv: list[str]) -> str | None:
    """The first ``--name`` given twice (click would silently keep the last one)."""
    seen: set[str] = set()
    for token in argv:
        if token == "--":
            break
        if token.startswith("--"):
            name = token.split("=", 1)[0]
            if name in seen and name not in _REPEATABLE:
                return name
            seen.add(name)
    return None


def _watch_interrupt(interrupted: list[bool], stuck_exit: bool = False):
    """Note Ctrl-C in ``interrupted`` (typer turns KeyboardInterrupt into a bare exit 130 when not
    standalone); returns what puts the previous handlers back, or None when the handler was left
    alone (another thread, or a handler someone else installed).

    Python runs a signal handler wherever the main thread is, also inside a garbage-collection
    callback or a ``__del__`` (JAX has such callbacks), where the KeyboardInterrupt is swallowed
    with an "Exception ignored" traceback. The ``sys.unraisablehook`` installed here catches that
    case silently and delivers SIGINT again a moment later, from outside (as ``reproduce`` does).

    A Python signal handler runs only when the main thread runs Python, and a compiled training
    loop can keep it in XLA for minutes. With ``stuck_exit`` (the console script) a watcher
    thread hears the signal through :func:`signal.set_wakeup_fd`; when this module's handler is
    still the one installed and has not run within ``STUCK_GRACE_S``, it prints the interrupt
    line and leaves at once (exit 130): outputs are written at the end, atomically, so nothing
    is half-written; when the handler ran but the command is still running ``SWALLOWED_GRACE_S``
    later (the KeyboardInterrupt was swallowed on its way up), it leaves the same way. Commands
    with handlers of their own (``reproduce``) are left to them."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        return None
    previous_hook = sys.unraisablehook
    redelivered: list[bool] = []

    def on_interrupt(signum, frame):
        interrupted.append(True)
        raise KeyboardInterrupt

    def redeliver(unraisable) -> None:
        # bounded: a handler that keeps landing in finalizers is left to the watcher's deadline
        if issubclass(unraisable.exc_type, KeyboardInterrupt) and len(redelivered) < 20:
            redelivered.append(True)
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
            return
        previous_hook(unraisable)

    def restore() -> None:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, on_interrupt)
    sys.unraisablehook = redeliver
    if stuck_exit:
        _watch_stuck_main_thread(interrupted, on_interrupt)
    return restore


STUCK_GRACE_S = 1.5
SWALLOWED_GRACE_S = 20.0  # after the handler ran, how long the command may take to leave


def _watch_stuck_main_thread(interrupted: list[bool], handler) -> None:
    """The watcher of :func:`_watch_interrupt` (a daemon thread reading a wakeup pipe)."""
    import threading
    import time

    try:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except (OSError, ValueError):  # no pipes, or another wakeup fd in use: plain Ctrl-C only
        return

    def watch() -> None:
        while True:
            try:
                data = os.read(read_end, 64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGINT not in data or signal.getsignal(signal.SIGINT) is not handler:
                continue
            deadline = time.monotonic() + STUCK_GRACE_S
            while time.monotonic() < deadline and not interrupted:
                time.sleep(0.05)
            if interrupted:
                # the handler ran: main prints the line and leaves within moments (a command's own
                # clean-up, e.g. stopping a pool, takes seconds). Still here much later, the
                # KeyboardInterrupt was swallowed on the way (raised inside a finalizer or a
                # library's handler): seen once under load, a compare running on for minutes
                time.sleep(SWALLOWED_GRACE_S)
            try:  # the main thread is inside compiled code, or lost the interrupt
                sys.stderr.write(interrupted_line() + "\n")
                sys.stderr.flush()
            finally:
                _exit_now(130)

    threading.Thread(target=watch, name="nqf-interrupt-watch", daemon=True).start()


def _run(argv: list[str] | None) -> int | None:
    repeated = _repeated_option(list(sys.argv[1:] if argv is None else argv))
    if repeated is not None:
        print(f"error: option {repeated} given twice", file=sys.stderr)
        return 2
    try:
        # without standalone mode a raised typer.Exit comes back as the return value
        code = app(args=argv, standalone_mode=False)
    except NqfError as err:
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 2
    except typer.Exit as err:
        return err.exit_code
    except typer.Abort:  # click turns EOF at a prompt into Abort
        print("aborted", file=sys.stderr)
        return 130
    except typer.TyperException as err:  # click usage errors (typer vendors click as typer._click)
        message = err.format_message().strip()
        if message:  # empty for a bare `nqf`: rich has already printed the help
            print(f"error: {_one_line(message)}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in _FULL:
            raise
        # a full disk (or quota) under stdout or an output file: files are written atomically,
        # so none is left half-written; stdout is what it is, and later flushes must not fail again
        _quiet_stdout()
        where = f" ({err.filename})" if err.filename else " (the standard output)"
        print(f"error: cannot write the output{where}: {err.strerror or err}", file=sys.stderr)
        return 2
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        return code
    return None


_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


class _StdoutReaderMayLeave:
    """The console script's stdout. When the reader of a pipe leaves early (``nqf structure --list
    | head -n 3``), writing raises EPIPE: the rest of the text is dropped and the command goes on
    to finish its work and its files and exits as it would have, instead of a traceback and exit
    1 (or, at the interpreter's last flush, "Exception ignored" and exit 120). Everything else
    (isatty, encoding, fileno, ...) is the stream's own."""

    def __init__(self, stream):
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        self._gone = True
        _stdout_to_devnull()  # what the stream still buffers goes there at exit

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _stdout_closed(console_script: bool) -> bool:
    """Whether there is no standard output: Python found descriptor 1 closed at start (sys.stdout is
    None), or, for the console script, descriptor 1 is not open now."""
    if sys.stdout is None:
        return True
    if not console_script:
        return False
    try:
        os.fstat(1)
    except OSError:
        return True
    return False


def _stdout_to_devnull(descriptor: int = 1) -> None:
    """Point file descriptor 1 (or ``descriptor``) at /dev/null (later flushes of anything buffered
    for it succeed)."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, descriptor)
        os.close(devnull)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: what is buffered for a full device is dropped, not retried at exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptor: sys.stdout alone
        _stdout_to_devnull(sys.stdout.fileno())
    with contextlib.suppress(OSError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives until exit)


def _one_line(message) -> str:
    """The message on one line (the CLI's errors are single lines)."""
    return " ".join(str(message).split())
