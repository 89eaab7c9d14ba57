r"""Nesterov momentum, ``optax.sgd(lr, momentum=beta, nesterov=True)``:

    V+ = g + beta V,   W+ = W - lr (g + beta V+),   V0 = 0.

It closes on M like heavy ball: with g = 2 G(M) W both updates are linear in (W, V) with
coefficients built from M, so (W, V) = (F, V_F) Q for the Q of W0 = F0 Q and the state
(W W^T, W V^T, V V^T) is closed.

Near M = 0 a mode with eigenvalue c > 0 has g = -(2 c) w; with u = lr V and a = 2 lr c,

    u+ = -a w + beta u,   w+ = (1 + a (1 + beta)) w - beta^2 u,

whose matrix has trace (1 + beta)(1 + a) and determinant beta (1 + a): the amplitude grows by
z, the larger root of z^2 - (1 + beta)(1 + a) z + beta (1 + a) = 0 (real: the discriminant is
at least (1 + a)(1 - beta)^2). Along a direction of curvature lambda (g = lambda w, b = lr
lambda) the characteristic polynomial z^2 - (1 + beta)(1 - b) z + beta (1 - b) has a root at
-1 when b = 2 (1 + beta) / (1 + 2 beta): the step is stable below it.
"""

from __future__ import annotations

from nqf.optimizers.base import AbstractClosedOptimizer


class Nesterov(AbstractClosedOptimizer):
    name = "nesterov"
    label = "Nesterov"
    colour = 5
    default_beta = 0.9
    equivariant = True
    buffers = 1
    mean_flow = "nesterov"

    def transform(self, lr, beta, eps):
        import optax

        return optax.sgd(lr, momentum=beta, nesterov=True)

    def flow_step(self, gradient, carry, lr, beta):
        F, V = carry
        V_next = gradient + beta * V
        return (F - lr * (gradient + beta * V_next), V_next)

    def log_growth(self, rate, beta):
        import numpy as np  # here: the command line imports this module without numpy

        b = (1.0 + beta) * (1.0 + rate)
        return np.log(0.5 * (b + np.sqrt(b * b - 4.0 * beta * (1.0 + rate))))

    def stable_rate(self, beta):
        return 2.0 * (1.0 + beta) / (1.0 + 2.0 * beta)
