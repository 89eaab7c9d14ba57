"""Task ``icl``: in-context linear regression prompts (natural architecture: linear-attention)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from nqf.core.errors import NqfError

from .base import Task, check_float


@dataclass(frozen=True)
class ICL(Task):
    """In-context linear regression prompts for linear attention.

    Per prompt: a task w ~ N(0, Lambda) (Lambda diagonal), inputs x_i, x_q ~ N(0, I_D),
    labels y_i = w . x_i + noise * eps_i. The prompt is (N+1, D+1): rows z_i = (x_i, y_i)
    for the ``context`` pairs, then the query row (x_q, 0); the target is w . x_q
    (+ noise). Defaults follow docs/theory.md: D = 4, Lambda = (4, 3, 2, 1)/10, N = 31.

    Population data matrix for linear-attention (merged W_KQ, w_OV): E[y_q B] is
    nonzero only where w_OV picks the label row and W_KQ maps x to x (entries
    Lambda_bc, singular value ||Lambda||_F), and where w_OV picks input row a and W_KQ
    maps the label column to x_q (entries Lambda_ac, singular values lambda_k). So
    c = (||Lambda||_F / 2, lambda_1/2, ..., lambda_D/2). The largest mode (w_OV on the
    label row, W_KQ = Lambda on the input block) carries the in-context map
    f = (1/N) sum_i y_i x_i^T Lambda x_q. Sample values differ by O(1/sqrt(prompts)).
    """

    name: ClassVar[str] = "icl"
    dim: int = 4
    context: int = 31
    prompts: int = 20000
    task_variances: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)
    noise: float = 0.0

    def _check_options(self):
        self._check_values("task_variances")
        self._check_counts("dim", "context", "prompts")
        check_float(self.name, "noise", self.noise, 0.0, math.inf)
        if len(self.task_variances) != self.dim:
            raise NqfError(
                f"task {self.name}: task_variances needs {self.dim} entries (dim), got {len(self.task_variances)}"
            )

    def _draw(self, rng):
        P, N, D = self.prompts, self.context, self.dim
        w = rng.standard_normal((P, D)) * np.sqrt(np.asarray(self.task_variances))
        x = rng.standard_normal((P, N + 1, D))
        y = np.einsum("pnd,pd->pn", x, w) + self.noise * rng.standard_normal((P, N + 1))
        prompts = np.concatenate([x, y[..., None]], axis=-1)
        prompts[:, N, D] = 0.0  # the query's label is hidden
        return prompts, y[:, N : N + 1]

    def spectrum(self, key=0) -> np.ndarray:
        lam = np.asarray(self.task_variances)
        return np.sort(0.5 * np.concatenate([[np.linalg.norm(lam)], lam]))[::-1]

    def natural_architecture(self):
        return "linear-attention", {"dim": self.dim, "context": self.context}
