"""train_grid's two batchings agree with train, and the vmapped one shards its points over devices.

The sharded case runs in a subprocess with 4 host devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4``): XLA reads the flag once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pytest

import nqf
from nqf.training.grid import default_batching, train_grid

TASK = nqf.get_task("staircase", inputs=6, outputs=4, samples=64)
ARCH = TASK.architecture()
X, Y = TASK.generate(0, "float64")
CONFIG = nqf.TrainConfig(width=8, steps=60, lr=0.05, dtype="float64")


def test_one_cpu_device_loops_and_the_loop_is_train_bit_for_bit():
    assert default_batching() == "loop"
    grid = train_grid(ARCH, X, Y, CONFIG, [1e-3, 1e-2], [0, 3])
    for i, sigma0 in enumerate([1e-3, 1e-2]):
        for j, seed in enumerate([0, 3]):
            single = nqf.train(ARCH, X, Y, replace(CONFIG, sigma0=sigma0, seed=seed))
            np.testing.assert_array_equal(grid.loss[i, j], single.loss)
            np.testing.assert_array_equal(grid.W_final[i, j], single.W_final)


def test_vmap_on_one_device_agrees_with_the_loop():
    looped = train_grid(ARCH, X, Y, CONFIG, [1e-3, 1e-2, 3e-2], [0, 1], batching="loop")
    vmapped = train_grid(ARCH, X, Y, CONFIG, [1e-3, 1e-2, 3e-2], [0, 1], batching="vmap")
    np.testing.assert_allclose(vmapped.loss, looped.loss, rtol=1e-12, atol=0)
    np.testing.assert_allclose(vmapped.occupations, looped.occupations, rtol=1e-10, atol=1e-300)
    np.testing.assert_allclose(vmapped.W_final, looped.W_final, rtol=1e-11, atol=1e-15)
    with pytest.raises(nqf.NqfError, match="batching must be one of auto, loop, vmap"):
        train_grid(ARCH, X, Y, CONFIG, [1e-3], [0], batching="threads")


SHARDED = textwrap.dedent(
    """
    import json, jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np, nqf
    from nqf.training import grid as grid_module

    devices_seen = []
    compiled = grid_module._compiled_vmap

    def watching(*args):
        swept, ckpts, names = compiled(*args)
        def run(*a):
            out = swept(*a)
            devices_seen.append(len(jax.tree_util.tree_leaves(out)[0].sharding.device_set))
            return out
        return run, ckpts, names

    grid_module._compiled_vmap = watching
    task = nqf.get_task("staircase", inputs=6, outputs=4, samples=64)
    X, Y = task.generate(0, "float64")
    config = nqf.TrainConfig(width=8, steps=60, lr=0.05, dtype="float64")
    args = (task.architecture(), X, Y, config, [1e-3, 1e-2, 3e-2], [0, 1])  # 6 points over 4 devices
    auto = nqf.train_grid(*args)
    loop = nqf.train_grid(*args, batching="loop")
    print(json.dumps({
        "devices": jax.device_count(),
        "default": grid_module.default_batching(),
        "devices_used": devices_seen,
        "loss_rel": float(np.max(np.abs(auto.loss - loop.loss) / np.abs(loop.loss))),
        "w_abs": float(np.max(np.abs(auto.W_final - loop.W_final))),
        "shape": list(auto.loss.shape),
    }))
    """
)


@pytest.mark.slow  # heavy for the dev loop (make test-fast); CI runs it
def test_several_devices_shard_the_points_and_agree_with_the_loop():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["devices"] == 4 and result["default"] == "vmap"
    assert result["devices_used"] == [4]  # the vmapped program's output lives on all 4 devices
    assert result["shape"][:2] == [3, 2]  # padding to 8 points is dropped again
    assert result["loss_rel"] < 1e-12 and result["w_abs"] < 1e-12
