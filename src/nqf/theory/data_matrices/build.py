r"""Data matrices: everything the flow of M = W W^T needs from a data set.

With the quadratic model f_c(x) = <M, A_c(x)> and a per-sample loss l(f, y), the
training dynamics close on M through (docs/theory.md section 2)

    G(M) = E[ sum_c l'_c(f(x), y) A_c(x) ]                    (d, d), symmetric
    C    = E[ sum_c y_c A_c(x) ]                               (d, d)
    K[M] = E[ sum_c A_c(x) <A_c(x), M> ]                       (d, d), linear in M

where E is the sample mean. For the squared loss l = (1/2) sum_c (f_c - y_c)^2,
l' = f - y and G(M) = K[M] - C. For the cross-entropy loss (softmax over the K
outputs) l = logsumexp(f) - sum_c y_c f_c and l' = softmax(f) - y.

In a basis Q = [q_1 ... q_m] (d, m) the mode quantities are

    c_k  = q_k^T C q_k = E[ sum_c y_c q_k^T A_c q_k ]                 (mode_growth)
    K_kj = E[ sum_c (q_k^T A_c q_k)(q_j^T A_c q_j) ] = <P_k, K[P_j]>  (mode_interactions)

with P_k = q_k q_k^T. Everything is computed from the structured representation of
A (``forms``, ``contract``, ``quad``); an N x d x d stack is never built when the
architecture has a closed form.

:class:`PopulationDataMatrices` gives the same quantities in closed form for the
``mlp`` architecture with Gaussian inputs x ~ N(0, Sigma) and a linear teacher y = T x.

Where the pieces live: :class:`DataMatrices` and the losses in ``samples``, the
checks of files and sample arrays (``read_npz``, ``checked_samples``, ``MAX_ABS_ENTRY``) in
``checks``, the population route in ``population``; this module builds the data
matrices from (X, Y) (:func:`data_matrices`, :func:`flow_data`) and re-exports the rest.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jaxtyping import ArrayLike, Float, Real

from nqf.architectures.architecture import Architecture, structure
from nqf.architectures.structure import with_shared_factors
from nqf.core.input_files import describe_file
from nqf.theory.data_matrices.checks import (
    MAX_ABS_ENTRY,
    check_sample_arrays,
    checked_samples,
    read_npz,
)
from nqf.theory.data_matrices.population import PopulationDataMatrices, population_data_matrices
from nqf.theory.data_matrices.protocol import AbstractDataMatrices, AbstractSampleDataMatrices
from nqf.theory.data_matrices.samples import LOSSES, DataMatrices

__all__ = [
    "LOSSES",
    "AbstractDataMatrices",
    "AbstractSampleDataMatrices",
    "MAX_ABS_ENTRY",
    "AnyDataMatrices",
    "DataMatrices",
    "PopulationDataMatrices",
    "check_sample_arrays",
    "checked_samples",
    "data_matrices",
    "describe_file",
    "flow_data",
    "population_data_matrices",
    "read_npz",
]


def data_matrices(
    arch: Architecture,
    X: Float[ArrayLike, " N *input"],
    Y: Float[ArrayLike, "N K"] | Real[ArrayLike, " N"],
    loss: str = "squared",
    method: str = "auto",
    dtype=None,
) -> DataMatrices:
    """DataMatrices of the samples X: (N, *input_shape) with targets Y.

    Y: (N, K) real targets, or (N,) when K = 1, or integer class labels (N,) (one-hot
    encoded; required form for cross-entropy together with one-hot/probability rows).
    loss: ``squared`` or ``cross_entropy`` (softmax over the K outputs; needs K >= 2).
    method: how A is represented, see :func:`nqf.structure` (closed form when known).
    dtype: floating dtype of the computation (default: X's if floating, else JAX's default float).
    """
    X, targets, dtype = checked_samples(arch, X, Y, loss, dtype)
    return DataMatrices(
        with_shared_factors(structure(arch, jnp.asarray(X, dtype=dtype), method=method)), jnp.asarray(targets), loss
    )


def flow_data(
    arch: Architecture, X, Y, loss: str = "squared", route: str = "auto", minibatches: bool = False, dtype=None
):
    """The data matrices the M-flow runs on, by the cheaper route, and the route chosen.

    Returns (DataMatrices or MomentDataMatrices, RouteChoice); see ``nqf.theory.data_matrices.moments.choose_route``.
    The moments route reads the samples in chunks and never holds all their structure matrices.
    """
    from nqf.theory.data_matrices.moments import choose_route, moment_data_matrices

    X, targets, dtype = checked_samples(arch, X, Y, loss, dtype)
    choice = choose_route(arch, X.shape[0], loss, route=route, minibatches=minibatches, dtype=dtype)
    if choice.route == "moments":
        data = moment_data_matrices(arch, X, targets, dtype)
        if data.evaluated == "numpy":  # say which path computed the statistics
            choice = dataclasses.replace(
                choice, reason=f"{choice.reason}; the moments computed in numpy (nothing compiled)"
            )
        return data, choice
    if choice.chunk is not None:
        from nqf.theory.data_matrices.chunked import chunked_data_matrices

        return chunked_data_matrices(arch, X, targets, loss, dtype, choice.chunk), choice
    return DataMatrices(
        with_shared_factors(structure(arch, jnp.asarray(X, dtype=dtype))), jnp.asarray(targets), loss
    ), choice


# The type every theory function takes (kept under its old name).
AnyDataMatrices = AbstractDataMatrices
