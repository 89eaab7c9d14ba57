"""The departure's corrections (issue 31): the unlearned rows' maps built from the units' own
derivatives (``factored``) against the Hessian-vector route they replace (``dense`` or
``chunked``), and a whole warm ``nqf.departure`` against ``nqf.train`` of the same network.

The arithmetic a map needs (d parameters per unit, n units, N samples, K outputs): the
Hessian-vector route pushes d n basis directions through the layer's linearised gradient,
each a pass over N samples and n units (nested forward derivatives for the quadratic model):
~ (d n) N n d c flops, c the unit's cost per parameter; the factored route takes N n Jacobians
of one unit (d forward passes each: N n d^2 c) and the Gauss-Newton sum N K (d n)^2. Their
ratio is about n c / K, so the gain grows with the width.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import nqf  # noqa: E402
from nqf.theory.costs import departure_cost  # noqa: E402
from nqf.theory.departure import plateaus  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import Outcome, time_calls  # noqa: E402


def _breast_cancer():
    """scikit-learn's breast cancer: 6 whitened principal components, standardised one-hot targets (569 x 2)."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X = X - X.mean(axis=0)
    U, _, _ = np.linalg.svd(X, full_matrices=False)
    Y = np.eye(2)[y]
    return U[:, :6] * np.sqrt(len(X)), (Y - Y.mean(axis=0)) / Y.std(axis=0)


def _cases(quick: bool):
    X, Y = nqf.get_task("staircase").generate(0)
    yield "staircase", nqf.get_architecture("mlp"), np.asarray(X), np.asarray(Y), 32
    Xb, Yb = _breast_cancer()
    yield "breast cancer", nqf.get_architecture("mlp", inputs=6, outputs=2), Xb, Yb, 16 if quick else 64


def _plateau(arch, width, seed=0):
    """A W* (O(1) weights, as after a switch-on) and Q_U with the first mode learned."""
    rng = np.random.default_rng(seed)
    d = arch.dim
    Wstar = jnp.asarray(0.5 * rng.standard_normal((d, width)))
    QU = jnp.asarray(np.linalg.qr(rng.standard_normal((d, d)))[0]).at[:, 0].set(0.0)
    return Wstar, QU, jnp.zeros((d, width))


def _one_map(name, arch, model, X, Y, width, repeats) -> dict:
    """One plateau's ``linearised`` map of ``model``, factored and by Hessian-vector products, warm."""
    Wstar, QU, D0 = _plateau(arch, width)
    Xj, Yj = jnp.asarray(X), jnp.asarray(Y)
    chunk = min(plateaus.factored_chunk(arch, width), X.shape[0])
    hvp, directions = plateaus.hvp_path(arch, X.shape[0], width, model=model, construction="linearised")
    args = (arch, model, "squared", "linearised", Wstar, QU, Xj, Yj, D0)

    def factored():
        return plateaus._factored_force(*args, chunk)[1]

    def by_hvp():
        if hvp == "dense":
            return plateaus._dense_force(*args)[1]
        return plateaus._chunked_force(*args, chunk=directions)[1]

    fast, J_fast = time_calls(factored, repeats)
    slow, J_slow = time_calls(by_hvp, max(1, repeats // 2), min_total_s=0.0)
    return {
        "case": name,
        "model": model,
        "d n": arch.dim * width,
        "N": X.shape[0],
        "hvp path": hvp,
        "hvp_s": slow.best,
        "factored_s": fast.best,
        "hvp / factored": slow.best / fast.best,
        "first factored_s": fast.first,
        "J rel. diff": float(jnp.max(jnp.abs(J_fast - J_slow)) / jnp.max(jnp.abs(J_slow))),
    }


def departure_maps(quick: bool, repeats: int) -> Outcome:
    """One plateau's maps (network and quadratic model, ``linearised``), warm: factored against
    the Hessian-vector route, the same matrix to 1e-12."""
    rows = [
        _one_map(name, arch, model, X, Y, width, repeats)
        for name, arch, X, Y, width in _cases(quick)
        for model in ("network", "quadratic")
    ]
    same = all(row["J rel. diff"] <= 1e-12 for row in rows)
    faster = all(row["hvp / factored"] >= 1.0 for row in rows if row["model"] == "quadratic")
    return Outcome(
        params={"construction": "linearised", "loss": "squared"},
        rows=rows,
        summary={"worst_ratio": min(row["hvp / factored"] for row in rows)},
        targets={
            "factored J equals the Hessian-vector J to 1e-12": same,
            "factored faster for the quadratic model": faster,
        },
    )


_FRESH = """
import sys, time, numpy as np, jax
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {here!r})
import nqf
from bench_departure import _cases
name, arch, X, Y, width = [c for c in _cases({quick!r}) if c[0] == {case!r}][0]
p = nqf.predict(arch, X, Y, nqf.PredictConfig(width=width, lr=0.05, steps={steps}, sigma0=1e-6))
start = time.perf_counter()
nqf.departure(arch, X, Y, p)
print(time.perf_counter() - start)
"""


def _fresh_first_call(case: str, quick: bool, steps: int) -> float:
    """Seconds of the first ``nqf.departure`` in a fresh process with an empty compilation cache
    (what a new user's first call costs; in the same process the cache of earlier calls helps)."""
    import os
    import subprocess
    import tempfile

    here = str(Path(__file__).resolve().parent)
    with tempfile.TemporaryDirectory() as cache:
        script = _FRESH.format(here=here, quick=quick, case=case, steps=steps)
        env = dict(os.environ, NQF_CACHE_DIR=cache, JAX_PLATFORMS="cpu")
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=900)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.split()[-1])


