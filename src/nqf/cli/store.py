"""``nqf store ls DIR`` and ``nqf store gc DIR``: inspect and prune a results store.

DIR is a store (a folder with ``runs/``: what ``nqf reproduce --out`` writes) or a sweep's
output folder (its store is ``DIR/store``). ``gc`` prunes only a store nqf marked as its own
(``nqf-store.json``); ``ls`` also lists an unmarked folder, reading only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nqf.cli.app import app

store_app = typer.Typer(
    name="store", help="Inspect and prune a results store (records keyed by config and code).", no_args_is_help=True
)
app.add_typer(store_app)


@store_app.command("ls")
def ls_command(
    directory: Annotated[Path, typer.Argument(help="Results store, or a sweep's output folder.")],
) -> None:
    """Records per experiment: current (this code), stale (other code) and damaged."""
    from nqf.store.maintenance import summarise
    from nqf.store.results import mib_text

    summary = summarise(directory)
    # a record is keyed by its experiment's part of the code (nqf.store.code): current or not per record
    typer.echo(f"store: {summary.root}  (this code: {summary.code}; each experiment's records keyed by its own part)")
    if summary.unmarked:
        why = "no nqf-store.json" if summary.unmarked == "missing" else summary.unmarked
        typer.echo(
            f"note: {summary.root} is not marked as an nqf store ({why}); listed read-only, "
            "and `nqf store gc` refuses it (an older nqf's store can be marked with `nqf store gc --adopt`)"
        )
    width = max([len(name) for name in summary.experiments] + [10])
    typer.echo(f"{'experiment':<{width}}  {'current':>8}  {'stale':>8}  {'damaged':>8}")
    totals = {"current": 0, "stale": 0, "damaged": 0}
    for name, counts in summary.experiments.items():
        typer.echo(f"{name:<{width}}  {counts['current']:>8}  {counts['stale']:>8}  {counts['damaged']:>8}")
        for state in totals:
            totals[state] += counts[state]
    typer.echo(f"{'total':<{width}}  {totals['current']:>8}  {totals['stale']:>8}  {totals['damaged']:>8}")
    for code, count in sorted(summary.stale_codes.items(), key=lambda item: -item[1]):
        typer.echo(f"stale: {count} record(s) of code {code}")
    for line in summary.problems:
        typer.echo(f"problem: {line}")
    if summary.leftovers:
        typer.echo(f"leftovers: {summary.leftovers} temporary or lock file(s) of interrupted runs")
    typer.echo(f"size: {mib_text(summary.bytes_on_disk)}")
    if totals["damaged"] or summary.leftovers:
        typer.echo(f"`nqf store gc {directory}` removes the damaged records and the leftovers.")
    if totals["stale"]:
        typer.echo(f"`nqf store gc --other-code {directory}` also removes the stale records (of other code).")


@store_app.command("gc")
def gc_command(
    directory: Annotated[Path, typer.Argument(help="Results store, or a sweep's output folder.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")] = False,
    other_code: Annotated[
        bool,
        typer.Option(
            "--other-code",
            help="Also remove records of other code (stale). Without it they are kept: another nqf may still use them.",
        ),
    ] = False,
    adopt: Annotated[
        bool,
        typer.Option(
            "--adopt",
            help="Mark an unmarked store (made by an older nqf) as an nqf store first; "
            "only when its runs/ holds nothing but files nqf writes.",
        ),
    ] = False,
) -> None:
    """Remove damaged records and leftovers of interrupted runs (and, with --other-code, stale records).

    Only a folder marked as an nqf store is pruned, and in it only files nqf writes; records of
    the running code are kept, and so is anything another process is working on. Foreign
    files, folders, symbolic links and FIFOs are reported and left alone.
    """
    from nqf.store.maintenance import collect_garbage
    from nqf.store.results import mib_text

    result = collect_garbage(directory, dry_run=dry_run, other_code=other_code, adopt=adopt)
    verb = "would remove" if dry_run else "removed"
    if result.adopted:
        typer.echo(f"{'would mark' if dry_run else 'marked'} {directory} as an nqf store (nqf-store.json)")
    for path in result.removed:
        typer.echo(f"{verb}: {path}")
    for path in result.kept_busy:
        typer.echo(f"kept (in use by another process): {path}")
    for line in result.problems:
        typer.echo(f"problem: {line}")
    if result.kept_other_code:
        codes = ", ".join(f"{n} of {code}" for code, n in sorted(result.other_codes.items(), key=lambda i: -i[1]))
        typer.echo(
            f"kept {len(result.kept_other_code)} record(s) of other code ({codes}): another nqf may still be "
            f"using them; `nqf store gc --other-code {directory}` removes them"
        )
    typer.echo(f"{verb} {len(result.removed)} file(s), {mib_text(result.bytes_freed)}")
