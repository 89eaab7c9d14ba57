"""What identifies the code that computed a result: a hash of the source files that compute it.

A record is keyed by its config and by this identity, not by the package version, so a
changed line of the theory (or of training, or of an experiment's run) recomputes, and an
unchanged tree reuses its records whatever the version says. The hash is deliberately
blunt: any file that can change a number, every byte of its code, strings, spacing and
blank lines included; only what never changes a number is left out of it: comments,
docstrings and the other strings that stand alone as statements (:func:`computing_text`), so
that a comment or a docstring edited anywhere recomputes nothing.

Hashed: every ``*.py`` under the ``nqf`` package folder, by relative path and computing text,
except the presentation layers ``report/`` (the library's figures) and ``cli/`` (parsing and
printing); and, when the paper's package ``nqf_paper`` (this repository's reproduction, a
user of nqf) is installed beside it, its files too, except its figures and HTML page
(``<experiment>/figures.py``, ``report_page.py``), which never change a stored number. The
identity reads ``<package version>+code.<16 hex>``.

Per experiment (:func:`code_identity` with its name): a record of the paper's experiment
``E<n>`` is keyed by nqf's files, the paper's shared modules and its own folder
``e<n>_<topic>/`` only, not the other experiments' folders (which it never imports: the
experiments import the shared modules and their own folder, checked in the tests), so an edit
of one experiment recomputes that experiment's runs alone. Any other name (a sweep's) is keyed
by nqf's files and the paper's shared modules. Without a name it is the identity of the whole
tree, which a worker checks against its driver's (:func:`check_same_code`).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import importlib.util
import re
from pathlib import Path

from nqf.core.version import __version__

# Folders of the nqf package whose files never change a stored number.
PRESENTATION = ("report", "cli")
# The paper's package, hashed with nqf when installed, and its files that never change a stored
# number: its figures (one file in each experiment's folder) and its HTML page
PAPER_PACKAGE = "nqf_paper"
PAPER_PRESENTATION = ("figures.py", "report_page.py")


# the paper package's convention: experiment E<n>'s own code lives in the folder e<n>_<topic>/
_EXPERIMENT_FOLDER = re.compile(r"e(\d+)_")


def folder_experiment(folder: str) -> str | None:
    """The experiment whose own code a folder of the paper's package holds, by the package's
    convention (``e5_architectures`` -> ``E5``); None for a shared folder (hashed for everyone)."""
    match = _EXPERIMENT_FOLDER.match(folder)
    return None if match is None else f"E{match.group(1)}"


def source_files(package_dir: Path, experiment: str | None = None) -> list[Path]:
    """The hashed files of one package folder (``nqf`` or the paper's), sorted by their path
    relative to ``package_dir``. ``experiment``: of the paper's experiment folders (``e<n>_*/``)
    only that experiment's (:func:`folder_experiment`; none for another name); None: all of them."""
    paper = package_dir.name == PAPER_PACKAGE
    files = []
    for path in package_dir.rglob("*.py"):
        rel = path.relative_to(package_dir)
        if "__pycache__" in rel.parts or (paper and rel.name in PAPER_PRESENTATION):
            continue
        if not paper and rel.parts[0] in PRESENTATION:
            continue
        owner = folder_experiment(rel.parts[0]) if paper and len(rel.parts) > 1 else None
        if experiment is not None and owner is not None and owner != experiment:  # another experiment's
            continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(package_dir).as_posix())


# line breaks other than "\n" (str.splitlines breaks at them, the lexer's rows do not): a file
# holding one is hashed whole
_OTHER_LINE_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
# Python's strings (any prefix, the four quotings, escapes) and comments, in one pass from the start:
# a "#" inside a string is consumed with the string, a quote inside a comment with the comment.
# Valid for the Python 3.11 grammar nqf is written in (an f-string holds no quote of its own kind).
_LEXEMES = re.compile(
    r"""(?P<string>(?:(?<![\w])[rRbBuUfF]{1,2})?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\""""
    r"""|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*"))|(?P<comment>\#[^\n]*)""",
    re.DOTALL,
)


