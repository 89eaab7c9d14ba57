"""The fast theory path (issue 11): the moments route equals the per-sample route, adaptive
stepping equals the step-by-step map, the Lanczos stability bound equals the dense one."""

import dataclasses
import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import nqf
from nqf.theory.data_matrices.build import data_matrices, flow_data
from nqf.theory.data_matrices.moments import choose_route
from nqf.theory.flow import hessian_of_w, stable_lr_bound

from .conftest import assert_allclose


def _random_samples(arch, n=64, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, *arch.input_shape))
    Y = rng.standard_normal((n, arch.outputs))
    return X, Y


@pytest.mark.parametrize("name", sorted(nqf.ARCHITECTURES))
def test_moments_route_equals_per_sample_route(name):
    """C, K[M], G(M), L(M), c_k and K_kj agree to 1e-12 between the two data routes."""
    arch = nqf.get_architecture(name)
    X, Y = _random_samples(arch)
    samples = data_matrices(arch, X, Y)
    moments, choice = flow_data(arch, X, Y, route="moments")
    assert choice.route == "moments"
    rng = np.random.default_rng(1)
    W = 0.3 * rng.standard_normal((arch.dim, 3))
    M = jnp.asarray(W @ W.T)
    Q = jnp.asarray(np.linalg.qr(rng.standard_normal((arch.dim, 2)))[0])

    def close(a, b, what):
        a, b = np.asarray(a), np.asarray(b)
        assert_allclose(b, a, rtol=0, atol=1e-12 * max(np.abs(a).max(), 1e-300), err_msg=f"{name}: {what}")

    close(samples.C, moments.C, "C")
    close(samples.K_apply(M), moments.K_apply(M), "K[M]")
    close(samples.gradient_matrix(M), moments.gradient_matrix(M), "G(M)")
    close(samples.loss(M), moments.loss(M), "L(M)")
    close(samples.loss(0 * M), moments.loss(0 * M), "L(0)")
    close(samples.mode_growth(Q), moments.mode_growth(Q), "c_k")
    close(samples.mode_interactions(Q), moments.mode_interactions(Q), "K_kj")


def test_moments_chunks_do_not_change_the_result():
    """Chunks that do not divide N (padded last chunk) give the same moments as one chunk."""
    from nqf.theory.data_matrices.build import checked_samples
    from nqf.theory.data_matrices.moments import moment_data_matrices

    arch = nqf.get_architecture("mlp-fixed")
    X, Y = _random_samples(arch, n=37)
    X, T, dtype = checked_samples(arch, X, Y)
    whole = moment_data_matrices(arch, X, T, dtype, chunk=37)
    pieces = moment_data_matrices(arch, X, T, dtype, chunk=8)
    assert_allclose(pieces.second, whole.second, rtol=1e-13, atol=1e-15)
    assert_allclose(pieces.cross, whole.cross, rtol=1e-13, atol=1e-15)
    assert_allclose(pieces.residual, whole.residual, rtol=1e-10, atol=1e-15)


def test_route_choice_says_which_and_why():
    arch = nqf.get_architecture("mlp", activation="tanh")
    assert choose_route(arch, 256, "squared").route == "moments"
    ce = choose_route(arch, 256, "cross_entropy")
    assert ce.route == "samples" and "loss" in ce.reason
    assert choose_route(arch, 256, "squared", minibatches=True).route == "samples"
    with pytest.raises(nqf.NqfError, match="does not apply"):
        choose_route(arch, 256, "cross_entropy", route="moments")
    X, Y = nqf.get_task("staircase").generate(0)
    p = nqf.predict(arch, X, Y, nqf.PredictConfig(width=8, lr=0.05, steps=300))
    assert p.route == "moments" and "moments route" in p.route_reason
    assert p.to_json()["route"] == "moments"


def test_both_routes_predict_the_same():
    X, Y = nqf.get_task("staircase").generate(0)
    arch = nqf.get_architecture("mlp", activation="tanh")
    cfg = nqf.PredictConfig(width=32, lr=0.05, steps=800, sigma0=1e-6)
    a = nqf.predict(arch, X, Y, cfg)
    b = nqf.predict(arch, X, Y, dataclasses.replace(cfg, route="samples"))
    assert b.route == "samples"
    np.testing.assert_array_equal(a.mflow_switch_steps, b.mflow_switch_steps)
    assert_allclose(a.flow.loss, b.flow.loss, rtol=1e-10, atol=1e-14)


