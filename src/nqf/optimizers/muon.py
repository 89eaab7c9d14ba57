r"""Muon, ``optax.contrib.muon(lr, beta=beta)`` with W declared a matrix: the whole d x n W is
orthogonalised by Newton-Schulz (never the Adam fallback optax uses for non-2-D leaves). Its
update commutes with W -> W O (E6's closure claims); nqf gives it no M-flow of its own:
``nqf compare`` draws GD's beside it.

optax normalises the momentum by (||mu||_F + eps) before Newton-Schulz, so while ||mu|| << eps
(tiny sigma0) the update is proportional to the momentum rather than orthogonalised (fast
exponential growth instead of linear); measured on the staircase at lr 0.01 this delays the
switch-ons by at most one step down to sigma0 = 1e-20. ``eps`` can lower it."""

from __future__ import annotations

from nqf.optimizers.base import AbstractOptimizer


class Muon(AbstractOptimizer):
    name = "muon"
    label = "Muon"
    colour = 4
    default_beta = 0.95
    takes_eps = True
    equivariant = True

    def transform(self, lr, beta, eps):
        import optax

        matrix = optax.contrib.MuonDimensionNumbers(reduction_axis=0, output_axis=1)
        return optax.contrib.muon(
            lr, beta=beta, muon_weight_dimension_numbers=matrix, **({} if eps is None else {"eps": eps})
        )
