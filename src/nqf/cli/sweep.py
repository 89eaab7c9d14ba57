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

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from nqf.cli.app import app, check_executor_options, check_jobs, on_interrupt_keeps, start_jax
from nqf.core.errors import NqfError


def slurm_minutes(text: str) -> int:
    """``--slurm-time``: minutes (``90``), ``H:MM:SS``, ``MM:SS`` or ``D-HH:MM:SS``, rounded up to minutes."""
    text = text.strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        raise NqfError(f"--slurm-time takes minutes or [D-]H:MM:SS, got {text!r}")
    days, a, b, c = match.groups()
    if b is None:
        minutes = int(a) * 60 if days else int(a)
    elif c is None:
        minutes = int(a) * 60 + int(b) if days else int(a) + (1 if int(b) else 0)
    else:
        minutes = int(a) * 60 + int(b) + (1 if int(c) else 0)
    minutes += int(days or 0) * 24 * 60
    if minutes < 1:
        raise NqfError(f"--slurm-time must be at least one minute, got {text!r}")
    return minutes


@dataclass(frozen=True)
class SweepArgs:
    """The command line of ``nqf sweep`` as typer read it."""

    spec: Path
    out: Path
    store: Path | None
    executor: str
    jobs: int | None  # None: not given (one worker, in this process)
    address: str | None
    slurm_partition: str | None
    slurm_time: str | None
    slurm_array_size: int | None
    slurm_cluster: str | None
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
    executor: Annotated[str, typer.Option("--executor", help="local, ray or slurm.")] = "local",
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", help="Workers (local processes, a local Ray's CPUs; default 1: in this process)."),
    ] = None,
    address: Annotated[str | None, typer.Option("--address", help="Ray cluster address HOST:PORT (ray).")] = None,
    slurm_partition: Annotated[str | None, typer.Option("--slurm-partition", help="Slurm partition (slurm).")] = None,
    slurm_time: Annotated[
        str | None, typer.Option("--slurm-time", help="Time limit of one task: minutes or H:MM:SS (slurm).")
    ] = None,
    slurm_array_size: Annotated[
        int | None, typer.Option("--slurm-array-size", help="Array tasks running at once (slurm).")
    ] = None,
    slurm_cluster: Annotated[
        str | None, typer.Option("--slurm-cluster", help="slurm, or local: submitit's local executor (tests).")
    ] = None,
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
    args = SweepArgs(
        spec=spec, out=out, store=store, executor=executor, jobs=jobs, address=address,
        slurm_partition=slurm_partition, slurm_time=slurm_time, slurm_array_size=slurm_array_size,
        slurm_cluster=slurm_cluster, batch_size=batch_size, retries=retries, force=force, dry_run=dry_run, quiet=quiet,
    )  # fmt: skip
    run_sweep_command(args)


def run_sweep_command(args: SweepArgs) -> None:
    """Check the arguments and the spec, then print the plan (``--dry-run``) or run the sweep and print its outcome."""
    slurm = check_arguments(args)
    plan = plan_or_exit(args)
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
    result = run_sweep(
        plan,
        args.out,
        executor=args.executor,
        jobs=args.jobs or 1,
        address=args.address,
        slurm=slurm,
        retries=args.retries,
        force=args.force,
        quiet=args.quiet,
    )
    print_outcome(args.out, len(plan.points), result)


def check_arguments(args: SweepArgs):
    """Every check of the options, before the spec is read; the Slurm options (``nqf.executors.SlurmOptions``)
    for ``--executor slurm``, else None."""
    if args.executor not in ("local", "ray", "slurm"):
        raise NqfError(f"unknown executor {args.executor!r}; choose from local, ray, slurm")
    given_slurm = {
        "--slurm-partition": args.slurm_partition,
        "--slurm-time": args.slurm_time,
        "--slurm-array-size": args.slurm_array_size,
        "--slurm-cluster": args.slurm_cluster,
    }
    check_executor_options(args.executor, args.jobs, args.address, given_slurm)  # as nqf reproduce
    if args.jobs is not None:
        check_jobs(args.jobs)  # positive; on this machine, at most a few workers per core
    if args.retries < 0:
        raise NqfError(f"--retries must be at least 0, got {args.retries}")
    if args.batch_size is not None and args.batch_size < 1:
        raise NqfError(f"--batch-size must be a positive integer, got {args.batch_size}")
    from nqf.core.output_paths import check_output_folder_path  # JAX-free: before the spec and JAX

    slurm = slurm_options(args) if args.executor == "slurm" else None
    from nqf.executors import check_available  # imports no engine

    check_available(args.executor, slurm)  # Ray, or submitit and sbatch: before anything is made
    address = ray_address(args)
    if args.executor == "ray" and address:
        from nqf.executors.ray_engine import check_ray_address  # seconds, not Ray's minutes of retries

        check_ray_address(address)
    check_output_folder_path("--out", args.out)
    check_output_folder_path("--store", args.store if args.store is not None else args.out / "store")
    return slurm


def ray_address(args: SweepArgs) -> str | None:
    """The Ray cluster the sweep runs on: ``--address``, else ``RAY_ADDRESS``; None: a local Ray."""
    return args.address or os.environ.get("RAY_ADDRESS") or None


def slurm_options(args: SweepArgs):
    """``nqf.executors.SlurmOptions`` from the ``--slurm-*`` options."""
    from nqf.executors import SlurmOptions

    options: dict[str, Any] = {"partition": args.slurm_partition, "array_size": args.slurm_array_size}
    if args.slurm_time is not None:
        options["time_min"] = slurm_minutes(args.slurm_time)
    if args.slurm_cluster is not None:
        options["cluster"] = args.slurm_cluster
    return SlurmOptions(**options)


def plan_or_exit(args: SweepArgs):
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
            jobs=args.jobs or 1,
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
