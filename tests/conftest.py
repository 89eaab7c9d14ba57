"""Tests run in float64 (the library itself never flips jax_enable_x64)."""

import atexit
import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jaxtyping
import numpy as np
import psutil
import pytest

# -- jaxtyping's shape annotations checked at test time (jaxtyping's import hook with beartype) -------
# Every module of src/nqf that imports jaxtyping (SHAPE_CHECKED_MODULES, found in the sources, so a new
# one is checked too) is loaded through jaxtyping's import hook, which puts
# `@jaxtyped(typechecker=beartype.beartype(...))` on each of its functions and classes (a dataclass: its
# fields, as constructor arguments). A call whose arrays disagree with the annotated dtype kind or
# shape, or with each other ("d" one size across the arguments and the result of one call), raises
# jaxtyping.TypeCheckError; the other annotations of those modules (float, str, a class, ...) are
# checked too, ints admitted as floats (PEP 484's numeric tower, as mypy reads them). beartype's
# default O(1) strategy: one item of a container is checked. jit-traced calls are checked when traced.
# Not checked: annotations that do not resolve when the function is defined (jaxtyping reads them as
# Any), i.e. names imported under TYPE_CHECKING only (the JAX-free modules nqf.core.measure,
# nqf.theory.scaling and nqf.theory.singular_limit import jaxtyping that way) or defined further
# down; and the subprocesses the tests start (console scripts). The library never imports beartype.
# The hook must be in place before those modules are first imported: it is installed here, when
# pytest loads this file (before any test module, hence nqf, is imported; pytest-xdist's workers
# load it too). NQF_SHAPE_CHECKS=0 leaves it out (e.g. to time the suite without it);
# tests/test_shape_checks.py proves it is on otherwise. jaxtyping's own pytest option
# (--jaxtyping-packages) is not used: it would have to be in pyproject's addopts, and jaxtyping 0.3.11
# splits a list of packages wrongly when the checker has arguments.
SRC = Path(__file__).resolve().parents[1] / "src"
SHAPE_CHECKS = os.environ.get("NQF_SHAPE_CHECKS", "1") != "0"
SHAPE_CHECKED_MODULES = sorted(
    ".".join(path.relative_to(SRC).with_suffix("").parts)
    for path in (SRC / "nqf").rglob("*.py")
    if re.search(r"^\s*(from jaxtyping import|import jaxtyping)\b", path.read_text(), re.MULTILINE)
)
SHAPE_CHECKER = "beartype.beartype(conf=beartype.BeartypeConf(is_pep484_tower=True))"
if SHAPE_CHECKS:
    _early = [name for name in SHAPE_CHECKED_MODULES if name in sys.modules]
    assert not _early, f"imported before jaxtyping's import hook, so not checked: {_early}"
    jaxtyping.install_import_hook(SHAPE_CHECKED_MODULES, SHAPE_CHECKER)
# Tests of the library's own refusal of ill-typed or ill-shaped arguments (the NqfError a user
# without the checks gets): jaxtyping would refuse those calls first, so they run with the checks
# off (the `no_shape_checks` marker; a test may also carry it itself).
UNCHECKED_CASES = {
    "test_data.py::test_data_input_errors",  # Y with fewer rows than X, a non-square covariance
    "test_data_protocol.py::test_what_is_not_data_matrices_is_refused_in_one_line",  # a dict as data
    "test_flow.py::test_map_input_errors",  # steps=2.5
    "test_flow.py::test_maps_accept_population_data_matrices",  # ends with sgd_map on population data
    "test_predict_grid.py::test_bad_grids_are_one_line_errors",  # seeds=[1.5] (every case of it)
}


@pytest.fixture(autouse=True)
def _shape_checks(request):
    """jaxtyping's checks off for a test marked `no_shape_checks` (on again after it)."""
    if request.node.get_closest_marker("no_shape_checks") is None:
        yield
        return
    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", before)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "no_shape_checks: jaxtyping's test-time shape checks off (tests of the library's own refusals)"
    )


