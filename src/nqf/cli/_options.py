"""Generic ``--name value`` options for factories (architectures, tasks).

Options are read from the arguments typer leaves over (``allow_extra_args``), dashes
mapped to underscores, values converted to the type of the factory default. An option
that several factories accept (e.g. ``--inputs`` for a task and its architecture) is
given to each of them, since it means the same thing for both.
"""

from __future__ import annotations

from typing import Any

from nqf.core.errors import NqfError


def convert_value(owner: str, option: str, raw: str, default: Any) -> Any:
    """``raw`` converted to the type of ``default`` (bool, int, float, tuple of floats, None: a number
    if it reads as one, else str)."""
    flag = "--" + option.replace("_", "-")
    if isinstance(default, bool):
        lowered = raw.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise NqfError(f"{owner}: option {flag} takes true or false, got {raw!r}")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise NqfError(f"{owner}: option {flag} takes an integer, got {raw!r}") from None
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise NqfError(f"{owner}: option {flag} takes a number, got {raw!r}") from None
    if default is None:  # an optional number (e.g. digits --samples): an int, else a float, else text
        for kind in (int, float):
            try:
                return kind(raw)
            except ValueError:
                pass
        return raw
    if isinstance(default, tuple):
        try:
            return tuple(float(v) for v in raw.split(",") if v.strip())
        except ValueError:
            raise NqfError(f"{owner}: option {flag} takes comma-separated numbers, got {raw!r}") from None
    return raw


def parse_factory_options(args: list[str], owners: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Split ``["--name", "value", "--other=value", ...]`` among factories.

    owners maps a factory's label (e.g. "mlp", "task staircase") to its options and
    defaults. Returns {label: {option: value}}. NqfError for an option no factory has,
    a missing value, a repeated option or a stray argument.
    """
    parsed: dict[str, dict[str, Any]] = {label: {} for label in owners}
    seen: set[str] = set()
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--") or token == "--":
            raise NqfError(f"unexpected argument {token!r}; options are given as --name value")
        if "=" in token:
            flag, raw = token.split("=", 1)
            i += 1
        else:
            flag = token
            if i + 1 >= len(args) or (args[i + 1].startswith("--") and len(args[i + 1]) > 2):
                raise NqfError(f"option {flag} needs a value")
            raw = args[i + 1]
            i += 2
        option = flag[2:].replace("-", "_")
        if option in seen:
            raise NqfError(f"option {flag} given twice")
        seen.add(option)
        takers = [label for label, known in owners.items() if option in known]
        if not takers and len(owners) == 1:
            ((label, known),) = owners.items()
            flags = ", ".join("--" + k.replace("_", "-") for k in known) or "none"
            raise NqfError(f"{label} has no option {flag}; its options are {flags}")
        if not takers:
            listing = "; ".join(
                f"{label}: {', '.join('--' + k.replace('_', '-') for k in known) or 'none'}"
                for label, known in owners.items()
            )
            raise NqfError(f"no option {flag} here; the options are {listing}")
        for label in takers:
            parsed[label][option] = convert_value(label, option, raw, owners[label][option])
    return parsed
