"""The package's floors: each stage imports only the stages below it, and no module imports
itself back through others (no circles, lazy imports inside functions included).

Floors, lowest first (a package may import its own floor and the ones below)::

    core < optimizers < architectures < theory < training < comparison < store < executors
         < report < scans < cli < demo < __main__

The paper's reproduction (experiments, their figures, the ``reproduce`` driver) is a package
of its own, ``nqf_paper``, a user of nqf: it imports nqf's public modules and names only, and
of nqf only the command line (``nqf reproduce``, ``nqf report``) loads it, lazily.

``nqf/__init__.py`` sits above everything (it re-exports the public API lazily);
``nqf/__main__.py`` (``python -m nqf``) only runs the command line.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import nqf

PACKAGE = Path(nqf.__file__).resolve().parent
FLOORS = (
    "core",
    "optimizers",
    "architectures",
    "theory",
    "training",
    "comparison",
    "store",
    "executors",
    "report",
    "scans",
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
    """A module's ``_private`` names, and a package's ``_private`` modules, stay their own: what
    another module needs is public (relative imports included)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").startswith("nqf")):
                continue
            module = "." * node.level + (node.module or "")
            if any(part.startswith("_") and not part.startswith("__") for part in module.split(".")):
                found.append(f"{path.relative_to(PACKAGE)}: from {module} import ... (a private module)")
            found += [
                f"{path.relative_to(PACKAGE)}: from {module} import {alias.name}"
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    assert found == [], "\n".join(found)


PAPER = Path(importlib.util.find_spec("nqf_paper").origin).resolve().parent


def _absolute_imports(path: Path) -> set[str]:
    """The absolute module names ``path`` imports (``import a.b``, ``from a.b import c``), anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_only_the_command_line_loads_the_paper():
    """Below the command line, nqf never imports the paper's package (nqf.cli.reproduce does, lazily)."""
    found = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "cli"
        for name in _absolute_imports(path)
        if name.split(".")[0] == "nqf_paper"
    ]
    assert found == [], "\n".join(found)


def test_the_paper_uses_nqfs_public_names_only():
    """The paper's package is written against nqf's public API: no ``_private`` module or name of nqf."""
    found = [
        f"{path.relative_to(PAPER)}: {name}"
        for path in sorted(PAPER.rglob("*.py"))
        for name in _absolute_imports(path)
        if name.split(".")[0] == "nqf" and any(part.startswith("_") for part in name.split(".")[1:])
    ]
    assert found == [], "\n".join(found)


def _paper_imports(path: Path) -> set[str]:
    """The paper's modules ``path`` (a file of the paper's package) imports, relative imports resolved."""
    rel = path.relative_to(PAPER).with_suffix("").parts
    package = ("nqf_paper", *rel[:-1]) if rel[-1] != "__init__" else ("nqf_paper", *rel[:-1])
    found = {name for name in _absolute_imports(path) if name.split(".")[0] == "nqf_paper"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)]
            found.add(".".join((*base, *([node.module] if node.module else []))))
    return found


def test_an_experiment_imports_the_shared_modules_and_its_own_folder_only():
    """The store keys an experiment's records by nqf, the paper's shared modules and that
    experiment's own folder (``nqf.store.code``): no experiment may import another's folder."""
    found = [
        f"{path.relative_to(PAPER)}: {name}"
        for path in sorted(PAPER.glob("e[0-9]*_*/*.py"))
        for name in _paper_imports(path)
        if len(name.split(".")) > 1
        and name.split(".")[1][:1] == "e"
        and name.split(".")[1][1:2].isdigit()
        and name.split(".")[1] != path.relative_to(PAPER).parts[0]
    ]
    assert found == [], "\n".join(found)
    assert len(list(PAPER.glob("e[0-9]*_*/__init__.py"))) == 7


def test_every_experiment_lives_in_the_folder_its_name_keys():
    """The store finds an experiment's own code by its name (E<n> in e<n>_*/, ``folder_experiment``):
    an experiment registered under another name, or living elsewhere, would have its own folder's
    edits recompute nothing."""
    from nqf.store.code import folder_experiment
    from nqf_paper.registry import EXPERIMENTS

    for name, experiment in EXPERIMENTS.items():
        folder = experiment.config_type.__module__.split(".")[1]
        assert folder_experiment(folder) == name, (name, folder)
        runs = experiment.run_specs(experiment.config_type.quick())
        computes = [getattr(spec.compute, "func", spec.compute).__module__ for spec in runs]  # a partial's function
        for ref in (experiment.figures, *computes):
            assert ref is None or ref.split(".")[1] == folder, (name, ref)


LAZY_PACKAGES = ("nqf", "nqf_paper", "nqf.theory.lotka_volterra", "nqf.theory.predict")
EAGER_PACKAGES = ("nqf.theory.data_matrices", "nqf.theory.flow", "nqf.theory.departure")


@pytest.mark.parametrize("package", LAZY_PACKAGES + EAGER_PACKAGES)
def test_every_name_a_package_exports_resolves(package):
    """The lazy namespaces (nqf.core.lazy) name real objects of their submodules; a name nobody
    exports is an AttributeError."""
    import importlib

    module = importlib.import_module(package)
    if package in LAZY_PACKAGES:
        assert module.__all__, package
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{package}.{name}"
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        module.nothing_here  # noqa: B018


def test_a_lazy_namespace_is_its_type_checking_block(tmp_path, monkeypatch):
    """A planted package: the names its `if TYPE_CHECKING:` block imports as themselves (relative or
    absolute) are its exports, loaded on first use; other imports there are not; none is an error."""
    import importlib
    import sys

    package = tmp_path / "planted_lazy"
    package.mkdir()
    (package / "things.py").write_text("LOADED = True\ndef thing():\n    return 1\nclass Other: ...\n")
    (package / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from nqf.core.lazy import lazy_exports\n"
        "__getattr__, __dir__, __all__ = lazy_exports(__name__)\n"
        "if TYPE_CHECKING:\n"
        "    from .things import thing as thing\n"
        "    from planted_lazy.things import Other as Other\n"
        "    from planted_lazy.things import LOADED\n"  # not a re-export (no `as LOADED`)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("planted_lazy")
        assert module.__all__ == ["Other", "thing"] and "planted_lazy.things" not in sys.modules
        assert module.thing() == 1 and module.Other.__module__ == "planted_lazy.things"
        assert [name for name in dir(module) if not name.startswith("__")] == ["Other", "thing"]
        with pytest.raises(AttributeError, match="has no attribute 'LOADED'"):
            module.LOADED  # noqa: B018
        (package / "__init__.py").write_text(
            "from nqf.core.lazy import lazy_exports\n__getattr__, __dir__, __all__ = lazy_exports(__name__)\n"
        )
        sys.modules.pop("planted_lazy")
        with pytest.raises(ImportError, match="re-exports nothing"):
            importlib.import_module("planted_lazy")
    finally:
        for name in [name for name in sys.modules if name.split(".")[0] == "planted_lazy"]:
            del sys.modules[name]
