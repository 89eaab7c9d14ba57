"""Floor 0: what every stage shares: errors, floating-point precision, the compilation cache,
stored traced programs, minibatch sampling and reading switch steps off a loss curve.

Nothing here imports another nqf package."""

from nqf.core.lazy import lazy_submodules

__getattr__ = lazy_submodules(__name__)
