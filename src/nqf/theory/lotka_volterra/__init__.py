r"""Modes and the Lotka-Volterra reduction (docs/theory.md section 3).

- ``modes``: the shared eigenbasis of the data matrices and the LV coefficients
  (:func:`mode_basis`, :class:`ModeBasis`);
- ``system``: the LV system, its fixed point, the logistic and staircase closed forms and
  gradient flow's switch slope (each optimizer's own: ``AbstractClosedOptimizer.switch_slope``);
- ``maps``: the optimizer's own discrete map restricted to diagonal M (:func:`lv_occupations`);
- ``solve``: the gradient-flow ODE in log occupations (diffrax), ``kvaerno`` its numpy
  solver (nothing compiled), ``logistic`` the independent-modes closed form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nqf.core.lazy import lazy_exports

# lazy: nqf.theory.singular_limit imports the system alone (the solvers import it back)
__getattr__, __dir__, __all__ = lazy_exports(__name__)

if TYPE_CHECKING:  # the names it re-exports, each imported on first use (nqf.core.lazy reads this block)
    from nqf.theory.lotka_volterra.maps import lv_occupations as lv_occupations
    from nqf.theory.lotka_volterra.modes import ModeBasis as ModeBasis
    from nqf.theory.lotka_volterra.modes import mode_basis as mode_basis
    from nqf.theory.lotka_volterra.solve import LVSolution as LVSolution
    from nqf.theory.lotka_volterra.solve import solve_lv as solve_lv
    from nqf.theory.lotka_volterra.solve import switch_times as switch_times
    from nqf.theory.lotka_volterra.system import LotkaVolterra as LotkaVolterra
    from nqf.theory.lotka_volterra.system import equilibrium as equilibrium
    from nqf.theory.lotka_volterra.system import excess_loss as excess_loss
    from nqf.theory.lotka_volterra.system import fixed_point as fixed_point
    from nqf.theory.lotka_volterra.system import logistic_occupation as logistic_occupation
    from nqf.theory.lotka_volterra.system import logistic_switch_time as logistic_switch_time
    from nqf.theory.lotka_volterra.system import staircase_switch_time as staircase_switch_time
    from nqf.theory.lotka_volterra.system import switch_slope_continuous as switch_slope_continuous
