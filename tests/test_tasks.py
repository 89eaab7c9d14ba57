"""Tasks: shapes, exact whitening, the documented spectra against the data matrices C = E[y A(x)], and
the options and seeds a task takes (a boolean option is a bool; a seed an integer or a JAX key)."""

import jax
import numpy as np
import pytest

import nqf
from nqf.architectures.architecture import structure
from nqf.core.errors import NqfError
from nqf.training.tasks import TASKS, get_task, task_options
from tests.conftest import assert_allclose


def data_matrix(task, key=0):
    """C = (1/N) sum_n sum_c y_nc A_c(x_n) of the task's natural architecture (structured contract)."""
    X, Y = task.generate(key, "float64")
    return np.asarray(structure(task.architecture(), X).contract(Y)), X, Y


def top_eigenvalues(C, count):
    return np.sort(np.linalg.eigvalsh(C))[::-1][:count]


def test_staircase_whitened_teacher_and_spectrum():
    task = get_task("staircase")
    C, X, Y = data_matrix(task, key=3)
    X, Y = np.asarray(X), np.asarray(Y)
    assert X.shape == (256, 8) and Y.shape == (256, 4)
    assert_allclose(X.T @ X / 256, np.eye(8), rtol=0, atol=1e-12)
    U, s, V = task.teacher(3)
    assert_allclose(U.T @ U, np.eye(4), rtol=0, atol=1e-12)
    assert_allclose(V.T @ V, np.eye(4), rtol=0, atol=1e-12)
    assert_allclose(Y, X @ V @ np.diag(s) @ U.T, rtol=0, atol=1e-12)
    # tanh: sigma'(0) = 1, c_k = s_k / 2, and C = sum_k c_k (q_k+ q_k+^T - q_k- q_k-^T)
    assert_allclose(task.spectrum(), [1.5, 1.0, 0.5, 0.25], rtol=1e-15)
    eig = np.sort(np.linalg.eigvalsh(C))
    assert_allclose(eig[::-1][:4], task.spectrum(), rtol=0, atol=1e-12)
    assert_allclose(eig[:4], -task.spectrum(), rtol=0, atol=1e-12)
    Q = task.mode_basis(3)
    assert_allclose(Q.T @ C @ Q, np.diag(task.spectrum()), rtol=0, atol=1e-12)
    assert_allclose(task.fixed_point_occupations(), [6.0, 4.0, 2.0, 1.0], rtol=1e-15)
    assert_allclose(task.plateau_losses()[0], 0.5 * np.mean(np.sum(Y**2, axis=1)), rtol=1e-12)
    assert_allclose(task.plateau_losses(), [7.125, 2.625, 0.625, 0.125, 0.0], rtol=1e-15)


def test_staircase_same_key_same_data_and_teacher_independent_of_samples():
    a = get_task("staircase").generate(5, "float64")
    b = get_task("staircase").generate(5, "float64")
    assert np.array_equal(np.asarray(a[0]), np.asarray(b[0]))
    key = jax.random.PRNGKey(7)
    c1, c2 = get_task("staircase").generate(key, "float64"), get_task("staircase").generate(key, "float64")
    assert np.array_equal(np.asarray(c1[1]), np.asarray(c2[1]))
    assert_allclose(get_task("staircase", samples=64).teacher(2)[0], get_task("staircase").teacher(2)[0], rtol=0)


def test_staircase_correlated_inputs_have_the_asked_second_moment():
    task = get_task("staircase", correlation=0.5)
    C, X, Y = data_matrix(task, key=1)
    X = np.asarray(X)
    Sigma = 0.5 ** np.abs(np.subtract.outer(np.arange(8), np.arange(8)))
    assert_allclose(X.T @ X / X.shape[0], Sigma, rtol=0, atol=1e-12)
    U, s, V = task.teacher(1)
    expected = 0.5 * np.linalg.svd((U * s) @ V.T @ Sigma, compute_uv=False)
    assert_allclose(task.spectrum(1), expected, rtol=1e-12)
    assert_allclose(top_eigenvalues(C, 4), expected, rtol=0, atol=1e-12)
    assert task.plateau_losses() is None


