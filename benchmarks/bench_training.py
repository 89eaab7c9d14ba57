"""``nqf.train`` against an independent training loop written here (issue 24).

``train_vs_independent``: GD on the tanh network f(x) = sum_i a_i tanh(v_i . x), full batch,
the mean squared loss, the same W0 and steps, both warm (a first call compiles; the second is
timed). The independent loop is plain JAX + optax, no nqf code: ``tanh(X @ V) @ A.T`` in a
``jax.lax.fori_loop`` under ``jax.jit``, returning the final weights and loss; ``nqf.train``
records its default 16 checkpoints (``checkpoints=16``). Cases: the staircase (N = 256,
D = 8, K = 4) at widths 32, 256, 1024, 4096 and 2000 steps (quick: 500), and synthetic data
with D = 64, K = 10, N = 10^4, width 256 and 200 steps (quick: 50). Both must end at the same
loss (1e-10 relative), which checks that they train the same network.

``readout_vs_generic``: ``nqf.train`` of the built-in units that declare a ``Readout`` (the
layer as matrix products, ``network_batch``) against the same architecture with
``readout=None`` (phi vmapped over units and samples), on each one's natural task: tokens
(attention, widths 32 and 256), experts (moe: 4 experts, and 64), fourier (conv1d, per-position
readout, widths 32 and 256) and icl (linear attention, width 32). GD, lr 0.05, sigma0 1e-2,
16 checkpoints, both warm, taken in turn, best of ``repeats``; time per step = call / steps.
The losses must agree to 1e-12.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from _timing import Outcome

TARGET = 1.5  # nqf.train / independent loop


def _independent(K: int, steps: int, lr: float):
    optimizer = optax.sgd(lr)

    def loss(params, X, Y):
        A, V = params
        return 0.5 * jnp.mean(jnp.sum((jnp.tanh(X @ V) @ A.T - Y) ** 2, axis=1))

    @jax.jit
    def run(A, V, X, Y):
        params = (A, V)
        state = optimizer.init(params)

        def step(_, carry):
            params, state = carry
            grads = jax.grad(loss)(params, X, Y)
            updates, state = optimizer.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        params, _ = jax.lax.fori_loop(0, steps, step, (params, state))
        return params, loss(params, X, Y)

    return run


def _timed(fn):
    jax.block_until_ready(fn())  # warm: compile
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - start, out


def train_vs_independent(quick: bool, repeats: int) -> Outcome:
    import nqf
    from nqf.architectures.architecture import init_weights
    from nqf.core.sampling import training_keys

    rows, ratios = [], {}
    steps = 500 if quick else 2000
    X, Y = nqf.get_task("staircase").generate(0)
    rng = np.random.default_rng(0)
    big_X = rng.standard_normal((10000, 64))
    big_Y = np.tanh(big_X @ rng.standard_normal((64, 10)) / 8.0)
    cases = [("staircase", X, Y, n, steps, 0.05) for n in (32, 256, 1024, 4096)]
    cases.append(("D = 64, N = 10^4", big_X, big_Y, 256, 50 if quick else 200, 0.05))
    for label, X, Y, width, case_steps, lr in cases:
        X, Y = jnp.asarray(X), jnp.asarray(Y)
        D, K = X.shape[1], Y.shape[1]
        arch = nqf.get_architecture("mlp", activation="tanh", inputs=D, outputs=K)
        config = nqf.TrainConfig(optimizer="gd", lr=lr, steps=case_steps, width=width, sigma0=1e-2, checkpoints=16)
        W0 = init_weights(arch, training_keys(0)[0], width, config.sigma0, jnp.float64)
        nqf_s, result = _timed(lambda: nqf.train(arch, X, Y, config).loss)  # noqa: B023
        run = _independent(K, case_steps, lr)
        ind_s, (_, ind_loss) = _timed(lambda: run(W0[:K], W0[K:], X, Y))  # noqa: B023
        final = float(np.asarray(result)[-1])
        agree = abs(final - float(ind_loss)) <= 1e-10 * abs(float(ind_loss))
        ratio = nqf_s / ind_s
        ratios[f"{label}, width {width}"] = ratio
        rows.append({"case": label, "width": width, "steps": case_steps, "nqf_train_s": nqf_s,
                     "independent_s": ind_s, "ratio": ratio, "final_loss": final, "same_loss": agree})
    return Outcome(
        params={"steps": steps, "optimizer": "gd", "float": "float64"},
        rows=rows,
        summary={"max_ratio": max(ratios.values())},
        targets={
            f"nqf.train <= {TARGET} x the independent loop at every size": all(r <= TARGET for r in ratios.values()),
            "the same final loss (1e-10)": all(r["same_loss"] for r in rows),
        },
        notes=["warm: each call made once to compile, the second timed; nqf.train end to end (its checks, "
               "16 checkpoints), the independent loop the jitted fori_loop alone"],
    )


READOUT_CASES = (  # task, its options, widths, steps (full, quick)
    ("tokens", {}, (32, 256), (400, 100)),
    ("experts", {}, (4,), (4000, 1000)),
    ("experts", {"experts": 64}, (64,), (1000, 250)),
    ("fourier", {}, (32, 256), (200, 50)),
    ("icl", {}, (32,), (40, 10)),
)
READOUT_SLOWER = 1.25  # readout / generic per step, at most, in every case


def readout_vs_generic(quick: bool, repeats: int) -> Outcome:
    import dataclasses

    import nqf

    rows = []
    for task_name, task_options, widths, (full_steps, quick_steps) in READOUT_CASES:
        task = nqf.get_task(task_name, **task_options)
        X, Y = map(jnp.asarray, task.generate(0))
        name, options = task.natural_architecture()
        arch = nqf.get_architecture(name, **options)
        archs = {"generic": dataclasses.replace(arch, readout=None), "readout": arch}
        steps = quick_steps if quick else full_steps
        for width in widths:
            config = nqf.TrainConfig(optimizer="gd", lr=0.05, steps=steps, width=width, sigma0=1e-2, checkpoints=16)
            losses = {k: np.asarray(nqf.train(a, X, Y, config).loss) for k, a in archs.items()}  # compile
            best = dict.fromkeys(archs, np.inf)
            for _ in range(max(repeats, 2)):
                for k, a in archs.items():
                    seconds, _ = _timed(lambda: nqf.train(a, X, Y, config).loss)  # noqa: B023
                    best[k] = min(best[k], seconds / steps)
            same = bool(np.allclose(losses["readout"], losses["generic"], rtol=1e-12, atol=0))
            rows.append({"task": task_name, "architecture": name, "samples": int(X.shape[0]), "width": width,
                         "steps": steps, "generic_ms_per_step": 1e3 * best["generic"],
                         "readout_ms_per_step": 1e3 * best["readout"], "speedup": best["generic"] / best["readout"],
                         "same_loss": same})
    return Outcome(
        params={"optimizer": "gd", "lr": 0.05, "sigma0": 1e-2, "checkpoints": 16, "float": "float64"},
        rows=rows,
        summary={f"{r['task']} ({r['architecture']}) n = {r['width']}": r["speedup"] for r in rows},
        targets={
            "the same losses (1e-12)": all(r["same_loss"] for r in rows),
            f"readout never slower than {READOUT_SLOWER} x generic": all(
                1 / r["speedup"] <= READOUT_SLOWER for r in rows
            ),
        },
        notes=["warm: each train compiled by a first call; the two paths timed in turn, best of the repeats; "
               "generic = dataclasses.replace(arch, readout=None)"],
    )


BENCHMARKS = {"train_vs_independent": train_vs_independent, "readout_vs_generic": readout_vs_generic}
COLUMNS = {"train_vs_independent": ["case", "width", "steps", "nqf_train_s", "independent_s", "ratio", "final_loss",
                                    "same_loss"],
           "readout_vs_generic": ["task", "architecture", "samples", "width", "steps", "generic_ms_per_step",
                                  "readout_ms_per_step", "speedup", "same_loss"]}