def _cases():
    stair = (nqf.get_task("staircase").generate(0), nqf.get_architecture("mlp", activation="tanh"), 0.05, 1e-8)
    corr = (
        nqf.get_task("staircase", correlation=0.5).generate(0),
        nqf.get_architecture("mlp", activation="tanh"),
        0.05,
        1e-6,
    )
    icl = (
        nqf.get_task("icl", prompts=2000).generate(0),
        nqf.get_architecture("linear-attention", dim=4, context=31),
        0.1,
        1e-3,
    )
    digits_task = nqf.get_task("digits")
    dX, dY = digits_task.generate(0)
    arch_name, options = digits_task.natural_architecture()
    digits = ((dX, dY), nqf.get_architecture(arch_name, **options), 0.02, 1e-4)
    return {"staircase": stair, "correlated": corr, "icl": icl, "digits": digits}


@pytest.mark.parametrize(
    ("case", "optimizer"),
    [
        pytest.param(case, optimizer, marks=pytest.mark.slow)
        if (case, optimizer) not in {("staircase", "gd"), ("correlated", "gd")}
        else (case, optimizer)
        for optimizer in ("gd", "momentum")
        for case in ("staircase", "correlated", "icl", "digits")
    ],
)  # only staircase and correlated with gd in the fast tier (the others 2.8-5.9 s each, digits the most)
def test_adaptive_stepping_equals_the_step_by_step_map(case, optimizer):
    """Loss within 1e-8 relative at every recorded step (absolute floor 1e-12 L(0), where the
    reference sits at rounding) and identical switch-on steps; 30000 steps record sparsely."""
    (X, Y), arch, lr, sigma0 = _cases()[case]
    if optimizer == "momentum":
        lr = lr / 5
    cfg = nqf.PredictConfig(width=8, lr=lr, steps=30000, sigma0=sigma0, optimizer=optimizer, beta=0.5)
    adaptive = nqf.predict(arch, X, Y, cfg)
    reference = nqf.predict(arch, X, Y, dataclasses.replace(cfg, stepping="every"))
    assert reference.flow_stats["jumped"] == 0
    a, b = np.asarray(adaptive.flow.loss), np.asarray(reference.flow.loss)
    np.testing.assert_array_equal(np.asarray(adaptive.flow.steps), np.asarray(reference.flow.steps))
    assert_allclose(a, b, rtol=1e-8, atol=1e-12 * b[0], err_msg=f"{case} {optimizer}")
    np.testing.assert_array_equal(adaptive.mflow_switch_steps, reference.mflow_switch_steps)
    stats = adaptive.flow_stats
    assert stats["stepped"] + stats["jumped"] == cfg.steps


def test_adaptive_stepping_jumps_after_the_last_switch_on():
    X, Y = nqf.get_task("staircase").generate(0)
    arch = nqf.get_architecture("mlp", activation="tanh")
    p = nqf.predict(arch, X, Y, nqf.PredictConfig(width=32, lr=0.05, steps=200000, sigma0=1e-6))
    assert p.flow_stats["jumps"] >= 1
    assert p.flow_stats["stepped"] < 5000  # the switch-ons end near step 500
    assert np.all(np.isfinite(p.mflow_switch_steps))


@pytest.mark.parametrize("engine", ["compiled", "numpy"])
def test_lanczos_bound_equals_the_dense_hessian(engine, monkeypatch):
    """The Lanczos top eigenvalue equals the dense Hessian's to 1e-8 (d^2 = 144: the dense
    limit is lowered to 64 here so that the bound takes the Lanczos path), on the compiled
    data matrices and on their numpy twins."""
    import nqf.theory.flow.stability as stability

    monkeypatch.setattr(stability, "_DENSE_HESSIAN_LIMIT", 64)
    X, Y = nqf.get_task("staircase").generate(0)
    arch = nqf.get_architecture("mlp", activation="tanh")
    data = data_matrices(arch, X, Y)
    rng = np.random.default_rng(0)
    Wr = 0.5 * rng.standard_normal((arch.dim, 4))
    M = Wr @ Wr.T
    checked = flow_data(arch, X, Y, route="moments")[0].on_host() if engine == "numpy" else data
    bound = stable_lr_bound(checked, points=M)
    evals, evecs = np.linalg.eigh(M)
    W = jnp.asarray((evecs * np.sqrt(np.clip(evals, 0, None))) @ evecs.T)
    H = np.asarray(hessian_of_w(data, W))
    top = max(
        np.linalg.eigvalsh(0.5 * (H + H.T))[-1], 2 * np.linalg.eigvalsh(np.asarray(data.gradient_matrix(W @ W.T)))[-1]
    )
    assert_allclose(bound.curvature, top, rtol=1e-8)