def test_powerlaw_spectrum():
    task = get_task("powerlaw", modes=12, inputs=16, outputs=12, alpha=1.5, samples=64)
    C, X, Y = data_matrix(task)
    k = np.arange(1, 13)
    assert_allclose(task.spectrum(), 0.5 * k**-1.5, rtol=1e-14)
    assert_allclose(top_eigenvalues(C, 12), task.spectrum(), rtol=0, atol=1e-12)


def test_experts_spectrum_is_staircase_over_experts():
    task = get_task("experts", experts=3)
    C, X, Y = data_matrix(task)
    assert task.architecture().router.units == 3
    assert_allclose(task.spectrum(), np.array([3, 2, 1, 0.5]) / 6, rtol=1e-15)
    assert_allclose(top_eigenvalues(C, 4), task.spectrum(), rtol=0, atol=1e-12)
    Q = task.mode_basis()
    assert_allclose(Q.T @ C @ Q, np.diag(task.spectrum()), rtol=0, atol=1e-12)
    assert_allclose(task.fixed_point_occupations(), 6 * np.array([3, 2, 1, 0.5]), rtol=1e-15)


def test_quadratic_teacher_and_population_moments():
    task = get_task("quadratic", samples=20000)
    C, X, Y = data_matrix(task, key=2)
    X, Y = np.asarray(X), np.asarray(Y)
    Qt = task.teacher(2)
    assert Y.shape == (20000, 1)
    assert_allclose(Y[:, 0], np.einsum("ni,ij,nj->n", X, Qt, X), rtol=1e-12)
    assert_allclose(np.sort(np.linalg.eigvalsh(Qt))[::-1][:4], [3, 2, 1, 0.5], rtol=1e-12)
    # population: C = Q + Tr(Q)/2 I (Isserlis); the sample's deviation is O(1/sqrt N),
    # measured 0.10-0.17 max over entries at N = 20000; the Tr(Q)/2 = 3.25 term and the
    # factor on Q (1 vs 2) would each be off by > 1
    population = Qt + 0.5 * np.trace(Qt) * np.eye(8)
    assert np.abs(C - population).max() < 0.4
    assert_allclose(task.spectrum(), [6.25, 5.25, 4.25, 3.75, 3.25, 3.25, 3.25, 3.25], rtol=1e-15)


def test_fourier_modes_are_frequencies():
    task = get_task("fourier", length=12, alpha=1.0, samples=256)
    C, X, Y = data_matrix(task, key=4)
    X = np.asarray(X)
    Sigma = task.covariance()
    assert_allclose(X.T @ X / 256, Sigma, rtol=0, atol=1e-12)
    assert_allclose(np.asarray(Y)[:, 0], X[:, 0], rtol=0)
    # circulant: eigenvalues of Sigma are the power spectrum
    assert_allclose(np.sort(np.linalg.eigvalsh(Sigma)), np.sort(task.power_spectrum()), rtol=0, atol=1e-12)
    L = 12
    assert_allclose(top_eigenvalues(C, L), task.spectrum(), rtol=0, atol=1e-12)
    assert_allclose(task.spectrum()[:3], [0.5, 0.25, 0.25], rtol=1e-15)


def test_icl_prompts_and_spectrum():
    task = get_task("icl")
    assert (task.dim, task.context, task.task_variances) == (4, 31, (0.4, 0.3, 0.2, 0.1))
    C, X, Y = data_matrix(task, key=0)
    X, Y = np.asarray(X), np.asarray(Y)
    assert X.shape == (20000, 32, 5) and Y.shape == (20000, 1)
    assert np.all(X[:, 31, 4] == 0.0)
    # noise-free labels: w solved from each prompt's context predicts the target exactly
    for p in range(5):
        w = np.linalg.lstsq(X[p, :31, :4], X[p, :31, 4], rcond=None)[0]
        assert_allclose(X[p, 31, :4] @ w, Y[p, 0], rtol=1e-10, atol=1e-12)
    lam = np.array([0.4, 0.3, 0.2, 0.1])
    assert_allclose(task.spectrum(), 0.5 * np.array([np.linalg.norm(lam), 0.4, 0.3, 0.2, 0.1]), rtol=1e-15)
    # population spectrum against 20000 prompts: measured deviation <= 0.007 over seeds 0-2
    assert_allclose(top_eigenvalues(C, 5), task.spectrum(), rtol=0, atol=0.02)
    assert abs(top_eigenvalues(C, 6)[5]) < 0.02  # nothing else


