"""Stage 3, training the real networks: tasks (data and architecture together), training runs
with several optimizers (``runs``) and the closure diagnostic (does training close on M?).

Imports ``core``, ``architectures`` and ``theory`` (tasks use its data-file checks)."""

from nqf.core.lazy import lazy_submodules

__getattr__ = lazy_submodules(__name__)
