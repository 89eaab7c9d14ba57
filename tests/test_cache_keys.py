"""Every cache is keyed by everything that determines its result.

Compiled training runs, expansion verdicts (in memory and on disk) and a sweep's shared runs
are keyed by ``arch_key``: name, options, shapes and a hash of the jaxprs the architecture's
functions trace to. Two modules of one class that compute different things, a ``--unit`` file
edited between runs, and an activation registered under a name another process used never
reuse one another's result; equal computations still share one compiled run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.architectures import expansion
from nqf.architectures.architecture import arch_key, stable_key
from nqf.core.errors import TheoryDoesNotApply
from nqf.training.runs import _clear_compiled, _trace_count

NQF = Path(sys.executable).parent / "nqf"
RNG = np.random.default_rng(0)
X = RNG.standard_normal((64, 3))
Y = np.sin(X @ np.array([1.0, -0.5, 0.25]))[:, None]
CONFIG = nqf.TrainConfig(width=8, sigma0=0.1, lr=0.1, steps=200, dtype="float64")


class Perceptron(eqx.Module):
    """a act(v . x), the activation a (non-array, so static) field of the module."""

    v: jax.Array
    a: jax.Array
    act: Callable

    def __call__(self, x):
        return self.a * self.act(self.v @ x)


def _equinox(act) -> nqf.Architecture:
    return nqf.from_equinox(Perceptron(jnp.zeros(3), jnp.zeros(1), act), 3, 1)


def _two_sin(z):
    return 2.0 * jnp.sin(z)


def test_equinox_modules_of_one_class_keep_their_own_training():
    alone = nqf.train(_equinox(_two_sin), X, Y, CONFIG).loss  # the sin module trained first
    _clear_compiled()
    tanh = nqf.train(_equinox(jnp.tanh), X, Y, CONFIG).loss
    after = nqf.train(_equinox(_two_sin), X, Y, CONFIG).loss  # after the tanh module of the same class
    assert np.array_equal(after, alone)
    assert abs(tanh[-1] - after[-1]) > 1e-2 * tanh[-1]
    # equal computations (new objects) still share the compiled run
    before = _trace_count()
    nqf.train(_equinox(jnp.tanh), X, Y, CONFIG)
    assert _trace_count() == before


def test_flax_modules_of_one_class_keep_their_own_training():
    linen = pytest.importorskip("flax.linen")

    class Unit(linen.Module):
        act: Callable

        @linen.compact
        def __call__(self, x):
            v = self.param("v", linen.initializers.zeros, (3,))
            a = self.param("a", linen.initializers.zeros, (1,))
            return a * self.act(v @ x)

    def arch(act):
        return nqf.from_flax(Unit(act), 3, 1)

    alone = nqf.train(arch(_two_sin), X, Y, CONFIG).loss
    _clear_compiled()
    nqf.train(arch(jnp.tanh), X, Y, CONFIG)
    assert np.array_equal(nqf.train(arch(_two_sin), X, Y, CONFIG).loss, alone)
    assert arch_key(arch(jnp.tanh)) != arch_key(arch(_two_sin))


def test_the_theory_gate_judges_each_module_of_one_class(monkeypatch):
    monkeypatch.setattr(expansion, "_verdict_folder", lambda: None)
    expansion._clear_gate_cache()
    assert expansion.theory_gate(_equinox(jnp.tanh)).applies
    with pytest.raises(TheoryDoesNotApply, match="not smooth"):
        expansion.theory_gate(_equinox(jax.nn.relu))
    expansion._clear_gate_cache()


def test_keys_are_stable_only_when_they_name_no_object():
    assert stable_key(arch_key(_equinox(jnp.tanh)))
    assert arch_key(_equinox(jnp.tanh)) == arch_key(_equinox(jnp.tanh))

    def untraceable(w, x):
        raise RuntimeError("needs concrete values")

    odd = nqf.Architecture(name="odd", unit=untraceable, template={"v": jnp.zeros(3)}, input_shape=(3,), outputs=1)
    assert not stable_key(arch_key(odd)) and arch_key(odd) == arch_key(odd)


# -- across processes, through the disk cache --------------------------------------------------


def _run(args: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", NQF_CACHE_DIR=str(cache))
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)


UNIT = """
import equinox as eqx
import jax
import jax.numpy as jnp


class Perceptron(eqx.Module):
    a: jax.Array
    v: jax.Array

    def __call__(self, x):
        z = jnp.dot(self.v, x)
        return self.a * ({body})


def unit(input_shape, outputs):
    return Perceptron(jnp.zeros(outputs), jnp.zeros(input_shape[0]))
"""


@pytest.mark.slow
def test_an_edited_unit_file_is_judged_again(tmp_path):
    unit, data, cache = tmp_path / "my_unit.py", tmp_path / "data.npz", tmp_path / "cache"
    np.savez(data, X=X, Y=np.concatenate([Y, -Y], axis=1))
    verdicts = []
    for body in ("jnp.tanh(z)", "jnp.tanh(z) + jnp.abs(z)", "jnp.tanh(z)"):
        unit.write_text(UNIT.format(body=body))
        args = [str(NQF), "predict", "--data", str(data), "--unit", f"{unit}:unit"]
        args += ["--width", "4", "--steps", "20", "--lr", "0.05", "--sigma0", "1e-3"]
        out = _run([*args, "--json"], cache)
        assert out.returncode in (0, 2), out.stderr  # exit 2: the theory does not apply
        verdicts.append(out.returncode == 0)
        if out.returncode:
            assert "not smooth" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert verdicts == [True, False, True]
    assert len(list((cache / "nqf-expansion").glob("*.json"))) == 2  # the third read the first's verdict


SCRIPT = """
import sys
import jax, jax.numpy as jnp
import nqf
from nqf.architectures.activations import ACTIVATIONS
from nqf.architectures.expansion import cached_expansion_check
nqf.enable_compilation_cache()
ACTIVATIONS["mine"] = {{"relu": jax.nn.relu, "tanh": jnp.tanh}}["{name}"]
print(cached_expansion_check(nqf.get_architecture("mlp", inputs=3, outputs=2, activation="mine")).applies)
"""


@pytest.mark.slow
def test_an_activation_registered_under_one_name_in_two_processes(tmp_path):
    cache = tmp_path / "cache"
    applies = []
    for name in ("relu", "tanh", "relu"):
        out = _run([sys.executable, "-c", textwrap.dedent(SCRIPT.format(name=name))], cache)
        assert out.returncode == 0, out.stderr
        applies.append(out.stdout.split()[-1])
    assert applies == ["False", "True", "False"]
