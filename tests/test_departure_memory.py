"""The departure's memory (issue 22): the unlearned rows' maps built from the units' own
derivatives (``factored``), all at once (``dense``), in chunks of basis directions (``chunked``)
or applied each step (``matrix_free``) give the same numbers; the memory formula
(``departure_plateaus.map_bytes``, used by ``nqf.theory.costs.departure_cost``) against the
buffer sizes XLA compiles, and the refusal before compute."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nqf import PredictConfig, get_task, predict
from nqf.architectures import mlp
from nqf.cli._checks import check_departure
from nqf.comparison import checks
from nqf.core.errors import NqfError
from nqf.theory.costs import departure_cost
from nqf.theory.departure import plateaus as dp
from nqf.theory.departure.corrections import corrected_switch_steps

from .conftest import assert_allclose

STAIR = get_task("staircase")
X, Y = STAIR.generate(0, dtype=np.float64)
TANH = mlp(inputs=8, outputs=4, activation="tanh")
VARIANTS = [(m, c) for m in ("network", "quadratic") for c in ("linearised", "near_zero")]


def _plateau(arch, N, width, seed=0):
    """A W*, Q_U (first mode learned), D0 (its row zero) and the samples: a small map to push."""
    rng = np.random.default_rng(seed)
    d = arch.dim
    Xs = jnp.asarray(rng.standard_normal((N, *arch.input_shape)))
    Ys = jnp.asarray(rng.standard_normal((N, arch.outputs)))
    Wstar = jnp.asarray(0.3 * rng.standard_normal((d, width)))
    QU = jnp.asarray(np.linalg.qr(rng.standard_normal((d, d)))[0]).at[:, 0].set(0.0)
    D0 = jnp.asarray(1e-3 * rng.standard_normal((d, width))).at[0].set(0.0)
    return Wstar, QU, Xs, Ys, D0


@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
@pytest.mark.parametrize(
    ("model", "construction"),
    [pytest.param(*v, marks=pytest.mark.slow) if v == ("quadratic", "linearised") else v for v in VARIANTS],
)  # the quadratic model linearised: the heaviest (2.8-5.9 s per optimizer)
def test_every_path_gives_the_dense_numbers(model, construction, optimizer):
    """Forced on the same small map (d n = 96): the matrix in chunks of 5 directions (the last
    chunk short) and the matrix-free steps give the dense path's occupations, rows, velocities
    to 1e-10, and the chunked matrix its lowest curvature."""
    Wstar, QU, Xs, Ys, D0 = _plateau(TANH, 64, 8)
    V0 = jnp.zeros_like(D0) if optimizer == "gd" else 1e-4 * D0
    lr, beta = jnp.asarray(0.05), jnp.asarray(0.9 if optimizer == "momentum" else 0.0)
    gaps = np.array([3, 10, 40, 100])
    common = (TANH, model, "squared", construction, optimizer, Wstar, QU, Xs, Ys, D0, lr, beta)
    dense = dp.UnlearnedMap(*common, path="dense")
    assert dense.path == "dense" and dense.chunk == D0.size
    reference = [np.asarray(a) for a in dense.run(D0, V0, gaps)]
    assert reference[0][-1].max() > 0
    for path, chunk in (("factored", 7), ("chunked", 5), ("matrix_free", None)):
        other = dp.UnlearnedMap(*common, path=path, chunk=chunk)
        assert other.path == path
        for got, want in zip(other.run(D0, V0, gaps), reference, strict=True):
            assert_allclose(np.asarray(got), want, rtol=0, atol=1e-10 * np.abs(want).max())
        if path in ("factored", "chunked"):
            assert other.chunk == chunk  # samples a chunk (factored), directions a chunk (chunked)
            assert_allclose(np.asarray(other.J), np.asarray(dense.J), rtol=0, atol=1e-12 * np.abs(dense.J).max())
            assert_allclose(other.lowest, dense.lowest, rtol=1e-10)
        else:
            assert np.isnan(other.lowest)  # no matrix, no curvature


@pytest.mark.slow  # heavy for the dev loop (make test-fast); CI runs it
def test_corrections_the_same_on_every_path(monkeypatch):
    """The whole corrected switch-on steps with every map factored (the default), dense by
    Hessian-vector products (a budget they all fit) and pushed one direction at a time (a budget
    of one byte): the same steps, orders, plateau losses and curvatures."""
    p = predict(TANH, X, Y, PredictConfig(width=8, lr=0.05, steps=400, sigma0=1e-6))
    assert np.isfinite(p.mflow_switch_steps).sum() >= 2
    paths = []
    original = dp.UnlearnedMap.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        paths.append((self.path, self.chunk))

    monkeypatch.setattr(dp.UnlearnedMap, "__init__", record)
    found = {}
    for label, budget, expected in (
        ("factored", 2.0**25, ("factored", X.shape[0])),
        ("dense", 2.0**40, ("dense", 12 * 8)),
        ("chunked", 1.0, ("chunked", 1)),
    ):
        monkeypatch.setattr(dp, "MAP_BYTES", budget)
        if label != "factored":
            monkeypatch.setattr(dp, "factorable", lambda arch, model: False)
        paths.clear()
        found[label] = corrected_switch_steps(TANH, X, Y, p)
        assert paths and set(paths) == {expected}
    reference = found.pop("factored")
    for steps, order, plateau, curvature, notes in found.values():
        assert order == reference[1] and notes == reference[4]
        for construction in steps:
            assert_allclose(steps[construction], reference[0][construction], rtol=0, atol=1e-9)
        for model in plateau:
            assert_allclose(plateau[model], reference[2][model], rtol=1e-12)
            assert_allclose(curvature[model], reference[3][model], rtol=1e-10, atol=1e-14)


def _xla_temp(arch, model, construction, args, chunk):
    """XLA's temporary buffers (bytes) of the compiled map builder: compiled, never run."""
    if chunk >= args[-1].size:
        lowered = dp._dense_force.lower(arch, model, "squared", construction, *args)
    else:
        lowered = dp._chunked_force.lower(arch, model, "squared", construction, *args, chunk=chunk)
    return dp._temp_bytes(lowered.compile())


