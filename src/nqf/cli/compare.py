"""``nqf compare``: train the real network side by side with the theory's predictions.

    nqf compare (--task TASK [task options] | --data FILE.npz) [--arch ARCH [arch options] | --unit FILE.py:FUNCTION]
                --width N --sigma0 S --lr ETA --steps T
                [--optimizers gd,sgd,momentum,adam,muon,nesterov] [--lr-adam ETA] [--lr-muon ETA] ...
                [--seeds K] [--seed S] [--data-seed D] [--batch B] [--beta B]
                [--json] [--plot FILE.png|FILE.pdf] [--csv DIR] [--overlay CURVE]

The architecture defaults to the task's natural one with the task's options for it
(``--arch`` with another name starts from that architecture's own defaults);
``--unit FILE.py:FUNCTION`` takes your own unit instead (``nqf.cli.unit``), its input
shape and outputs by default the task's (for ``--task npz`` its file's X and Y; ``--data FILE``
is ``--task npz --path FILE``, as ``predict --data FILE`` takes it). Every
other ``--name value`` is an option of the task or the architecture (``nqf structure
--list``); an option both accept (e.g. ``--inputs``) goes to both. One ``--lr`` serves
every optimizer unless ``--lr-OPT`` overrides it for one. ``--beta`` is the momentum
of the optimizers with one (``momentum``, ``nesterov``); ``--batch`` the minibatch of ``sgd`` (the others are full
batch). Seeds ``S .. S+K-1`` set W0 and the minibatches; numbers are means over them.

What is compared and how (thresholds, plateau losses, closure window): ``nqf.comparison.compare``.
Bad input (unknown task, optimizer or option, bad numbers, width != experts for a
mixture of experts, an unstable learning rate, a seed outside [0, 2^32), an unwritable
--plot or --csv folder, a bad --overlay curve (``nqf.comparison.curves``), a run that
would not fit in memory, a unit the theory does not apply to without
``--allow-inapplicable``) prints one ``error:`` line, exit 2, before any training. A run
estimated to take longer than ~10 s says so on stderr first. The figure is written
atomically (a temporary file in the same folder, renamed), as are the tables of --csv
(``nqf.report.curve_tables``). --overlay compares a measured loss curve with the M-flow
of the first optimizer listed, first seed, by switch-on steps read from the loss.
Float64: enabled when the command starts (the library never does this).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from nqf.cli.app import app, start_jax
from nqf.comparison.checks import check_compare, task_samples
from nqf.comparison.settings import BETA, CompareSettings, check_settings, run_config
from nqf.core.arguments import check_seed
from nqf.core.errors import NqfError
from nqf.optimizers import OPTIMIZER_SETTINGS, OPTIMIZERS, RATE_OPTIMIZERS, unused_setting

from .checks import check_departure
from .options import RunArgs, command_args, task_of
from .outputs import OverlayOption, PlotOption, fmt
from .settings import setting
from .unit import UnitOption, check_unit_option, resolve_task, unit_computing


def _loss(value) -> str:
    """A loss with 3 digits; |L| < 1e-12 (rounding of an exact zero) shows as 0."""
    return "0" if value is not None and abs(value) < 1e-12 else fmt(value, 3)


def _percent(value) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def parse_optimizers(text: str) -> tuple[str, ...]:
    """``"gd,momentum"`` -> ("gd", "momentum"); names are checked by CompareConfig."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise NqfError(f"--optimizers needs at least one name ({', '.join(OPTIMIZERS)})")
    return names


@dataclass(frozen=True)
class CompareArgs(RunArgs):
    """The command line of ``nqf compare`` as typer read it (:class:`~nqf.cli.options.RunArgs` and its own).

    ``rates``: (optimizer, its ``--lr-OPT`` or None) for every optimizer with a rate of its own
    (``nqf.optimizers.RATE_OPTIMIZERS``).
    """

    task: str
    sigma0: float
    optimizers: str
    rates: tuple[tuple[str, float | None], ...]
    seeds: int
    data_seed: int

    SETTINGS = (*RunArgs.SETTINGS, "sigma0", "data_seed")

    def settings(self) -> dict[str, Any]:
        """:meth:`RunArgs.settings` with the compare run's own, ``--lr-OPT`` as ``lr_OPT``."""
        return {**super().settings(), **{f"lr_{name}": lr for name, lr in self.rates if lr is not None}}


