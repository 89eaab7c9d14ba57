"""``nqf reproduce`` (run the suite, resuming from the store) and ``nqf report`` (rebuild the report).

``reproduce`` turns SIGINT and SIGTERM into one line saying what the store keeps and how
to resume, with exit status 130 or 143 (128 + the signal), and no traceback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from nqf.cli.app import app, check_jobs, start_cache

from .executor_options import (
    AddressOption,
    ExecutorArgs,
    ExecutorOption,
    JobsOption,
    SlurmArraySizeOption,
    SlurmClusterOption,
    SlurmPartitionOption,
    SlurmTimeOption,
)

if TYPE_CHECKING:  # the library is imported inside the commands, after parsing
    from nqf_paper.reproduce import ProgressEvent, ReproduceOutcome


class _Bars:
    """One rich progress bar per experiment, fed by the library's progress events.

    The bars start with the first event, so an error in the arguments prints only its line.
    """

    def __init__(self, console: Console):
        self.console = console
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, event: ProgressEvent) -> None:
        if self.progress is None:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("runs"),
                TimeElapsedColumn(),
                TextColumn("{task.fields[note]}"),
                console=self.console,
                transient=False,
            )
            self.progress.start()
        if event.experiment not in self.tasks:
            self.tasks[event.experiment] = self.progress.add_task(event.experiment, total=event.total, note="")
        task = self.tasks[event.experiment]
        note = f"{event.stored} stored"
        if event.stage == "run":
            note += f", last: {event.run}" + (" FAILED" if event.failed else f" ({event.seconds:.1f} s)")
        elif event.stage == "summarise":
            note += ", summarised"
        self.progress.update(task, completed=event.done, total=event.total, note=note)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _counted(values: Sequence[str], kinds: tuple[str, ...]) -> str:
    """``"2 stored, 1 failed"``: how many of ``values`` are each of ``kinds``, those present, in that order."""
    return ", ".join(f"{values.count(kind)} {kind}" for kind in kinds if values.count(kind))


def _print_summary(outcome: ReproduceOutcome) -> None:
    verdict = paper_module("verdict")
    verdicts = (verdict.CONFIRMED, verdict.NOT_CONFIRMED, verdict.NOT_APPLICABLE)

    for result in outcome.outcomes:
        statuses: list[str] = [claim.verdict.status for claim, _ in result.rows()]
        counts = _counted(statuses, verdicts)
        states = [run.state for run in result.runs]
        runs = _counted(states, ("stored", "computed", "missing", "failed"))
        second = [v.status for claim, _ in result.rows() if (v := claim.network_verdict) is not None]
        network = _counted(second, verdicts)
        typer.echo(
            f"{result.name:<4} {result.title}: {len(states)} runs ({runs}); {len(statuses)} claims: {counts}"
            + (f"; the network's own prediction on {len(second)}: {network}" if second else "")
        )
    for line in outcome.problems:
        typer.echo(f"problem: {line}")
    for result in outcome.outcomes:
        for run in result.runs:
            if run.state == "failed":
                typer.echo(f"failed: {result.name}/{run.name}: {run.error}", err=True)
    typer.echo(f"report: {outcome.report}")


_signals: list[int] = []  # the signals that stopped `reproduce`, recorded by _on_signal


def _on_signal(signum: int, frame: object) -> None:
    """Raise SIGINT or SIGTERM as KeyboardInterrupt (recording which), ignoring any further
    ones, so that the workers' shutdown and the message are not cut short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _signals.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def _signals_as_interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt (see :func:`_on_signal`) inside the block.

    Python runs a signal handler wherever the main thread is, also inside a garbage-collection
    callback or a ``__del__`` (JAX has such callbacks), where an exception is swallowed with an
    "Exception ignored" message. The ``sys.unraisablehook`` installed here catches that case and
    delivers the signal again a moment later, from outside, so a signal is never lost.
    """
    _signals.clear()
    if threading.current_thread() is not threading.main_thread():  # Python handles signals there only
        yield
        return
    previous_hook = sys.unraisablehook

    def redeliver(unraisable: Any) -> None:
        if _signals and issubclass(unraisable.exc_type, KeyboardInterrupt):
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, _on_signal)
            threading.Timer(0.05, os.kill, (os.getpid(), _signals.pop())).start()
            return
        previous_hook(unraisable)

    previous = {signum: signal.signal(signum, _on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    sys.unraisablehook = redeliver
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def paper_module(name: str):
    """The paper's module ``nqf_paper.<name>`` (the reproduction is a package of its own beside nqf);
    an NqfError that says how to install it when it is absent."""
    import importlib

    from nqf.core.errors import NqfError

    try:
        return importlib.import_module(f"nqf_paper.{name}")
    except ModuleNotFoundError as err:
        if err.name not in ("nqf_paper", f"nqf_paper.{name}"):
            raise
        raise NqfError(
            "this command runs the paper's reproduction, the package nqf_paper, which is not installed: it ships "
            "in nqf's repository (git clone it, then `pip install -e .` installs nqf and nqf_paper)"
        ) from None


@app.command("reproduce")
def reproduce_command(
    quick: Annotated[bool, typer.Option("--quick/--full", help="Quick configs (minutes) or full ones.")] = True,
    only: Annotated[str | None, typer.Option("--only", help="Comma-separated experiments, e.g. E1,E4.")] = None,
    out: Annotated[Path, typer.Option("--out", help="Results directory (store, figures, report).")] = Path("results"),
    jobs: JobsOption = None,
    config: Annotated[Path | None, typer.Option("--config", help="TOML file with [E1]-style sections.")] = None,
    set_values: Annotated[
        list[str] | None, typer.Option("--set", help="Override a config field: E1.sigma0=1e-8 (repeatable).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Recompute runs already in the store.")] = False,
    executor: ExecutorOption = "local",
    address: AddressOption = None,
    slurm_partition: SlurmPartitionOption = None,
    slurm_time: SlurmTimeOption = None,
    slurm_array_size: SlurmArraySizeOption = None,
    slurm_cluster: SlurmClusterOption = None,
) -> None:
    """Run the experiment suite (resuming finished runs) and write figures and report.html.

    Runs are computed here (--jobs worker processes), on a Ray cluster (--executor ray,
    --address) or on Slurm (--executor slurm; the output folder must be on a filesystem the
    compute nodes share).
    """
    from nqf.core.output_paths import check_output_folder_path  # JAX-free: a bad --out costs no startup

    check_output_folder_path("--out", out)
    # The compilation cache, shared with the spawned workers through NQF_CACHE_DIR; not
    # start_jax: the experiments choose their own precision and keep equinox's runtime checks.
    start_cache()
    bars = _Bars(Console(stderr=True))
    with _signals_as_interrupts():
        try:
            where = (executor, jobs, address, slurm_partition, slurm_time, slurm_array_size, slurm_cluster)
            engine = ExecutorArgs(*where).checked()
            reproduce = paper_module("reproduce").reproduce

            try:
                outcome = reproduce(
                    out,
                    mode="quick" if quick else "full",
                    only=only,
                    force=force,
                    config_file=config,
                    overrides=set_values or (),
                    progress=bars,
                    **engine,
                )
            finally:
                bars.stop()
        except KeyboardInterrupt as err:  # nqf_paper.reproduce.Interrupted once the runs are planned
            stored, total = getattr(err, "stored", None), getattr(err, "total", None)
            kept = f"{stored} of {total} runs are stored in {out}" if total is not None else "nothing was computed"
            typer.echo(f"interrupted: {kept}; run the same command again to resume", err=True)
            code = 128 + (_signals[-1] if _signals else signal.SIGINT)
            if Path(sys.argv[0]).name == "nqf":  # the console script: leave without interpreter shutdown,
                sys.stdout.flush()  # as `main` does after Ctrl-C (JAX's threads may still be computing
                sys.stderr.flush()  # the interrupted run; shutdown under them was seen to SIGSEGV, exit -11)
                os._exit(code)
            raise typer.Exit(code) from None
    _print_summary(outcome)
    if outcome.failed:
        typer.echo(f"error: {outcome.failed} run(s) failed; see the report's 'Failed runs'", err=True)
        raise typer.Exit(1)


@app.command("report")
def report_command(
    out: Annotated[Path, typer.Option("--out", help="Results directory written by `nqf reproduce`.")] = Path("results"),
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Experiments whose figures are drawn at once.")] = 1,
) -> None:
    """Rebuild report.html and the figures from the store, computing nothing."""
    check_jobs(jobs)  # processes drawing figures: a few per core at most, as reproduce's workers
    _print_summary(paper_module("reproduce").rebuild_report(out, jobs=jobs))
