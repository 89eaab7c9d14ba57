"""The names a user may pass for a choice (routes, steppings, engines, models, losses),
in one JAX-free place.

The library's modules re-export these tuples, and the command line and the sweep spec check their
arguments against them before JAX is imported, so a bad name costs no startup and a new name
needs one edit.
"""

from __future__ import annotations

# what the M-flow is driven by: the moments of the data, the samples, or the cheaper of the two
ROUTES = ("auto", "moments", "samples")
# the M map every step, or exact steps where M moves and jumps across plateaus
STEPPINGS = ("adaptive", "every")
# where the stages after the data matrices run (nqf.theory.flow.host)
ENGINES = ("auto", "compiled", "numpy")
# how the network's own prediction is computed (nqf.theory.departure.mean_field)
NETWORK_METHODS = ("auto", "mean_field", "networks")
# what nqf.train trains: the network, or its quadratic model (closed on M)
MODELS = ("network", "quadratic")
LOSSES = ("squared", "cross_entropy")