def rate_options(command):
    """Give ``command`` an option ``--lr-OPT`` per optimizer with a rate of its own
    (``RATE_OPTIMIZERS``, from the optimizers' records), right after ``--optimizers``; the command
    takes them as ``**rates``. typer reads the signature, so a new record brings its option (its
    help from the settings schema, ``lr_OPT``)."""
    signature = inspect.signature(command, eval_str=True)
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    at = [p.name for p in params].index("optimizers") + 1
    rates = [
        inspect.Parameter(
            f"lr_{name}",
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=setting(CompareSettings, f"lr_{name}"),
            annotation=float | None,
        )
        for name in RATE_OPTIMIZERS
    ]
    command.__signature__ = signature.replace(parameters=[*params[:at], *rates, *params[at:]])
    return command


@app.command("compare", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@rate_options
def compare_command(
    ctx: typer.Context,
    task: Annotated[
        str | None, typer.Option("--task", help="Task name (staircase, powerlaw, quadratic, ...), or --data.")
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="FILE.npz with arrays X (samples first) and Y, as predict takes it (--task npz)."),
    ] = None,
    # the run settings: default and help from the schema (nqf.comparison.settings)
    width: int = setting(CompareSettings, "width"),
    sigma0: float = setting(CompareSettings, "sigma0"),
    lr: float = setting(CompareSettings, "lr"),
    steps: int = setting(CompareSettings, "steps"),
    arch: Annotated[str | None, typer.Option("--arch", help="Architecture (default: the task's natural one).")] = None,
    unit: UnitOption = None,
    optimizers: str = setting(CompareSettings, "optimizers"),
    seeds: Annotated[int, typer.Option("--seeds", help="Number of seeds K (init and minibatches).")] = 1,
    seed: int = setting(CompareSettings, "seed"),
    data_seed: int = setting(CompareSettings, "data_seed"),
    batch: int | None = setting(CompareSettings, "batch"),
    beta: float | None = setting(CompareSettings, "beta"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    plot: PlotOption = None,
    csv_dir: Annotated[
        Path | None,
        typer.Option("--csv", help="Write every loss curve and switch-on step as tidy CSV tables into DIR."),
    ] = None,
    overlay: OverlayOption = None,
    departure: Annotated[
        bool,
        typer.Option(
            "--departure",
            help="Also evaluate, without training, the network along each predicted path: the relative gap "
            "between the network and its quadratic form there (docs/departure.md).",
        ),
    ] = False,
    network: bool = setting(CompareSettings, "network", flag="--network/--no-network"),
    network_budget: float = setting(CompareSettings, "network_budget"),
    network_method: str = setting(CompareSettings, "network_method"),
    allow_inapplicable: bool = setting(CompareSettings, "allow_inapplicable"),
    **rates: float | None,  # --lr-OPT, one per optimizer with a rate of its own (rate_options)
) -> None:
    """Train the network (each optimizer), the quadratic model and the theory side by side.

    The task's and the architecture's own options follow as --name value (nqf structure --list
    lists them): e.g. --path FILE.npz (task npz; or --data FILE.npz), --samples N, --inputs D,
    --outputs K, --activation tanh. With --unit, --inputs D[,D2..] and --outputs K set its shapes
    (default: the task's).
    """
    extra = list(ctx.args)  # task_of adds --data FILE's --path FILE
    args = command_args(
        CompareArgs,
        locals(),
        task=task_of(task, data, extra),
        rates=tuple((name, rates.get(f"lr_{name}")) for name in RATE_OPTIMIZERS),
        extra=tuple(extra),
    )
    run_compare_command(args)


def run_compare_command(args: CompareArgs) -> None:
    """Check the arguments, train and predict, write the files and print the result (JSON or text)."""
    check_counts(args)
    from .outputs import check_outputs, finish_comparison, print_outputs, stdout_console

    # the figure's path, the table folder and the measured curve, before any compute
    measured = check_outputs(args.plot, args.csv_dir, args.overlay)
    chosen = parse_optimizers(args.optimizers)
    known = all(name in OPTIMIZERS for name in chosen)  # else CompareConfig names the unknown one
    for name, value in (("batch", args.batch), ("beta", args.beta)):  # refused, not ignored
        unused = None if value is None or not known else unused_setting(name, chosen, f"--{name}")
        if unused:
            users = " or ".join(OPTIMIZER_SETTINGS[name][1])
            raise NqfError(f"{unused}; add {users} to --optimizers or drop it")
    check_unit_option(args.arch, args.unit)
    start_jax()  # float64 and the compilation cache (the CLI is an application; the library never does this)
    from nqf.comparison.compare import compare

    config = compare_config(args, chosen)
    with unit_computing(args.unit):  # a unit's prints (it is traced again) never reach stdout
        the_task, architecture = resolve_task(args.task, args.arch, args.unit, list(args.extra))
        if args.departure:  # one departure per M-flow and seed, after the training: its memory and time
            flows = tuple(config.flows)
            check_departure(
                architecture, task_samples(the_task), args.width, args.steps, "squared", "auto", flows[0],
                runs=len(flows) * args.seeds,
            )  # fmt: skip
        check_compare(the_task, architecture, args.width, args.steps, args.seeds, chosen)
        comparison = compare(the_task, architecture, config)
        result = comparison.to_json()
        matched = finish_comparison(comparison, result, args.csv_dir, measured)  # the overlay block; the tables
        if args.plot is not None:  # written atomically under the umask
            from ..report.compare_plot import plot_comparison

            plot_comparison(comparison, args.plot, overlay=matched)
    if args.as_json:
        print(json.dumps(result, allow_nan=False))
        return
    console = stdout_console()
    print_comparison(result, console)
    if result["departure"] is not None:
        print_departures(comparison, result, console)
    print_outputs(console, result, args.plot, args.csv_dir)


def check_counts(args: CompareArgs) -> None:
    """The checks of the run settings (the schema's, :func:`nqf.comparison.settings.check_settings`),
    the seed count and the last seed, before the library (and JAX) is loaded."""
    check_settings(CompareSettings, args.settings())
    if args.seeds < 1:
        raise NqfError(f"--seeds: must be a positive integer, got {args.seeds}")
    check_seed("--seed", args.seed, count=args.seeds)


def compare_config(args: CompareArgs, chosen: tuple[str, ...]):
    """The library's ``CompareConfig`` (its own checks, ``nqf.comparison.settings.run_config``); ``--lr-OPT``
    overrides ``--lr`` for one optimizer; no ``--beta``: the momentum record's, which the JSON's config
    then names (a sweep's points keep None there)."""
    beta = BETA if args.beta is None else args.beta
    settings = {**args.settings(), "optimizers": chosen, "beta": beta}
    return run_config("compare", settings, seeds=args.seeds, departure=args.departure)


def print_departures(comparison, result: dict, console: Console) -> None:
    """Per optimizer with an M-flow of its own: the first seed's departure block beside the trained network."""
    from .outputs import print_departure

    first = int(comparison.seeds[0])
    for opt in result["config"]["optimizers"]:
        if opt not in result["departure"]:
            continue
        console.print(f"[bold]{opt}[/bold], seed {first}:", highlight=False)
        print_departure(console, result["departure"][opt][0])


def print_comparison(result: dict, console: Console) -> None:
    """The text form of ``Comparison.to_json()``: the prediction against the network first, then the
    analysis (the theory's other readings, the quadratic model), the closure check and the notes."""
    from nqf.core.measure import TIMING_SHIFT

    from .outputs import print_table

    opts = list(result["config"]["optimizers"])
    print_header(result, console)
    print_table(console, network_table(result, opts))
    console.print(
        "  M-flow: the optimizer's own M-flow"
        + (" (* the GD M-flow as a reference: this optimizer has no M-flow)" if result["reference_only"] else "")
        + "; vs M-flow: (network - M-flow) / M-flow per seed; own thr.: at half the run's own final occupation "
        "(- where the run diverged or the mode never switched on)"
        + (
            "; mean field: the network's own prediction, the mean-field flow of its units (a router's: the median "
            "over networks sharing the init's M0; docs/departure.md), "
            "vs mean field: (network - mean field) / mean field, "
            f"± its plateau's timing error bar (its reading step moved by {TIMING_SHIFT:.0%})"
            if any(r["predicted_by_optimizer"][o].get("mean_field") is not None for r in result["modes"] for o in opts)
            else ""
        ),
        highlight=False,
    )
    print_table(console, theory_table(result))
    if result["closure_defect"]:
        print_table(console, closure_table(result, opts))
    for opt, bad in result["diverged"].items():
        if bad:
            console.print(f"[red]network ({opt}) diverged[/red] for seed(s) {', '.join(map(str, bad))}")
    for note in result["notes"]:
        console.print(f"note: {note}", highlight=False)


def print_header(result: dict, console: Console) -> None:
    """The run in one line (task, architecture, width, init, steps, seeds, rates, data defect) and the legend."""
    seeds = result["seeds"]
    cfg = result["config"]
    console.print(
        f"[bold]{result['task']}[/bold] with [bold]{result['arch']}[/bold]: n = {cfg['width']}, sigma0 = "
        f"{cfg['sigma0']:g}, "
        f"{cfg['steps']} steps, seeds {seeds[0]}..{seeds[-1]}; lr "
        + ", ".join(f"{o} {'its own' if r is None else format(r, 'g')}" for o, r in result["learning_rates"].items())
        + f"; data defect {result['defect']:.2e} ({'LV applies' if result['lv_applies'] else 'LV approximate'})",
        highlight=False,
    )
    grouped = any(len(row.get("modes", ())) > 1 for row in result["modes"])
    console.print(
        "switch-on step: m_k first reaches m_k*/2 (the theory's threshold, every source)"
        + ("; a group of modes with equal c_k (1-2, ...): its total occupation, half its total" if grouped else "")
        + f"; L: plateau loss, at the log-midpoint to the next switch{'; means over seeds' if len(seeds) > 1 else ''}",
        highlight=False,
    )


def theory_table(result: dict) -> Table:
    """The analysis: per mode, the other readings of the theory (GD: the vanishing-init limit,
    Lotka-Volterra) beside the GD M-flow and the trained quadratic model, steps and plateau losses."""
    theory = Table(
        title="analysis: the other readings (GD) and the trained quadratic model",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in ("mode", "c_k", "limit", "LV", "M-flow", "quad.", "L limit", "L M-flow", "L quad."):
        theory.add_column(column, justify="right", overflow="fold")
    for row in result["modes"]:
        pred, plateau = row["predicted"], row["plateau_loss"]
        theory.add_row(
            str(row.get("label", row["mode"])),
            fmt(row["growth"]),
            fmt(pred["singular_limit"]),
            fmt(pred["lv"]),
            fmt(pred["mflow"]),
            fmt(row["measured"]["quadratic"]),
            _loss(plateau["predicted"]["singular_limit"]),
            _loss(plateau["predicted"]["mflow"]),
            _loss(plateau["measured"]["quadratic"]),
        )
    return theory


def network_table(result: dict, opts: list[str]) -> Table:
    """The prediction against the network: per mode and optimizer, the optimizer's M-flow (the
    prediction) and the network's switch-on step, their gap, and the network's plateau; where
    predict computed it, the network's own prediction (the mean-field flow), its gap and plateau."""
    seeds = result["seeds"]
    network = Table(
        title="prediction (the M-flow) against the network, per optimizer",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    mean_field = any(
        row["predicted_by_optimizer"][opt].get("mean_field") is not None for row in result["modes"] for opt in opts
    )
    columns = ["mode", "optimizer", "M-flow", "network", "sd", "vs M-flow", "own thr.", "plateau"]
    columns += ["mean field", "vs mean field", "L mean field"] if mean_field else []
    for column in columns:
        network.add_column(column, justify="right", overflow="fold")
    for row in result["modes"]:
        for i, opt in enumerate(opts):
            flow = row["predicted_by_optimizer"][opt]
            mark = "*" if flow["reference"] else ""
            network.add_row(
                str(row.get("label", row["mode"])) if i == 0 else "",
                opt,
                fmt(flow["mflow"]) + mark,
                fmt(row["measured"]["network"][opt]),
                fmt(row["network_seeds"][opt]["std"], 2) if len(seeds) > 1 else "",
                _percent(row["relative_error"]["network"][opt]) + mark,
                fmt(row["measured_own_threshold"]["network"][opt]),
                _loss(row["plateau_loss"]["measured"]["network"][opt]),
                *(_mean_field_cells(row, opt) if mean_field else ()),
                end_section=i == len(opts) - 1,
            )
    return network


def _mean_field_cells(row: dict, opt: str) -> tuple[str, str, str]:
    """The network's own prediction (the mean-field flow), its gap to the network, its plateau loss."""
    flow = row["predicted_by_optimizer"][opt]
    step, measured = flow.get("mean_field"), row["measured"]["network"][opt]
    gap = None if step is None or measured is None else (measured - step) / step
    plateau, timing = flow.get("mean_field_plateau_loss"), flow.get("mean_field_plateau_timing")
    bar = f" ±{100 * timing:.2g}%" if plateau is not None and timing else ""  # none for 0: an exact unit
    return fmt(step), _percent(gap), _loss(plateau) + bar


def closure_table(result: dict, opts: list[str]) -> Table:
    """Per optimizer: how far the quadratic model from W0 and from W0 O stay apart on M (the closure check)."""
    closure = Table(
        title="closure on M: quadratic model from W0 and W0 O, until the last switch-on",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in ("optimizer", "until step", "max M defect", "max update defect"):
        closure.add_column(column, justify="right", overflow="fold")
    for opt in opts:
        closure.add_row(
            opt,
            str(result["closure_until"][opt]),
            fmt(result["closure_defect"][opt], 2),
            fmt(result["closure_update_defect"][opt], 2),
        )
    return closure
