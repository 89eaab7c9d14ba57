"""Package namespaces that import on first use (PEP 562), for the packages whose names cannot all
be imported when the package is: ``nqf`` itself (``nqf --help`` starts without JAX), those with
modules the command line reads before JAX starts (``nqf_paper``, ``nqf.theory.predict``), and
``nqf.theory.lotka_volterra`` (``nqf.theory.singular_limit`` imports its system, its solvers
import ``singular_limit``). Importing one submodule of such a package does not import its
siblings; the other packages import what they re-export.

The package lists each name it re-exports once, as PEP 484's explicit re-export in its
``if TYPE_CHECKING:`` block, the form type checkers and editors read::

    from typing import TYPE_CHECKING

    from nqf.core.lazy import lazy_exports

    __getattr__, __dir__, __all__ = lazy_exports(__name__)

    if TYPE_CHECKING:
        from nqf_paper.registry import EXPERIMENTS as EXPERIMENTS

:func:`lazy_exports` reads that block (its ``from MODULE import NAME as NAME`` lines) and imports
each name from its module on first use. A package without re-exports gets only the lazy
submodules (:func:`lazy_submodules`).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """(``__getattr__``, ``__dir__``, ``__all__``) of ``package``, re-exporting the names its
    ``if TYPE_CHECKING:`` block imports as themselves."""
    origin = type_checking_exports(package)
    public = sorted(origin)
    submodules = lazy_submodules(package)

    def __getattr__(name: str) -> Any:
        module = origin.get(name)
        if module is None:
            return submodules(name)  # nqf.theory, ...; AttributeError for anything else
        # not cached in the package: a name may also be a submodule's (nqf_paper.reproduce), which
        # the import system puts there
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        """The public names and the package's dunders (``__version__``, ...), not the names its
        ``__init__`` imports for itself (``TYPE_CHECKING``, ``lazy_exports``, ...)."""
        dunders = {name for name in vars(sys.modules[package]) if name.startswith("__") and name.endswith("__")}
        return sorted(set(public) | dunders)

    return __getattr__, __dir__, public


def type_checking_exports(package: str) -> dict[str, str]:
    """name -> absolute module of each ``from MODULE import NAME as NAME`` in the ``if TYPE_CHECKING:``
    block of ``package``'s ``__init__`` (read from its source, while or after it executes)."""
    spec = sys.modules[package].__spec__ if package in sys.modules else importlib.util.find_spec(package)
    get_data = getattr(spec.loader, "get_data", None) if spec is not None else None
    if spec is None or spec.origin is None or get_data is None:
        raise ImportError(f"{package}: no source to read its re-exports from")
    source = get_data(spec.origin)  # bytes: the loader's get_source would import tokenize (1 ms of `import nqf`)
    origin = {}
    for block in ast.parse(source, spec.origin).body:
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING":
            for node in block.body:
                if isinstance(node, ast.ImportFrom):
                    module = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    origin.update({alias.name: module for alias in node.names if alias.asname == alias.name})
    if not origin:
        raise ImportError(f"{package}: its `if TYPE_CHECKING:` block re-exports nothing (`from M import X as X`)")
    return origin


def lazy_submodules(package: str) -> Callable[[str], Any]:
    """A package's ``__getattr__`` that imports its submodules on attribute access, so that
    ``import nqf; nqf.theory.flow.gd_map`` works without importing ``nqf.theory.flow`` first."""

    def __getattr__(name: str) -> Any:
        if not name.startswith("__") and name.isidentifier():
            try:
                found = importlib.util.find_spec(f"{package}.{name}") is not None
            except (ImportError, ValueError):
                found = False
            if found:
                return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
