r"""Minibatch SGD: gradient descent on minibatches of ``batch_size`` samples (``optax.sgd(lr)``).

Its map on M is GD's with G(M) the minibatch mean G_b(M) of the step's batch (drawn by
``nqf.core.sampling.minibatch_indices``, as training draws it); its Lotka-Volterra numbers are
those of the full-batch mean, GD's. Its transformation, step, escape rate and stability bound
are GD's (a subclass); only its name, colour and batch rule differ.
"""

from __future__ import annotations

from nqf.optimizers.gd import GD


class SGD(GD):
    name = "sgd"
    label = "SGD"
    colour = 1
    batch = "required"
