r"""Does the quadratic-form expansion hold for a unit? The one theory gate of ``predict``,
``compare`` and ``nqf structure`` (docs/theory.md section 1).

The check itself lives beside this module and is importable from here:

- ``nqf.architectures.expansion_verdict``: :func:`expansion_check`, its verdicts in order
  (not smooth, linear term, vanishing form, a gate across units, applies) and the
  definitions of the remainder ratio, its rounding floor and its order;
- ``nqf.architectures.expansion_probes``: the probe points and the compiled evaluations of
  the unit (and of the routed layer) near w = 0;
- ``nqf.architectures.expansion_report``: :class:`ExpansionReport` and ``report_json``.

This module holds the gate: :func:`theory_gate` and :func:`cached_expansion_check` (the
verdict kept in-process and on disk), :func:`require_expansion`, :func:`raise_unless_applies`
and the one-line messages naming an architecture.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture
from nqf.architectures.expansion_probes import EPS_FLOAT32, EPS_FLOAT64
from nqf.architectures.expansion_report import (
    APPLIES,
    LINEAR_TERM,
    NOT_SMOOTH,
    VANISHING_FORM,
    ExpansionReport,
    report_json,
)
from nqf.architectures.expansion_verdict import expansion_check
from nqf.core.errors import TheoryDoesNotApply
from nqf.core.precision import jax_option
from nqf.core.programs import LruCache

__all__ = [
    "APPLIES",
    "EPS_FLOAT32",
    "EPS_FLOAT64",
    "GATE_SEED",
    "LINEAR_TERM",
    "NOT_SMOOTH",
    "VANISHING_FORM",
    "ExpansionReport",
    "cached_expansion_check",
    "expansion_check",
    "inapplicable_message",
    "label",
    "raise_unless_applies",
    "report_json",
    "require_expansion",
    "theory_gate",
]


def require_expansion(arch: Architecture, **kwargs) -> ExpansionReport:
    """Run :func:`expansion_check` and raise :class:`TheoryDoesNotApply` when it fails.

    The message is one line: the architecture and the report's reason.
    """
    report = expansion_check(arch, **kwargs)
    raise_unless_applies(arch, report)
    return report


def raise_unless_applies(arch: Architecture, report: ExpansionReport) -> None:
    """Raise :class:`TheoryDoesNotApply` with the one-line message when ``report`` says no."""
    if not report.applies:
        raise TheoryDoesNotApply(f"{label(arch)}: the quadratic-form theory does not apply: {report.reason}")


def label(arch: Architecture) -> str:
    """``name (option=value, ...)``, how messages name an architecture."""
    options = ", ".join(f"{k}={v}" for k, v in arch.options)
    return f"{arch.name} ({options})" if options else arch.name


# -- one theory gate for predict, compare and structure ----------------------------------
# The check costs 0.2-1 s (it compiles a probe of the unit), so its verdict is kept:
# in-process per architecture key and dtype, and on disk beside JAX's compilation cache (when
# that is on), keyed by the architecture key (``arch_key``: what its functions compute, as a
# hash of their jaxprs) and the nqf version. Inputs are deterministic: key(0) seeds the draws
# (``expansion_check``).
GATE_SEED = 0
_GATE_FORMAT = 3  # bump when expansion_check's verdicts change within one nqf version (3: not finite at w = 0)
_GATE_MEMORY = LruCache(128)
_VERDICT_DIR = "nqf-expansion"  # a subdirectory of the compilation cache (JAX keeps only *-cache files there)


def _gate_key(arch: Architecture, dtype) -> tuple:
    from nqf.architectures.architecture import arch_key  # the description the compiled training runs are keyed by

    return (arch_key(arch), np.dtype(dtype).name)


def _verdict_folder() -> str | None:
    """JAX's compilation cache directory when the cache is on (None otherwise)."""
    return jax_option("jax_compilation_cache_dir") or None


def _verdict_path(key: tuple) -> Path | None:
    """The file of a built-in architecture's verdict in the compilation cache's directory, or None."""
    folder = _verdict_folder()
    from nqf.architectures.architecture import stable_key

    if not folder or not stable_key(key[0]):
        return None
    from nqf.core.version import __version__

    text = repr((_GATE_FORMAT, __version__, jax.__version__, GATE_SEED, key))
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return Path(folder) / _VERDICT_DIR / f"{digest}.json"


def _report_from_json(data: dict) -> ExpansionReport:
    fields = {f.name for f in dataclasses.fields(ExpansionReport)}
    if set(data) != fields:
        raise ValueError("fields differ")
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return ExpansionReport(**values)


def _read_verdict(path: Path) -> ExpansionReport | None:
    try:
        return _report_from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):  # missing, unreadable, truncated, another format: a miss
        return None


def _write_verdict(path: Path, report: ExpansionReport) -> None:
    """Write atomically (a temporary file renamed into place); failures only skip the cache."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".verdict-", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(dataclasses.asdict(report), handle)  # inf/nan as JSON's Infinity/NaN, read back by json
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def cached_expansion_check(arch: Architecture) -> ExpansionReport:
    """``expansion_check(arch, key=jax.random.key(GATE_SEED))`` in JAX's default float dtype, remembered.

    In-process: per :func:`~nqf.architectures.architecture.arch_key` (name, options, shapes
    and the hash of the jaxprs of the unit and its other functions: two modules of one class
    that compute different things never share a verdict) and dtype. On disk, when JAX's
    compilation cache is on (``nqf.enable_compilation_cache``; the command line does it): a
    small JSON file per architecture under ``<cache>/nqf-expansion/``, named by a hash of that
    key, the dtype, the nqf and JAX versions and the check's seed, written atomically. An
    architecture whose key holds its identity (a function that cannot be traced for its
    shapes) is cached in-process only.
    """
    dtype = jnp.result_type(float)
    key = _gate_key(arch, dtype)

    def stored_or_checked() -> ExpansionReport:
        path = _verdict_path(key)
        report = None if path is None else _read_verdict(path)
        if report is None:
            # the key's data written out: jax.random.key(seed) would compile two programs to make it
            key_data = jax.device_put(np.array([0, GATE_SEED], dtype=np.uint32))
            report = expansion_check(arch, key=jax.random.wrap_key_data(key_data))
            if path is not None:
                _write_verdict(path, report)
        return report

    return _GATE_MEMORY.get(key, stored_or_checked)


def _clear_gate_cache() -> None:
    """Forget the in-process verdicts (tests)."""
    _GATE_MEMORY.clear()


def inapplicable_message(arch: Architecture, report: ExpansionReport) -> str:
    """One line: the architecture, the check's reason and how to run anyway."""
    return (
        f"the theory does not apply to {label(arch)}: {report.reason}; "
        "allow_inapplicable=True (nqf: --allow-inapplicable) runs anyway"
    )


def theory_gate(arch: Architecture, allow_inapplicable: bool = False) -> ExpansionReport:
    """The one gate of ``predict`` and ``compare``: the (cached) expansion verdict of ``arch``.

    Raises :class:`TheoryDoesNotApply` (one line, :func:`inapplicable_message`) when the
    quadratic-form expansion does not hold and ``allow_inapplicable`` is false; returns
    the report otherwise (callers put it in their output either way).
    """
    report = cached_expansion_check(arch)
    if not report.applies and not allow_inapplicable:
        raise TheoryDoesNotApply(inapplicable_message(arch, report))
    return report
