"""Stage 4, theory beside training: ``compare`` runs both on one task and measures where they
agree; ``curves`` reads users' own loss curves in for the same measurement."""

from nqf.core.lazy import lazy_submodules

__getattr__ = lazy_submodules(__name__)
