"""Many runs at once: ``reproduce`` runs the paper's experiment suite into a results store and
builds the report."""

from nqf.core.lazy import lazy_submodules

__getattr__ = lazy_submodules(__name__)