def test_tokens_mean_token_whitened_and_hidden_part_invisible():
    base = get_task("tokens", value_dim=2)
    C0, X0, Y0 = data_matrix(base, key=1)
    X0 = np.asarray(X0)
    xbar = X0.mean(axis=1)
    assert X0.shape == (256, 8, 8) and np.asarray(Y0).shape == (256, 4)
    assert_allclose(xbar.T @ xbar / 256, np.eye(8), rtol=0, atol=1e-12)
    assert_allclose(base.spectrum(), [1.5, 1.5, 1.0, 1.0, 0.5, 0.5, 0.25, 0.25], rtol=1e-15)
    assert_allclose(top_eigenvalues(C0, 8), base.spectrum(), rtol=0, atol=1e-12)
    hidden = get_task("tokens", value_dim=2, query_weight=1.0)
    C1, X1, Y1 = data_matrix(hidden, key=1)
    assert_allclose(np.asarray(X1), X0, rtol=0)
    assert np.abs(np.asarray(Y1) - np.asarray(Y0)).max() > 0.1  # the target did change
    assert_allclose(C1, C0, rtol=0, atol=1e-12)  # ... but not what the quadratic form sees


def test_digits_preprocessing():
    task = get_task("digits")
    X, Y = (np.asarray(a) for a in task.generate(0, "float64"))
    assert X.shape == (1797, 64) and Y.shape == (1797, 10)
    std = X.std(axis=0)
    assert_allclose(X.mean(axis=0), 0.0, rtol=0, atol=1e-12)
    assert np.all((np.abs(std - 1) < 1e-12) | (std == 0)) and np.sum(std == 0) >= 1  # constant border pixels
    assert_allclose(Y.sum(axis=1), 0.0, rtol=0, atol=1e-12)
    assert_allclose(Y.max(axis=1), 0.9, rtol=1e-15)
    sub = get_task("digits", samples=100, standardize=False, center_targets=False)
    Xs, Ys = (np.asarray(a) for a in sub.generate(1, "float64"))
    assert Xs.shape == (100, 64) and Xs.min() >= 0 and Xs.max() <= 1
    assert_allclose(Ys.sum(axis=1), 1.0, rtol=0)
    assert sub.natural_architecture() == ("mlp", {"inputs": 64, "outputs": 10, "activation": "tanh"})


def test_npz_roundtrip_and_errors(tmp_path):
    good = tmp_path / "good.npz"
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((20, 3)), rng.standard_normal(20)
    np.savez(good, X=X, Y=y)
    task = get_task("npz", path=str(good))
    Xg, Yg = task.generate(0, "float64")
    assert_allclose(Xg, X, rtol=0)
    assert_allclose(np.asarray(Yg)[:, 0], y, rtol=0)
    assert task.natural_architecture() == ("mlp", {"inputs": 3, "outputs": 1, "activation": "tanh"})

    with pytest.raises(NqfError, match="not found"):
        get_task("npz", path=str(tmp_path / "missing.npz")).generate()
    np.savez(tmp_path / "nokey.npz", X=X, Z=y)
    with pytest.raises(NqfError, match="no array Y"):
        get_task("npz", path=str(tmp_path / "nokey.npz")).generate()
    np.savez(tmp_path / "mismatch.npz", X=X, Y=y[:5])
    with pytest.raises(NqfError, match="20 samples but Y has 5"):
        get_task("npz", path=str(tmp_path / "mismatch.npz")).generate()
    bad = X.copy()
    bad[2, 1] = np.nan
    np.savez(tmp_path / "nan.npz", X=bad, Y=y)
    with pytest.raises(NqfError, match="1 non-finite"):
        get_task("npz", path=str(tmp_path / "nan.npz")).generate()
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(NqfError, match="cannot read"):
        get_task("npz", path=str(tmp_path / "junk.npz")).generate()
    with pytest.raises(NqfError, match="path"):
        get_task("npz")


