"""Stage 2, the theory: from A(x) and the data to predicted training. A package per concept:

- ``data_matrices``: the statistics of A(x) over the data (C, K[M], G(M), the loss): the
  protocol every implementation meets, samples, chunks, moments, the population closed form;
- ``flow``: the exact maps of each optimizer on M = W W^T, their adaptive jumps, the
  gradient flow, the stability bound, and the numpy engine;
- ``lotka_volterra``: the modes (the shared eigenbasis), the Lotka-Volterra system, its
  closed forms, its discrete maps and its ODE solves;
- ``singular_limit`` (module): the limit m0 -> 0, step times and plateaus;
- ``scaling`` (module): power laws over many modes;
- ``predict``: all of the above for one configuration, or a grid of them;
- ``departure``: where the network leaves the quadratic model, and the corrected steps.
- ``costs`` (module): the memory and time of a structure, a comparison and a departure, from
  their sizes, before any compute.

Imports only ``core`` and ``architectures`` (the stage below).
"""

from nqf.core.lazy import lazy_submodules

__getattr__ = lazy_submodules(__name__)  # nqf.theory.flow, ... on first use
