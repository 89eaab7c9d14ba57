"""``nqf.train`` against an independent training loop written here (issue 24).

``train_vs_independent``: GD on the tanh network f(x) = sum_i a_i tanh(v_i . x), full batch,
the mean squared loss, the same W0 and steps, both warm (a first call compiles; the second is
timed). The independent loop is plain JAX + optax, no nqf code: ``tanh(X @ V) @ A.T`` in a
``jax.lax.fori_loop`` under ``jax.jit``, returning the final weights and loss; ``nqf.train``
records its default 16 checkpoints (``checkpoints=16``). Cases: the staircase (N = 256,
D = 8, K = 4) at widths 32, 256, 1024, 4096 and 2000 steps (quick: 500), and synthetic data
with D = 64, K = 10, N = 10^4, width 256 and 200 steps (quick: 50). Both must end at the same
loss (1e-10 relative), which checks that they train the same network.
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


BENCHMARKS = {"train_vs_independent": train_vs_independent}
COLUMNS = {"train_vs_independent": ["case", "width", "steps", "nqf_train_s", "independent_s", "ratio", "final_loss",
                                    "same_loss"]}
