"""The exact occupations and losses of uncoupled (diagonal K) Lotka-Volterra modes, evaluated
block by block in (time x mode) tiles so that 10^5 modes and thousands of times fit in cache."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from nqf.theory.lotka_volterra.system import logistic_log_occupation

# The closed form is evaluated in (time x mode) blocks: modes in chunks of about
# _LOGISTIC_MODE_CHUNK (their per-mode constants, 8 x 32 KiB, stay in cache while the
# block's times reuse them) and at most _LOGISTIC_BLOCK_ELEMENTS elements per block (2 MiB
# per complex intermediate), whatever the number of modes and output times.
_LOGISTIC_MODE_CHUNK = 4096
_LOGISTIC_BLOCK_ELEMENTS = 1 << 17


def _regular_occupation(t, r, m0, rho, sigma):
    r"""m(t) at times t (tc,) of modes with c > 0, K > 0 and m0 <= m*, shape (tc, modes).

    From the per-mode r = 4 lr c, m0, rho = m0 / m* = m0 K / c in (0, 1] and sigma = 1 - rho,

        m(t) = m0 / (rho + sigma e^{-x}),   x = r t,

    ``logistic_occupation``'s 1/m = e^{-x}/m0 + (1 - e^{-x})/m* multiplied by m0. Both terms
    of the denominator are >= 0 (no cancellation) and it lies in [rho, 1]: one exp and one
    division per element, m(0) = m0 exactly, and m = m0/rho once e^{-x} is below rounding.
    """
    return m0 / (rho + sigma * jnp.exp(-(r * t[:, None])))


def _general_log_occupation(lr, t, c, k, log_m0):
    """ln m(t) at times t (tc,) of any mode with K >= 0, shape (tc, modes): the log-space
    ``logistic_occupation`` (c <= 0, K = 0, m0 > m*, extreme ranges)."""
    return logistic_log_occupation(c, k, log_m0, lr, t[:, None])


def logistic_evaluate(c, k, m0, lr, m_ref, ts, batch_size, save_occupations):
    """Losses minus loss0, excess losses and optionally the (T, m) occupations of
    uncoupled logistic modes at times ``ts`` (float64 numpy).

    Modes with c > 0, K > 0 and m0 <= m* inside the float range (the theory's case) take
    the one-exp form ``_regular_occupation``; every other mode the log-space form of
    ``logistic_occupation``. The per-mode loss and excess-loss terms m (K m / 2 - c) and
    delta (K delta / 2 - w) are summed block by block (``_logistic_map``).
    """
    c, k, m0, m_ref = (np.asarray(a, dtype=np.float64) for a in (c, k, m0, m_ref))
    ts = np.asarray(ts, dtype=np.float64)
    num_modes, num_times = c.size, ts.size
    r = 4.0 * lr * c  # the association of logistic_log_occupation's x = 4 lr c t
    # the float range of the device arrays (float32 without jax_enable_x64): rho >= rho_min
    # makes every e^{-x} that still moves rho + sigma e^{-x} (> eps rho) a normal float
    # (XLA flushes subnormals to 0)
    tiny, rho_min = (1e-300, 1e-250) if jnp.result_type(float) == jnp.float64 else (1e-30, 1e-25)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        rho = m0 * k / c
        regular = (c > 0) & (k > 0) & (r >= tiny) & (m0 >= tiny) & (m0 <= 1.0 / tiny)
        regular &= np.isfinite(rho) & (rho >= rho_min) & (rho <= 1.0)
    weights = (0.5 * k, c, m_ref, c - k * m_ref)  # K/2, c, m_ref, w
    reg, gen = np.flatnonzero(regular), np.flatnonzero(~regular)
    # per kind: the per-mode constants of its occupation and their padding values (padding
    # modes have m = 1 and zero weights: they add exactly 0)
    kinds = (
        (reg, (r, m0, rho, 1.0 - rho), (0.0, 1.0, 1.0, 0.0)),
        (gen, (c, k, np.log(m0)), (0.0, 0.0, 0.0)),
    )
    args: list[tuple[jax.Array, ...] | None] = []
    widths: list[int] = []
    for idx, consts, pads in kinds:
        if idx.size == 0:
            args.append(None)
            continue
        chunks = -(-idx.size // _LOGISTIC_MODE_CHUNK)
        width = -(-idx.size // chunks)  # balanced chunks: less than one chunk of padding
        arrays = []
        for a, v in zip(consts + weights, pads + (0.0,) * 4, strict=True):
            padded = np.full(chunks * width, v)
            padded[: idx.size] = a[idx]
            arrays.append(jnp.asarray(padded.reshape(chunks, width)))
        args.append(tuple(arrays))
        widths.append(width)
    time_chunk = max(1, min(batch_size, num_times, _LOGISTIC_BLOCK_ELEMENTS // max(widths)))
    time_chunks = -(-num_times // time_chunk)
    padded_ts = np.zeros(time_chunks * time_chunk)  # t = 0 pads: valid, dropped below
    padded_ts[:num_times] = ts
    losses, excess, blocks = _logistic_map(
        args[0],
        args[1],
        jnp.asarray(lr),
        jnp.asarray(padded_ts.reshape(time_chunks, time_chunk)),
        save_occupations,
    )
    losses = np.asarray(losses).reshape(-1)[:num_times]
    excess = np.asarray(excess).reshape(-1)[:num_times]
    if not save_occupations:
        return losses, excess, None
    parts = [
        (idx, np.asarray(b).reshape(time_chunks * time_chunk, -1)[:num_times, : idx.size])
        for (idx, _, _), b in zip(kinds, blocks, strict=True)
        if b is not None
    ]
    if gen.size:  # ln m of these modes: exp here keeps subnormal m (XLA flushes them to 0)
        parts[-1] = (gen, np.exp(parts[-1][1]))
    if len(parts) == 1:
        return losses, excess, np.ascontiguousarray(parts[0][1])
    ms = np.empty((num_times, num_modes))
    for idx, part in parts:
        ms[:, idx] = part
    return losses, excess, ms


@functools.partial(jax.jit, static_argnames=("save_occupations",))
def _logistic_map(regular_args, general_args, lr, ts, save_occupations):
    """Losses minus loss0 and excess losses at ts (time chunks, time chunk), and with
    ``save_occupations`` the occupations of each kind of mode (of the general kind their
    logarithms), (time chunks, time chunk, chunks x width) or None.

    ``regular_args`` / ``general_args``: (chunks, width) arrays, the per-mode constants of
    ``_regular_occupation`` / ``_general_log_occupation`` then K/2, c, m_ref, w; None when no
    mode is of that kind. A map over the time chunks (rows of ts) of a scan over the mode
    chunks: memory is one block, (time chunk x width), whatever the sizes.
    """

    def kind(t, args, occupation, log_space):
        def step(acc, chunk):
            *consts, half_k, c, m_ref, w = chunk
            saved = occupation(t, *consts)
            m = jnp.exp(saved) if log_space else saved
            delta = m - m_ref
            # both sums in one pass over the block: a complex sum adds the real parts
            # (loss terms) and the imaginary parts (excess terms) separately
            terms = jax.lax.complex(m * (half_k * m - c), delta * (half_k * delta - w))
            return acc + jnp.sum(terms, axis=1), (saved if save_occupations else None)

        acc, ms = jax.lax.scan(step, jnp.zeros_like(jax.lax.complex(t, t)), args)
        if save_occupations:  # (chunks, tc, width) -> (tc, chunks x width)
            ms = jnp.moveaxis(ms, 0, 1).reshape(t.size, -1)
        return acc, ms

    def block(t):
        acc = jnp.zeros_like(jax.lax.complex(t, t))
        ms: list[jax.Array | None] = []
        for args, occupation, log_space in (
            (regular_args, _regular_occupation, False),
            (general_args, functools.partial(_general_log_occupation, lr), True),
        ):
            if args is None:
                ms.append(None)
                continue
            part, m = kind(t, args, occupation, log_space)
            acc = acc + part
            ms.append(m)
        return jnp.real(acc), jnp.imag(acc), tuple(ms)

    return jax.lax.map(block, ts)
