r"""The staircase task as E1 and E2 use it: data, architecture and the theory's modes.

The staircase (docs/theory.md section 3, worked case): y = U diag(s) V^T x with whitened
inputs, learned by the tanh perceptron (``mlp``). Its growing modes are
q_k = (u_k, v_k)/sqrt 2 with c_k = q_k^T C q_k = s_k / 2, interactions
K_kj = E[(q_k^T A q_k)(q_j^T A q_j)] (1/4 on the diagonal) and LV fixed point
m_k* = 2 s_k; a mode's switch-on threshold is m_k*/2 for every model.

Call these under ``jax.enable_x64(True)``: the experiments run in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from nqf.core.errors import NqfError


def task_dict(inputs: int, outputs: int, singular_values, samples: int, data_seed: int) -> dict[str, Any]:
    """The task part of a run's config (JSON-able, part of the run's key)."""
    return {
        "inputs": int(inputs),
        "outputs": int(outputs),
        "singular_values": [float(s) for s in singular_values],
        "samples": int(samples),
        "data_seed": int(data_seed),
    }


def check_staircase(experiment: str, singular_values, inputs: int, outputs: int, samples: int) -> None:
    """Strictly decreasing positive singular values (so the modes' order is the growth order), sizes that fit."""
    s = tuple(singular_values)
    if not s or any(not (v > 0) for v in s):
        raise NqfError(f"{experiment}: singular_values must be positive numbers, got {s!r}")
    if any(a <= b for a, b in pairwise(s)):
        raise NqfError(f"{experiment}: singular_values must be strictly decreasing (mode k = k-th fastest), got {s!r}")
    if len(s) > min(inputs, outputs):
        raise NqfError(f"{experiment}: {len(s)} singular values need inputs and outputs >= {len(s)}")
    if samples < inputs:
        raise NqfError(f"{experiment}: whitening needs samples >= inputs ({inputs}), got {samples}")


@dataclass(frozen=True)
class StaircaseSetup:
    """arch; X (N, D), Y (N, K); Q (d, m) mode basis; c (m,) growth; K (m, m) interactions; m_star (m,)."""

    task: Any
    arch: Any
    X: Any
    Y: Any
    Q: np.ndarray
    c: np.ndarray
    K: np.ndarray
    m_star: np.ndarray

    @property
    def thresholds(self) -> np.ndarray:
        """Switch-on thresholds m_k*/2 (docs/theory.md section 5)."""
        return 0.5 * self.m_star


def setup(task: dict[str, Any]) -> StaircaseSetup:
    """Draw the staircase of ``task`` (see :func:`task_dict`) in float64 and compute its modes' LV data.

    c_k = q_k^T C q_k with C = E[y A(x)] = contract(Y); K from the structured
    representation (``quad``), never an N x d x d stack.
    """
    from nqf.architectures.architecture import structure
    from nqf.theory.lotka_volterra.system import LotkaVolterra, fixed_point
    from nqf.training.tasks import get_task

    staircase = get_task(
        "staircase",
        inputs=task["inputs"],
        outputs=task["outputs"],
        singular_values=tuple(task["singular_values"]),
        samples=task["samples"],
    )
    arch = staircase.architecture()
    X, Y = staircase.generate(task["data_seed"], "float64")
    Q = np.asarray(staircase.mode_basis(task["data_seed"]))  # type: ignore[attr-defined]  # a Staircase task
    S = structure(arch, X)
    C = np.asarray(S.contract(Y))
    c = np.einsum("im,ij,jm->m", Q, C, Q)
    quad = np.asarray(S.quad(Q))  # (N, K, m): q_k^T A_c(x_n) q_k
    K = np.einsum("ncm,ncl->ml", quad, quad) / quad.shape[0]
    m_star = fixed_point(LotkaVolterra(c=c, K=K, m0=np.ones_like(c), lr=1.0))
    return StaircaseSetup(staircase, arch, X, Y, Q, c, K, np.asarray(m_star))


def basis_overlap(prediction_basis, Q) -> float:
    """min_k |p_k . q_k|: 1 when predict's modes (sorted by growth) are the task's modes in the same order."""
    P = np.asarray(prediction_basis, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    return float(np.min(np.abs(np.sum(P[:, : Q.shape[1]] * Q, axis=0))))