@pytest.mark.slow  # 2.8-5.9 s each
@pytest.mark.parametrize(
    ("inputs", "outputs", "samples", "width"),
    [(4, 3, 150, 64), (8, 4, 256, 32)],  # iris and the staircase, as nqf predict runs them
    ids=["iris", "staircase"],
)
def test_memory_formula_against_the_compiled_buffers(inputs, outputs, samples, width):
    """map_bytes for the chunk choose_path picks is within 2x of the buffers XLA assigns to the
    compiled map builder (the arrays it holds at once), for every model and construction, and
    the chosen chunk keeps them within the budget."""
    arch = mlp(inputs=inputs, outputs=outputs, activation="tanh")
    args = _plateau(arch, samples, width)
    budget = dp.map_budget()
    for model, construction in VARIANTS:
        path, chunk = dp.hvp_path(arch, samples, width, budget, model, construction)
        assert path in ("dense", "chunked")
        estimate = dp.map_bytes(arch, model, construction, samples, width, dp.held_directions(arch.dim * width, chunk))
        temp = _xla_temp(arch, model, construction, args, chunk)
        if temp is None:
            pytest.skip("this backend reports no buffer sizes")
        assert 0.5 < estimate / temp < 2.0, (model, construction, chunk, estimate, temp)
        assert estimate <= budget and temp <= 2 * budget


