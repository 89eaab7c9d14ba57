r"""Does the quadratic-form expansion hold for a unit? A numerical check (THEORY.md section 1).

The theory needs, for every input x,

    phi(0, x) = 0,   grad_w phi(0, x) = 0,   phi(eps w, x) = eps^2 w^T A(x) w + O(eps^3),

with A(x) = (1/2) Hessian_w phi(0, x) not identically zero. ``expansion_check`` tests
this on random inputs x_n (shape ``arch.input_shape``) and random unit directions w_n
(|w_n| = 1), using the effective unit g0 phi (g0 the gate weight at W = 0). The
remainder ratio

    rho(eps) = max_{n,c} |phi_c(eps w_n, x_n) - eps^2 w_n^T A_c(x_n) w_n| / (eps^2 S),
    S = max( max_{n,c} |w_n^T A_c(x_n) w_n|,  max_{n,c} |phi_c(eps_0 w_n, x_n)| / eps_0^2 ),

is measured over a ladder of eps and its log-log slope fitted (the remainder order:
1 for a cubic remainder, 2 for a quartic one). Verdicts, tested in this order:

- not smooth at w = 0: the autodiff Taylor polynomial phi(0) + eps grad.w + eps^2 w^T A w
  does not describe phi (its remainder ratio does not fall): relu, abs (where autodiff
  returns one-sided derivatives), hard top-k routing;
- linear term present: phi(0, x) != 0 or grad_w phi(0, x) != 0 (above sqrt(u) S); rho
  then grows like 1/eps (or 1/eps^2): softplus, sigmoid;
- quadratic form vanishes: A(x) = 0 to rounding (max |w^T A w| <= sqrt(u) S) while phi
  is not; the leading order is fitted from phi itself (cubic for a (v.x)^2 with
  trainable a);
- applies: rho -> 0 like eps or faster (slope >= 1/2), or rho is at rounding level
  for every eps (the unit is exactly quadratic; order reported as inf).

For an architecture with a ``router`` (a gate across units) the full layer
f(x; eps W) with n = router.units random unit-norm columns is also compared with the
quadratic model eps^2 Tr[W W^T A(x)]: top-k routing is only visible across units.

Rounding: everything is computed in JAX's default float dtype (float64 when enabled).
The absolute rounding error of phi(eps w) can be as large as the unit's O(1)
intermediates (1 - cos z cancels), so ratios below

    rounding_floor(eps) = 16 u max(1, max |phi(eps w, x)|) / (eps^2 S)

(u the machine epsilon of the dtype) count as unresolved and are left out of the fit;
a ratio that falls under the floor counts as falling. In float32 the default ladder
stops at eps = 3e-3 and the order is often not resolved (nan); the verdicts still hold.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from nqf.architectures.architecture import Architecture, network
from nqf.core.errors import NqfError, TheoryDoesNotApply

EPS_FLOAT64 = (1e-1, 1e-2, 1e-3, 1e-4)
EPS_FLOAT32 = (1e-1, 3e-2, 1e-2, 3e-3)
_ROUNDING_FACTOR = 16.0
_MIN_ORDER = 0.5  # a fitted remainder order below this means the ratio does not fall

APPLIES = "applies"
NOT_SMOOTH = "not smooth"
LINEAR_TERM = "linear term"
VANISHING_FORM = "vanishing form"


@dataclass(frozen=True)
class ExpansionReport:
    """Outcome of :func:`expansion_check`.

    Attributes:
        architecture: the architecture's name.
        applies: whether the quadratic-form theory applies.
        kind: ``applies``, ``not smooth``, ``linear term`` or ``vanishing form``.
        reason: one human-readable line explaining the verdict.
        remainder_order: fitted log-log slope p of rho(eps) ~ eps^p over the resolved eps
            (1: cubic remainder, 2: quartic; ~0: not smooth; negative: a lower-order term).
            ``inf`` when rho is at rounding level for every eps (exactly quadratic); ``nan``
            when only one eps is resolved (float32).
        value_at_zero: max_{n,c} |phi_c(0, x_n)|.
        gradient_at_zero: max_{n,c} |grad_w phi_c(0, x_n)| (Euclidean norm).
        quadratic_scale: S, the normalisation of the ratios (see module docstring).
        leading_order: fitted slope of max |phi(eps w, x)| against eps (2 when the
            quadratic form leads).
        eps: the eps ladder.
        ratios: rho(eps) for the single unit.
        rounding_floor: the ratio below which rho is not resolved, per eps.
        layer_ratios: rho(eps) for the full layer (routed architectures only, else ()).
        layer_order: fitted order of layer_ratios (nan without a router).
        dtype: the float dtype the check ran in.
    """

    architecture: str
    applies: bool
    kind: str
    reason: str
    remainder_order: float
    value_at_zero: float
    gradient_at_zero: float
    quadratic_scale: float
    leading_order: float
    eps: tuple[float, ...]
    ratios: tuple[float, ...]
    rounding_floor: tuple[float, ...]
    layer_ratios: tuple[float, ...] = ()
    layer_order: float = math.nan
    dtype: str = "float64"


def _unit_directions(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Gaussian directions normalised to unit norm along the last axis."""
    w = rng.standard_normal(shape)
    return w / np.linalg.norm(w, axis=-1, keepdims=True)


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def _remainder_order(eps: np.ndarray, ratios: np.ndarray, floor: np.ndarray) -> tuple[float, bool]:
    """Fitted order p of ratios ~ eps^p over the resolved points, and whether the ratio falls.

    Two or more resolved points: least-squares slope, falls when p >= 1/2. None: the
    ratio is at rounding level everywhere (p = inf, falls). One resolved point: no
    order can be fitted (p = nan); the ratio fell under rounding unless that point is
    the smallest eps (then it rose out of rounding as eps shrank: p is the slope from
    the previous floor, and it does not fall).
    """
    resolved = ratios > floor
    count = int(resolved.sum())
    if count == 0:
        return math.inf, True
    if count >= 2:
        order = _slope(eps[resolved], ratios[resolved])
        return order, order >= _MIN_ORDER
    i = int(np.flatnonzero(resolved)[0])
    if i == len(eps) - 1:
        return _slope(eps[i - 1 : i + 1], np.array([floor[i - 1], ratios[i]])), False
    return math.nan, True


