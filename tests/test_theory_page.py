"""docs/theory.md is the theory page that the code cites: every "docs/theory.md section N"
citation in the repository (docstrings, comments, report strings, tests, pages) must name a
section heading that the page has, and no file may cite a theory page outside the repository.

Citations are read as the code writes them: "section 3", "sections 2 and 4", "sections 2-4",
"sections 1, 2, 3 and 5", "section 4's", possibly broken across lines (a docstring, a comment
continued with #, a string continued on the next line). A subsection number (3.5) must match a
heading of that number.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "theory.md"
SCANNED = ("src", "tests", "docs", "benchmarks", "examples", "scripts", "README.md", "CONTRIBUTING.md")
SUFFIXES = {".py", ".md", ".toml", ".txt", ".rst", ".cff", ".cfg"}

_NUMBER = r"\d+(?:\.\d+)*"
CITATION = re.compile(
    r"docs/theory\.md(?:'s)?[\s#\"']*sections?\s+"
    rf"(?P<numbers>{_NUMBER}(?:\s*(?:,|-|–|and|to)\s*{_NUMBER})*)"
)
HEADING = re.compile(rf"^#{{2,6}}\s+(?P<number>{_NUMBER})\.?\s+(?P<title>.+)$", re.MULTILINE)
# the page that lived outside the repository, spelled so that this file does not match itself
OUTSIDE_PAGE = re.compile(r"\b" + "THEORY" + r"\.md")

# The top-level sections and their topics: the numbers are what the code cites.
TOPICS = {
    "1": "interchangeable units",
    "2": "closes on m",
    "3": "lotka-volterra",
    "4": "power laws",
    "5": "confirmation",
}


def _files():
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            yield path
        elif path.is_dir():
            for file in sorted(path.rglob("*")):
                if file.is_file() and file.suffix in SUFFIXES and "__pycache__" not in file.parts:
                    yield file


def _texts():
    for file in _files():
        try:
            yield file, file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue


def _headings() -> dict[str, str]:
    return {m["number"]: m["title"].strip() for m in HEADING.finditer(PAGE.read_text(encoding="utf-8"))}


def _numbers(spec: str) -> list[str]:
    """'2, 3 and 5' -> ['2', '3', '5']; '2-4' -> ['2', '3', '4'] (ranges of top-level sections)."""
    out: list[str] = []
    for part in re.split(r"\s*(?:,|and)\s*", spec):
        bounds = re.split(r"\s*(?:-|–|to)\s*", part)
        if len(bounds) == 2 and bounds[0].isdigit() and bounds[1].isdigit():
            out.extend(str(k) for k in range(int(bounds[0]), int(bounds[1]) + 1))
        else:
            out.extend(b for b in bounds if b)
    return out


def _citations():
    """(file relative to the root, line, cited section number) for every citation."""
    for file, text in _texts():
        for m in CITATION.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            for number in _numbers(m["numbers"]):
                yield file.relative_to(ROOT).as_posix(), line, number


def test_page_has_the_five_sections_and_cites_the_paper():
    headings = _headings()
    for number, topic in TOPICS.items():
        assert number in headings, f"docs/theory.md has no section {number} ({topic})"
        assert topic in headings[number].lower(), (number, headings[number])
    text = PAGE.read_text(encoding="utf-8")
    assert "arXiv:2608.13335" in text
    assert "Neural Quadratic Forms: A Unified Minimal Model for Sudden Learning and Scaling Laws" in text


def test_every_cited_section_exists():
    headings = _headings()
    citations = list(_citations())
    # the code cites the page in dozens of places: finding few means the pattern broke
    assert len(citations) >= 50, len(citations)
    assert {number for _, _, number in citations} >= set(TOPICS)
    missing = [f"{path}:{line}: section {number}" for path, line, number in citations if number not in headings]
    assert not missing, "citations of sections docs/theory.md does not have:\n" + "\n".join(missing)


def test_nothing_cites_a_theory_page_outside_the_repository():
    stale = [
        f"{file.relative_to(ROOT).as_posix()}:{text.count(chr(10), 0, m.start()) + 1}"
        for file, text in _texts()
        for m in OUTSIDE_PAGE.finditer(text)
    ]
    assert not stale, "cite docs/theory.md instead:\n" + "\n".join(stale)


def test_citation_parser():
    assert _numbers("3") == ["3"]
    assert _numbers("2, 3 and 5") == ["2", "3", "5"]
    assert _numbers("1, 2, 3 and 5") == ["1", "2", "3", "5"]
    assert _numbers("2-4") == ["2", "3", "4"]
    assert _numbers("3.5") == ["3.5"]
    page = "docs/theory.md"  # a variable, so that this file cites nothing itself
    sample = f"({page}\n    # sections 2 and 4), {page} section 4's, {page}\n    section 3.5"
    assert [m["numbers"] for m in CITATION.finditer(sample)] == ["2 and 4", "4", "3.5"]
