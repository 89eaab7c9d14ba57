r"""Adam, ``optax.adam(lr, b1=beta)`` (b2 = 0.999). Its update is elementwise, so it does not
commute with W -> W O and its quadratic model does not close on M: ``nqf compare`` draws GD's
M-flow beside it as a reference."""

from __future__ import annotations

from nqf.optimizers.base import AbstractOptimizer


class Adam(AbstractOptimizer):
    name = "adam"
    label = "Adam"
    colour = 3
    default_beta = 0.9
    takes_eps = True

    def transform(self, lr, beta, eps):
        import optax

        return optax.adam(lr, b1=beta, **({} if eps is None else {"eps": eps}))