@pytest.mark.parametrize("optimizer", ["gd", "momentum", "nesterov"])
def test_lv_map_records_equal_every_step(optimizer):
    """Blocks and the settled-rate extrapolation give the full scan's occupations at the records
    (1e-10 relative) and the same switch-on steps."""
    from nqf.theory.lotka_volterra.maps import lv_map_records
    from nqf.theory.lotka_volterra.system import LotkaVolterra, fixed_point
    from nqf.theory.predict.pipeline import first_crossing, lv_occupations, record_steps

    s = np.array([3.0, 2.0, 1.0, 0.5])
    c = np.concatenate([s / 2, -s / 2])  # growing modes and their decaying partners
    K = np.block([[np.eye(4) / 4, -np.eye(4) / 4], [-np.eye(4) / 4, np.eye(4) / 4]])
    lr = 0.05 if optimizer == "gd" else 0.01
    system = LotkaVolterra(c, K, np.full(8, 1e-20), lr, 7.125)
    thresholds = 0.5 * fixed_point(system)[:4]
    steps = 60000
    record = record_steps(steps)
    occ, switch, stats = lv_map_records(system, steps, record, thresholds, optimizer=optimizer, beta=0.9)
    full = lv_occupations(system, steps, optimizer, 0.9)
    np.testing.assert_array_equal(switch, first_crossing(np.arange(steps + 1), full[:, :4], thresholds))
    assert_allclose(occ, full[record], rtol=1e-10, atol=0)
    assert stats["extrapolated"] > 0


@pytest.mark.slow  # the dev loop keeps the smaller equivalences; CI runs this one
@pytest.mark.parametrize("loss", ["squared", "cross_entropy"])
def test_chunked_route_equals_the_whole_route(loss, monkeypatch):
    """Rebuilding the structure chunk by chunk (data too large to hold) gives the same data
    matrices and the same prediction as holding it whole."""
    import nqf.theory.data_matrices.moments as moments_module
    from nqf.theory.data_matrices.build import checked_samples
    from nqf.theory.data_matrices.chunked import chunked_data_matrices

    X, Y = nqf.get_task("digits").generate(0)
    X = np.asarray(X)[:300]
    # squared loss on the task's targets, cross-entropy on its class labels
    labels = np.asarray(Y)[:300] if loss == "squared" else np.argmax(np.asarray(Y)[:300], axis=1)
    arch = nqf.get_architecture("mlp", inputs=X.shape[1], outputs=10, activation="tanh")
    Xc, T, dtype = checked_samples(arch, X, labels, loss)
    whole = data_matrices(arch, X, labels, loss=loss)
    chunked = chunked_data_matrices(arch, Xc, T, loss, dtype, chunk=64)  # 300 = 4 x 64 + 44: padded
    rng = np.random.default_rng(0)
    W = 0.2 * rng.standard_normal((arch.dim, 3))
    M = jnp.asarray(W @ W.T)
    Q = jnp.asarray(np.linalg.qr(rng.standard_normal((arch.dim, 2)))[0])
    for what, a, b in [
        ("loss", whole.loss(M), chunked.loss(M)),
        ("G", whole.gradient_matrix(M), chunked.gradient_matrix(M)),
        ("C", whole.C, chunked.C),
        ("K[M]", whole.K_apply(M), chunked.K_apply(M)),
        ("K_kj", whole.mode_interactions(Q), chunked.mode_interactions(Q)),
        ("c_k", whole.mode_growth(Q), chunked.mode_growth(Q)),
        ("outputs", whole.outputs(M), chunked.outputs(M)),
    ]:
        a, b = np.asarray(a), np.asarray(b)
        assert_allclose(b, a, rtol=0, atol=1e-12 * max(np.abs(a).max(), 1e-300), err_msg=what)
    # the route chooses chunks when the whole structure would not fit
    monkeypatch.setattr(moments_module, "MAX_HELD_STRUCTURE", 1000)
    choice = choose_route(arch, 300, loss, route="samples")
    assert choice.chunk is not None and "chunks" in choice.reason
    cfg = nqf.PredictConfig(width=4, lr=0.02, steps=200, sigma0=1e-3, loss=loss, route="samples")
    held = nqf.predict(arch, X, labels, cfg, data=whole)
    streamed = nqf.predict(arch, X, labels, cfg)
    assert "chunks" in streamed.route_reason
    assert_allclose(streamed.flow.loss, held.flow.loss, rtol=1e-10)
    np.testing.assert_array_equal(streamed.mflow_switch_steps, held.mflow_switch_steps)


