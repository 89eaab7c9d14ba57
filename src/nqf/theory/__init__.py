"""Stage 2, the theory: from A(x) and the data to predicted training. A package per concept:

- ``data_matrices``: the statistics of A(x) over the data (C, K[M], G(M), the loss): the
  protocol every implementation meets, samples, chunks, moments, the population closed form;
- ``flow``: the exact maps of each optimizer on M = W W^T, their adaptive jumps, the
  gradient flow, the stability bound, and the numpy engine;
- ``lotka_volterra``: the modes (the shared eigenbasis), the Lotka-Volterra system, its
  closed forms, its discrete maps and its ODE solves;
- ``singular_limit`` (module): the limit m0 -> 0, step times and plateaus;
- ``scaling`` (module): power laws over many modes;
- ``predict``: all of the above for one configuration, or a grid of them;
- ``departure``: where the network leaves the quadratic model, and the corrected steps.

Imports only ``core`` and ``architectures`` (the stage below).

The modules of the flat layout before these packages (``nqf.theory.flow_maps``,
``nqf.theory.lv_solve``, ...) still import, as the module that replaced them, with a
``DeprecationWarning`` naming the new path (:data:`MOVED`); they go in the next release.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

from nqf.core.lazy import lazy_submodules

# old module (nqf.theory.<old>) -> where it lives now (nqf.theory.<new>); the old modules whose
# name is now a package (data_matrices, flow, lotka_volterra, predict, departure) need no entry:
# the package re-exports what the module did
MOVED = {
    "data_protocol": "data_matrices.protocol",
    "sample_matrices": "data_matrices.samples",
    "sample_checks": "data_matrices.checks",
    "population": "data_matrices.population",
    "moments": "data_matrices.moments",
    "chunked": "data_matrices.chunked",
    "flow_base": "flow.base",
    "flow_maps": "flow.maps",
    "flow_continuous": "flow.continuous",
    "flow_stability": "flow.stability",
    "jumps": "flow.jumps",
    "host_flow": "flow.host",
    "lv_solve": "lotka_volterra.solve",
    "lv_kvaerno": "lotka_volterra.kvaerno",
    "lv_logistic": "lotka_volterra.logistic",
    "lv_maps": "lotka_volterra.maps",
    "modes": "lotka_volterra.modes",
    "predict_stages": "predict.stages",
    "predict_init": "predict.init",
    "prediction": "predict.result",
    "predict_grid": "predict.grid",
    "tables": "predict.tables",
    "departure_path": "departure.path",
    "departure_plateaus": "departure.plateaus",
    "corrections": "departure.corrections",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``nqf.theory.<old>`` of :data:`MOVED` as the module that replaced it (the same
    module object), warning once per process and module."""

    def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = f"{__name__}.{MOVED[spec.name.rpartition('.')[2]]}"
        warnings.warn(
            f"{spec.name} moved to {new}; the old path goes in the next nqf release", DeprecationWarning, stacklevel=2
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its new name."""


if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(MovedModuleFinder())


__getattr__ = lazy_submodules(__name__)  # nqf.theory.flow, ... on first use