def test_memory_formula_reproduces_the_breast_cancer_allocation():
    """The issue's case (569 samples, mlp 6 -> 10, width 64: d n = 1024): all directions at once
    would hold ~30.7 GB (XLA's number for the quadratic model's linearised map, the failed
    allocation); the formula says so to 2x, choose_path does not take that path, and the chunked
    program it takes stays within the budget (compiled only, never run)."""
    arch = mlp(inputs=6, outputs=10, activation="tanh")
    N, width = 569, 64
    args = _plateau(arch, N, width)
    dense = _xla_temp(arch, "quadratic", "linearised", args, arch.dim * width)
    if dense is None:
        pytest.skip("this backend reports no buffer sizes")
    assert dense > 20e9
    estimate = dp.map_bytes(arch, "quadratic", "linearised", N, width, arch.dim * width)
    assert 0.5 < estimate / dense < 2.0
    path, chunk = dp.hvp_path(arch, N, width, model="quadratic", construction="linearised")
    assert path == "chunked" and chunk == 1  # one direction already holds ~42 MB
    temp = _xla_temp(arch, "quadratic", "linearised", args, chunk)
    assert 0.5 < dp.map_bytes(arch, "quadratic", "linearised", N, width, chunk) / temp < 2.0
    # the factored path (the default for a sum over units) stays within the budget too
    assert dp.choose_path(arch, N, width, model="quadratic", construction="linearised")[0] == "factored"
    nbytes, seconds, chosen = departure_cost(arch, N, width, 600)
    assert chosen == "factored" and nbytes < 2**30 and seconds > checks.ANNOUNCE_AFTER_S


def test_factored_builder_memory_within_its_budget():
    """The factored map builder's compiled buffers (XLA's memory analysis) for the chunk
    factored_chunk picks stay within 2x of the budget plus the matrix it returns."""
    arch = mlp(inputs=6, outputs=10, activation="tanh")
    N, width = 569, 64
    Wstar, QU, Xs, Ys, D0 = _plateau(arch, N, width)
    budget = dp.map_budget()
    chunk = min(dp.factored_chunk(arch, width, budget), N)
    for model in ("network", "quadratic"):
        lowered = dp._factored_force.lower(arch, model, "squared", "linearised", Wstar, QU, Xs, Ys, D0, chunk)
        temp = dp._temp_bytes(lowered.compile())
        if temp is None:
            pytest.skip("this backend reports no buffer sizes")
        matrix = 8.0 * (arch.dim * width) ** 2
        assert temp <= 2 * budget + 3 * matrix, (model, temp, budget, matrix)


def test_check_departure_refuses_before_compute_and_announces(monkeypatch, capsys):
    """One NqfError when the estimate exceeds half of the memory available; a note for a long run."""
    arch = mlp(inputs=6, outputs=10, activation="tanh")
    monkeypatch.setattr(checks, "available_bytes", lambda: 64 * 2**30)
    check_departure(arch, 569, 64, 600, "squared", "auto", "gd")
    assert "note: departure (--departure; the unlearned rows' maps factored, d n = 1024)" in capsys.readouterr().err
    with pytest.raises(NqfError, match=r"the departure \(--departure\) .* needs about .* of memory"):
        check_departure(arch, 569, 200_000, 600, "squared", "auto", "gd")
    monkeypatch.setattr(checks, "available_bytes", lambda: 2**30)  # half a GiB usable: the runtime alone
    with pytest.raises(NqfError, match="leave out --departure"):
        check_departure(arch, 569, 64, 600, "squared", "auto", "gd")
    # without corrections (sgd) only the curve: no maps
    nbytes, _, path = departure_cost(arch, 569, 64, 600, corrections=False)
    assert path == "none" and nbytes < 2**26


@pytest.mark.slow  # through the real command
def test_cli_refuses_an_impossible_departure_with_one_line(tmp_path):
    """``nqf predict --departure`` whose departure cannot fit (below ~0.7 TB available): one ``error:``
    line before any compute, exit 2, no traceback."""
    import subprocess
    import sys
    from pathlib import Path

    np.savez(tmp_path / "data.npz", X=np.asarray(X), Y=np.asarray(Y))
    nqf_cli = str(Path(sys.executable).parent / "nqf")
    # the prediction itself needs ~0.6 GB at this width, the departure ~0.34 TB (one map direction)
    common = ["--arch", "mlp", "--width", "2000000", "--sigma0", "1e-6", "--lr", "0.05", "--steps", "100"]
    run = subprocess.run(
        [nqf_cli, "predict", "--data", "data.npz", *common, "--departure"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the departure (--departure)"), run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_jax_stays_float64():
    assert jax.config.jax_enable_x64