# The CLI keeps compiled computations in a persistent cache: one per test session, not the
# user's ~/.cache (tests of the cache itself set NQF_CACHE_DIR explicitly).
if "NQF_CACHE_DIR" not in os.environ:
    os.environ["NQF_CACHE_DIR"] = tempfile.mkdtemp(prefix="nqf-test-cache-")
    atexit.register(shutil.rmtree, os.environ["NQF_CACHE_DIR"], ignore_errors=True)

jax.config.update("jax_enable_x64", True)


# -- test tiers: `make test-fast` runs `-m "not slow"`, `make test` (CI) runs everything ---------------
# Slow: whole modules whose tests start processes (the console script, reproduce, Ray, Slurm's
# local executor, a headless browser), run the experiments or execute the tutorial, and in the
# other modules the tests that go through the real command (their names say cli / console /
# real_command) or a second Python process (subprocess / stored_artifact); and the heaviest numerical
# equivalences (digits-sized data, the chunked route), marked `slow` where they are defined or
# named in SLOW_CASES.
SLOW_MODULES = {
    "test_architecture_comparisons",
    "test_bad_inputs",
    "test_cache",
    "test_cli_properties",
    "test_cli_structure",
    "test_cli_unit",
    "test_curves",
    "test_executors",
    "test_experiment_e6",
    "test_experiment_e7",
    "test_experiments_e1_e2",
    "test_experiments_e3_e4",
    "test_install",
    "test_packaging",
    "test_report",
    "test_reproduce",
    "test_reproduce_kill",
    "test_store_code",
    "test_store_tamper",
    "test_sweep",
    "test_tutorial",
}
SLOW_NAMES = re.compile(r"cli|console|real_command|subprocess|stored_artifact")
# The heaviest single cases of the other modules (2.8-5.7 s each, `pytest -m "not slow" --durations`
# on the 2-core machine, 2026-12-05), each with a lighter sibling left in the fast tier: the full
# suite runs them, the developer's loop keeps under 3 minutes.
SLOW_CASES = {
    "test_predict_grid.py::test_many_modes_power_law_and_its_failure_are_predicts[1000]",
    "test_lotka_volterra.py::test_single_modes_match_the_logistic_closed_form",
    "test_progress.py::test_the_departure_reports_its_plateau_segments",
    "test_lv_kvaerno.py::test_batch_equals_the_scalar_solver_row_by_row",
    "test_fast_predict.py::test_adaptive_stepping_equals_the_step_by_step_map[staircase-momentum]",
    "test_predict.py::test_lv_equals_mflow_when_data_commute_and_init_is_diagonal",
    "test_flow.py::test_stable_lr_bound_whitened_two_layer_network",
    "test_fast_predict.py::test_adaptive_stepping_equals_the_step_by_step_map[icl-gd]",
    "test_registries.py::test_optimizer_m_flow_equals_training_or_predict_refuses[sgd]",
    "test_departure_memory.py::test_memory_formula_against_the_compiled_buffers[staircase]",
    "test_data_protocol.py::test_every_implementation_meets_the_protocol[chunked-squared]",
    "test_departure_memory.py::test_every_path_gives_the_dense_numbers[quadratic-linearised-gd]",
    "test_predict.py::test_single_mode_is_the_logistic_curve",
    # the next heaviest (3.4-5.9 s each in `make test-fast --durations`, 2026-12-05 18:02)
    "test_fast_predict.py::test_adaptive_stepping_equals_the_step_by_step_map[correlated-momentum]",
    "test_factored_moments.py::test_staircase_adaptive_equals_every",
    "test_data_protocol.py::test_every_implementation_meets_the_protocol[chunked-cross_entropy]",
    "test_lotka_volterra.py::test_log_space_handles_tiny_init_and_step_count_does_not_grow_with_plateau",
    "test_prediction_pytree.py::test_comparison_is_a_pytree_of_what_it_measured",
    "test_data.py::test_data_matrices_equal_dense_einsums[attention]",
    "test_data.py::test_data_matrices_equal_dense_einsums[conv2d]",
    "test_fast_predict.py::test_adaptive_stepping_equals_the_step_by_step_map[icl-momentum]",
    "test_validity.py::test_float32_underflow_is_refused_with_the_enable_float64_remedy",
    "test_flow.py::test_gd_map_equals_gd_on_quadratic_model[attention-3]",
    "test_departure_memory.py::test_memory_formula_against_the_compiled_buffers[iris]",
    "test_departure_memory.py::test_every_path_gives_the_dense_numbers[quadratic-linearised-momentum]",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module is not None else ""
        case = f"{module}.py::{item.name}"
        if module in SLOW_MODULES or SLOW_NAMES.search(item.name) or case in SLOW_CASES:
            item.add_marker(pytest.mark.slow)
        if case in UNCHECKED_CASES or f"{module}.py::{getattr(item, 'originalname', item.name)}" in UNCHECKED_CASES:
            item.add_marker(pytest.mark.no_shape_checks)


def assert_allclose(actual, desired, rtol, atol=0.0, err_msg=""):
    """The one tolerance helper: explicit rtol/atol at every call site."""
    np.testing.assert_allclose(np.asarray(actual), np.asarray(desired), rtol=rtol, atol=atol, err_msg=err_msg)


# --- a Ray cluster for the executor tests (and any test that takes `ray_cluster`) -------------

RAY_CLUSTERS: dict[str, dict] = {}  # address -> {"process": Popen, "temp_dir": str}: what ray_cluster started


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop_ray_cluster(process, temp_dir: str) -> None:
    """Stop exactly the processes this cluster started (never `ray stop`, which stops every Ray
    cluster of the user on the machine): the `ray start --block` process and its descendants,
    and any process whose command line names the cluster's own temp folder."""
    try:
        tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for proc in psutil.process_iter(["cmdline"]):
        if temp_dir in " ".join(proc.info["cmdline"] or []) and proc not in tree:
            tree.append(proc)
    for signum, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 15)):  # `ray start` drains up to 30 s: not waited for
        for proc in tree:
            try:
                proc.send_signal(signum)
            except psutil.NoSuchProcess:
                pass
        _, tree = psutil.wait_procs(tree, timeout=grace)
        if not tree:
            break
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """The address "127.0.0.1:<port>" of a Ray head started for this session, on loopback only.

    `ray start --head --block` from the venv (2 CPUs, no dashboard, no usage stats, its own temp
    folder and auth token), with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 set here too (Ray reads it
    when it is imported), so the cluster and every driver of this session bind 127.0.0.1; the
    token's RAY_AUTH_MODE/RAY_AUTH_TOKEN_PATH are set for the session's drivers (subprocesses
    included). Stopped at the end of the session, also when a test failed (only its own
    processes: never `ray stop`). Skipped when Ray is not installed.
    """
    ray_script = Path(sys.executable).with_name("ray")
    if importlib.util.find_spec("ray") is None or not ray_script.exists():
        pytest.skip("Ray is not installed (pip install 'nqf[ray]')")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    temp_dir = tempfile.mkdtemp(prefix="nqf-ray-", dir="/tmp")  # short: Ray's socket paths are limited
    # Token authentication with a token of its own (not ~/.ray/auth_token): Ray enables it for a
    # driver that connects by address only when told, so every driver of the session is told here.
    token = Path(temp_dir) / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    saved = {name: os.environ.get(name) for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")}
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    port = _free_port()
    log_path = tmp_path_factory.mktemp("ray") / "ray-start.log"
    command = [
        str(ray_script),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        "--num-cpus=2",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
    ]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log_path.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        RAY_CLUSTERS[address] = {"process": process, "temp_dir": temp_dir}
        yield address
    finally:
        RAY_CLUSTERS.pop(address, None)
        _stop_ray_cluster(process, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
