"""The init of a prediction: W0 (drawn as ``nqf.train`` draws it, or given and checked), its
occupations m_k(0) = |W0^T q_k|^2 in log space, and the check that they are resolvable in the
working dtype (the docstring of
    ``nqf.theory.predict.pipeline``)."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture, check_width, init_weights
from nqf.core.errors import NqfError
from nqf.core.precision import occupation_floor, underflow_remedy
from nqf.core.sampling import training_keys
from nqf.theory.predict.result import PredictConfig


def initial_weights(arch: Architecture, config: PredictConfig, W0, dtype):
    """(W0 (d, n) as ``dtype``, whether it was given): ``W0`` checked, or drawn as ``nqf.train``
    draws it (``training_keys(config.seed)[0]``, scale ``config.sigma0``) when None."""
    if W0 is None:  # init_weights checks the width
        return init_weights(arch, training_keys(int(config.seed))[0], config.width, float(config.sigma0), dtype), False
    W0 = np.asarray(W0)
    if W0.ndim != 2 or W0.shape[0] != arch.dim:
        raise NqfError(f"{arch.name}: W0 must have shape (d={arch.dim}, n), got {W0.shape}")
    if not np.all(np.isfinite(W0)):
        raise NqfError("W0 contains non-finite values")
    if W0.shape[1] != config.width:
        raise NqfError(f"W0 has {W0.shape[1]} units (columns) but the width is {config.width}")
    check_width(arch, W0.shape[1])
    return jnp.asarray(W0, dtype=dtype), True


def log_occupations(basis, W0) -> np.ndarray:
    """ln m_k(0) = ln |W0^T q_k|^2 for every column q_k of basis (d, m), without underflow: (m,).

    Computed in float64 as 2 ln s + ln |(W0 / s)^T q_k|^2 with s = max |W0_ij|, so that
    W0 W0^T may underflow (sigma0 = 1e-300) and m_k(0) is still known; -inf where the
    component is exactly zero (W0 = 0, or W0 orthogonal to q_k).
    """
    W = np.asarray(W0, dtype=np.float64)
    Q = np.asarray(basis, dtype=np.float64)
    scale = float(np.max(np.abs(W))) if W.size else 0.0
    if scale == 0.0:
        return np.full(Q.shape[1], -np.inf)
    proj = Q.T @ (W / scale)
    with np.errstate(divide="ignore"):
        return 2.0 * math.log(scale) + np.log(np.sum(proj * proj, axis=1))


def _exp_text(log_value: float) -> str:
    """e^log_value as 'a.bce-N', also far outside float64's range."""
    exponent10 = log_value / math.log(10.0)
    e = math.floor(exponent10)
    return f"{10 ** (exponent10 - e):.2g}e{e:+d}".replace("e+", "e")


def _init_text(config: PredictConfig, given_W0: bool) -> str:
    """How a refusal names the init: the given W0, or sigma0 with n sigma0^2."""
    if given_W0:
        return "the given W0"
    s0 = float(config.sigma0)
    n_s2 = _exp_text(math.log(config.width) + 2.0 * math.log(s0))
    return f"sigma0 = {s0:g} (n sigma0^2 = {config.width} * {s0:g}^2 = {n_s2})"


def check_init_scale(log_m0, dtype, config: PredictConfig, given_W0: bool) -> None:
    """Refuse an init whose smallest growing-mode occupation underflows ``dtype`` (the docstring of
    ``nqf.theory.predict.pipeline``), or whose largest overflows it (an init far from small: W0 W0^T
    and the LV system would hold inf).

    log_m0: (g,) ln m_k(0) of the growing modes (-inf: exactly zero, allowed: never switches).
    The floor is ``occupation_floor(dtype)`` = tiny / u. The message gives m_k(0), n sigma0^2,
    the floor, and the smallest sigma0 that passes: sigma0 sqrt(floor / min_k m_k(0)) (m_k(0)
    scales with sigma0^2 for a fixed draw).
    """
    log_m0 = np.asarray(log_m0, dtype=np.float64)
    present = np.isfinite(log_m0)
    if not present.any():
        return
    floor = occupation_floor(dtype)
    name, info = np.dtype(dtype).name, np.finfo(np.dtype(dtype))
    top = int(np.flatnonzero(present)[np.argmax(log_m0[present])])
    if log_m0[top] > math.log(float(info.max)):
        raise NqfError(
            f"{_init_text(config, given_W0)}: the initial occupation of mode {top + 1}, m_k(0) = |W0^T q_k|^2 = "
            f"{_exp_text(float(log_m0[top]))}, overflows {name} (largest {info.max:.2g}); the theory is about "
            "small inits: lower sigma0 (or scale W0 down)"
        )
    k = int(np.flatnonzero(present)[np.argmin(log_m0[present])])
    low = float(log_m0[k])
    if low >= math.log(floor):
        return
    factor = math.exp(0.5 * (math.log(floor) - low))
    subject = _init_text(config, given_W0)
    if given_W0:
        remedy = underflow_remedy(dtype, None).replace("scale W0 up", f"scale W0 up by at least {factor:.2g}")
    else:
        remedy = underflow_remedy(dtype, float(config.sigma0) * factor)
    raise NqfError(
        f"{subject}: the initial occupation of mode {k + 1}, m_k(0) = |W0^T q_k|^2 = {_exp_text(low)}, underflows "
        f"{name} (smallest normal {info.tiny:.2g}; the M-flow and the LV need m_k(0) >= tiny / u = {floor:.2g}); "
        f"{remedy}"
    )
