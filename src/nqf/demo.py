"""``python -m nqf.demo`` (what ``make demo`` runs): structure matrices and expansion verdicts.

For every built-in architecture (default options) it prints what ``nqf structure``
prints: the coupled blocks of A(x) at a sample input, their closed form, and the
verdict of the expansion check. Then it shows the check refusing units for which the
theory does not apply (not smooth, linear term, vanishing quadratic form). Float64 is
enabled here, as in the CLI: the demo is an application.
"""

from __future__ import annotations

import jax
from rich.console import Console

from nqf.architectures.expansion import expansion_check, label

from .architectures import ARCHITECTURES, get_architecture
from .cli.structure import print_summary, structure_summary

# units the theory must reject, one per reason (docs/theory.md section 1)
REJECTED = (
    ("mlp", {"activation": "relu"}),
    ("mlp", {"activation": "abs"}),
    ("mlp", {"activation": "softplus"}),
    ("mlp", {"activation": "sigmoid"}),
    ("mlp", {"activation": "square"}),
    ("moe", {"routing": "topk"}),
)


def main(seed: int = 0) -> int:
    jax.config.update("jax_enable_x64", True)  # application-level choice, as in the CLI
    console = Console(soft_wrap=True)
    applies = 0
    for name in ARCHITECTURES:
        arch = get_architecture(name)
        summary, A, report = structure_summary(arch, seed=seed)
        applies += report.applies
        print_summary(summary, A, arch, console)
        console.print()
    console.print(f"[bold]the expansion applies to {applies} of {len(ARCHITECTURES)} built-in architectures[/bold]")
    console.print("[bold]units the theory refuses:[/bold]")
    for name, options in REJECTED:
        if name not in ARCHITECTURES:
            continue
        arch = get_architecture(name, **options)
        report = expansion_check(arch, key=jax.random.key(seed))
        verdict = "applies" if report.applies else "does not apply"
        console.print(f"  {label(arch)}: {verdict}: {report.reason}", highlight=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
