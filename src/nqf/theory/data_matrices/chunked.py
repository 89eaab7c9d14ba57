r"""The per-sample route for data too large to hold every sample's structure matrices.

``DataMatrices`` keeps the structured A(x_n) of all N samples (the perceptron's closed form
alone holds N K (K + D) numbers, ten times X for K = 10 outputs). :class:`ChunkedDataMatrices`
keeps only X and the targets and rebuilds A(x) for ``chunk`` samples at a time inside every
evaluation, so memory is X plus one chunk's factors, for any loss (cross-entropy too) and
for SGD's minibatches. The arithmetic per step is the per-sample route's plus rebuilding the
closed form (O(N K R (d_L + d_R))), in a compiled scan over the chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

from nqf.architectures.architecture import Architecture, structure
from nqf.theory.data_matrices.protocol import AbstractSampleDataMatrices
from nqf.theory.data_matrices.samples import DataMatrices, loss_derivative, per_sample_loss


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ChunkedDataMatrices(AbstractSampleDataMatrices):
    """Samples X (C, B, *input_shape) in C chunks of B, targets (C, B, K), weights (C, B)
    (1 for a sample, 0 for the padding of the last chunk). Same interface as ``DataMatrices``."""

    inputs: jax.Array
    targets_chunks: jax.Array
    weights: jax.Array
    arch: Architecture = field(metadata=dict(static=True))
    loss_type: str = field(default="squared", metadata=dict(static=True))
    samples: int = field(default=0, metadata=dict(static=True))

    @property
    def dim(self) -> int:
        return self.arch.dim

    @property
    def outputs_count(self) -> int:
        return self.targets_chunks.shape[-1]

    @property
    def num_samples(self) -> int:
        return self.samples

    @property
    def dtype(self):
        return self.targets_chunks.dtype

    def _chunk(self, c: int) -> DataMatrices:
        return DataMatrices(structure(self.arch, self.inputs[c]), self.targets_chunks[c], self.loss_type)

    def _sum(self, fn):
        """sum over chunks of fn(DataMatrices of the chunk, weights of the chunk)."""

        def body(total, c):
            return jax.tree_util.tree_map(jnp.add, total, fn(self._chunk(c), self.weights[c])), None

        first = fn(self._chunk(0), self.weights[0])
        total, _ = jax.lax.scan(body, first, jnp.arange(1, self.inputs.shape[0]))
        return total

    def subset(self, indices: jax.Array) -> DataMatrices:
        """The samples ``indices`` (B,) (flat sample numbers): a minibatch, built on the fly."""
        flat_x = self.inputs.reshape(-1, *self.inputs.shape[2:])
        flat_y = self.targets_chunks.reshape(-1, self.targets_chunks.shape[-1])
        return DataMatrices(structure(self.arch, flat_x[indices]), flat_y[indices], self.loss_type)

    def loss_and_gradient(self, M: jax.Array, indices: jax.Array | None = None):
        if indices is not None:
            return self.subset(indices).loss_and_gradient(M)

        def part(d, w):
            F = d.structure.forms(M)
            loss = jnp.sum(w * per_sample_loss(self.loss_type, F, d.targets))
            grad = d.structure.contract(w[:, None] * loss_derivative(self.loss_type, F, d.targets)) * w.shape[0]
            return loss, grad

        loss, grad = self._sum(part)
        return loss / self.samples, grad / self.samples

    def loss(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        return self.loss_and_gradient(M, indices)[0]

    def gradient_matrix(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        return self.loss_and_gradient(M, indices)[1]

    def per_sample_loss(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        if indices is not None:
            return self.subset(indices).per_sample_loss(M)
        flat_y = self.targets_chunks.reshape(-1, self.targets_chunks.shape[-1])[: self.samples]
        return per_sample_loss(self.loss_type, self.outputs(M), flat_y)

    def outputs(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        if indices is not None:
            return self.subset(indices).outputs(M)
        F = jax.lax.map(lambda c: structure(self.arch, self.inputs[c]).forms(M), jnp.arange(self.inputs.shape[0]))
        return F.reshape(-1, F.shape[-1])[: self.samples]

    @property
    def C(self) -> jax.Array:
        return self._sum(lambda d, w: d.structure.contract(w[:, None] * d.targets) * w.shape[0]) / self.samples

    def K_apply(self, M: jax.Array, indices: jax.Array | None = None) -> jax.Array:
        if indices is not None:
            return self.subset(indices).K_apply(M)
        return (
            self._sum(lambda d, w: d.structure.contract(w[:, None] * d.structure.forms(M)) * w.shape[0]) / self.samples
        )


def chunked_data_matrices(arch: Architecture, X, targets, loss: str, dtype, chunk: int) -> ChunkedDataMatrices:
    """ChunkedDataMatrices of checked samples X (N, *input_shape) and targets (N, K)."""
    import numpy as np

    N = X.shape[0]
    chunk = max(1, min(int(chunk), N))
    count = -(-N // chunk)
    pad = count * chunk - N
    dtype = jnp.dtype(dtype)
    # one device array of X (no host copy of X: pad by writing into the destination)
    Xp = np.empty((count * chunk, *X.shape[1:]), dtype=dtype)
    Xp[:N] = X
    Xp[N:] = X[:1]
    Yp = np.concatenate([np.asarray(targets, dtype=dtype), np.repeat(np.asarray(targets[:1], dtype=dtype), pad, 0)])
    w = np.concatenate([np.ones(N, dtype=dtype), np.zeros(pad, dtype=dtype)])
    inputs = jnp.asarray(Xp.reshape(count, chunk, *X.shape[1:]))
    del Xp
    return ChunkedDataMatrices(
        inputs,
        jnp.asarray(Yp.reshape(count, chunk, -1)),
        jnp.asarray(w.reshape(count, chunk)),
        arch,
        loss,
        N,
    )
