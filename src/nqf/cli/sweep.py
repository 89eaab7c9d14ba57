"""``nqf sweep``: run predict or compare over a grid of settings, into a resumable store.

    nqf sweep SPEC.toml --out DIR [--store PATH] [--executor local|ray|slurm] [--jobs J]
              [--address HOST:PORT] [--slurm-partition P] [--slurm-time MIN] [--slurm-array-size K]
              [--slurm-cluster slurm|local] [--batch-size B] [--retries R] [--force] [--dry-run] [--quiet]

The spec format: ``nqf.scans.sweep.spec``. A bad spec prints one ``error: spec KEY: ...``
line per problem and exits 2, before anything is computed or written. ``--dry-run`` prints
the number of points, batches and how many are already stored. Otherwise every point is
computed (batches of points that differ only in sigma0 and seed train together), stored in
the results store (DIR/store unless ``--store``) as soon as it is done, and DIR/points.parquet
(points.csv without pyarrow), DIR/failed.json and DIR/figures/ are written. Rerunning the
same command recomputes nothing that is stored and retries the points that failed.
Exit status: 0 when every point has a record, 1 when some failed (the outputs are written
all the same), 2 for bad input (``--jobs`` above 4 per core for workers on this machine, an
option that does not fit ``--executor``, as ``nqf reproduce`` refuses it, an executor whose
engine is missing: before ``--out`` is made). Ctrl-C: one line saying how many
points are stored and where (they are kept; a rerun resumes), exit 130.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from nqf.cli.app import app, on_interrupt_keeps, start_jax
from nqf.core.errors import NqfError

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


@dataclass(frozen=True)
class SweepArgs:
    """The command line of ``nqf sweep`` as typer read it (``where``: its executor options)."""

    spec: Path
    out: Path
    store: Path | None
    where: ExecutorArgs
    batch_size: int | None
    retries: int
    force: bool
    dry_run: bool
    quiet: bool


@app.command("sweep")
def sweep_command(
    spec: Annotated[Path, typer.Argument(help="The sweep spec (TOML): task, architecture, settings, axes.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder: points table, failed.json, figures/, store/.")],
    store: Annotated[
        Path | None, typer.Option("--store", help="Results store to use (default DIR/store); share one between sweeps.")
    ] = None,
    executor: ExecutorOption = "local",
    jobs: JobsOption = None,
    address: AddressOption = None,
    slurm_partition: SlurmPartitionOption = None,
    slurm_time: SlurmTimeOption = None,
    slurm_array_size: SlurmArraySizeOption = None,
    slurm_cluster: SlurmClusterOption = None,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", help="Points per task at most (default: ~4 tasks per worker, at most 32)."),
    ] = None,
    retries: Annotated[int, typer.Option("--retries", help="Retries of a task whose worker died.")] = 2,
    force: Annotated[bool, typer.Option("--force", help="Recompute points that are already stored.")] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the points, batches and stored points; run nothing (the checks that compute wait for the run).",
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Run predict or compare at every point of a grid (a TOML spec), store each point, tabulate and plot."""
    where = ExecutorArgs(executor, jobs, address, slurm_partition, slurm_time, slurm_array_size, slurm_cluster)
    args = SweepArgs(
        spec=spec, out=out, store=store, where=where, batch_size=batch_size, retries=retries, force=force,
        dry_run=dry_run, quiet=quiet,
    )  # fmt: skip
    run_sweep_command(args)


def run_sweep_command(args: SweepArgs) -> None:
    """Check the arguments and the spec, then print the plan (``--dry-run``) or run the sweep and print its outcome."""
    engine = check_arguments(args)
    plan = plan_or_exit(args, engine["jobs"])
    if args.dry_run:
        from nqf.scans.sweep.run import describe_plan

        print(f"dry run: {describe_plan(plan)}")
        print(
            "dry run: not checked (they compute): the theory gate and the learning rates against the "
            "stability bound; the sweep checks both before its first point"
        )
        return
    from nqf.scans.sweep.run import interrupted_keeps, run_sweep

    # each point is stored as it is done: after Ctrl-C, say how many are kept and where
    on_interrupt_keeps(lambda: interrupted_keeps(plan))
    result = run_sweep(plan, args.out, **engine, retries=args.retries, force=args.force, quiet=args.quiet)
    print_outcome(args.out, len(plan.points), result)


def check_arguments(args: SweepArgs) -> dict[str, Any]:
    """Every check of the options, before the spec is read; the executor's arguments
    (:meth:`~nqf.cli.executor_options.ExecutorArgs.checked`, as ``nqf reproduce`` checks them)."""
    engine = args.where.checked()
    if args.retries < 0:
        raise NqfError(f"--retries must be at least 0, got {args.retries}")
    if args.batch_size is not None and args.batch_size < 1:
        raise NqfError(f"--batch-size must be a positive integer, got {args.batch_size}")
    from nqf.core.output_paths import check_output_folder_path  # JAX-free: before the spec and JAX

    check_output_folder_path("--out", args.out)
    check_output_folder_path("--store", args.store if args.store is not None else args.out / "store")
    return engine


def plan_or_exit(args: SweepArgs, jobs: int):
    """The sweep's plan (``nqf.scans.sweep.run.plan_sweep``): the spec's own checks before JAX starts,
    then the points' checks against the data. A bad spec prints one ``error:`` line per problem, exit 2."""
    from nqf.scans.sweep.spec import SpecError, load_spec

    try:
        spec = load_spec(args.spec)  # the spec's own checks before JAX starts
        start_jax()
        from nqf.scans.sweep.run import plan_sweep

        return plan_sweep(
            spec,
            args.out,
            store=args.store,
            batch_size=args.batch_size,
            jobs=jobs,
            force=args.force,
            check_data=not args.dry_run,
        )
    except SpecError as err:
        for line in err.lines:
            print(f"error: {line}", file=sys.stderr)
        raise typer.Exit(2) from None


def print_outcome(out: Path, n: int, result) -> None:
    """The counts, the table and the figures of a sweep of ``n`` points; exit 1 when some points failed
    (their first errors printed; the outputs are written all the same)."""
    kind = "parquet" if result.table.suffix == ".parquet" else "CSV (pyarrow is not installed)"
    print(
        f"{n} point(s): {result.count('computed')} computed, {result.count('stored')} already stored, "
        f"{result.count('failed')} failed; {result.seconds:.1f} s"
    )
    print(f"table: {result.table} ({kind})")
    from nqf.scans.sweep.table import read_table, table_notes

    for line in table_notes(read_table(result.table), result.plan.spec.mode):
        print(f"note: {line}")
    drawn = [str(p) for p in result.figures.values() if p is not None]
    print(f"figures: {', '.join(drawn) if drawn else 'none'}")
    if result.count("failed"):
        print(f"failed points: {out / 'failed.json'} (a rerun tries them again)")
        for index, error in sorted(result.errors.items())[:5]:
            print(f"  point {index}: {error}")
        raise typer.Exit(1)  # the outputs are written; some points have no record
