"""Warm starts of the command line: the persistent compilation cache and lazy imports.

Through the installed console script, as a user runs it: the cache fills and is reused,
``--no-cache`` and ``NQF_CACHE_DIR=""`` write nothing, XDG_CACHE_HOME and HOME are
honoured, and a damaged or unwritable cache costs only a recompile (same output, exit 0,
nothing on stderr). ``nqf --help`` and argument errors never import JAX. Correctness only:
timings are in benchmarks/bench_cli.py.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nqf
from nqf.core.cache import cache_dir, enable_compilation_cache, prune_unreadable_entries

pytestmark = pytest.mark.slow  # warm starts of the real console script

NQF = Path(sys.executable).parent / "nqf"
PREDICT = ("--arch", "mlp", "--width", "8", "--sigma0", "1e-6", "--lr", "0.05", "--steps", "60", "--json")
GARBAGE = b"\x00not a compiled program\xff" * 64


def _env(**values: str | None) -> dict:
    """The test environment with JAX on the CPU; a value None removes the variable."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    for name in ("NQF_CACHE_DIR", "XDG_CACHE_HOME", "EQX_ON_ERROR"):
        env.pop(name, None)
    for name, value in values.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_nqf(*args: str, env: dict) -> subprocess.CompletedProcess:
    assert NQF.exists(), f"console script {NQF} is missing: pip install -e . first"
    return subprocess.run([str(NQF), *args], capture_output=True, text=True, env=env, timeout=600)


def entries(path: Path) -> dict[str, bytes]:
    """The cache entries (JAX names them KEY-cache) with their contents."""
    return {p.name: p.read_bytes() for p in path.rglob("*-cache") if p.is_file()} if path.exists() else {}


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in files_under(path)}


def restore(path: Path, files: dict[str, bytes]) -> None:
    """Put the cache back as it was. In place: JAX's cache keys include the cache's path."""
    shutil.rmtree(path, ignore_errors=True)
    for name, content in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(content)


@pytest.fixture(scope="module")
def staircase_file(tmp_path_factory) -> Path:
    X, Y = nqf.get_task("staircase").generate(0)
    path = tmp_path_factory.mktemp("data") / "staircase.npz"
    np.savez(path, X=np.asarray(X), Y=np.asarray(Y))
    return path


@pytest.fixture(scope="module")
def reference(staircase_file, tmp_path_factory) -> subprocess.CompletedProcess:
    """``nqf --no-cache predict``: the output every cached run must reproduce."""
    unused = tmp_path_factory.mktemp("no-cache") / "cache"
    result = run_nqf(
        "--no-cache", "predict", "--data", str(staircase_file), *PREDICT, env=_env(NQF_CACHE_DIR=str(unused))
    )
    assert result.returncode == 0, result.stderr
    assert not unused.exists(), "--no-cache must not create the cache directory"
    return result