def computing_text(source: bytes) -> bytes:
    """A Python file's bytes without what never changes a number: its comments, its bare string
    statements (docstrings, and any string that stands alone as a statement: a no-op; not an
    f-string, which may call), the lines that held nothing else and its blank lines. Everything
    else stays byte for byte (code, the other strings with their blank lines, spacing within a
    line). A file that is not UTF-8, or breaks lines otherwise than with "\\n", is returned whole.

    One regular expression over strings and comments (:data:`_LEXEMES`), the brackets counted
    between them: a fifth of the time of the same cut through ``tokenize`` and ``ast``."""
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError:
        return source
    if any(mark in text for mark in _OTHER_LINE_BREAKS):
        return source
    starts = [0, *(m.end() for m in re.finditer("\n", text))]  # each row's first offset

    def where(offset: int) -> tuple[int, int]:  # (row from 1, column)
        row = bisect.bisect_right(starts, offset) - 1
        return row + 1, offset - starts[row]

    spans = []  # ((row, column), (row, column)) of what is left out
    inside: set[int] = set()  # rows within a string that spans several: its blank lines are its value
    depth, position = 0, 0  # brackets open in the code before the lexeme
    for lexeme in _LEXEMES.finditer(text):
        code = text[position : lexeme.start()]
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        position = lexeme.end()
        (row, column), end = where(lexeme.start()), where(lexeme.end())
        if lexeme.lastgroup == "comment":
            spans.append(((row, column), end))
            continue
        inside.update(range(row + 1, end[0] + 1))
        line_start = starts[row - 1]
        line_end = text.find("\n", lexeme.end())
        after = text[lexeme.end() : len(text) if line_end < 0 else line_end].strip()
        statement = (
            depth == 0
            and not text[line_start : lexeme.start()].strip()
            and not (line_start >= 2 and text[line_start - 2] == "\\")  # not a continued line
            and (not after or after.startswith("#"))
        )
        literal = lexeme.group()
        if statement and "f" not in literal[: len(literal) - len(literal.lstrip("rRbBuUfF"))].lower():
            spans.append(((row, column), end))  # not an f-string, which may call
    cut: dict[int, list[tuple[int, int | None]]] = {}  # row -> character intervals left out
    for (start_row, start_col), (end_row, end_col) in spans:
        for row in range(start_row, end_row + 1):
            cut.setdefault(row, []).append((start_col if row == start_row else 0, end_col if row == end_row else None))
    kept = []
    for row, line in enumerate(text.splitlines(keepends=True), start=1):
        if row not in cut:
            if line.strip() or row in inside:  # blank lines of the code itself are left out
                kept.append(line)
            continue
        content = line.rstrip("\n")
        newline = line[len(content) :]
        for start, stop in sorted(cut[row], reverse=True):
            content = content[:start] + ("" if stop is None else content[stop:])
        if content.strip():
            kept.append(content.rstrip() + newline)
    return "".join(kept).encode("utf-8")


@functools.cache
def _text_digest(source: bytes) -> str:
    """SHA-256 (hex) of ``source``'s computing text, once per process for the same bytes: the
    identities of the whole tree and of each experiment read the same files."""
    return hashlib.sha256(computing_text(source)).hexdigest()


def code_hash(*package_dirs: Path, experiment: str | None = None) -> str:
    """SHA-256 (hex) over (relative path, NUL, SHA-256 of its computing text (:func:`computing_text`))
    of each hashed file of each package folder in turn (the paper's paths prefixed by its name);
    ``experiment``: the files its records depend on (:func:`source_files`)."""
    digest = hashlib.sha256()
    for package_dir in package_dirs:
        prefix = f"{PAPER_PACKAGE}/" if package_dir.name == PAPER_PACKAGE else ""
        for path in source_files(package_dir, experiment):
            text = _text_digest(path.read_bytes())
            digest.update((prefix + path.relative_to(package_dir).as_posix()).encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


def package_dirs() -> tuple[Path, ...]:
    """The folders the identity hashes: nqf's, and the paper's package where it is installed
    (found without importing it)."""
    found = importlib.util.find_spec(PAPER_PACKAGE)
    paper = () if found is None or found.origin is None else (Path(found.origin).resolve().parent,)
    return (Path(__file__).resolve().parent.parent, *paper)


@functools.cache
def code_identity(experiment: str | None = None) -> str:
    """``<version>+code.<first 16 hex of code_hash>`` of the code that is running (once per process
    and experiment): of every hashed file (None), or of those experiment ``experiment``'s records
    depend on: nqf's, the paper's shared modules and that experiment's own folder, so that an edit
    of one experiment recomputes that experiment's runs alone."""
    return f"{__version__}+code.{code_hash(*package_dirs(), experiment=experiment)[:16]}"


def check_same_code(driver_code: str) -> None:
    """Refuse to compute in a worker whose nqf differs from the driver's.

    Records are keyed by the driver's code identity; a worker on other code (another
    checkout on a cluster node, or files edited while a run was going) would store its
    numbers under a key that claims they came from the driver's code.
    """
    from nqf.core.errors import NqfError

    mine = code_identity()
    if mine != driver_code:
        raise NqfError(
            f"this worker runs nqf {mine} but the driver runs {driver_code}: every worker needs the same nqf "
            "source (install the same checkout everywhere, and do not edit it while a run is going)"
        )
