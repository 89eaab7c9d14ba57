"""Minibatch sampling shared by training and the SGD map on M, so both see the same batches."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def minibatch_indices(key: jax.Array, num_samples: int, batch_size: int, steps: int) -> jax.Array:
    """Indices of the minibatch used at each step, shape (steps, batch_size).

    Each step draws ``batch_size`` distinct samples uniformly (without replacement
    within the step, independently across steps) from ``jax.random.fold_in(key, step)``.
    """
    if not 1 <= batch_size <= num_samples:
        from nqf.core.errors import NqfError

        raise NqfError(f"batch size must be between 1 and the number of samples {num_samples}, got {batch_size}")

    def one(step):
        return jax.random.choice(jax.random.fold_in(key, step), num_samples, (batch_size,), replace=False)

    return jax.vmap(one)(jnp.arange(steps))


def training_keys(seed: int | jax.Array) -> tuple[jax.Array, jax.Array]:
    """(init_key, batch_key) = split(PRNGKey(seed)): W0 ~ init_key, minibatches ~ batch_key."""
    keys = jax.random.split(jax.random.PRNGKey(seed))
    return keys[0], keys[1]
