"""``nqf predict``: predict the loss curve and switch-on steps from data, without training.

    nqf predict --data FILE.npz (--arch ARCH [arch options] | --unit FILE.py:FUNCTION) --width N
                (--sigma0 S | --init W0.npz) --lr ETA --steps T
                [--optimizer gd|sgd|momentum|nesterov] [--batch B] [--beta B] [--seed S] [--json]
                [--plot FILE.png|FILE.pdf] [--csv DIR] [--overlay CURVE]
    nqf predict --task TASK [task options] [--data-seed D] [--arch ARCH [arch options] | --unit FILE.py:FUNCTION]
                --width N (--sigma0 S | --init W0.npz) --lr ETA --steps T [...]

``--task TASK`` takes a built-in task (staircase, powerlaw, ...; ``nqf structure --list``) as
``nqf compare --task`` does, with the same names, options and defaults (``nqf.cli.options``):
its data ``task.generate(--data-seed)``, the architecture by default the task's natural one
with the task's options for it (``--arch`` with another name starts from that architecture's
own defaults; ``--unit`` takes the task's shapes), an option both accept going to both.
``--task`` and ``--data`` together, or neither, are one ``error:`` line.

FILE.npz holds arrays X (N, *input_shape) and Y (N, K) (or (N,) for one output, or
integer class labels (N,) in [0, K), one-hot encoded, e.g. with --loss cross_entropy);
entries real, finite and at most 1e30 in magnitude (``nqf.theory.data_matrices.build.MAX_ABS_ENTRY``);
W0.npz holds W (d x n, units as columns, each flattened in the order that
``nqf structure ARCH`` lists as parameter blocks). Architecture options are given as
``--name value`` (see ``nqf structure --list``). ``--unit FILE.py:FUNCTION`` takes your own unit
instead of ``--arch`` (``nqf.cli.unit``); its input shape and outputs default to X's and
Y's. Bad files, shape mismatches,
non-finite values, an unstable learning rate, a seed outside [0, 2^32), a run that would
not fit in memory (``nqf.comparison.checks``, ``nqf.cli.checks``), an unwritable --plot or --csv folder, a bad
--overlay curve (``nqf.comparison.curves``) and a unit the theory does not apply to (unless
``--allow-inapplicable``) print one ``error:`` line, exit 2. A run estimated to take
longer than ~10 s says so on stderr first.

--plot draws the loss curves and switch-on steps (``nqf.report.predict_plot``); --csv DIR
writes curves.csv and modes.csv, tidy tables (``nqf.report.curve_tables``); --overlay CURVE
reads a measured loss curve and compares its switch-on steps, read from the loss, with the
M-flow's (``nqf.comparison.curves``). Files are written at the end, each atomically.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from nqf.cli.app import app, start_jax
from nqf.comparison.checks import check_predict
from nqf.comparison.settings import PredictSettings, check_settings, run_config
from nqf.core.errors import NqfError
from nqf.optimizers import MINIBATCH_OPTIMIZERS, OPTIMIZER_RECORDS, PREDICT_OPTIMIZERS, unused_setting

from .checks import check_departure
from .options import RunArgs, check_task_or_data, command_args, parse_factory_options
from .outputs import OverlayOption, PlotOption, fmt
from .settings import is_default, setting
from .unit import UnitOption, check_unit_option, parse_unit_options, resolve_task, unit_computing, unit_for_data

if TYPE_CHECKING:
    import numpy as np


def load_npz(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Arrays ``names`` from an .npz file, with one-line errors for every way it can be bad: the
    file (``nqf.core.input_files.read_npz``: its kind, missing arrays, dtypes, headers against the
    file's size and the memory), then the values (non-finite or huge entries)."""
    from nqf.core.input_files import read_npz
    from nqf.theory.data_matrices.checks import check_finite

    arrays = read_npz(path, names)
    for name, array in arrays.items():
        check_finite(f"{path}: array {name}", array)
    return arrays