def _format_order(order: float) -> str:
    return f"{order + 0.0:.2f}".replace("-0.00", "0.00")


def _format_eps(eps: float) -> str:
    return f"{eps:.0e}".replace("e-0", "e-")


def expansion_check(
    arch: Architecture,
    key: jax.Array | None = None,
    num_inputs: int = 8,
    eps: tuple[float, ...] | None = None,
) -> ExpansionReport:
    """Test numerically whether phi(w, x) = w^T A(x) w + O(|w|^3) near w = 0.

    Args:
        arch: any :class:`Architecture` (built-in or a user's unit function).
        key: JAX PRNG key (default ``key(0)``); its bits seed the numpy generator that
            draws the inputs x_n ~ N(0, I) and unit directions w_n (drawing them with
            jax.random would compile threefry on every call).
        num_inputs: number of (x_n, w_n) pairs.
        eps: decreasing ladder of weight scales; default (1e-1, 1e-2, 1e-3, 1e-4) in float64
            and (1e-1, 3e-2, 1e-2, 3e-3) in float32 (rounding hides smaller scales there).

    Returns:
        An :class:`ExpansionReport`; see the module docstring for the verdicts.
    """
    if num_inputs < 1:
        raise NqfError(f"expansion check: num_inputs must be >= 1, got {num_inputs}")
    dtype = jnp.result_type(float)
    if eps is None:
        eps = EPS_FLOAT64 if dtype == jnp.float64 else EPS_FLOAT32
    eps = tuple(float(e) for e in eps)
    if len(eps) < 2 or any(e <= 0 for e in eps) or any(a <= b for a, b in zip(eps, eps[1:])):
        raise NqfError(f"expansion check: eps must be at least two positive, decreasing scales, got {eps}")
    key = jax.random.key(0) if key is None else key
    units = 1 if arch.router is None else arch.router.units

    # Inputs and directions come from numpy's generator seeded with the key's bits:
    # drawing them with jax.random inside the compiled probe would compile threefry each time.
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    X = jnp.asarray(rng.standard_normal((num_inputs, *arch.input_shape)), dtype=dtype)
    W = jnp.asarray(_unit_directions(rng, (num_inputs, arch.dim)), dtype=dtype)
    Ws = jnp.asarray(_unit_directions(rng, (num_inputs, units, arch.dim)).swapaxes(1, 2), dtype=dtype)

    gate = arch.zero_gate_weight()  # g0, once: evaluating the router inside every trace recompiles it

    def effective_unit(w, x):
        """g0 phi(w, x) for a flat w, (K,): Architecture.effective_unit with g0 hoisted."""
        return gate * jnp.reshape(arch.unit(arch.unravel(w), x), (arch.outputs,))

    def quadratic(w, x):
        # w^T A(x) w = (1/2) d^2/dt^2 g0 phi(t w, x) at t = 0 (the same A as structure_matrix)
        along = lambda t: effective_unit(t * w, x)  # noqa: E731
        return 0.5 * jax.jacfwd(jax.jacfwd(along))(jnp.zeros((), dtype))

    def probe(w, x):
        zero = jnp.zeros_like(w)
        value0 = effective_unit(zero, x)  # (K,)
        grad0 = jax.jacrev(effective_unit)(zero, x)  # (K, d)
        values = jax.vmap(lambda e: effective_unit(e * w, x))(jnp.asarray(eps, dtype))  # (E, K)
        return value0, jnp.linalg.norm(grad0, axis=-1), grad0 @ w, quadratic(w, x), values

    def layer_probe(Wn, x):
        quad_layer = jnp.sum(jax.vmap(quadratic, in_axes=(1, None))(Wn, x), axis=0)  # Tr[W W^T A]
        layer = jax.vmap(lambda s: network(arch, s * Wn, x))(jnp.asarray(eps, dtype))  # (E, K)
        return quad_layer, layer

    outs = jax.jit(jax.vmap(probe))(W, X)
    value0, grad_norm, slope0, quad, values = (np.asarray(a, dtype=np.float64) for a in outs)
    values = values.transpose(1, 0, 2)  # (E, N, K)
    e = np.asarray(eps)
    u = float(jnp.finfo(dtype).eps)
    tolerance = math.sqrt(u)

    def ratios_of(remainder, scale):
        """max |remainder| / (eps^2 scale) per eps, and its rounding floor."""
        ratios = np.max(np.abs(remainder), axis=(1, 2)) / (e**2 * scale)
        noise = np.maximum(1.0, np.max(np.abs(values), axis=(1, 2)))  # O(1) intermediates round too
        return ratios, _ROUNDING_FACTOR * u * noise / (e**2 * scale)

    def scale_of(quadratic_part, remainder_at_largest):
        return max(float(np.max(np.abs(quadratic_part))), float(np.max(np.abs(remainder_at_largest))) / eps[0] ** 2)

    value_at_zero = float(np.max(np.abs(value0)))
    gradient_at_zero = float(np.max(grad_norm))
    quad_size = float(np.max(np.abs(quad)))
    phi_size = np.max(np.abs(values), axis=(1, 2))  # (E,)
    leading = _slope(e, phi_size) if np.all(phi_size > 0) else math.nan
    ladder = lambda r: ", ".join(f"{v:.3g}" for v in r)  # noqa: E731
    span = f"eps = {_format_eps(eps[0])} ... {_format_eps(eps[-1])}"

    # the ratio of THEORY.md: (phi(eps w) - eps^2 w^T A w) / eps^2
    plain = values - e[:, None, None] ** 2 * quad[None]
    scale = scale_of(quad, values[0])
    common = dict(
        architecture=arch.name,
        value_at_zero=value_at_zero,
        gradient_at_zero=gradient_at_zero,
        quadratic_scale=scale,
        leading_order=leading,
        eps=eps,
        dtype=str(np.dtype(dtype)),
    )
    if scale == 0.0:
        return ExpansionReport(
            applies=False,
            kind=VANISHING_FORM,
            reason="phi(eps w, x) vanishes at every tested point: there is no quadratic form to reduce to",
            remainder_order=math.nan,
            ratios=tuple(0.0 for _ in eps),
            rounding_floor=tuple(math.inf for _ in eps),
            **common,
        )
    ratios, floor = ratios_of(plain, scale)
    order, falls = _remainder_order(e, ratios, floor)
    common.update(remainder_order=order, ratios=tuple(map(float, ratios)), rounding_floor=tuple(map(float, floor)))

    # 1. smoothness: the second-order Taylor polynomial from autodiff must describe phi,
    #    whatever its value and gradient at 0 (relu, abs: autodiff returns one-sided numbers)
    taylor = plain - value0[None] - e[:, None, None] * slope0[None]
    taylor_scale = scale_of(quad, taylor[0])
    if taylor_scale > 0.0:
        taylor_ratios, taylor_floor = ratios_of(taylor, taylor_scale)
        taylor_order, taylor_falls = _remainder_order(e, taylor_ratios, taylor_floor)
        if not taylor_falls:
            return ExpansionReport(
                applies=False,
                kind=NOT_SMOOTH,
                reason=(
                    f"not smooth at w = 0: the Taylor remainder ratio does not fall "
                    f"({ladder(taylor_ratios)} at {span}, order {_format_order(taylor_order)})"
                ),
                **common,
            )

    # 2. terms below second order, seen directly at w = 0
    if value_at_zero > tolerance * scale or gradient_at_zero > tolerance * scale:
        what = (
            f"phi(0, x) = {value_at_zero:.3g} != 0"
            if value_at_zero > tolerance * scale
            else f"|grad_w phi(0, x)| = {gradient_at_zero:.3g} != 0"
        )
        return ExpansionReport(
            applies=False,
            kind=LINEAR_TERM,
            reason=f"linear term present: {what}; the remainder ratio grows like eps^{_format_order(order)} ({ladder(ratios)} at {span})",
            **common,
        )

    # 3. a smooth unit without linear term: the quadratic form must be there at all
    if quad_size <= tolerance * scale:
        if math.isnan(leading):
            named = "above quadratic"
        else:
            named = {3: "cubic", 4: "quartic"}.get(round(leading), f"eps^{leading:.2f}")
        return ExpansionReport(
            applies=False,
            kind=VANISHING_FORM,
            reason=f"quadratic form vanishes; leading order is {named} (A(x) = 0 to rounding, phi ~ eps^{leading:.3g})",
            **common,
        )
    if not falls:  # cannot happen for a smooth unit without linear term; kept as a guard
        return ExpansionReport(
            applies=False,
            kind=NOT_SMOOTH,
            reason=f"not smooth at w = 0: the remainder ratio does not fall ({ladder(ratios)} at {span}, order {_format_order(order)})",
            **common,
        )

    # 4. a gate across units (mixture of experts) is only visible in the full layer
    if arch.router is not None:
        n = arch.router.units
        lquad, lvalues = (np.asarray(a, dtype=np.float64) for a in jax.jit(jax.vmap(layer_probe))(Ws, X))
        lvalues = lvalues.transpose(1, 0, 2)
        lscale = scale_of(lquad, lvalues[0])
        lratios, lfloor = ratios_of(lvalues - e[:, None, None] ** 2 * lquad[None], lscale)
        layer_order, layer_falls = _remainder_order(e, lratios, lfloor)
        common.update(layer_ratios=tuple(map(float, lratios)), layer_order=layer_order)
        if not layer_falls:
            return ExpansionReport(
                applies=False,
                kind=NOT_SMOOTH,
                reason=(
                    f"not smooth at w = 0: the gate across the {n} units is not smooth; the layer's remainder "
                    f"ratio does not fall ({ladder(lratios)} at {span}, order {_format_order(layer_order)})"
                ),
                **common,
            )

    if math.isinf(order):
        falls_text = "is at rounding level for every eps (exact)"
    elif math.isnan(order):
        falls_text = f"falls under rounding below eps = {_format_eps(eps[0])} (order not resolved in {common['dtype']})"
    else:
        falls_text = f"falls like eps^{_format_order(order)}"
    return ExpansionReport(applies=True, kind=APPLIES, reason=f"the quadratic form holds: the remainder ratio {falls_text}", **common)


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
# in-process per architecture description and dtype, and on disk beside JAX's compilation
# cache (when that is on) for built-in architectures, keyed by their description and the
# nqf version. Inputs are deterministic: key(0) seeds the draws (``expansion_check``).
GATE_SEED = 0
_GATE_FORMAT = 1  # bump when expansion_check's verdicts change within one nqf version
_GATE_CACHE_SIZE = 128
_GATE_MEMORY: OrderedDict = OrderedDict()
_VERDICT_DIR = "nqf-expansion"  # a subdirectory of the compilation cache (JAX keeps only *-cache files there)


