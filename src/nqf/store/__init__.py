"""The results store (atomic, checksummed records keyed by what determines them) and the
verdicts that judge a measured number against its claim."""

from nqf.core.lazy import lazy_submodules

__getattr__ = lazy_submodules(__name__)
