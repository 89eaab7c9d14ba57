"""The package's floors: each stage imports only the stages below it, and no module imports
itself back through others (no circles, lazy imports inside functions included).

Floors, lowest first (a package may import its own floor and the ones below)::

    core < architectures < theory < training < comparison < store < executors
         < report < scans < paper < cli < demo < __main__

``paper`` (the reproduction of the paper: experiments, their figures, the ``reproduce``
driver) sits above the library: only the command line imports it, lazily.

``nqf/__init__.py`` sits above everything (it re-exports the public API lazily);
``nqf/__main__.py`` (``python -m nqf``) only runs the command line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nqf

PACKAGE = Path(nqf.__file__).resolve().parent
FLOORS = (
    "core",
    "architectures",
    "theory",
    "training",
    "comparison",
    "store",
    "executors",
    "report",
    "scans",
    "paper",
    "cli",
    "demo",
    "__main__",
)


def _module_name(path: Path) -> tuple[str, bool]:
    parts = ("nqf", *path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _imports(path: Path) -> set[str]:
    """Absolute names of the nqf modules (or packages) that ``path`` imports, anywhere in it."""
    module, is_package = _module_name(path)
    package = module if is_package else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from pkg import sub` imports the submodule pkg.sub when there is one
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if _exists(sub) else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "nqf" or name.startswith("nqf.")}


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    return {_module_name(path)[0]: _imports(path) for path in sorted(PACKAGE.rglob("*.py"))}


def _floor(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_package_has_a_floor():
    unknown = {_floor(m) for m in _graph()} - set(FLOORS) - {None}
    assert not unknown, f"packages without a floor in tests/test_layering.py: {sorted(unknown)}"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    upward = []
    for module, targets in graph.items():
        here = _floor(module)
        if here is None:
            continue
        for target in targets:
            there = _floor(target)
            if there is None:
                upward.append(f"{module} imports the top-level package nqf")
            elif FLOORS.index(there) > FLOORS.index(here):
                upward.append(f"{module} ({here}) imports {target} ({there})")
    return sorted(upward)


def test_no_stage_imports_a_stage_above_it():
    upward = upward_imports(_graph())
    assert not upward, "\n".join(upward)


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    # `from nqf.cli import app` is an edge into the package nqf.cli (its __init__), which is
    # how a command module and the package that imports it close a circle.
    index, low, on_stack, stack, circles = {}, {}, set(), [], []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                circles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return circles


def test_no_import_circles():
    circles = import_circles(_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


@pytest.mark.parametrize(
    ("module", "target"),
    [("nqf.theory._planted", "nqf.comparison.compare"), ("nqf.core._planted", "nqf.architectures.architecture")],
)
def test_the_checks_catch_a_planted_upward_import_and_circle(module, target):
    """Both checks fail on a planted upward import and a planted circle (they cannot pass vacuously)."""
    graph = _graph()
    assert upward_imports({**graph, module: {target}}) == [
        f"{module} ({_floor(module)}) imports {target} ({_floor(target)})"
    ]
    planted = {**graph, module: {target}, target: {*graph[target], module}}
    assert any(module in circle and target in circle for circle in import_circles(planted))


def test_no_private_name_is_imported_from_another_module():
    """A module's ``_private`` names stay its own: what another module needs is public (issue 21:
    there were 53 such imports, 9 of them of flow_base's helpers by flow_maps)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "nqf":
                found += [
                    f"{path.relative_to(PACKAGE)}: from {node.module} import {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert found == [], "\n".join(found)


THEORY_PACKAGES = ("data_matrices", "flow", "lotka_volterra", "predict", "departure")


@pytest.mark.parametrize("package", THEORY_PACKAGES)
def test_every_name_a_theory_package_exports_resolves(package):
    """The packages' lazy namespaces (nqf.core.lazy) name real objects of their submodules."""
    import importlib

    module = importlib.import_module(f"nqf.theory.{package}")
    assert module.__all__, package
    for name in module.__all__:
        assert getattr(module, name) is not None, f"nqf.theory.{package}.{name}"
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        module.nothing_here  # noqa: B018


def test_the_flat_layouts_module_paths_still_import_with_a_deprecation_warning():
    """nqf.theory.<old> (before the concept packages) is the module that replaced it, and says so."""
    import subprocess
    import sys

    from nqf.theory import MOVED

    code = (
        "import importlib, warnings, sys\n"
        "from nqf.theory import MOVED\n"
        "for old, new in MOVED.items():\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module(f'nqf.theory.{old}')\n"
        "    assert module is importlib.import_module(f'nqf.theory.{new}'), old\n"
        "    messages = [str(w.message) for w in caught if w.category is DeprecationWarning]\n"
        "    assert messages == [f'nqf.theory.{old} moved to nqf.theory.{new}; the old path goes in the next nqf "
        "release'], (old, messages)\n"
        "print(len(MOVED))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(len(MOVED)) == "25"
    for old in MOVED:  # the old files are gone from the package: only the finder answers
        assert not (PACKAGE / "theory" / f"{old}.py").exists()
