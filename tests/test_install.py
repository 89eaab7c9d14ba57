"""The README's Install section, followed as a user follows it: no uv, no clone's `.venv`.

A fresh ``python -m venv``; its own pip builds the wheel of the working tree (pyproject's build
backend, setuptools, in pip's build isolation) from a copy of the files the wheel is made of, so
nothing is written into the checkout; ``pip install`` of that wheel takes the dependencies from
the package index (pip's own configuration, cache included), not from ``uv.lock``: the newest
releases pyproject.toml allows. Then, with that venv's programs and the working directory
outside the clone (so ``import nqf`` finds the installed package, not ``src/``):
``nqf --version`` prints ``nqf <version>``, ``python -m nqf --help`` exits 0, the README's
"Five lines of Python" (read from README.md, run as written) print the switch steps the
README gives, and ``nqf predict`` on a small .npz file prints its table.

Slow (the module's ``pytestmark``): the install fetches jax, jaxlib, scipy and the rest
(an 824 MB venv), from pip's cache where it holds them. Measured on the 2-core development
machine, shared with other work (load 4-5), whose pip config adds local file:// mirrors of PyPI
(so the wheels came from disk and pip's cache stayed empty): the wheel built in 4-8 s, the
install took 28-41 s, the whole module 45-67 s. The same install from PyPI alone
(``pip install --isolated``, no cache) took 35 s there. When the package index cannot be
reached the module is skipped with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# pytest-timeout counts the module fixture's install in the first test's time.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # builds and installs the package

# What pip prints when it cannot reach an index (its retry warnings, then the error).
NETWORK_TROUBLE = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution"
    r"|Name or service not known|Network is unreachable|Connection refused|ConnectTimeoutError"
    r"|ReadTimeoutError|Max retries exceeded|ProxyError|SSLError"
)


def _version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _five_lines() -> str:
    """The README's "Five lines of Python" block, as written there."""
    match = re.search(
        r"^## Five lines of Python\s*\n+```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M
    )
    assert match, "README.md has no '## Five lines of Python' python block"
    return match.group(1)


def _env(venv: Path, cache: Path) -> dict[str, str]:
    """The caller's environment with the venv activated and no trace of the test's own venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(
        PATH=os.pathsep.join([str(venv / "bin"), env.get("PATH", "")]),
        VIRTUAL_ENV=str(venv),
        JAX_PLATFORMS="cpu",
        NQF_CACHE_DIR=str(cache),
        COLUMNS="120",
    )
    return env


def _run(command: list[str | Path], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False
    )


def _skip_if_index_unreachable(python: Path, env: dict[str, str], cwd: Path) -> None:
    """Skip when a TCP connection to pip's index cannot be opened (not tried behind a proxy,
    where only pip itself knows the way; a failed install is then judged by its output)."""
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return
    url = env.get("PIP_INDEX_URL")
    if not url:
        got = _run([python, "-m", "pip", "config", "get", "global.index-url"], env, cwd, timeout=60)
        url = got.stdout.strip() if got.returncode == 0 and got.stdout.strip() else "https://pypi.org/simple"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=15).close()
    except OSError as error:
        pytest.skip(f"the package index {url} is unreachable ({error}): cannot install the dependencies")


def _pip(python: Path, args: list[str | Path], env: dict[str, str], cwd: Path, timeout: float) -> float:
    """Run ``python -m pip ARGS``; its time in seconds. A failure caused by the network skips."""
    start = time.monotonic()
    result = _run([python, "-m", "pip", *args], env, cwd, timeout=timeout)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        output = result.stdout + result.stderr
        trouble = NETWORK_TROUBLE.search(output)
        if trouble:
            pytest.skip(f"pip could not reach the package index ({trouble.group(0)}): pip {' '.join(map(str, args))}")
        pytest.fail(f"pip {' '.join(map(str, args))} failed ({result.returncode}):\n{output[-4000:]}")
    return elapsed


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Iterator[dict]:
    """A fresh venv with the wheel of the working tree and its dependencies from the index."""
    base = tmp_path_factory.mktemp("install")
    source = base / "source"  # what the wheel is made of; building in the checkout would write into it
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    home = base / "venv"
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, timeout=300, capture_output=True)
    python = home / "bin" / "python"
    env = _env(home, base / "nqf-cache")
    _skip_if_index_unreachable(python, env, base)
    wheels = base / "wheels"
    build_s = _pip(python, ["wheel", "--no-deps", "-w", wheels, source], env, base, timeout=600)
    (wheel,) = wheels.glob("nqf-*.whl")
    install_s = _pip(python, ["install", wheel], env, base, timeout=1200)
    total_s = time.monotonic() - start
    print(f"\nvenv {total_s:.0f} s in all: wheel built in {build_s:.0f} s, installed in {install_s:.0f} s")
    yield {"python": python, "bin": home / "bin", "env": env, "cwd": base, "wheel": wheel}
    shutil.rmtree(home, ignore_errors=True)  # about 700 MB; pytest keeps its last three temp folders


def test_the_wheel_installs_nqf_outside_the_clone(venv):
    assert venv["wheel"].name.startswith(f"nqf-{_version()}-"), venv["wheel"].name
    result = _run([venv["python"], "-c", "import nqf; print(nqf.__file__)"], venv["env"], venv["cwd"], timeout=300)
    assert result.returncode == 0, result.stderr
    location = Path(result.stdout.strip())
    assert location.is_relative_to(venv["bin"].parent), location  # site-packages of the new venv, not src/


def test_nqf_version(venv):
    result = _run([venv["bin"] / "nqf", "--version"], venv["env"], venv["cwd"], timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"nqf {_version()}\n"


def test_python_m_nqf_help(venv):
    result = _run([venv["python"], "-m", "nqf", "--help"], venv["env"], venv["cwd"], timeout=300)
    assert result.returncode == 0, result.stderr
    assert "predict" in result.stdout and "reproduce" in result.stdout, result.stdout


def test_the_readme_five_lines(venv):
    script = venv["cwd"] / "five_lines.py"
    script.write_text(_five_lines())
    result = _run([venv["python"], script], venv["env"], venv["cwd"], timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "[ 93. 136. 256. 491.]" in result.stdout, result.stdout
    assert "[ 94.  138.  234.5 359. ]" in result.stdout, result.stdout  # the network's own prediction


def test_nqf_predict_on_an_npz_file(venv):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    Y = X @ np.diag([3.0, 2.0, 1.0, 0.5])  # a linear teacher, singular values 3, 2, 1, 0.5
    data = venv["cwd"] / "data.npz"
    np.savez(data, X=X, Y=Y)
    command = ["predict", "--data", data, "--arch", "mlp", "--inputs", "4", "--outputs", "4"]
    command += ["--width", "16", "--lr", "0.05", "--steps", "400", "--sigma0", "1e-6"]
    result = _run([venv["bin"] / "nqf", *command], venv["env"], venv["cwd"], timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout
    assert "switch-on step" in out and "plateau" in out, out
    rows = [line for line in out.splitlines() if re.match(r"^│\s+[1-4] │", line)]
    assert len(rows) == 8, out  # one row a mode in the prediction, one in the analysis
