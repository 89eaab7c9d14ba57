"""Package namespaces that import on first use (PEP 562): a package's ``__init__`` names what it
re-exports and from which submodule, and importing one submodule of the package does not
import its siblings (no import circles through the package, no import cost for names unused).

A package without re-exports gets only the lazy submodules (:func:`lazy_submodules`).

Usage in a package ``__init__``::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {"build": ("data_matrices", "flow_data")})

with the eager imports repeated under ``if TYPE_CHECKING:`` for type checkers and editors.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """(``__getattr__``, ``__dir__``, ``__all__``) of ``package`` re-exporting, from each of its
    submodules (keys, relative names), the names listed."""
    origin = {name: submodule for submodule, names in exports.items() for name in names}
    public = sorted(origin)

    submodules = lazy_submodules(package)

    def __getattr__(name: str) -> Any:
        submodule = origin.get(name)
        if submodule is None:
            return submodules(name)
        return getattr(importlib.import_module(f"{package}.{submodule}"), name)

    def __dir__() -> list[str]:
        return sorted(set(public) | set(exports))

    return __getattr__, __dir__, public


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