@pytest.fixture(scope="module")
def populated_once(staircase_file, reference, tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    """A cache directory filled by one ``nqf predict`` run, and its files."""
    cache = tmp_path_factory.mktemp("populated") / "jax-cache"
    result = run_nqf("predict", "--data", str(staircase_file), *PREDICT, env=_env(NQF_CACHE_DIR=str(cache)))
    assert result.returncode == 0, result.stderr
    assert result.stdout == reference.stdout
    assert result.stderr == reference.stderr
    return cache, snapshot(cache)


@pytest.fixture
def populated(populated_once) -> Path:
    """The populated cache, as the first run left it (tests damage it in place)."""
    cache, files = populated_once
    restore(cache, files)
    return cache


@pytest.fixture(scope="module")
def structure_reference(tmp_path_factory) -> subprocess.CompletedProcess:
    result = run_nqf("--no-cache", "structure", "mlp", "--json", env=_env())
    assert result.returncode == 0, result.stderr
    return result


# -- the cache through the console script ---------------------------------------------------------
# the CLI's main with JAX's compiler log (cache hits and misses) on stderr; the log level is not
# part of JAX's cache keys (JAX_EXPLAIN_CACHE_MISSES would be)
_LOGGED_RUN = """
import logging, sys
handler = logging.StreamHandler(sys.stderr)
handler.setFormatter(logging.Formatter("LOG %(message)s"))
logger = logging.getLogger("jax._src.compiler")
logger.addHandler(handler)
logger.setLevel(logging.DEBUG)
from nqf.cli import main
main(sys.argv[1:])
"""


def test_cache_is_filled_then_reused(populated, staircase_file, reference):
    stored = entries(populated)
    # every jitted program, however small, is stored: what a small predict still compiles is the
    # init draw's transform of random bits (the expansion probe, the moments and the numpy engine
    # run in numpy: nqf.core.host_eval)
    names = {name.split("-")[0] for name in stored}
    assert "jit__normal_of_bits" in names, sorted(stored)
    result = subprocess.run(
        [sys.executable, "-c", _LOGGED_RUN, "predict", "--data", str(staircase_file), *PREDICT],
        capture_output=True,
        text=True,
        env=_env(NQF_CACHE_DIR=str(populated)),
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == reference.stdout
    assert json.loads(result.stdout)["lv"]["applies"] is True
    # the second run compiled nothing: every program came from the cache, the ODE solves
    # too (equinox's runtime checks would otherwise be Python callbacks, which JAX never stores)
    log = result.stderr
    assert "Persistent compilation cache hit" in log, log[-3000:]
    assert "PERSISTENT COMPILATION CACHE MISS" not in log, log[-3000:]
    assert entries(populated) == stored


def test_damaged_cache_costs_only_a_recompile(populated, staircase_file, reference):
    cache = populated
    stored = entries(cache)
    damaged = files_under(cache)
    assert damaged
    for path in damaged:
        path.write_bytes(GARBAGE)
    result = run_nqf("predict", "--data", str(staircase_file), *PREDICT, env=_env(NQF_CACHE_DIR=str(cache)))
    assert result.returncode == 0, result.stderr
    assert result.stdout == reference.stdout
    assert result.stderr == reference.stderr  # no warning, no traceback
    # the unreadable entries were removed and stored afresh by the same run
    repaired = entries(cache)
    assert set(repaired) == set(stored)
    assert all(content != GARBAGE for content in repaired.values())
    assert prune_unreadable_entries(cache) == 0
    again = run_nqf("predict", "--data", str(staircase_file), *PREDICT, env=_env(NQF_CACHE_DIR=str(cache)))
    assert again.returncode == 0 and again.stdout == reference.stdout
    assert entries(cache) == repaired  # all read from the cache


def test_truncated_entries_cost_only_a_recompile(populated, staircase_file, reference):
    """What a run killed while writing, or a full disk, leaves behind: entries cut short."""
    cache = populated
    stored = entries(cache)
    for path in cache.rglob("*-cache"):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    result = run_nqf("predict", "--data", str(staircase_file), *PREDICT, env=_env(NQF_CACHE_DIR=str(cache)))
    assert result.returncode == 0, result.stderr
    assert result.stdout == reference.stdout
    assert result.stderr == reference.stderr
    # removed and stored afresh (recompiled entries differ in bytes: they hold the compile time);
    # programs that only tracing asked for (the exported ODE solve is loaded, not traced) stay away
    assert set(entries(cache)) <= set(stored)
    assert len(entries(cache)) >= len(stored) // 2
    assert prune_unreadable_entries(cache) == 0


@pytest.mark.parametrize("switch", ["--no-cache", "empty NQF_CACHE_DIR"])
def test_switched_off_writes_nothing(switch, tmp_path, structure_reference):
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    home.mkdir()
    if switch == "--no-cache":
        result = run_nqf("--no-cache", "structure", "mlp", "--json", env=_env(HOME=str(home), XDG_CACHE_HOME=str(xdg)))
    else:
        result = run_nqf(
            "structure", "mlp", "--json", env=_env(HOME=str(home), XDG_CACHE_HOME=str(xdg), NQF_CACHE_DIR="")
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout == structure_reference.stdout
    assert files_under(home) == [] and not xdg.exists()


def test_xdg_cache_home_then_home(tmp_path, structure_reference):
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    home.mkdir()
    result = run_nqf("structure", "mlp", "--json", env=_env(HOME=str(home), XDG_CACHE_HOME=str(xdg)))
    assert result.returncode == 0, result.stderr
    assert result.stdout == structure_reference.stdout
    assert entries(xdg / "nqf" / "jax")
    assert files_under(home) == []

    result = run_nqf("structure", "mlp", "--json", env=_env(HOME=str(home)))
    assert result.returncode == 0, result.stderr
    assert entries(home / ".cache" / "nqf" / "jax")

    # NQF_CACHE_DIR wins over both
    explicit = tmp_path / "explicit"
    result = run_nqf(
        "structure", "mlp", "--json", env=_env(HOME=str(home), XDG_CACHE_HOME=str(xdg), NQF_CACHE_DIR=str(explicit))
    )
    assert result.returncode == 0, result.stderr
    assert entries(explicit)


@pytest.mark.parametrize("where", ["a file", "below a file", "XDG_CACHE_HOME a file", "read-only directory"])
def test_unwritable_location_costs_only_a_recompile(where, tmp_path, structure_reference):
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"not a directory")
    if where == "a file":
        env = _env(NQF_CACHE_DIR=str(blocker))
    elif where == "below a file":
        env = _env(NQF_CACHE_DIR=str(blocker / "jax"))
    elif where == "XDG_CACHE_HOME a file":
        env = _env(XDG_CACHE_HOME=str(blocker), HOME=str(tmp_path))
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories")
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        env = _env(NQF_CACHE_DIR=str(locked / "jax"))
    try:
        result = run_nqf("structure", "mlp", "--json", env=env)
    finally:
        if where == "read-only directory":
            (tmp_path / "locked").chmod(0o700)
    assert result.returncode == 0, result.stderr
    assert result.stdout == structure_reference.stdout
    assert result.stderr == structure_reference.stderr
    assert blocker.read_bytes() == b"not a directory"


# -- lazy imports -----------------------------------------------------------------------------------
_JAX_CHECK = """
import sys
from nqf.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
else:
    code = 0
print(f"exit={code} jax={'jax' in sys.modules} numpy={'numpy' in sys.modules}")
"""


@pytest.mark.parametrize(
    "args, code",
    [
        (["--help"], 0),
        (["predict", "--help"], 0),
        (["structure", "--help"], 0),
        (["compare", "--help"], 0),
        (["reproduce", "--help"], 0),
        (["--no-cache", "predict", "--help"], 0),
        (
            [
                "predict",
                "--width",
                "-3",
                "--data",
                "x.npz",
                "--arch",
                "mlp",
                "--lr",
                "0.1",
                "--steps",
                "5",
                "--sigma0",
                "1",
            ],
            2,
        ),
        (["predict", "--width", "three"], 2),
        (["predict", "--data", "x.npz", "--arch", "mlp", "--width", "3", "--lr", "0.1", "--steps", "5"], 2),
        (["compare", "--task", "staircase", "--width", "0", "--sigma0", "1", "--lr", "0.1", "--steps", "5"], 2),
        (["--bogus"], 2),
        (["bogus"], 2),
    ],
)
def test_help_and_argument_errors_do_not_import_jax(args, code, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _JAX_CHECK, *args],
        capture_output=True,
        text=True,
        env=_env(NQF_CACHE_DIR=str(tmp_path / "cache")),
        timeout=300,
    )
    assert f"exit={code} jax=False numpy=False" in result.stdout, (result.stdout, result.stderr)
    if code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not (tmp_path / "cache").exists()


def test_import_nqf_is_lazy_and_sets_no_jax_config():
    code = """
import sys
import nqf
assert "jax" not in sys.modules, "import nqf loaded jax"
assert set(nqf.__all__) <= set(dir(nqf))
assert "enable_compilation_cache" in nqf.__all__ and "predict" in nqf.__all__
from nqf import enable_compilation_cache, predict, PredictConfig, get_task, NqfError
for name in nqf.__all__:
    getattr(nqf, name)
import nqf.architectures
import nqf_paper
assert nqf.architectures.mlp is nqf.architectures.mlp and callable(nqf.architectures.mlp)
assert nqf.theory.flow.gd_map is nqf.theory.flow.gd_map and nqf_paper.EXPERIMENTS["E1"].name == "E1"
try:
    nqf.no_such_name
except AttributeError:
    pass
else:
    raise AssertionError("nqf.no_such_name resolved")
import jax
assert jax.config.jax_compilation_cache_dir is None
assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0
assert not jax.config.jax_enable_x64
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# -- the library functions --------------------------------------------------------------------------
def test_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("NQF_CACHE_DIR", raising=False)
    assert cache_dir() == tmp_path / "home" / ".cache" / "nqf" / "jax"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the XDG spec: ignore relative paths
    assert cache_dir() == tmp_path / "home" / ".cache" / "nqf" / "jax"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "nqf" / "jax"
    monkeypatch.setenv("NQF_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache_dir() == tmp_path / "explicit"
    monkeypatch.setenv("NQF_CACHE_DIR", "")
    assert cache_dir() is None


def test_enable_refuses_bad_locations_without_touching_jax(monkeypatch, tmp_path):
    import jax

    before = jax.config.jax_compilation_cache_dir
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert enable_compilation_cache(blocker) is None
    assert enable_compilation_cache(blocker / "below") is None
    assert enable_compilation_cache("") is None
    monkeypatch.setenv("NQF_CACHE_DIR", "")
    assert enable_compilation_cache() is None
    monkeypatch.setenv("NQF_CACHE_DIR", str(blocker))
    assert enable_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir == before
    assert blocker.read_text() == "x"


def test_prune_removes_only_unreadable_entries(tmp_path):
    from jax._src import compilation_cache as jax_cache

    good = tmp_path / "good-cache"
    good.write_bytes(jax_cache.compress_executable(b"\x00\x00\x00\x01" + b"program"))
    bad = tmp_path / "bad-cache"
    bad.write_bytes(GARBAGE)
    other = tmp_path / "notes.txt"  # not an entry: left alone
    other.write_bytes(GARBAGE)
    assert prune_unreadable_entries(tmp_path) == 1
    assert good.exists() and not bad.exists() and other.exists()
    assert prune_unreadable_entries(tmp_path / "missing") == 0