@dataclass(frozen=True)
class PredictArgs(RunArgs):
    """The command line of ``nqf predict`` as typer read it (:class:`~nqf.cli.options.RunArgs` and its own).

    ``extra``: the options of the architecture or of the unit (and of the task with ``--task``).
    Exactly one of ``data`` and ``task``; ``data_seed``: None when not given (it is the task's,
    refused with ``--data``).
    """

    data: Path | None
    task: str | None
    data_seed: int | None
    sigma0: float | None
    init: Path | None
    optimizer: str
    loss: str
    route: str
    stepping: str

    SETTINGS = (*RunArgs.SETTINGS, "sigma0", "data_seed", "optimizer", "loss", "route", "stepping")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def predict(
    ctx: typer.Context,
    task: Annotated[
        str | None,
        typer.Option("--task", help="Task name (staircase, powerlaw, quadratic, ...), as compare takes it; or --data."),
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="FILE.npz with arrays X (samples first) and Y (with --arch or --unit); or --task."),
    ] = None,
    data_seed: int = setting(PredictSettings, "data_seed"),
    # the run settings: default and help from the schema (nqf.comparison.settings)
    width: int = setting(PredictSettings, "width"),
    lr: float = setting(PredictSettings, "lr"),
    steps: int = setting(PredictSettings, "steps"),
    arch: Annotated[
        str | None,
        typer.Option("--arch", help="Architecture name (nqf structure --list); --inputs and --outputs from the data."),
    ] = None,
    unit: UnitOption = None,
    sigma0: float | None = setting(PredictSettings, "sigma0", default=None),  # or --init
    init: Annotated[Path | None, typer.Option("--init", help="W0.npz with array W (d x n).")] = None,
    optimizer: str = setting(PredictSettings, "optimizer"),
    batch: int | None = setting(PredictSettings, "batch"),
    beta: float = setting(PredictSettings, "beta"),
    seed: int = setting(PredictSettings, "seed"),
    loss: str = setting(PredictSettings, "loss"),
    route: str = setting(PredictSettings, "route"),
    stepping: str = setting(PredictSettings, "stepping"),
    allow_inapplicable: bool = setting(PredictSettings, "allow_inapplicable"),
    departure: Annotated[
        bool,
        typer.Option(
            "--departure",
            help="Also evaluate the network along the quadratic model's predicted path, without training: the "
            "relative gap between the network and its quadratic form there (docs/departure.md; seconds more).",
        ),
    ] = False,
    network: bool = setting(PredictSettings, "network", flag="--network/--no-network"),
    network_budget: float = setting(PredictSettings, "network_budget"),
    network_method: str = setting(PredictSettings, "network_method"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the prediction as JSON.")] = False,
    plot: PlotOption = None,
    csv_dir: Annotated[
        Path | None, typer.Option("--csv", help="Write the curves and switch-on steps as tidy CSV tables into DIR.")
    ] = None,
    overlay: OverlayOption = None,
) -> None:
    """Predict training (M-flow, Lotka-Volterra, vanishing-init steps) from data, without training.

    The data: --data FILE.npz, or --task TASK, a built-in task as compare takes it (its options
    follow as --name value, e.g. --samples N; the architecture defaults to the task's natural one).
    The architecture's own options follow as --name value (nqf structure --list lists them):
    e.g. --activation tanh, --inputs D and --outputs K (default: X's and Y's). With --unit,
    --inputs D[,D2..] and --outputs K set its shapes (default: the data's).
    """
    args = command_args(
        PredictArgs,
        locals(),
        data_seed=None if is_default(ctx, "data_seed") else data_seed,
        # not given: None, so that a --beta the optimizer does not use is refused (its default shows in --help)
        beta=None if is_default(ctx, "beta") else beta,
        extra=tuple(ctx.args),
    )
    run_predict_command(args)


def run_predict_command(args: PredictArgs) -> None:
    """Check the arguments, predict, write the files and print the result (JSON or text)."""
    check_arguments(args)
    from .outputs import check_outputs, finish_prediction

    # before any compute: a bad path or curve costs nothing
    measured = check_outputs(args.plot, args.csv_dir, args.overlay)
    start_jax()  # float64 and the compilation cache (the library never flips these)
    with unit_computing(args.unit):  # a unit's prints (it is traced again) never reach stdout
        prediction, architecture, label = run_prediction(args)
        result = prediction.to_json()
        # the overlay block; figure, tables
        finish_prediction(prediction, result, args.plot, args.csv_dir, measured, init=args.init)
    if args.as_json:
        print(json.dumps(result))
        return
    print_prediction(args, label, architecture.dim, result)