def test_registry_and_option_errors():
    assert set(TASKS) == {"staircase", "powerlaw", "quadratic", "fourier", "icl", "tokens", "experts", "digits", "npz"}
    assert task_options("staircase")["singular_values"] == (3.0, 2.0, 1.0, 0.5)
    assert get_task("staircase", singular_values=[2, 1]).singular_values == (2.0, 1.0)
    with pytest.raises(NqfError, match="no option bogus"):
        get_task("staircase", bogus=1)
    with pytest.raises(NqfError, match="unknown task"):
        get_task("nope")
    with pytest.raises(NqfError, match="singular values need"):
        get_task("staircase", singular_values=(1, 1, 1, 1, 1))
    with pytest.raises(NqfError, match="positive"):
        get_task("staircase", singular_values=(1, -1))
    with pytest.raises(NqfError, match="samples >= inputs"):
        get_task("staircase", samples=4)
    with pytest.raises(NqfError, match="task_variances"):
        get_task("icl", dim=3)
    # every task's natural architecture is in the registry and matches its data shapes
    for name in TASKS:
        if name in ("npz", "digits"):
            continue
        small = {"icl": {"prompts": 8}}.get(name, {})
        task = get_task(name, **small)
        X, Y = task.generate(0, "float64")
        arch = task.architecture()
        assert X.shape[1:] == tuple(arch.input_shape) and Y.shape[1] == arch.outputs, name


# -- options and seeds: a boolean option is a real bool, a seed an integer or a JAX key ---------------


def _bool_options():
    return [
        (name, option)
        for name, cls in TASKS.items()
        for option, default in nqf.task_options(name).items()
        if isinstance(default, bool)
    ]


@pytest.mark.parametrize("name, option", _bool_options())
@pytest.mark.parametrize("value", ["false", "no", "", 0, 1, None, 1.0])
def test_boolean_task_option_refuses_what_is_no_bool(name, option, value):
    with pytest.raises(NqfError, match=rf"^task {name}: option {option} must be true or false, got {value!r}$"):
        nqf.get_task(name, **{option: value})


def test_boolean_task_option_refused_when_the_class_is_built_directly():
    from nqf.training.tasks import Staircase

    with pytest.raises(NqfError, match="whiten must be true or false, got 'false'"):
        Staircase(whiten="false")


def test_boolean_task_option_takes_python_and_numpy_bools():
    plain = nqf.get_task("staircase", whiten=False)
    from_numpy = nqf.get_task("staircase", whiten=np.bool_(False))
    assert from_numpy.whiten is False and from_numpy == plain  # a Python bool: hashable, JSON-ready
    X, _ = from_numpy.generate(0, "float64")
    assert not np.allclose(np.asarray(X).T @ np.asarray(X) / X.shape[0], np.eye(8))  # not whitened


@pytest.mark.parametrize("seed", [1.5, -1, 1.0, True, "1", 2**32])
def test_task_generate_refuses_what_is_no_seed(seed):
    with pytest.raises(NqfError, match=r"^seed must be an integer in \[0, 4294967295\], got "):
        nqf.get_task("staircase").generate(seed)


def test_task_generate_takes_int_seeds_and_jax_keys_but_not_float_keys():
    task = nqf.get_task("staircase")
    a, _ = task.generate(np.int64(3), "float64")
    b, _ = task.generate(3, "float64")
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    c, _ = task.generate(jax.random.PRNGKey(1), "float64")
    d, _ = task.generate(jax.random.key(1), "float64")
    np.testing.assert_array_equal(np.asarray(c), np.asarray(d))
    with pytest.raises(NqfError, match="^key must be an int seed or a JAX PRNG key"):
        task.generate(np.array([1.5, 2.0]))  # was read as the words (1, 2)
