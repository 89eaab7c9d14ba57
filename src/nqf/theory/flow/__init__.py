r"""The flow of the order parameter M = W W^T: exact discrete maps and gradient flow.

For the quadratic model f = <W W^T, A(x)>, grad_W L = 2 G(M) W (docs/theory.md section 2),
so every update that acts on W from the left by a matrix built from M closes on M:

- gradient descent, W+ = W - lr 2 G W = B W with B = I - 2 lr G(M):

      M+ = B M B                                                          (gd_map)

- minibatch SGD: the same map with G replaced by the minibatch mean G_b(M)  (sgd_map)

- every update built linearly from the gradients and a buffer V (V0 = 0) with scalar
  coefficients, e.g. heavy ball (optax.sgd(lr, momentum=beta): V+ = g + beta V, W+ = W - lr V+,
  g = 2 G W): (W, V) = (F, V_F) Q for the fixed Q of W0 = F0 Q, so the Gram state
  (M, P = W V^T, Q = V V^T) is closed. For heavy ball, with U = V+ and R = W U^T:

      R  = 2 M G + beta P                 (= W U^T)
      Q+ = 4 G M G + 2 beta (G P + P^T G) + beta^2 Q      (= U U^T)
      M+ = M - lr (R + R^T) + lr^2 Q+
      P+ = R - lr Q+                      (= W+ U^T)                      (optimizer_map)

  Each optimizer carries its step (``nqf.optimizers``); the maps, the jumps' Gram map and the
  Lotka-Volterra map are derived from it.

- gradient flow dW/dt = -lr grad_W L, in units of steps:

      dM/dt = -2 lr (G M + M G)                                           (continuous_flow)

All of these take M0 (d x d) and never the width n: their cost does not depend on n.
Each returns a :class:`FlowResult`. The maps live in ``maps`` (with ``jumps``, the exact
jumps of the adaptive stepping, and ``host``, the numpy engine that compiles nothing), the
gradient flow in ``continuous``, the stability bound in ``stability``, what they share
(checks, recording, the result) in ``base``; this package gathers them.

Linear stability (``stable_lr_bound``, ``nqf.theory.flow.stability`` has the bound): the M-map is
linearly stable at M exactly when GD on W is, lr < 2 / lambda_max of the Hessian of W -> L(W W^T).
"""

from __future__ import annotations

from nqf.core.lazy import lazy_submodules
from nqf.theory.flow.base import FlowResult as FlowResult
from nqf.theory.flow.continuous import continuous_flow as continuous_flow
from nqf.theory.flow.maps import STEPPINGS as STEPPINGS
from nqf.theory.flow.maps import gd_map as gd_map
from nqf.theory.flow.maps import optimizer_map as optimizer_map
from nqf.theory.flow.maps import sgd_map as sgd_map
from nqf.theory.flow.maps import square_factor as square_factor
from nqf.theory.flow.stability import LearningRateBound as LearningRateBound
from nqf.theory.flow.stability import hessian_of_w as hessian_of_w
from nqf.theory.flow.stability import stable_lr_bound as stable_lr_bound

__getattr__ = lazy_submodules(__name__)  # jumps on first use (nqf.theory.flow.jumps)