def _gate_key(arch: Architecture, dtype) -> tuple:
    from nqf.architectures.architecture import arch_key  # the description the compiled training runs are keyed by

    return (arch_key(arch), np.dtype(dtype).name)


def _is_builtin(key: tuple) -> bool:
    """Whether an architecture description names only nqf's own functions (then it is stable across processes)."""
    description = key[0]
    if description[0] == "identity":
        return False

    def builtin(item) -> bool:
        if callable(item) and not isinstance(item, type):
            return False
        if isinstance(item, tuple):
            return all(builtin(v) for v in item)
        return True

    return builtin(description)


def _verdict_folder() -> str | None:
    """JAX's compilation cache directory when the cache is on (None otherwise)."""
    return jax.config.jax_compilation_cache_dir or None


def _verdict_path(key: tuple) -> Path | None:
    """The file of a built-in architecture's verdict in the compilation cache's directory, or None."""
    folder = _verdict_folder()
    if not folder or not _is_builtin(key):
        return None
    from nqf.core.version import __version__

    text = repr((_GATE_FORMAT, __version__, jax.__version__, GATE_SEED, key))
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return Path(folder) / _VERDICT_DIR / f"{digest}.json"


def _report_from_json(data: dict) -> ExpansionReport:
    fields = {f.name for f in dataclasses.fields(ExpansionReport)}
    if set(data) != fields:
        raise ValueError("fields differ")
    return ExpansionReport(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


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

    In-process: per architecture description (name, options, shapes and unit functions:
    built-in functions by name, a user's by identity) and dtype. On disk, when JAX's
    compilation cache is on (``nqf.enable_compilation_cache``; the command line does it):
    a small JSON file per built-in architecture under ``<cache>/nqf-expansion/``, named by
    a hash of the description, the dtype, the nqf and JAX versions and the check's seed,
    written atomically. A user's architecture is cached in-process only (its functions
    have no stable name).
    """
    dtype = jnp.result_type(float)
    key = _gate_key(arch, dtype)
    report = _GATE_MEMORY.get(key)
    if report is not None:
        _GATE_MEMORY.move_to_end(key)
        return report
    path = _verdict_path(key)
    report = None if path is None else _read_verdict(path)
    if report is None:
        report = expansion_check(arch, key=jax.random.key(GATE_SEED))
        if path is not None:
            _write_verdict(path, report)
    _GATE_MEMORY[key] = report
    while len(_GATE_MEMORY) > _GATE_CACHE_SIZE:
        _GATE_MEMORY.popitem(last=False)
    return report


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


def report_json(report: ExpansionReport | None) -> dict | None:
    """The verdict as printed in ``predict``/``compare`` JSON: applies, kind, reason, remainder_order, dtype."""
    if report is None:
        return None
    order = report.remainder_order
    return {
        "applies": bool(report.applies),
        "kind": report.kind,
        "reason": report.reason,
        "remainder_order": float(order) if math.isfinite(order) else None,
        "dtype": report.dtype,
    }