_FLOW_SWITCH_SCRIPT = """
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
from nqf.core.cache import enable_compilation_cache
enable_compilation_cache(sys.argv[1])
import numpy as np
import nqf.theory.lotka_volterra.system as lvm
import nqf.theory.lotka_volterra.solve as lvs
s = np.array([3.0, 2.0, 1.0, 0.5])
c = np.concatenate([s / 2, -s / 2])
K = np.block([[np.eye(4) / 4, -np.eye(4) / 4], [-np.eye(4) / 4, np.eye(4) / 4]]) + 0.01
system = lvm.LotkaVolterra(c, K, np.full(8, 1e-12), 0.05, 7.125)
out = lvs.flow_switch_times(system, 3000.0, lvm.fixed_point(system), method="compiled")
print(json.dumps([None if np.isnan(v) else float(v) for v in out]))
"""


def _flow_switch_system():
    import nqf.theory.lotka_volterra.system as lvm

    s = np.array([3.0, 2.0, 1.0, 0.5])
    c = np.concatenate([s / 2, -s / 2])
    K = np.block([[np.eye(4) / 4, -np.eye(4) / 4], [-np.eye(4) / 4, np.eye(4) / 4]]) + 0.01
    return lvm.LotkaVolterra(c, K, np.full(8, 1e-12), 0.05, 7.125)


@pytest.mark.slow  # heavy for the dev loop (make test-fast); CI runs it
def test_flow_switch_times_equal_the_solver_path():
    """The one-program LV flow switch times equal ``switch_times(solve_lv(...))`` exactly; the
    numpy route (the default for this size) agrees to the solver's tolerance (rtol 1e-8 on ln m:
    measured 7e-8 relative here)."""
    import nqf.theory.lotka_volterra.solve as lvs
    import nqf.theory.lotka_volterra.system as lvm

    system = _flow_switch_system()
    reference = lvm.fixed_point(system)
    expected = lvs.switch_times(lvs.solve_lv(system, 3000.0), reference=reference)
    assert np.isfinite(expected[:4]).all()
    np.testing.assert_array_equal(lvs.flow_switch_times(system, 3000.0, reference, method="compiled"), expected)
    numpy_route = lvs.flow_switch_times(system, 3000.0, reference)
    np.testing.assert_array_equal(numpy_route, lvs.flow_switch_times(system, 3000.0, reference, method="numpy"))
    assert_allclose(numpy_route, expected, rtol=1e-6)


@pytest.mark.slow  # a second Python process
def test_flow_switch_times_through_a_stored_artifact(tmp_path):
    """With the cache on (and EQX_ON_ERROR=nan, as the CLI sets it) the program is stored as a
    jax.export artifact, a second process uses it, and a corrupt artifact only costs tracing."""
    import nqf.theory.lotka_volterra.solve as lvs
    import nqf.theory.lotka_volterra.system as lvm

    system = _flow_switch_system()
    expected = lvs.switch_times(lvs.solve_lv(system, 3000.0), reference=lvm.fixed_point(system))
    env = dict(os.environ, EQX_ON_ERROR="nan")

    def run():
        done = subprocess.run(
            [sys.executable, "-c", _FLOW_SWITCH_SCRIPT, str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        return np.array([np.nan if v is None else v for v in json.loads(done.stdout)])

    assert_allclose(run(), expected, rtol=1e-12)
    artifacts = list((tmp_path / "exported").glob("*.jaxexport"))
    assert len(artifacts) == 1
    assert_allclose(run(), expected, rtol=1e-12)
    artifacts[0].write_bytes(b"not a program")
    assert_allclose(run(), expected, rtol=1e-12)
    assert artifacts[0].read_bytes() != b"not a program"  # traced again and stored afresh
