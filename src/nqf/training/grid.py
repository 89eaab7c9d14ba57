"""``train_grid``: ``train`` over a grid of init scales x seeds, batched the way the machine runs best.

Run (i, j) of a sweep equals ``train(arch, X, Y, replace(config, sigma0=sigma0s[i],
seed=seeds[j]))``. Two ways to run the grid, chosen by ``batching``:

``"loop"``: ``train``'s compiled run once per point, every point dispatched before any
result is read. Bit-identical to ``train``, one compile whatever the grid's size (the sweep
shares ``train``'s cache entry). The default on one CPU device.

``"vmap"``: one program vmapped over the P = len(sigma0s) len(seeds) points, the point
axis sharded over the devices (``jax.sharding``: a 1-D mesh "points", P padded to a
multiple of the device count; data replicated). The default with several devices or an
accelerator, where a batch keeps the devices busy. On the CPU it depends on the machine,
measured (width 32, 300 steps, staircase, ``benchmarks/bench_batch.py``): pinned to one busy
core it cost 1.32x the loop's CPU time at 16 points and 1.95x at 64, because per point the
vmapped program holds (P, N, n, K) intermediates of the layer's sum over units that leave the
caches as P grows; on an idle 2-core machine it was faster, 0.71x the CPU time and 0.56x the
wall time at 16 points (XLA spreads its large fusions over both cores). The loop never costs
more than the runs one by one, so it is the CPU default. Agrees with the loop to rounding
(about 1e-14 relative).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, Int, Real

from nqf.architectures.architecture import Architecture, arch_key, check_width, init_weights
from nqf.core.cache import ensure_default_cache
from nqf.core.errors import NqfError
from nqf.core.precision import resolve_dtype
from nqf.core.pytrees import register_fields
from nqf.core.sampling import training_keys
from nqf.training.config import TrainConfig
from nqf.training.runs import (
    PER_RUN,
    RunRecords,
    TrainResult,
    cached_program,
    check_scale,
    compiled_train,
    counted_jit,
    make_run,
    prepare,
    records_of_run,
    static_settings,
)

__all__ = ["BATCHING", "TrainingGrid", "default_batching", "train_grid"]

BATCHING = ("auto", "loop", "vmap")


@dataclass(frozen=True)
class TrainingGrid(RunRecords):
    """Records of a sweep over init scales (axis 0) and seeds (axis 1): the arrays of
    :class:`RunRecords` with two leading axes; ``diverged_at`` is -1 where finite."""

    sigma0s: np.ndarray
    seeds: np.ndarray
    diverged_at: np.ndarray

    def run(self, i: int, j: int) -> TrainResult:
        """The run with init scale sigma0s[i] and seed seeds[j]."""
        div = int(self.diverged_at[i, j])
        return TrainResult(
            config=replace(self.config, sigma0=float(self.sigma0s[i]), seed=int(self.seeds[j])),
            steps=self.steps,
            block_names=self.block_names,
            diverged_at=None if div < 0 else div,
            **{name: getattr(self, name)[i, j] for name in PER_RUN},
        )


register_fields(
    TrainingGrid,
    ("sigma0s", "seeds", "steps", "loss", "occupations", "weight_norm", "block_norms", "diverged_at", "W_final"),
    ("config", "block_names"),
)


def default_batching() -> Literal["loop", "vmap"]:
    """ "vmap" with several devices or an accelerator, else "loop" (see the module docstring)."""
    return "vmap" if jax.device_count() > 1 or jax.default_backend() != "cpu" else "loop"


def _looped(arch, config, dtype, inputs, Y, Qt, sigma0s, seeds):
    run, ckpts, names = compiled_train(arch, config)
    lr = jnp.asarray(config.lr, dtype=dtype)
    outs = []
    for sigma0 in sigma0s:
        for seed in seeds:  # W0 and keys exactly as train makes them; dispatched without waiting
            init_key, batch_key = training_keys(int(seed))
            W0 = init_weights(arch, init_key, config.width, float(sigma0), dtype)
            outs.append(run(inputs, Y, Qt, W0, batch_key, lr))
    stacked = jax.tree_util.tree_map(lambda *runs: np.stack([np.asarray(r) for r in runs]), *outs)
    return stacked, ckpts, names


def _compiled_vmap(arch: Architecture, config: TrainConfig, dtype):
    """(jitted swept(inputs, Y, Qt, sigma0s, seeds, lr) over a flat point axis, checkpoints, names), cached."""
    static, width = static_settings(config), int(config.width)

    def build():
        run, ckpts, names = make_run(arch, static)

        def swept(inputs, Y, Qt, sigma0s, seeds, lr):
            def one(sigma0, seed):
                init_key, batch_key = training_keys(seed)
                return run(inputs, Y, Qt, init_weights(arch, init_key, width, sigma0, dtype), batch_key, lr)

            return jax.vmap(one)(sigma0s, seeds)

        return counted_jit(swept), ckpts, names

    return cached_program(("sweep", arch_key(arch), static, width, np.dtype(dtype).name), build)


def _vmapped(arch, config, dtype, inputs, Y, Qt, sigma0s, seeds):
    """All points in one program, the point axis sharded over every device."""
    points = sigma0s.size * seeds.size
    flat_sigma0 = np.repeat(sigma0s, seeds.size)
    flat_seed = np.tile(seeds, sigma0s.size)
    devices = jax.devices()
    pad = (-points) % len(devices)  # each device gets the same number of points
    flat_sigma0 = np.concatenate([flat_sigma0, np.repeat(flat_sigma0[-1:], pad)])
    flat_seed = np.concatenate([flat_seed, np.repeat(flat_seed[-1:], pad)])
    mesh = jax.sharding.Mesh(np.asarray(devices), ("points",))
    split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("points"))
    whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    inputs, Y, Qt = jax.device_put((inputs, Y, Qt), whole)
    swept, ckpts, names = _compiled_vmap(arch, config, dtype)
    out = swept(
        inputs,
        Y,
        Qt,
        jax.device_put(jnp.asarray(flat_sigma0, dtype=dtype), split),
        jax.device_put(jnp.asarray(flat_seed), split),
        jax.device_put(jnp.asarray(config.lr, dtype=dtype), whole),
    )
    return jax.tree_util.tree_map(lambda a: np.asarray(a)[:points], out), ckpts, names


def train_grid(
    arch: Architecture,
    X: Float[ArrayLike, " N *input"],
    Y: Float[ArrayLike, "N K"] | Real[ArrayLike, " N"],
    config: TrainConfig,
    sigma0s: Float[ArrayLike, " S"] | Sequence[float],
    seeds: Int[ArrayLike, " R"] | Sequence[int],
    basis: Float[ArrayLike, "d m"] | None = None,
    batching: str = "auto",
) -> TrainingGrid:
    """``train`` for every (sigma0, seed) pair, batched as ``batching`` says (module docstring).

    Run (i, j) equals ``train(arch, X, Y, replace(config, sigma0=sigma0s[i], seed=seeds[j]))``
    (config.sigma0 and config.seed are ignored). Records have leading axes (len(sigma0s), len(seeds)).
    """
    ensure_default_cache()
    dtype = resolve_dtype(config.dtype)
    check_width(arch, config.width)
    if batching not in BATCHING:
        raise NqfError(f"batching must be one of {', '.join(BATCHING)}, got {batching!r}")
    sigma0_grid = np.asarray(sigma0s, dtype=np.float64).ravel()
    seed_grid = np.asarray(seeds).ravel()
    if sigma0_grid.size == 0 or seed_grid.size == 0:
        raise NqfError("a sweep needs at least one sigma0 and one seed")
    if np.any(~np.isfinite(sigma0_grid)) or np.any(sigma0_grid < 0):
        raise NqfError("sigma0 values must be finite and >= 0")
    if not np.issubdtype(seed_grid.dtype, np.integer) or np.any(seed_grid < 0):
        raise NqfError("seeds must be integers >= 0")
    check_scale(config, dtype, sigma0_grid)
    inputs, Y, Qt = prepare(arch, X, Y, config, basis, dtype, runs=sigma0_grid.size * seed_grid.size)
    how = default_batching() if batching == "auto" else batching
    runner = _vmapped if how == "vmap" else _looped
    (recs, div, W), ckpts, names = runner(arch, config, dtype, inputs, Y, Qt, sigma0_grid, seed_grid)
    grid = (sigma0_grid.size, seed_grid.size)
    recs, div, W = jax.tree_util.tree_map(lambda a: a.reshape(grid + a.shape[1:]), (recs, div, W))
    return TrainingGrid(
        config=config,
        sigma0s=sigma0_grid,
        seeds=seed_grid,
        steps=ckpts,
        diverged_at=np.asarray(div),
        **records_of_run(recs, W, names),
    )