def departure_vs_training(quick: bool, repeats: int) -> Outcome:
    """A whole warm ``nqf.departure`` (the curve and both constructions' corrections) against a warm
    ``nqf.train`` of the same network (GD, same steps), and ``predict`` itself."""
    rows = []
    for name, arch, X, Y, width in _cases(quick):
        steps = 1000 if name == "staircase" else 600
        config = nqf.PredictConfig(width=width, lr=0.05, steps=steps, sigma0=1e-6)
        train_config = nqf.TrainConfig(width=width, lr=0.05, steps=steps, sigma0=1e-6, dtype="float64")
        predict, p = time_calls(lambda: nqf.predict(arch, X, Y, config), repeats)  # noqa: B023
        _, estimate, path = departure_cost(arch, X.shape[0], width, steps)
        departure, d = time_calls(lambda: nqf.departure(arch, X, Y, p), 1, min_total_s=0.0)  # noqa: B023
        train, _ = time_calls(lambda: nqf.train(arch, X, Y, train_config).loss, repeats)  # noqa: B023
        rows.append(
            {
                "case": name,
                "width": width,
                "steps": steps,
                "predict_s": predict.best,
                "departure_s": departure.best,
                "first departure_s": departure.first,
                "train_s": train.best,
                "departure / train": departure.best / train.best,
                "departure / predict": departure.best / predict.best,
                "corrected": " ".join(f"{t:.0f}" for t in d.corrected_switch_steps["linearised"]),
                "path": path,
                "estimate_s": estimate,
                "fresh first_s": (fresh := _fresh_first_call(name, quick, steps)),
                "estimate / fresh first": estimate / fresh,
            }
        )
    return Outcome(
        params={"lr": 0.05, "sigma0": 1e-6},
        rows=rows,
        summary={"worst_departure_over_train": max(row["departure / train"] for row in rows)},
        targets={
            "the time estimate (nqf.theory.costs.departure_cost) within 2x of a fresh first call": all(
                0.5 <= row["estimate / fresh first"] <= 2.0 for row in rows
            )
        },
        notes=["the issue's target (departure warm <= 3x the plain prediction) is not met: see the rows"],
    )


BENCHMARKS = {"departure_maps": departure_maps, "departure_vs_training": departure_vs_training}
COLUMNS = {
    "departure_maps": [
        "case",
        "model",
        "d n",
        "N",
        "hvp path",
        "hvp_s",
        "factored_s",
        "hvp / factored",
        "first factored_s",
        "J rel. diff",
    ],
    "departure_vs_training": [
        "case",
        "width",
        "steps",
        "predict_s",
        "departure_s",
        "first departure_s",
        "train_s",
        "departure / train",
        "departure / predict",
        "corrected",
        "path",
        "estimate_s",
        "fresh first_s",
        "estimate / fresh first",
    ],
}
