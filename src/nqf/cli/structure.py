"""``nqf structure ARCH [--OPTION VALUE ...] [--json] [--seed S]``, ``nqf structure --list`` and
``nqf structure --unit FILE.py:FUNCTION [--inputs D] [--outputs K]`` (your own unit, ``nqf.cli.unit``).

Shows which parameter blocks of the structure matrix A(x) couple (autodiff at a sample
input x ~ N(0, I)), the closed form where one is known (and how far it is from
autodiff), and the verdict of the expansion check (docs/theory.md section 1).

Architecture options are generic: every ``--name value`` (or ``--name=value``) after
the architecture is an option of its factory, dashes mapped to underscores and the
value converted to the type of the factory's default.

Exit status 2, one ``error: ...`` line on stderr: unknown architecture, unknown option,
bad option value, a seed outside [0, 2^32), sizes whose A(x) would not fit in memory
(``nqf.cli.checks``), or an architecture for which the theory does not apply. With
``--json`` the last case still prints the JSON object (``expansion.applies`` false)
on stdout before exiting with status 2.

Float64: the command enables ``jax_enable_x64`` when it starts (the CLI is an
application; the library never does this). The library, numpy and JAX are imported
inside the functions, so ``nqf structure --help`` starts without them.
"""

from __future__ import annotations

import inspect
import json
import textwrap
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from nqf.cli.app import app, start_jax
from nqf.core.arguments import check_seed
from nqf.core.errors import NqfError

from .checks import check_structure
from .options import parse_factory_options
from .outputs import print_table, stdout_console
from .unit import UNIT_HELP, parse_unit_options, parse_unit_spec, unit_architecture, unit_computing

if TYPE_CHECKING:
    import numpy as np

    from nqf.architectures.architecture import Architecture
    from nqf.architectures.expansion import ExpansionReport

_SMALL_BLOCK = 64  # blocks with at most this many entries (per output) are printed in full


# -- the summary, shared with ``python -m nqf.demo`` --------------------------------------------
def expansion_summary(report: ExpansionReport) -> dict:
    """The expansion verdict as JSON-ready data: ``report_json``'s fields but dtype, then the
    probes: eps, the unit's and the layer's remainder ratios rho(eps) (non-finite: null)."""
    from nqf.architectures.expansion import report_json
    from nqf.core.pytrees import json_value

    summary = report_json(report)
    del summary["dtype"]  # the structure JSON has never carried it: its output stays as it was
    summary |= {
        "eps": list(report.eps),
        "ratios": json_value(report.ratios),
        "layer_ratios": json_value(report.layer_ratios),
    }
    return summary


