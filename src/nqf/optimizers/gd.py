r"""Gradient descent on the full batch: W+ = W - lr grad_W L (``optax.sgd(lr)``).

On the quadratic model grad_W L = 2 G(M) W, so W+ = (I - 2 lr G(M)) W and M+ = B M B with
B = I - 2 lr G(M) (``nqf.theory.flow``). A mode with eigenvalue c > 0 of -G(0) grows by
1 + 2 lr c a step near M = 0; along a direction of curvature lambda the step is stable while
lr lambda < 2.
"""

from __future__ import annotations

from nqf.optimizers.base import AbstractClosedOptimizer, Batch


class GD(AbstractClosedOptimizer):
    name = "gd"
    label = "GD"
    colour = 0
    batch: Batch = "never"
    equivariant = True
    mean_flow = "gd"

    def transform(self, lr, beta, eps):
        import optax

        return optax.sgd(lr)

    def flow_step(self, gradient, carry, lr, beta):
        (F,) = carry  # F+ = F - lr gradient (SGD: the engine gives the minibatch gradient)
        return (F - lr * gradient,)

    def log_growth(self, rate, beta):
        import numpy as np  # here: the command line imports this module without numpy

        return np.log1p(rate)  # w+ = (1 + rate) w

    def stable_rate(self, beta):
        return 2.0  # |1 - lr lambda| <= 1
