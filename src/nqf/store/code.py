"""What identifies the code that computed a result: a hash of the source files that compute it.

A record is keyed by its config and by this identity, not by the package version, so a
changed line of the theory (or of training, or of an experiment's run) recomputes, and an
unchanged tree reuses its records whatever the version says. The hash is deliberately
blunt: any file that can change a number, every byte of its code, strings, spacing and
blank lines included; only what never changes a number is left out of it: comments and
docstrings (:func:`computing_text`), so that a comment or a docstring edited anywhere
recomputes nothing.

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

import ast
import functools
import hashlib
import importlib.util
import io
import json
import os
import re
import tempfile
import tokenize
from pathlib import Path

from nqf.core.version import __version__

# Folders of the nqf package whose files never change a stored number.
PRESENTATION = ("report", "cli")
# The paper's package, hashed with nqf when installed, and its files that never change a stored
# number: its figures (one file in each experiment's folder) and its HTML page
PAPER_PACKAGE = "nqf_paper"
PAPER_PRESENTATION = ("figures.py", "report_page.py")


def experiment_folder(experiment: str) -> str | None:
    """The folder of the paper's package that holds experiment ``experiment``'s own code, by the
    package's convention: ``E<n>`` in ``e<n>_<topic>/``; None for any other name (a sweep, a test's)."""
    match = re.fullmatch(r"E(\d+)", experiment)
    return None if match is None else f"e{match.group(1)}_"


def source_files(package_dir: Path, experiment: str | None = None) -> list[Path]:
    """The hashed files of one package folder (``nqf`` or the paper's), sorted by their path
    relative to ``package_dir``. ``experiment``: of the paper's experiment folders (``e<n>_*/``)
    only that experiment's (:func:`experiment_folder`; none for another name); None: all of them."""
    paper = package_dir.name == PAPER_PACKAGE
    own = None if experiment is None else experiment_folder(experiment)
    files = []
    for path in package_dir.rglob("*.py"):
        rel = path.relative_to(package_dir)
        if "__pycache__" in rel.parts or (paper and rel.name in PAPER_PRESENTATION):
            continue
        if not paper and rel.parts[0] in PRESENTATION:
            continue
        if paper and experiment is not None and len(rel.parts) > 1 and re.match(r"e\d+_", rel.parts[0]):
            if own is None or not rel.parts[0].startswith(own):  # another experiment's own code
                continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(package_dir).as_posix())


# line breaks other than "\n" (str.splitlines breaks at them, tokenize's readline does not): a file
# holding one is hashed whole
_OTHER_LINE_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def computing_text(source: bytes) -> bytes:
    """A Python file's bytes without what never changes a number: its comments, its docstrings
    (the first statement of a module, class or function body when it is a string), the lines that
    held nothing else and its blank lines. Everything else stays byte for byte (code, the other
    strings with their blank lines, spacing within a line). A file that does not parse, or that
    breaks lines otherwise than with "\\n", is returned whole."""
    try:
        text = source.decode("utf-8")
        if any(mark in text for mark in _OTHER_LINE_BREAKS):  # rows counted otherwise by ast, tokenize and splitlines
            return source
        tree = ast.parse(text)
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, UnicodeDecodeError, ValueError, tokenize.TokenError):
        return source
    lines = text.splitlines(keepends=True)

    def column(row: int, offset: int) -> int:  # ast's UTF-8 byte offset -> a character column
        return len(lines[row - 1].encode("utf-8")[:offset].decode("utf-8", errors="ignore"))

    spans = [(token.start, token.end) for token in tokens if token.type == tokenize.COMMENT]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                end_row, end_offset = first.end_lineno or first.lineno, first.end_col_offset or 0
                spans.append(
                    ((first.lineno, column(first.lineno, first.col_offset)), (end_row, column(end_row, end_offset)))
                )
    cut: dict[int, list[tuple[int, int | None]]] = {}  # row (1-based) -> character intervals removed
    for (start_row, start_col), (end_row, end_col) in spans:
        for row in range(start_row, end_row + 1):
            cut.setdefault(row, []).append((start_col if row == start_row else 0, end_col if row == end_row else None))
    # rows inside a token that spans several (a triple-quoted string): their blank lines are its value
    inside = {row for token in tokens for row in range(token.start[0] + 1, token.end[0] + 1)}
    kept = []
    for row, line in enumerate(lines, start=1):
        if row not in cut:
            if line.strip() or row in inside:  # blank lines of the code itself are left out
                kept.append(line)
            continue
        content = line.rstrip("\r\n")
        newline = line[len(content) :]
        for start, end in sorted(cut[row], reverse=True):
            content = content[:start] + ("" if end is None else content[end:])
        if content.strip():
            kept.append(content.rstrip() + newline)
    return "".join(kept).encode("utf-8")


def code_hash(*package_dirs: Path, experiment: str | None = None) -> str:
    """SHA-256 (hex) over (relative path, NUL, SHA-256 of its computing text (:func:`computing_text`))
    of each hashed file of each package folder in turn (the paper's paths prefixed by its name);
    ``experiment``: the files its records depend on (:func:`source_files`)."""
    files = [
        (
            (f"{PAPER_PACKAGE}/" if package_dir.name == PAPER_PACKAGE else "")
            + path.relative_to(package_dir).as_posix(),
            path,
        )
        for package_dir in package_dirs
        for path in source_files(package_dir, experiment)
    ]
    texts = _text_digests([path.read_bytes() for _, path in files])
    digest = hashlib.sha256()
    for (name, _), text in zip(files, texts, strict=True):
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


# The SHA-256 of a file's computing text, by the SHA-256 of its bytes, kept beside the compilation
# cache: reading the files and hashing their bytes takes milliseconds, finding their comments and
# docstrings (tokenize and ast) about a second for the whole package, so it is done for the files
# whose bytes are new, and a process started on an unchanged tree reads it from here.
_TEXT_DIGESTS = "code-text-digests.json"


def _text_digests(sources: list[bytes]) -> list[str]:
    """The SHA-256 (hex) of each source's computing text, through the file of _TEXT_DIGESTS when
    the cache directory has one (content-addressed: a digest is only ever looked up by the bytes
    it was computed from); the file is rewritten with the current sources' digests when any was new."""
    from nqf.core.cache import cache_dir

    folder = cache_dir()
    known: dict[str, str] = {}
    if folder is not None:
        try:
            loaded = json.loads((folder / _TEXT_DIGESTS).read_text())
            known = {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, str)}
        except (OSError, ValueError, AttributeError):  # none yet, unreadable, not a table: computed afresh
            known = {}
    raw = [hashlib.sha256(source).hexdigest() for source in sources]
    texts = [
        known.get(key) or hashlib.sha256(computing_text(source)).hexdigest()
        for key, source in zip(raw, sources, strict=True)
    ]
    if folder is not None and any(key not in known for key in raw):
        temporary = None
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            with tempfile.NamedTemporaryFile("w", dir=folder, prefix=f".{_TEXT_DIGESTS}.", delete=False) as out:
                temporary = out.name
                json.dump(dict(zip(raw, texts, strict=True)), out)
            os.replace(temporary, folder / _TEXT_DIGESTS)
        except OSError:  # a read-only cache: computed again next time
            if temporary is not None and os.path.exists(temporary):
                os.unlink(temporary)
    return texts


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
