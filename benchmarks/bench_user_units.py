"""A user's own unit against a built-in one and against training it.

``user_units``: Equinox units without a closed form on scikit-learn data, each call in a fresh
process with an empty ``NQF_CACHE_DIR``:

- ``gated``: phi = a (u.x) sigmoid(g.x) (d = K + 2 D; A(x) couples a and u only, one row per output);
- ``gelu2``: phi = a @ gelu(V x) with two hidden neurons (d = 2 K + 2 D; modes in degenerate pairs).

Data: wine (13 z-scored inputs, centred one-hot of 3 classes), digits on 16 whitened principal
components and on all 64 pixels (standardised; constant pixels 0), centred one-hot of 10 classes.
Width 32, sigma0 1e-6, GD. Per case: the first ``nqf.predict`` of the user's unit, the first
``nqf.train`` of the same network (same steps), and the first ``nqf.predict`` of the built-in
``mlp`` (tanh) on the same data and settings; and the first ``nqf.predict`` of the unit with the quadratic
theory alone (``network=False``). Ratios: predict / train and predict / built-in,
call times (after imports) in their own processes.

Targets: predict <= train and predict <= 2 x built-in for every case.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from _timing import Outcome, fresh_process

TRAIN_TARGET = 1.0  # user unit's first predict / first nqf.train of it
BUILTIN_TARGET = 2.0  # user unit's first predict / the built-in mlp's first predict

_CHILD = r"""
import json, math, resource, sys, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import equinox as eqx
import jax.numpy as jnp
import numpy as np
import nqf


class Gated(eqx.Module):
    a: jax.Array
    u: jax.Array
    g: jax.Array

    def __call__(self, x):
        return self.a * jnp.dot(self.u, x) * jax.nn.sigmoid(jnp.dot(self.g, x))


class HiddenGelu(eqx.Module):
    a: jax.Array
    v: jax.Array

    def __call__(self, x):
        return self.a @ jax.nn.gelu(self.v @ x)


def wine():
    from sklearn.datasets import load_wine
    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    Y = np.eye(3)[y]
    return X, Y - Y.mean(0)


def digits(k):
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    Xc = X - X.mean(0)
    if k < 64:
        _, s, vt = np.linalg.svd(Xc, full_matrices=False)
        Xc = Xc @ vt[:k].T / (s[:k] / math.sqrt(X.shape[0]))
    else:
        std = Xc.std(0)
        Xc = np.where(std > 0, Xc / np.where(std > 0, std, 1.0), 0.0)
    Y = np.eye(10)[y]
    return Xc, Y - Y.mean(0)


what, unit, data, lr, steps = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
X, Y = wine() if data == "wine" else digits(int(data.removeprefix("digits")))
D, K = X.shape[1], Y.shape[1]
if unit == "gated":
    module = Gated(jnp.zeros(K), jnp.zeros(D), jnp.zeros(D))
else:
    module = HiddenGelu(jnp.zeros((K, 2)), jnp.zeros((2, D)))
arch = "mlp" if what == "builtin" else nqf.from_equinox(module, D, K)
settings = dict(width=32, lr=lr, steps=steps, sigma0=1e-6)
t1 = time.perf_counter()
if what == "train":
    result = nqf.train(arch, X, Y, nqf.TrainConfig(**settings))
    out = {"final_loss": float(np.asarray(result.loss)[-1])}
else:
    p = nqf.predict(arch, X, Y, nqf.PredictConfig(**settings, network=what != "quadratic"))
    out = {"route": p.route, "groups": len(p.groups), "first_group_step": float(p.group_readings()["mflow"][0]),
           "network": "computed" if p.network is not None else "not computed"}
call = time.perf_counter() - t1
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"import_s": t1 - t0, "call_s": call, "cpu_s": r.ru_utime + r.ru_stime, **out}))
"""

# (unit, data, lr, steps)
CASES = [
    ("gated", "wine", 0.5, 400),
    ("gelu2", "wine", 0.5, 400),
    ("gelu2", "digits16", 1.0, 600),
    ("gated", "digits64", 0.5, 2000),
]
QUICK = CASES[:2]
RUN_NAMES = {
    "predict": "predict (own unit)",
    "quadratic": "predict (own unit), network=False",
    "train": "nqf.train (own unit)",
    "builtin": "predict (mlp)",
}


def _child(args: list[str], cache: Path) -> dict:
    return fresh_process(_CHILD, args, cache)


def user_units(quick: bool, repeats: int) -> Outcome:
    rows = []
    worst_train, worst_builtin = 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for k, (unit, data, lr, steps) in enumerate(QUICK if quick else CASES):
            args = [unit, data, str(lr), str(steps)]
            runs = {what: _child([what, *args], Path(tmp) / f"{k}-{what}") for what in RUN_NAMES}
            to_train = runs["predict"]["call_s"] / runs["train"]["call_s"]
            to_builtin = runs["predict"]["call_s"] / runs["builtin"]["call_s"]
            worst_train, worst_builtin = max(worst_train, to_train), max(worst_builtin, to_builtin)
            for what, run in runs.items():
                rows.append(
                    {
                        "case": f"{unit} on {data}",
                        "run": RUN_NAMES[what],
                        "call_s": run["call_s"],
                        "cpu_s": run["cpu_s"],
                        "route": run.get("route", "-"),
                        "network": run.get("network", "-"),
                        "ratio_to_train": run["call_s"] / runs["train"]["call_s"] if what != "train" else None,
                        "ratio_to_builtin": to_builtin if what == "predict" else None,
                    }
                )
    return Outcome(
        params={"cases": [list(c) for c in (QUICK if quick else CASES)], "width": 32, "sigma0": 1e-6},
        rows=rows,
        summary={"worst_ratio_to_train": worst_train, "worst_ratio_to_builtin": worst_builtin},
        targets={
            f"predict <= {TRAIN_TARGET} x nqf.train (own unit, fresh processes)": worst_train <= TRAIN_TARGET,
            f"predict <= {BUILTIN_TARGET} x the built-in mlp's predict": worst_builtin <= BUILTIN_TARGET,
        },
        notes=["each call in a fresh process with an empty NQF_CACHE_DIR; call_s after `import jax, equinox, nqf`"],
    )


BENCHMARKS = {"user_units": user_units}
COLUMNS = {"user_units": ["case", "run", "call_s", "cpu_s", "route", "network", "ratio_to_train", "ratio_to_builtin"]}
