"""``nqf.train`` against an independent training loop written here.

``train_vs_independent``: GD on the tanh network f(x) = sum_i a_i tanh(v_i . x), full batch,
the mean squared loss, the same W0 and steps, all warm (a first call compiles; then up to 3
rounds of the calls in turn, the best of each). The independent loop is plain JAX + optax, no
nqf code: ``tanh(X @ V) @ A.T`` in a ``jax.lax.fori_loop`` under ``jax.jit``, returning the
final weights and loss; ``nqf.train`` records 16 checkpoints (``checkpoints=16``), and again
every step with the occupations of 4 directions (``every_step_s``: what ``compare`` records up
to 20000 steps). Cases: the staircase (N = 256, D = 8, K = 4) at widths 32, 256, 1024, 4096
and 2000 steps (quick: 500), and synthetic data with D = 64, K = 10, N = 10^4, width 256 and
200 steps (quick: 50). All must end at the same loss (1e-10 relative), which checks that they train the same network.

``_independent_icl`` (used by ``bench_predict.predict_icl``): the same kind of loop for merged
linear attention (in-context regression), f(X_p) = sum_i w_OV^i . S_p W_KQ^i z_q as einsums over
the heads, in several algebraically equal forms (see its docstring); ``icl_blocks`` splits nqf's
W0 into (W_KQ, w_OV) for it (setup only).

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


def _independent_icl(context: int, steps: int, lr: float, form: str = "moments"):
    """GD on merged linear attention (in-context regression), plain JAX + optax, no nqf code.

    Prompts X (P, context+1, D+1): context tokens z_j = (x_j, y_j), then the query z_q = (x_q, 0).
    Head i has W_KQ^i (D+1, D+1) and w_OV^i (D+1,); the layer sums the n heads,

        f(X_p) = sum_i w_OV^i . (1/context) sum_j z_j (z_j . W_KQ^i z_q) = sum_i w_OV^i . S_p W_KQ^i z_q,

    S_p = (1/context) sum_j z_j z_j^T, written as einsums over the heads: KQ (D+1, D+1, n),
    OV (D+1, n). ``form``: "tokens" (attention as written: scores over the context, then the
    attended sum, every step), "moments" (S_p formed from the tokens inside the loss, every
    step, then S_p W_KQ^i z_q), "precomputed" (S_p formed once, before the loop) or "factored"
    (the same sum regrouped as f(X_p) = <F_p, M>, M[a, c, b] = sum_i w_OV^i_a W_KQ^i_cb the
    heads summed first, F_p[a, c, b] = S_p[a, c] (z_q)_b formed once before the loop: one
    (P, (D+1)^3) matrix-vector product a step; the parameters and their gradients are still
    KQ and OV, through M). All four are the same function of (KQ, OV). The loss is
    (1/2) mean_p (f(X_p) - Y_p)^2 (Y: (P, 1)); full-batch GD (``optax.sgd``) in a
    ``jax.lax.fori_loop`` under ``jax.jit``. "gram": the factored loss expanded once, before
    the loop, into the data's sufficient statistics, (1/2) m^T G m - b . m + c with m = vec(M),
    G = F^T F / P, b = F^T Y / P, c = Y^T Y / (2P): the same full-batch loss and gradient at
    every step (exact up to rounding), at a cost per step independent of P.
    ``run(KQ, OV, X, Y)`` -> (final (KQ, OV), final loss (1/2) mean_p (f(X_p) - Y_p)^2)."""
    if form not in ("tokens", "moments", "precomputed", "factored", "gram"):
        raise ValueError(f"form must be 'tokens', 'moments', 'precomputed', 'factored' or 'gram', got {form!r}")
    optimizer = optax.sgd(lr)

    def moments(tokens):
        return jnp.einsum("pja,pjc->pac", tokens, tokens) / context  # (P, D+1, D+1)

    def heads_summed(KQ, OV):
        return jnp.einsum("ai,cbi->acb", OV, KQ).reshape(-1)  # m = vec(M), M: (D+1, D+1, D+1)

    def layer(KQ, OV, data):
        if form in ("factored", "gram"):
            return data[0] @ heads_summed(KQ, OV)  # (P,)
        first, queries = data  # the tokens (P, N, D+1), or S (P, D+1, D+1); the queries (P, D+1)
        keyed = jnp.einsum("abi,pb->pai", KQ, queries)  # W_KQ^i z_q: (P, D+1, n)
        if form == "tokens":
            scores = jnp.einsum("pja,pai->pji", first, keyed)  # z_j . W_KQ^i z_q: (P, N, n)
            attended = jnp.einsum("pja,pji->pai", first, scores) / context  # (P, D+1, n)
        else:
            S = moments(first) if form == "moments" else first
            attended = jnp.einsum("pac,pci->pai", S, keyed)  # S_p W_KQ^i z_q
        return jnp.einsum("ai,pai->p", OV, attended)  # (P,)

    def loss(params, data, Y):
        KQ, OV = params
        return 0.5 * jnp.mean((layer(KQ, OV, data) - Y[:, 0]) ** 2)

    def gram_loss(params, stats):
        G, b, c = stats
        m = heads_summed(*params)
        return 0.5 * m @ G @ m - b @ m + c

    @jax.jit
    def run(KQ, OV, X, Y):
        tokens, queries = X[:, :context], X[:, context]
        if form in ("factored", "gram"):
            F = jnp.einsum("pac,pb->pacb", moments(tokens), queries)  # (P, D+1, D+1, D+1)
            data = (F.reshape(F.shape[0], -1),)
        else:
            data = (moments(tokens) if form == "precomputed" else tokens, queries)
        if form == "gram":
            F, y, P = data[0], Y[:, 0], Y.shape[0]
            stats = (F.T @ F / P, F.T @ y / P, 0.5 * (y @ y) / P)
            step_loss = lambda params: gram_loss(params, stats)  # noqa: E731
        else:
            step_loss = lambda params: loss(params, data, Y)  # noqa: E731
        params = (KQ, OV)
        state = optimizer.init(params)

        def step(_, carry):
            params, state = carry
            grads = jax.grad(step_loss)(params)
            updates, state = optimizer.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        params, _ = jax.lax.fori_loop(0, steps, step, (params, state))
        return params, loss(params, data, Y)

    return run


def icl_blocks(arch, W0):
    """nqf's W0 (d, n) split into the linear-attention blocks in ``arch.blocks`` order:
    (KQ (D+1, D+1, n), OV (D+1, n)) for ``_independent_icl`` (setup; nqf's layout only)."""
    n = W0.shape[1]
    parts = {b.name: W0[b.start : b.stop].reshape(*b.shape, n) for b in arch.blocks}
    return parts["W_KQ"], parts["w_OV"]


def _timed(fn):
    jax.block_until_ready(fn())  # warm: compile
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - start, out


def _best_interleaved(calls: dict, repeats: int) -> tuple[dict, dict]:
    """Each call once to compile, then ``repeats`` rounds of all of them in turn: the best time of
    each (a shared machine's load hits the calls of one round alike) and each one's last output."""
    out = {name: jax.block_until_ready(call()) for name, call in calls.items()}
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            out[name] = jax.block_until_ready(call())
            best[name] = min(best[name], time.perf_counter() - start)
    return best, out


def train_vs_independent(quick: bool, repeats: int) -> Outcome:
    import dataclasses

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
        # as compare records: every step, with the occupations of 4 directions (a mode basis)
        every = dataclasses.replace(config, checkpoints=None)
        basis = np.linalg.qr(rng.standard_normal((arch.dim, 4)))[0]
        run = _independent(K, case_steps, lr)
        calls = {
            "nqf": lambda: nqf.train(arch, X, Y, config).loss,  # noqa: B023
            "every": lambda: nqf.train(arch, X, Y, every, basis=basis).loss,  # noqa: B023
            "independent": lambda: run(W0[:K], W0[K:], X, Y),  # noqa: B023
        }
        best, out = _best_interleaved(calls, min(repeats, 3))
        nqf_s, every_s, ind_s = best["nqf"], best["every"], best["independent"]
        result, every_loss, (_, ind_loss) = out["nqf"], out["every"], out["independent"]
        final = float(np.asarray(result)[-1])
        agree = abs(final - float(ind_loss)) <= 1e-10 * abs(float(ind_loss))
        agree &= abs(float(np.asarray(every_loss)[-1]) - final) <= 1e-10 * abs(final)
        ratio = nqf_s / ind_s
        ratios[f"{label}, width {width}"] = ratio
        rows.append(
            {
                "case": label,
                "width": width,
                "steps": case_steps,
                "nqf_train_s": nqf_s,
                "independent_s": ind_s,
                "ratio": ratio,
                "every_step_s": every_s,
                "ratio_every_step": every_s / ind_s,
                "final_loss": final,
                "same_loss": agree,
            }
        )
    return Outcome(
        params={"steps": steps, "optimizer": "gd", "float": "float64"},
        rows=rows,
        summary={"max_ratio": max(ratios.values())},
        targets={
            f"nqf.train <= {TARGET} x the independent loop at every size": all(r <= TARGET for r in ratios.values()),
            "the same final loss (1e-10)": all(r["same_loss"] for r in rows),
        },
        notes=[
            "warm: each call made once to compile, then up to 3 rounds of the three in turn, the best of each; "
            "nqf.train end to end (its checks, "
            "16 checkpoints; every_step_s: every step, with 4 occupations), the independent loop the "
            "jitted fori_loop alone"
        ],
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
            rows.append(
                {
                    "task": task_name,
                    "architecture": name,
                    "samples": int(X.shape[0]),
                    "width": width,
                    "steps": steps,
                    "generic_ms_per_step": 1e3 * best["generic"],
                    "readout_ms_per_step": 1e3 * best["readout"],
                    "speedup": best["generic"] / best["readout"],
                    "same_loss": same,
                }
            )
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
        notes=[
            "warm: each train compiled by a first call; the two paths timed in turn, best of the repeats; "
            "generic = dataclasses.replace(arch, readout=None)"
        ],
    )


BENCHMARKS = {"train_vs_independent": train_vs_independent, "readout_vs_generic": readout_vs_generic}
COLUMNS = {
    "train_vs_independent": [
        "case",
        "width",
        "steps",
        "nqf_train_s",
        "independent_s",
        "ratio",
        "every_step_s",
        "ratio_every_step",
        "final_loss",
        "same_loss",
    ],
    "readout_vs_generic": [
        "task",
        "architecture",
        "samples",
        "width",
        "steps",
        "generic_ms_per_step",
        "readout_ms_per_step",
        "speedup",
        "same_loss",
    ],
}
