"""mkdocs hook: the command-line reference page, ``cli.md``, written at build time.

Every command of the ``nqf`` typer app (subcommands of groups such as ``nqf store``
included) gets a section with the output of ``python -m nqf ... --help``, run in a
subprocess with typer's plain (non-rich) formatter at 100 columns: the page is what the
terminal prints, so it cannot drift from the commands. Nothing here loads JAX
(``nqf --help`` never does).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer
from mkdocs.structure.files import File

PAGE = "cli.md"
INTRO = """# Command-line reference

Generated from the commands when the site is built: each section is the output of
`nqf ... --help` (also `python -m nqf ... --help`). The [tutorial](tutorial.md) uses the
commands on a layer and data of your own; [Reproducing the claims](report.md) describes
`nqf reproduce` and its results directory.
"""


def command_paths() -> list[tuple[list[str], str]]:
    """(the words after ``nqf``, one-line help) of every command, groups before their commands."""
    import nqf.cli  # registers every command on the app

    root = typer.main.get_command(nqf.cli.app)
    paths: list[tuple[list[str], str]] = []

    # typer's own click classes (typer may carry its own copy of click): duck-typed
    def walk(command: Any, words: list[str], parent: Any) -> None:
        context = command.context_class(command, info_name=words[-1] if words else "nqf", parent=parent)
        paths.append((words, command.get_short_help_str(limit=200)))
        if hasattr(command, "list_commands"):
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                if sub is not None and not sub.hidden:
                    walk(sub, [*words, name], context)

    walk(root, [], None)
    return paths


def help_text(words: list[str]) -> str:
    """``nqf WORDS --help`` as the terminal prints it without rich, 100 columns wide."""
    env = {**os.environ, "TYPER_USE_RICH": "0", "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    script = Path(sys.executable).parent / "nqf"  # the console script, so usage lines read `nqf ...`
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "nqf"]
    done = subprocess.run([*command, *words, "--help"], capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"nqf {' '.join(words)} --help exited {done.returncode}:\n{done.stderr}")
    return done.stdout.rstrip()


def cli_markdown() -> str:
    parts = [INTRO]
    for words, short in command_paths():
        name = " ".join(["nqf", *words])
        parts.append(f"## `{name}`\n\n{short}\n\n```text\n{help_text(words)}\n```\n")
    return "\n".join(parts)


def on_files(files, config):
    files.append(File.generated(config, PAGE, content=cli_markdown()))
    return files
