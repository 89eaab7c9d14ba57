"""Many runs at once: ``sweep`` scans a grid of configurations (predict or compare) on one
machine or a cluster into a results store, with its table and figures. (``nqf reproduce``, the
paper's suite, lives apart in ``nqf_paper``.)"""

from nqf.core.lazy import lazy_submodules

__getattr__ = lazy_submodules(__name__)