def check_arguments(args: PredictArgs) -> None:
    """Every check of the plain arguments, before the library (and JAX) is loaded."""
    check_task_or_data("predict", args.task, args.data, list(args.extra))
    if args.data is not None and args.data_seed is not None:
        raise NqfError("--data-seed is the seed of a task's data (--task); --data FILE has none, drop it")
    if args.optimizer not in PREDICT_OPTIMIZERS:  # the schema's choice, with the reason
        raise NqfError(
            f"the M-flow predicts {', '.join(PREDICT_OPTIMIZERS)} (equivariant optimizers); got {args.optimizer!r}"
        )
    check_settings(PredictSettings, args.settings())
    record = OPTIMIZER_RECORDS[args.optimizer]
    if record.minibatches and args.batch is None:
        raise NqfError(f"optimizer {args.optimizer} needs a batch size (--batch)")
    for name, value in (("batch", args.batch), ("beta", args.beta)):
        unused = None if value is None else unused_setting(name, (args.optimizer,), f"--{name}")
        if unused:
            raise NqfError(f"{unused}; drop it")
    if (args.sigma0 is None) == (args.init is None):
        raise NqfError("give exactly one of --sigma0 S or --init W0.npz")
    check_unit_option(args.arch, args.unit)
    if args.task is None and args.arch is None and args.unit is None:  # --task: the task's natural one
        raise NqfError("give --arch NAME or --unit FILE.py:FUNCTION")


def run_prediction(args: PredictArgs):
    """(prediction, architecture, its name): the data checked, then the data matrices, then the prediction."""
    import numpy as np

    from nqf.theory.data_matrices.build import flow_data
    from nqf.theory.predict.pipeline import predict as run_predict

    architecture, label, X, Y = load_problem(args)
    W0 = None if args.init is None else load_init(args.init, architecture.dim, args.width)
    config = predict_config(args)
    # the data matrices first, then let go of X and Y: the prediction's compilations then
    # happen without the samples in memory (the moments route keeps only S and u)
    data_route = flow_data(
        architecture,
        np.asarray(X, dtype=np.float64),
        Y,
        loss=args.loss,
        route=args.route,
        minibatches=args.optimizer in MINIBATCH_OPTIMIZERS,
        dtype=np.float64,
    )
    # the network's mean-field flow and the departure evaluate the network on the samples; otherwise they are let go
    samples = (np.asarray(X, dtype=np.float64), Y) if args.departure or args.network else (None, None)
    del X, Y
    X_kept, Y_kept = samples
    prediction = run_predict(
        architecture, X_kept, Y_kept, config, W0=W0, data=data_route[0], route_choice=data_route[1]
    )
    return prediction, architecture, label


def load_problem(args: PredictArgs):
    """(architecture, its name, X, Y): the architecture (or unit) and the samples, every check of the
    data (shapes, labels, losses) and of the run's memory done, before any compute."""
    import numpy as np

    from nqf.theory.data_matrices.build import check_sample_arrays, checked_samples

    from ..architectures import architecture_options, get_architecture, outputs_for_targets

    if args.task is not None:  # a built-in task, as compare takes it
        architecture, X, Y = task_problem(args)
        arch, where, known = architecture.name, f"task {args.task}", {}
    else:
        arch, data = args.arch, args.data
        assert data is not None  # exactly one of --task and --data (check_arguments)
        where = str(data)
        if arch is not None:  # exactly one of --arch and --unit (checked by run_prediction)
            known = architecture_options(arch)
            options = parse_factory_options(list(args.extra), {arch: known})[arch]
        else:
            known, unit_options = {}, parse_unit_options(list(args.extra))
        arrays = load_npz(data, ("X", "Y"))
        X, Y = arrays["X"], arrays["Y"]
        check_sample_arrays(where, X, Y)
        if arch is not None:  # --inputs and --outputs from the data unless given, as nqf.predict does with a name
            if "inputs" in known and "inputs" not in options and X.ndim == 2:
                options["inputs"] = int(X.shape[1])
            if "outputs" in known and "outputs" not in options and (Y.ndim == 2 or (Y.ndim == 1 and Y.size)):
                options["outputs"] = outputs_for_targets(Y, args.loss)
            architecture = get_architecture(arch, **options)
        else:  # --unit: shapes from the data unless --inputs / --outputs say otherwise
            assert args.unit is not None  # exactly one of --arch and --unit
            architecture = unit_for_data(args.unit, unit_options, X, Y, args.loss, where)
            arch = architecture.name
    if X.shape[1:] != tuple(architecture.input_shape):
        shape = ", ".join(map(str, architecture.input_shape))
        hint = (
            f"; leave out --inputs (taken from the data) or give --inputs {X.shape[1]}"
            if args.arch is not None and "inputs" in known and X.ndim == 2
            else ""
        )
        raise NqfError(f"{where}: X has shape {X.shape}, but {arch} with these options takes inputs (N, {shape}){hint}")
    if args.batch is not None and args.batch > X.shape[0]:
        raise NqfError(f"--batch {args.batch} is larger than the {X.shape[0]} samples in {where}")
    X, Y_checked, _ = checked_samples(architecture, X, Y, loss=args.loss, dtype=np.float64)
    check_predict(
        architecture,
        X.shape[0],
        args.width,
        args.steps,
        args.loss,
        args.route,
        args.optimizer,
        adaptive=args.stepping == "adaptive",
    )
    if args.departure:  # its memory and time on top of the prediction's
        check_departure(architecture, X.shape[0], args.width, args.steps, args.loss, args.route, args.optimizer)
    return architecture, arch, X, Y_checked


