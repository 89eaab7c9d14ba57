r"""Heavy-ball momentum, ``optax.sgd(lr, momentum=beta)``: V+ = g + beta V, W+ = W - lr V+, V0 = 0.

On the quadratic model g = 2 G(M) W, and (W, V) = (F, V_F) Q keeps the closed state
(M, P, Q) = (W W^T, W V^T, V V^T) (``nqf.theory.flow``). Near M = 0 a mode with eigenvalue
c > 0 grows by z a step, the larger root of z^2 - (1 + beta + 2 lr c) z + beta = 0 (the
lr / (1 - beta) rule holds only for 2 lr c << (1 - beta)^2); along a direction of curvature
lambda the step is stable while lr lambda < 2 (1 + beta).
"""

from __future__ import annotations

from nqf.optimizers.base import AbstractClosedOptimizer


class HeavyBall(AbstractClosedOptimizer):
    name = "momentum"
    label = "momentum"
    colour = 2
    default_beta = 0.9
    equivariant = True
    buffers = 1
    mean_flow = "momentum"

    def transform(self, lr, beta, eps):
        import optax

        return optax.sgd(lr, momentum=beta)

    def flow_step(self, gradient, carry, lr, beta):
        F, V = carry
        V_next = gradient + beta * V
        return (F - lr * V_next, V_next)

    def log_growth(self, rate, beta):
        import numpy as np  # here: the command line imports this module without numpy

        b = 1.0 + beta + rate
        return np.log(0.5 * (b + np.sqrt(b * b - 4.0 * beta)))

    def stable_rate(self, beta):
        return 2.0 * (1.0 + beta)