def structure_summary(arch: Architecture, seed: int = 0) -> tuple[dict, np.ndarray, ExpansionReport]:
    """What ``nqf structure`` prints, as data: (summary dict, A at the sample input (K, d, d), report).

    The sample input is x ~ N(0, I) from ``numpy.random.default_rng(seed)``; the expansion
    check uses ``jax.random.key(seed)``. Blocks whose Frobenius norm is below 1e3 u |A|
    (u the dtype's machine epsilon) count as zero.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from nqf.architectures.architecture import closed_form_structure, describe_blocks, structure_matrix
    from nqf.architectures.expansion import expansion_check

    report = expansion_check(arch, key=jax.random.key(seed))
    dtype = jnp.result_type(float)
    x = jnp.asarray(np.random.default_rng(seed).standard_normal(arch.input_shape), dtype=dtype)
    # compiled: op-by-op dispatch of a Hessian costs seconds
    A = np.asarray(jax.jit(lambda x: structure_matrix(arch, x))(x))
    atol = 1e3 * float(jnp.finfo(dtype).eps) * max(float(np.linalg.norm(A)), np.finfo(float).tiny)
    closed_error = None
    if arch.closed_form is not None:
        closed = np.asarray(jax.jit(lambda x: closed_form_structure(arch, x))(x))
        closed_error = float(np.max(np.abs(closed - A)) / max(float(np.max(np.abs(A))), np.finfo(float).tiny))
    summary = {
        "arch": arch.name,
        "options": dict(arch.options),
        "d": arch.dim,
        "outputs": arch.outputs,
        "input_shape": list(arch.input_shape),
        "seed": seed,
        "parameter_blocks": [{"name": b.name, "shape": list(b.shape)} for b in arch.blocks],
        "blocks": describe_blocks(arch, A, atol=atol),
        "closed_form": [{"blocks": pair, "formula": text} for pair, text in arch.closed_form_text],
        "closed_form_max_relative_error": closed_error,
        "expansion": expansion_summary(report),
    }
    return summary, A, report


def print_summary(summary: dict, A: np.ndarray, arch: Architecture, console: Console) -> None:
    """The human-readable form of :func:`structure_summary`."""
    import numpy as np

    from nqf.architectures.expansion import label

    blocks = {b.name: b for b in arch.blocks}
    console.print(
        f"[bold]{label(arch)}[/bold]: d = {summary['d']} parameters per unit "
        f"({', '.join(f'{b.name} {tuple(b.shape)}' for b in arch.blocks)}), "
        f"K = {summary['outputs']} output(s), input shape {tuple(summary['input_shape'])}",
        highlight=False,
    )
    if arch.description:
        console.print(f"  {arch.description}")
    expansion = summary["expansion"]
    verdict = "[green]applies[/green]" if expansion["applies"] else f"[red]does not apply ({expansion['kind']})[/red]"
    console.print(f"  expansion: {verdict}: {expansion['reason']}")

    formulas = dict((c["blocks"], c["formula"]) for c in summary["closed_form"])
    table = Table(title=f"coupled blocks of A(x), sample x ~ N(0, I), seed {summary['seed']}", title_justify="left")
    for column in ("block", "shape", "|A| (Frobenius)", "closed form"):
        table.add_column(column, overflow="fold")
    for b in summary["blocks"]:
        pair, swapped = f"{b['rows']} x {b['cols']}", f"{b['cols']} x {b['rows']}"
        rows, cols = blocks[b["rows"]], blocks[b["cols"]]
        formula = formulas.get(pair, formulas.get(swapped, ""))
        table.add_row(pair, f"{rows.stop - rows.start}x{cols.stop - cols.start}", f"{b['norm']:.4g}", formula)
    if not summary["blocks"]:
        table.add_row("(none)", "", "0", "A(x) = 0")
    print_table(console, table)
    shown = {
        f"{b[first]} x {b[second]}" for b in summary["blocks"] for first, second in (("rows", "cols"), ("cols", "rows"))
    }
    for pair, text in formulas.items():
        if pair not in shown:
            console.print(f"  {pair}: {text}")
    if summary["closed_form_max_relative_error"] is not None:
        console.print(
            f"  closed form vs autodiff: max relative difference {summary['closed_form_max_relative_error']:.2g}"
        )

    with np.printoptions(precision=3, suppress=True, linewidth=100):
        for b in summary["blocks"]:
            rows, cols = blocks[b["rows"]], blocks[b["cols"]]
            if (rows.stop - rows.start) * (cols.stop - cols.start) > _SMALL_BLOCK:
                continue
            which = "" if summary["outputs"] == 1 else f" (output 0 of {summary['outputs']})"
            console.print(f"  A[{b['rows']}, {b['cols']}]{which}:", markup=False, highlight=False)
            matrix = np.array2string(A[0, rows.start : rows.stop, cols.start : cols.stop])
            console.print(textwrap.indent(matrix, "    "), markup=False, highlight=False)


# -- the command --------------------------------------------------------------------------------
def list_architectures() -> list[dict]:
    """Built-in architectures with their options, defaults and one-line descriptions."""
    from ..architectures import ARCHITECTURES

    out = []
    for name, factory in ARCHITECTURES.items():
        defaults = {p.name: p.default for p in inspect.signature(factory).parameters.values()}
        out.append({"name": name, "options": defaults, "description": factory().description})
    return out


def _print_list(entries: list[dict], console: Console) -> None:
    table = Table(title="architectures (nqf structure NAME --option value ...)", title_justify="left")
    for column in ("name", "options (defaults)", "description"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in entry["options"].items())
        table.add_row(entry["name"], options, entry["description"])
    print_table(console, table)


@app.command("structure", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def structure_command(
    ctx: typer.Context,
    architecture: Annotated[
        str | None, typer.Argument(help="Architecture name (see --list); its options follow as --name value.")
    ] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the architectures with their options.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample input and the expansion check.")] = 0,
    unit: Annotated[
        str | None, typer.Option("--unit", help=UNIT_HELP + " Here the shapes come from --inputs / --outputs.")
    ] = None,
) -> None:
    """The structure matrix A(x) of an architecture: coupled blocks, closed form, expansion verdict."""
    check_seed("--seed", seed)
    unit_args: list[str] = []
    if unit is not None:
        # click hands the first left-over token (e.g. the ``--inputs`` of ``--inputs 4``) to ARCH
        unit_args = ([] if architecture is None else [architecture]) + list(ctx.args)
        if list_ or (unit_args and not unit_args[0].startswith("--")):
            raise NqfError("give an architecture name (or --list) or --unit FILE.py:FUNCTION, not both")
        parse_unit_spec(unit)  # a bad FILE.py:FUNCTION fails before JAX starts
    start_jax()  # float64 (application-level choice; see the module docstring) and the compilation cache
    from nqf.architectures.expansion import raise_unless_applies

    from ..architectures import architecture_options, get_architecture

    console = stdout_console()  # piped: tables at their natural width, never cut (issue 23)
    if list_:
        if architecture is not None or ctx.args:
            raise NqfError("--list takes no architecture or options")
        entries = list_architectures()
        if as_json:
            typer.echo(json.dumps({"architectures": entries}, allow_nan=False))
        else:
            _print_list(entries, console)
        return
    with unit_computing(unit):  # a unit's prints (it is traced again) never reach stdout
        if unit is not None:
            arch = unit_architecture(unit, parse_unit_options(unit_args))
        elif architecture is None:
            raise NqfError("give an architecture name (nqf structure --list shows them) or --unit FILE.py:FUNCTION")
        else:
            known = architecture_options(architecture)  # raises for an unknown architecture
            options = parse_factory_options(list(ctx.args), {architecture: known})[architecture]
            arch = get_architecture(architecture, **options)
        check_structure(arch)
        summary, A, report = structure_summary(arch, seed=seed)
    if as_json:
        typer.echo(json.dumps(summary, allow_nan=False))
        if not report.applies:
            raise typer.Exit(2)
        return
    raise_unless_applies(arch, report)
    print_summary(summary, A, arch, console)
