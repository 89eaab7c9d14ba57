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
from typing import Any

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
# without the checks gets): jaxtyping would refuse those calls first, so they carry the
# `no_shape_checks` marker where they are defined and run with the checks off.


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
# A test is slow where it is defined: `pytestmark = pytest.mark.slow` for a module whose tests start
# processes (the console script, reproduce, Ray, Slurm's local executor, a headless browser), run the
# experiments or execute the tutorial; `@pytest.mark.slow` on a test that goes through the real command
# or a second Python process, or on the heaviest numerical cases (`pytest.param(..., marks=pytest.mark.slow)`
# for one case of a parametrized test), each with a lighter sibling in the fast tier.


def assert_allclose(actual, desired, rtol, atol=0.0, err_msg=""):
    """The one tolerance helper: explicit rtol/atol at every call site."""
    np.testing.assert_allclose(np.asarray(actual), np.asarray(desired), rtol=rtol, atol=atol, err_msg=err_msg)


def one_line(err: pytest.ExceptionInfo) -> str:
    """The message of a raised error, asserted to be one line."""
    message = str(err.value)
    assert "\n" not in message, message
    return message


# -- the installed console script on small data: bad input through the real command -----------------

NQF = Path(sys.executable).parent / "nqf"
# a small sweep spec, the start of the specs of several tests
SWEEP_BASE = '[task]\nname = "staircase"\n[settings]\nwidth = 4\nsteps = 50\nsigma0 = 0.01\nlr = 0.1\n'


def run_nqf(*args, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``nqf ARGS`` through the installed console script, its output captured as text."""
    assert NQF.exists(), f"console script {NQF} is missing: pip install -e . first"
    return subprocess.run([str(NQF), *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def error_line(done: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a refused command (exit 2, nothing on stdout, no traceback)."""
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def mlp_data(tmp_path_factory) -> dict[str, Any]:
    """Data for mlp's defaults (8 inputs, 4 outputs): ok.npz: X (32, 8), Y (32, 4); y1d.npz: Y (32,)
    floats (the first column); "X" and "Y": the arrays themselves."""
    folder = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((32, 8)), rng.standard_normal((32, 4))
    np.savez(folder / "ok.npz", X=X, Y=Y)
    np.savez(folder / "y1d.npz", X=X, Y=Y[:, 0])
    return {"ok": folder / "ok.npz", "y1d": folder / "y1d.npz", "X": X, "Y": Y}


def run_cli(args: list[Any], capture) -> tuple[int, str, str]:
    """``nqf ARGS`` in this process (``nqf.cli.main``): (exit status, stdout, stderr), read from
    ``capture`` (pytest's ``capsys`` or ``capfd``)."""
    from nqf.cli import main

    capture.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capture.readouterr()
    return code, out, err


def predict_args(data_file: Path, *extra: str, width: int = 4, sigma0: str = "0.01", steps: int = 50) -> list[str]:
    """The arguments of ``nqf predict`` on ``data_file`` with mlp (lr 0.1), then ``extra``."""
    common = ["predict", "--data", str(data_file), "--arch", "mlp", "--width", str(width), "--sigma0", sigma0]
    return [*common, "--lr", "0.1", "--steps", str(steps), *map(str, extra)]


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
