"""``nqf reproduce`` (run the suite, resuming from the store) and ``nqf report`` (rebuild the report)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import app

if TYPE_CHECKING:  # the library is imported inside the commands, after parsing
    from .._reproduce import ProgressEvent, ReproduceOutcome


class _Bars:
    """One rich progress bar per experiment, fed by the library's progress events.

    The bars start with the first event, so an error in the arguments prints only its line.
    """

    def __init__(self, console: Console):
        self.console = console
        self.progress: Progress | None = None
        self.tasks: dict[str, int] = {}

    def __call__(self, event: ProgressEvent) -> None:
        if self.progress is None:
            self.progress = _progress_bars(self.console)
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


def _progress_bars(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("runs"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=console,
        transient=False,
    )


def _print_summary(outcome: ReproduceOutcome) -> None:
    from .._verdict import CONFIRMED, NOT_APPLICABLE, NOT_CONFIRMED

    for result in outcome.outcomes:
        statuses = [claim.verdict.status for claim, _ in result.rows()]
        counts = ", ".join(
            f"{statuses.count(s)} {s}" for s in (CONFIRMED, NOT_CONFIRMED, NOT_APPLICABLE) if statuses.count(s)
        )
        states = [run.state for run in result.runs]
        runs = ", ".join(f"{states.count(s)} {s}" for s in ("stored", "computed", "missing", "failed") if states.count(s))
        typer.echo(f"{result.name:<4} {result.title}: {len(states)} runs ({runs}); {len(statuses)} claims: {counts}")
    for line in outcome.problems:
        typer.echo(f"problem: {line}")
    typer.echo(f"report: {outcome.report}")


@app.command("reproduce")
def reproduce_command(
    quick: Annotated[bool, typer.Option("--quick/--full", help="Quick configs (minutes) or full ones.")] = True,
    only: Annotated[str | None, typer.Option("--only", help="Comma-separated experiments, e.g. E1,E4.")] = None,
    out: Annotated[Path, typer.Option("--out", help="Results directory (store, figures, report).")] = Path("results"),
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Runs computed in parallel worker processes.")] = 1,
    config: Annotated[Path | None, typer.Option("--config", help="TOML file with [E1]-style sections.")] = None,
    set_values: Annotated[
        list[str] | None, typer.Option("--set", help="Override a config field: E1.sigma0=1e-8 (repeatable).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Recompute runs already in the store.")] = False,
) -> None:
    """Run the experiment suite (resuming finished runs) and write figures and report.html."""
    # No compilation cache here (start_jax is not called): the results store already resumes
    # finished runs, spawned workers would not share the cache, and the experiments keep
    # equinox's default runtime checks; they choose their own precision.
    from .._reproduce import reproduce

    bars = _Bars(Console(stderr=True))
    try:
        outcome = reproduce(
            out,
            mode="quick" if quick else "full",
            only=only,
            jobs=jobs,
            force=force,
            config_file=config,
            overrides=set_values or (),
            progress=bars,
        )
    finally:
        bars.stop()
    _print_summary(outcome)
    if outcome.failed:
        typer.echo(f"error: {outcome.failed} run(s) failed; see the report's 'Failed runs'", err=True)
        raise typer.Exit(1)


@app.command("report")
def report_command(
    out: Annotated[Path, typer.Option("--out", help="Results directory written by `nqf reproduce`.")] = Path(
        "results"
    ),
) -> None:
    """Rebuild report.html and the figures from the store, computing nothing."""
    from .._reproduce import rebuild_report

    _print_summary(rebuild_report(out))
