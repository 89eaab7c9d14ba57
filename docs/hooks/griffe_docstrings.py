"""Griffe extension for the API reference: nqf's docstring conventions, read as Google style.

nqf's docstrings are Google style with two habits that style does not know; both are
rewritten here before griffe parses them (the source is left as it is):

- reST roles (``:func:`predict```, ``:class:`~nqf.Readout```) become the code span of their
  target (``predict``, ``Readout``): Markdown has no roles.
- An entry of an ``Args:`` / ``Attributes:`` section may name several parameters at once
  (``rtol, atol: tolerances``, the names possibly running over a line); it becomes one entry
  per name, each with the description.

Loaded by mkdocstrings (mkdocs.yml, ``extensions``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`~?([^`]+)`")
SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params|Attributes|Other Parameters|Keyword Args):\s*$")
NAMES_CONTINUED = re.compile(r"^\s+\w+(?:,\s*\w+)*,\s*$")  # "a, b," and the list goes on below
GROUP = re.compile(r"^(\s+)(\w+(?:,\s*\w+)+):(.*)$")  # "a, b: description"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def split_grouped_entries(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    section: int | None = None  # the indent of the current Args/Attributes header
    i = 0
    while i < len(lines):
        line = lines[i]
        header = SECTION.match(line)
        if header:
            section = len(header.group(1))
        elif line.strip() and section is not None and _indent(line) <= section:
            section = None
        if section is not None and not header:
            while NAMES_CONTINUED.match(line) and i + 1 < len(lines):  # join the broken list of names
                i += 1
                line = line.rstrip() + " " + lines[i].strip()
            group = GROUP.match(line)
            if group:
                indent, names, rest = group.groups()
                body = []
                while i + 1 < len(lines) and lines[i + 1].strip() and _indent(lines[i + 1]) > len(indent):
                    i += 1
                    body.append(lines[i])
                for name in re.split(r",\s*", names):
                    out += [f"{indent}{name}:{rest}", *body]
                i += 1
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


class NqfDocstrings(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = split_grouped_entries(ROLE.sub(r"`\1`", obj.docstring.value))
