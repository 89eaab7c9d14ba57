r"""Data matrices built from samples (X, Y): :func:`data_matrices` (every sample's structure
held) and :func:`flow_data` (by the route that costs least: moments, chunks or all samples).

The quantities are the protocol's (``protocol``: G(M), C, K[M] and the mode quantities, the
sample means over (X, Y)). For the squared loss l = (1/2) sum_c (f_c - y_c)^2, l' = f - y and
G(M) = K[M] - C; for the cross-entropy (softmax over the K outputs) l = logsumexp(f) - sum_c
y_c f_c and l' = softmax(f) - y. Everything is computed from the structured representation of A
(``forms``, ``contract``, ``quad``); an N x d x d stack is never built when the architecture has
a closed form.

Callers import from here the protocol, :class:`DataMatrices` (``samples``), the checks of files
and sample arrays (``checks``) and the population route (``population``), re-exported.
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
    return _sample_data(arch, X, targets, loss, dtype, method)


def _sample_data(arch: Architecture, X, targets, loss: str, dtype, method: str = "auto") -> DataMatrices:
    """DataMatrices of checked samples (:func:`checked_samples`): every sample's structure, held."""
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
    return _sample_data(arch, X, targets, loss, dtype), choice
