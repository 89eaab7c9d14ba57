r"""Minibatch SGD: gradient descent on minibatches of ``batch_size`` samples (``optax.sgd(lr)``).

Its map on M is GD's with G(M) the minibatch mean G_b(M) of the step's batch (drawn by
``nqf.core.sampling.minibatch_indices``, as training draws it); its Lotka-Volterra numbers are
those of the full-batch mean, GD's.
"""

from __future__ import annotations

from nqf.optimizers.base import AbstractClosedOptimizer
from nqf.optimizers.gd import descent_step


class SGD(AbstractClosedOptimizer):
    name = "sgd"
    label = "SGD"
    colour = 1
    batch = "required"
    equivariant = True
    mean_flow = "gd"

    def transform(self, lr, beta, eps):
        import optax

        return optax.sgd(lr)

    def flow_step(self, gradient, carry, lr, beta):
        return descent_step(gradient, carry, lr)  # the engine gives the minibatch gradient

    def log_growth(self, rate, beta):
        import numpy as np  # here: the command line imports this module without numpy

        return np.log1p(rate)

    def stable_rate(self, beta):
        return 2.0