def task_problem(args: PredictArgs):
    """(architecture, X, Y) of ``--task``: the task and the architecture as ``compare`` builds them
    (``nqf.cli.unit.resolve_task``: the task's natural architecture unless ``--arch`` or ``--unit``),
    the data ``task.generate(--data-seed)`` in float64, checked as a file's would be."""
    import numpy as np

    from nqf.theory.data_matrices.build import check_sample_arrays

    assert args.task is not None  # the caller's branch
    task, architecture = resolve_task(args.task, args.arch, args.unit, list(args.extra))
    seed = PredictSettings.model_fields["data_seed"].default if args.data_seed is None else args.data_seed
    X, Y = task.generate(seed, dtype="float64")
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    check_sample_arrays(f"task {args.task}", X, Y)
    return architecture, X, Y


def load_init(init: Path, dim: int, width: int) -> np.ndarray:
    """W0 from ``--init`` as float64, checked against the architecture's d and ``--width``."""
    import numpy as np

    W0 = load_npz(init, ("W",))["W"]
    if W0.ndim != 2 or W0.shape[0] != dim:
        raise NqfError(f"{init}: W must have shape (d={dim}, n), got {W0.shape}")
    if W0.shape[1] != width:
        raise NqfError(f"{init}: W has {W0.shape[1]} units (columns) but --width is {width}")
    return np.asarray(W0, dtype=np.float64)


def predict_config(args: PredictArgs):
    """The library's ``PredictConfig`` (its own checks, ``nqf.comparison.settings.run_config``) from the
    arguments (with ``--init`` its W0, not sigma0, is the init)."""
    return run_config("predict", {"sigma0": 1.0, **args.settings()}, departure=args.departure)


def print_prediction(args: PredictArgs, arch: str, dim: int, result: dict) -> None:
    """The text form of ``Prediction.to_json()``: a header, the modes table, the loss and fit, notes and files."""
    from .outputs import print_departure, print_outputs, print_table, stdout_console

    console = stdout_console()
    lv, steps = result["lv"], args.steps
    console.print(
        f"[bold]{arch}[/bold] d={dim}, n={args.width}, {args.optimizer}, lr={args.lr:g}, {steps} steps; "
        f"data defect {lv['defect']:.2e} ({'LV applies' if lv['applies'] else 'LV does not apply: M-flow only'}), "
        f"init defect {lv['init_defect']:.2e}, stable lr < {result['stable_lr']:.4g}"
    )
    print_table(console, prediction_table(result))
    print_table(console, modes_table(result))
    loss = result["mflow"]["loss"]
    console.print(f"loss: {loss[0]:.6g} at step 0, {loss[-1]:.6g} at step {steps}")
    if result["power_law"] is not None:
        fit = result["power_law"]
        console.print(
            f"power law: exponent {fit['exponent']:.3f} [{fit['ci'][0]:.3f}, {fit['ci'][1]:.3f}] "
            f"({'a power law' if fit['is_power_law'] else 'not a power law'}: {fit['reason']})"
        )
    stats = result["flow_stats"]
    console.print(
        f"M-flow: {result['route_reason']}; {stats.get('stepped', steps)} steps stepped, "
        f"{stats.get('jumped', 0)} jumped ({stats.get('jumps', 0)} jumps)"
    )
    console.print(f"engine: {result['engine_reason']}")
    if result.get("network") is not None:
        flow = result["network"]
        console.print(f"network ({network_kind(flow, sizes=True)}); loss {flow['loss'][-1]:.6g} at step {steps}")
    if result["departure"] is not None:
        print_departure(console, result["departure"])
    for note in result["notes"]:
        console.print(f"note: {note}")
    print_outputs(console, result, args.plot, args.csv_dir)


def network_kind(flow: dict, sizes: bool = False) -> str:
    """What the network's own prediction (its JSON, ``NetworkFlow.to_json()``) is, in a few words;
    ``sizes``: with its networks' or particle sets' sizes."""
    if flow.get("exact"):
        return "the M-flow itself: the unit is exactly quadratic"
    if flow.get("ensemble"):
        size = f": {flow['sets']} networks of {flow['particles']} units" if sizes else ""
        return f"the median of networks sharing the init's M0{size}"
    size = f": {flow['sets']} sets of {flow['particles']} particles" if sizes else ""
    return f"the mean-field flow of the network's units{size}"


def prediction_table(result: dict) -> Table:
    """The prediction (``Prediction.to_json()["prediction"]``): per mode, or per degenerate group,
    c_k, the fixed point, the M-flow's switch-on step and plateau loss."""
    from nqf.core.measure import TIMING_SHIFT

    block = result["prediction"]
    grouped = any(len(row["modes"]) > 1 for row in block["modes"])
    network = any("network_switch_step" in row for row in block["modes"])  # the network's own prediction
    flow = result.get("network") or {}
    # each network plateau's timing error bar (NetworkFlow.plateau_timing), per mode; none for groups
    # or an exactly quadratic unit (its M-flow is its training)
    timing = [] if grouped or flow.get("exact") else list(flow.get("plateau_timing") or [])
    table = Table(
        title="prediction (the M-flow"
        + (f", the quadratic model; network: {network_kind(flow)}" if network else "")
        + "): switch-on step = first step m_k"
        + (" (a group's total, for modes with equal c_k)" if grouped else "")
        + " reaches half its fixed point m*; plateau loss at the log-midpoint to the next switch-on"
        + (
            f"; ± the network plateau's timing error bar (its reading step moved by {TIMING_SHIFT:.0%})"
            if timing
            else ""
        )
    )
    columns = ["modes" if grouped else "mode", "c_k", "m*" if grouped else "m_k*", "switch-on step", "plateau loss"]
    columns += ["network: step", "network: plateau"] if network else []
    for column in columns:
        table.add_column(column, justify="right", overflow="fold")
    for k, row in enumerate(block["modes"]):
        first, last = row["modes"][0], row["modes"][-1]
        cells = [
            str(first) if first == last else f"{first}-{last}",
            fmt(row["growth"]),
            fmt(row["fixed_point"]),
            fmt(row["switch_step"]),
            fmt(row["plateau_loss"]),
        ]
        if network:
            plateau = fmt(row.get("network_plateau_loss"))
            bar = timing[k] if k < len(timing) else None
            if plateau != "-" and bar is not None and math.isfinite(bar):
                plateau += f" ±{100 * bar:.2g}%"
            cells += [fmt(row.get("network_switch_step")), plateau]
        table.add_row(*cells)
    return table


def modes_table(result: dict) -> Table:
    """The analysis: per mode, every other reading's switch-on step (LV map and ODE, closed form,
    vanishing-init limit) and the limit's plateau loss; per degenerate group where modes share
    c_k (:func:`groups_table`)."""
    if any(len(group["modes"]) > 1 for group in result.get("groups") or ()):
        return groups_table(result)
    lv = result["lv"]
    table = Table(title="analysis: the other readings of the same modes (docs/theory.md 3-4)")
    columns = ("mode", "LV (map)", "LV (flow)", "closed form", "vanishing init", "limit plateau")
    for column in columns:
        table.add_column(column, justify="right", overflow="fold")
    for k in range(len(lv["growth"])):
        table.add_row(
            str(k + 1),
            fmt(lv["switch_steps"][k]),
            fmt(lv["continuous_switch_steps"][k]),
            fmt(lv["closed_form_switch_steps"][k]),
            fmt(result["singular_limit"]["switch_steps"][k]),
            fmt(lv["plateau_losses"][k]),
        )
    return table


def groups_table(result: dict) -> Table:
    """Per degenerate group (``Prediction.group_readings``): its modes, c_k, total fixed point,
    every source's switch-on step and the plateau loss; no per-mode step inside a group."""
    table = Table(
        title="analysis, per group of modes with equal c_k: the other readings (a group's step: its first mode's)"
    )
    columns = ("modes", "LV (map)", "LV (flow)", "closed form", "vanishing init", "limit plateau")
    for column in columns:
        table.add_column(column, justify="right", overflow="fold")
    for group in result["groups"]:
        first, last = group["modes"][0], group["modes"][-1]
        steps = group["switch_steps"]
        table.add_row(
            str(first) if first == last else f"{first}-{last}",
            fmt(steps["lv"]),
            fmt(steps["lv_flow"]),
            fmt(steps["closed_form"]),
            fmt(steps["singular_limit"]),
            fmt(group["plateau_losses"]["singular_limit"]),
        )
    return table
