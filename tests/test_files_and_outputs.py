"""Hostile files and outputs through the installed ``nqf`` (issue 35 "files" and "sizes", issue 34):
every case is exit 2 (or the stated status), one ``error:`` line, no traceback, nothing left behind.

- arrays whose headers lie (16e9 rows in a few hundred bytes), zip bombs, arrays larger than the
  memory: refused from their headers before anything is allocated (``nqf.core.input_files``), in
  ``predict --data`` / ``--init`` / ``--overlay``, ``compare --task npz`` and ``sweep --dry-run``;
- files that are not small regular files: a FIFO as the sweep spec, ``reproduce --config`` or the
  report's manifest.json (each was waited on forever), a 40 GiB spec, config or manifest (read
  whole), a device, a link to a folder: refused without reading;
- an output file (``report.html``, ``points.parquet``, a figure) that is an existing folder;
- a spec or config nested 10^5 deep; the standard output closed; a 10^6-point dry run;
- ``--executor slurm`` without Slurm, options that do not fit ``--executor``; a ``--unit`` that
  prints or calls ``os._exit``; ``--jobs`` without bound; Ctrl-C on a sweep, which keeps the
  points already stored.
"""

from __future__ import annotations

import io
import json
import os
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SWEEP_BASE, error_line, one_line, run_cli

NQF = Path(sys.executable).parent / "nqf"
PREDICT = ["--arch", "mlp", "--inputs", "8", "--outputs", "4", "--width", "4", "--lr", "0.05", "--steps", "20"]


def run_nqf(*args, cwd: Path, timeout: float = 300, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    assert NQF.exists(), f"console script {NQF} is missing: pip install -e . first"
    env = dict(os.environ, JAX_PLATFORMS="cpu", **(env or {}))
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run([str(NQF), *map(str, args)], text=True, env=env, timeout=timeout, cwd=cwd, **streams)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return lines[0]


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def assert_one_error_line(code: int, err: str, *words: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err[-2000:])
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- hostile array files ---------------------------------------------------------------------


def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    """A valid .npy header (format 1.0) for an array of ``shape``: what numpy.save writes first."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def lying_npy(shape: tuple[int, ...]) -> bytes:
    """A header that claims ``shape`` followed by a few bytes."""
    return npy_header(shape) + bytes(64)


def lying_npz(path: Path, **shapes: tuple[int, ...]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, shape in shapes.items():
            archive.writestr(f"{name}.npy", lying_npy(shape))
    return path


def _patch_uncompressed_size(path: Path, member: str, size: int) -> None:
    """Make the zip directory declare ``size`` uncompressed bytes for ``member`` (local header
    and central directory), the rest as written: the zip bomb's lie."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    local = data.find(b"PK\x03\x04")
    while local >= 0:
        (length,) = struct.unpack_from("<H", data, local + 26)
        if data[local + 30 : local + 30 + length] == name:
            struct.pack_into("<I", data, local + 22, size)
        local = data.find(b"PK\x03\x04", local + 4)
    central = data.find(b"PK\x01\x02")
    while central >= 0:
        (length,) = struct.unpack_from("<H", data, central + 28)
        if data[central + 46 : central + 46 + length] == name:
            struct.pack_into("<I", data, central + 24, size)
        central = data.find(b"PK\x01\x02", central + 4)
    path.write_bytes(bytes(data))


def zip_bomb(path: Path, rows: int = 60_000_000) -> Path:
    """X: a header claiming (rows, 8) float64 (3.6 GiB at the default) over 1 MiB of deflated zeros,
    the member declared as large as the header says; Y: a small honest array."""
    header = npy_header((rows, 8))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("X.npy", header + bytes(1 << 20))
        buffer = io.BytesIO()
        np.save(buffer, np.zeros((2, 4)))
        archive.writestr("Y.npy", buffer.getvalue())
    _patch_uncompressed_size(path, "X.npy", len(header) + rows * 64)
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("inputs")
    rng = np.random.default_rng(0)
    np.savez(folder / "ok.npz", X=rng.standard_normal((32, 8)), Y=rng.standard_normal((32, 4)))
    lying_npz(folder / "huge.npz", X=(16_000_000_000, 8), Y=(16_000_000_000, 4))
    lying_npz(folder / "huge_w.npz", W=(16_000_000_000, 4))
    (folder / "huge.npy").write_bytes(lying_npy((2_000_000_000, 2)))
    zip_bomb(folder / "bomb.npz")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, args",
    [
        ("predict-data", ["predict", "--data", "{D}/huge.npz", *PREDICT, "--sigma0", "1e-3"]),
        ("predict-init", ["predict", "--data", "{D}/ok.npz", *PREDICT, "--init", "{D}/huge_w.npz"]),
        ("predict-overlay", ["predict", "--data", "{D}/ok.npz", *PREDICT, "--sigma0", "1e-3",
                             "--overlay", "{D}/huge.npy"]),
        ("compare-task-npz", ["compare", "--task", "npz", "--path", "{D}/huge.npz", "--width", "4", "--lr", "0.05",
                              "--steps", "20", "--sigma0", "1e-3"]),
        ("predict-zip-bomb", ["predict", "--data", "{D}/bomb.npz", *PREDICT, "--sigma0", "1e-3"]),
        ("compare-zip-bomb", ["compare", "--task", "npz", "--path", "{D}/bomb.npz", "--width", "4", "--lr", "0.05",
                              "--steps", "20", "--sigma0", "1e-3"]),
    ],
)  # fmt: skip
def test_a_lying_array_file_is_one_line(case, args, inputs, tmp_path):
    """A header that claims 16e9 rows (2e9 for the curve) in a few hundred bytes, or a zip member
    declared far larger than deflate can make its compressed bytes: refused from the headers,
    nothing allocated (it was numpy's ArrayMemoryError traceback)."""
    result = run_nqf(*(a.replace("{D}", str(inputs)) for a in args), cwd=tmp_path, timeout=120)
    line = one_error_line(result)
    assert "header claims" in line or "zip bomb" in line, line
    assert listing(tmp_path) == set()


@pytest.mark.slow
def test_a_lying_npz_in_a_sweep_dry_run_is_one_line(inputs, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[task]\nname = "npz"\npath = "{inputs / "huge.npz"}"\n[arch]\nname = "mlp"\ninputs = 8\noutputs = 4\n'
        "[settings]\nwidth = 4\nsteps = 20\nlr = 0.05\nsigma0 = 1e-3\n[axes]\nseed = [0, 1]\n"
    )
    line = one_error_line(run_nqf("sweep", spec, "--out", tmp_path / "out", "--dry-run", cwd=tmp_path, timeout=120))
    assert line.startswith("error: spec task.path:") and "header claims" in line, line
    assert listing(tmp_path) == {"spec.toml"}


@pytest.mark.slow
def test_an_array_larger_than_the_memory_is_one_line(tmp_path):
    """An honest header over a (sparse) file of four times the memory available: refused by size."""
    import psutil

    rows = 4 * psutil.virtual_memory().available // 16 + 1
    curve = tmp_path / "curve.npy"
    header = npy_header((rows, 2))
    with open(curve, "wb") as handle:
        handle.write(header)
        handle.truncate(len(header) + rows * 16)  # sparse: takes no disk
    result = run_nqf("predict", "--data", "ok.npz", *PREDICT, "--sigma0", "1e-3", "--overlay", curve, cwd=tmp_path)
    line = one_error_line(result)
    assert "of memory, more than half of the" in line, line


@pytest.mark.slow
def test_the_reader_reads_valid_arrays_as_numpy_does(tmp_path):
    """Every dtype and layout numpy.save writes, read back equal (dtype and byte order kept)."""
    from nqf.core.input_files import read_npy, read_npz

    rng = np.random.default_rng(1)
    arrays = {
        "f8": rng.standard_normal((5, 3)),
        "f4_fortran": np.asfortranarray(rng.standard_normal((4, 6)).astype(np.float32)),
        "big_endian": rng.standard_normal((3, 2)).astype(">f8"),
        "i8": rng.integers(-5, 5, (7,)),
        "u1": rng.integers(0, 255, (2, 2, 2)).astype(np.uint8),
        "bool": rng.random((3, 3)) > 0.5,
        "scalar": np.float64(2.5),
        "empty": np.zeros((0, 4)),
    }
    np.savez(tmp_path / "plain.npz", **arrays)
    np.savez_compressed(tmp_path / "compressed.npz", **arrays)
    for name in ("plain.npz", "compressed.npz"):
        read = read_npz(tmp_path / name, tuple(arrays))
        with np.load(tmp_path / name) as expected:
            for key in arrays:
                assert read[key].dtype == expected[key].dtype and read[key].shape == expected[key].shape, key
                np.testing.assert_array_equal(read[key], expected[key])
    for key, array in arrays.items():
        np.save(tmp_path / f"{key}.npy", array)
        np.testing.assert_array_equal(read_npy(tmp_path / f"{key}.npy"), np.load(tmp_path / f"{key}.npy"))


@pytest.mark.slow
def test_the_reader_refuses_what_numpy_would_load_wrongly(tmp_path, monkeypatch):
    """In process: arrays beyond the memory (npz), a member whose compressed data run past its
    declared size (stopped there; its checksum then fails), pickled objects (never unpickled)."""
    import nqf.core.input_files as input_files
    from nqf.core.errors import NqfError

    np.savez(tmp_path / "ok.npz", X=np.zeros((1000, 8)), Y=np.zeros((1000, 1)))
    monkeypatch.setattr(input_files, "available_bytes", lambda: 100_000)
    with pytest.raises(NqfError, match=r"need 70.3 KiB of memory, more than half of the 97.7 KiB available"):
        input_files.read_npz(tmp_path / "ok.npz", ("X", "Y"))
    monkeypatch.undo()

    header = npy_header((4, 8))
    with zipfile.ZipFile(tmp_path / "longer.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("X.npy", header + bytes(1 << 20))
    _patch_uncompressed_size(tmp_path / "longer.npz", "X.npy", len(header) + 4 * 8 * 8)
    with pytest.raises(NqfError, match="CRC"):
        input_files.read_npz(tmp_path / "longer.npz", ("X",))

    marker = tmp_path / "unpickled"

    class Trap:
        def __reduce__(self):
            return (Path.touch, (marker,))

    np.save(tmp_path / "objects.npy", np.array([Trap()], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "objects.npz", X=np.array([Trap()], dtype=object))
    with pytest.raises(NqfError, match=r"Python objects \(pickled\)"):
        input_files.read_npy(tmp_path / "objects.npy")
    with pytest.raises(NqfError, match=r"Python objects \(pickled\)"):
        input_files.read_npz(tmp_path / "objects.npz", ("X",))
    assert not marker.exists()


# -- files that are not small regular files (in this process) ----------------------------------


@pytest.mark.no_shape_checks  # the library as a user runs it, without the test-time checks
@pytest.mark.timeout(120)  # before the fix: blocked forever opening the FIFO
@pytest.mark.parametrize("command", ["sweep", "reproduce"])
def test_a_fifo_spec_or_config_is_refused_not_waited_on(command, tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    if command == "sweep":
        args = ["sweep", fifo, "--out", tmp_path / "out", "--dry-run"]
    else:
        args = ["reproduce", "--only", "E1", "--config", fifo, "--out", tmp_path / "out"]
    code, out, err = run_cli(args, capfd)
    assert_one_error_line(code, err, "is not a regular file (a FIFO, socket or device)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]  # nothing written


@pytest.mark.no_shape_checks  # the library as a user runs it, without the test-time checks
@pytest.mark.timeout(60)
def test_read_toml_refuses_what_is_not_a_small_regular_file(tmp_path):
    from nqf.core.errors import NqfError
    from nqf.core.input_files import MAX_TOML_BYTES, read_toml

    huge = tmp_path / "huge.toml"
    with open(huge, "wb") as handle:
        handle.truncate(40 * 2**30)  # sparse: no disk, and never read
    with pytest.raises(NqfError, match=r"holds 40 GiB, more than the 16 MiB a TOML spec or config may take") as err:
        read_toml(huge, "spec huge.toml")
    one_line(err)
    edge = tmp_path / "edge.toml"
    edge.write_bytes(b"# " + b"x" * (MAX_TOML_BYTES - 3) + b"\n")  # exactly the limit: read
    assert read_toml(edge, "spec edge.toml") == {}
    if Path("/dev/zero").exists():  # a device would never end
        with pytest.raises(NqfError, match=r"is not a regular file"):
            read_toml("/dev/zero", "config file '/dev/zero'")
    (tmp_path / "folder").mkdir()
    (tmp_path / "link.toml").symlink_to(tmp_path / "folder")
    with pytest.raises(NqfError, match=r"spec link.toml is a folder, not a TOML file"):
        read_toml(tmp_path / "link.toml", "spec link.toml")
    (tmp_path / "ok.toml").write_text("[E1]\nsigma0 = 1e-8\n")
    assert read_toml(tmp_path / "ok.toml", "config") == {"E1": {"sigma0": 1e-8}}


@pytest.mark.no_shape_checks  # the library as a user runs it, without the test-time checks
@pytest.mark.timeout(120)
def test_a_manifest_that_is_a_fifo_or_huge_is_one_line(tmp_path, capfd):
    from nqf.core.errors import NqfError
    from nqf.store.results import MAX_READ_BYTES
    from nqf_paper.plan import read_manifest

    fifo_out = tmp_path / "fifo"
    fifo_out.mkdir()
    os.mkfifo(fifo_out / "manifest.json")
    code, out, err = run_cli(["report", "--out", fifo_out], capfd)
    assert_one_error_line(code, err, "manifest.json is a FIFO, not a regular file")
    assert sorted(p.name for p in fifo_out.iterdir()) == ["manifest.json"]

    huge_out = tmp_path / "huge"
    huge_out.mkdir()
    with open(huge_out / "manifest.json", "wb") as handle:
        handle.truncate(MAX_READ_BYTES + 1)  # sparse; before the fix read whole (40 GiB: killed)
    with pytest.raises(NqfError, match=r"manifest.json holds 256.0 MiB, more than the 256.0 MiB nqf reads") as err:
        read_manifest(huge_out)
    one_line(err)


# -- outputs that are folders, deep nesting, a closed stdout ------------------------------------

SPEC = """
[task]
name = "staircase"
samples = 32
[settings]
width = 4
steps = 20
lr = 0.05
sigma0 = 1e-3
[axes]
seed = {seeds}
"""


@pytest.mark.slow
def test_a_sweep_table_that_is_a_folder_is_refused_before_computing(tmp_path):
    (tmp_path / "spec.toml").write_text(SPEC.format(seeds="[0, 1]"))
    (tmp_path / "out" / "points.parquet").mkdir(parents=True)
    line = one_error_line(run_nqf("sweep", "spec.toml", "--out", "out", "--quiet", cwd=tmp_path, timeout=120))
    assert "points.parquet is a folder" in line, line
    assert listing(tmp_path) == {"spec.toml", "out", "out/points.parquet"}  # no store: nothing computed


@pytest.mark.slow
def test_a_sweep_figure_that_is_a_folder_is_refused_before_computing(tmp_path):
    (tmp_path / "spec.toml").write_text(SPEC.format(seeds="[0, 1]"))
    (tmp_path / "out" / "figures" / "curves.png").mkdir(parents=True)
    line = one_error_line(run_nqf("sweep", "spec.toml", "--out", "out", "--quiet", cwd=tmp_path, timeout=120))
    assert "curves.png is a folder" in line, line
    assert listing(tmp_path) == {"spec.toml", "out", "out/figures", "out/figures/curves.png"}


@pytest.mark.slow
def test_a_report_that_is_a_folder_is_refused_before_computing(tmp_path):
    (tmp_path / "results" / "report.html").mkdir(parents=True)
    line = one_error_line(run_nqf("reproduce", "--only", "E1", "--out", "results", cwd=tmp_path, timeout=120))
    assert "report.html is a folder" in line, line
    assert listing(tmp_path) == {"results", "results/report.html"}


DEPTH = 100_000


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, text",
    [
        ("spec-array", SPEC.format(seeds="[" * DEPTH + "0" + "]" * DEPTH)),
        ("spec-inline-table", SPEC.format(seeds="[0]") + "[task.x]\ny = " + "{a = " * DEPTH + "1" + "}" * DEPTH),
        ("spec-40-deep", SPEC.format(seeds="[" * 40 + "0" + "]" * 40)),
        ("config", "[E1]\nsigma0 = " + "[" * DEPTH + "1" + "]" * DEPTH + "\n"),
    ],
)
def test_a_deeply_nested_spec_or_config_is_one_line(kind, text, tmp_path):
    (tmp_path / "file.toml").write_text(text)
    if kind == "config":
        args = ["reproduce", "--only", "E1", "--config", "file.toml", "--out", "results"]
    else:
        args = ["sweep", "file.toml", "--out", "out", "--dry-run"]
    line = one_error_line(run_nqf(*args, cwd=tmp_path, timeout=120))
    assert "levels deep" in line, line
    assert listing(tmp_path) == {"file.toml"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "args", [["--version"], ["predict", "--data", "{D}/ok.npz", *PREDICT, "--sigma0", "1e-3", "--json"]]
)
def test_a_closed_stdout_is_one_line(args, inputs, tmp_path):
    """``nqf ... >&-``: nothing could take the output; one line on stderr, exit 2 (it was a
    traceback of writes to None and exit 120)."""
    result = run_nqf(
        *(a.replace("{D}", str(inputs)) for a in args), cwd=tmp_path, timeout=120, stdout=None,
        preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert result.stdout is None
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "standard output is closed" in lines[0], result.stderr
    assert listing(tmp_path) == set()


# -- sizes: a million points, workers, executors ------------------------------------------------


@pytest.mark.slow
def test_a_dry_run_of_a_million_seeds_answers_in_seconds(tmp_path):
    """10^6 seeds: the batching was quadratic in a row of points (minutes); now linear."""
    (tmp_path / "spec.toml").write_text(SPEC.format(seeds="{range = [0, 1000000]}"))
    started = time.monotonic()
    result = run_nqf("sweep", "spec.toml", "--out", "out", "--dry-run", cwd=tmp_path, timeout=90)
    assert result.returncode == 0, result.stderr
    assert "1000000 point(s)" in result.stdout and "in 31250 batch(es)" in result.stdout, result.stdout
    print(f"dry run of 10^6 points: {time.monotonic() - started:.1f} s")
    assert listing(tmp_path) == {"spec.toml"}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["sweep", "reproduce"])
def test_jobs_without_bound_is_one_line(command, tmp_path):
    (tmp_path / "spec.toml").write_text(SPEC.format(seeds="[0, 1]"))
    args = (
        ["sweep", "spec.toml", "--out", "out"] if command == "sweep" else ["reproduce", "--only", "E1", "--out", "out"]
    )
    line = one_error_line(run_nqf(*args, "--jobs", "1000000", cwd=tmp_path, timeout=120))
    assert "--jobs 1000000 is more workers than this machine runs well" in line, line
    assert listing(tmp_path) == {"spec.toml"}


@pytest.mark.slow
def test_slurm_without_slurm_leaves_no_output_folder(tmp_path):
    (tmp_path / "spec.toml").write_text(SPEC.format(seeds="[0, 1]"))
    no_sbatch = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "sbatch").exists())
    result = run_nqf(
        "sweep", "spec.toml", "--out", "out", "--executor", "slurm", cwd=tmp_path, timeout=120, env={"PATH": no_sbatch}
    )
    assert "no sbatch on PATH" in one_error_line(result)
    assert listing(tmp_path) == {"spec.toml"}


@pytest.mark.slow  # through the console script
@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--executor", "slurm", "--jobs", "2", "--slurm-cluster", "local"],
            "error: --jobs does not apply to --executor slurm; --slurm-array-size limits the runs at once",
        ),
        (
            ["--executor", "ray", "--address", "127.0.0.1:1", "--jobs", "2"],
            "error: --jobs does not apply to a Ray cluster given by address: its CPUs decide",
        ),
        (["--address", "127.0.0.1:1"], "error: --address applies to --executor ray, not local"),
        (["--executor", "ray", "--slurm-time", "5"], "error: --slurm-time applies to --executor slurm, not ray"),
        (["--executor", "ray", "--address", " "], "error: --address is empty; give host:port of the Ray cluster"),
    ],
)
def test_sweep_refuses_options_that_do_not_fit_the_executor(args, expected, tmp_path):
    """The checks and words of ``nqf reproduce`` (tests/test_executors.py), from one function."""
    (tmp_path / "spec.toml").write_text(SWEEP_BASE)
    assert error_line(run_nqf("sweep", "spec.toml", "--out", "out", *args, cwd=tmp_path)) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


# -- a user's unit -------------------------------------------------------------------------------

PRINTING_UNIT = """
import os
import equinox as eqx
import jax
import jax.numpy as jnp

print("loading my unit")
os.write(1, b"a write to file descriptor 1\\n")


class Perceptron(eqx.Module):
    a: jax.Array
    v: jax.Array

    def __call__(self, x):
        print("tracing my unit")
        return self.a * jnp.tanh(jnp.dot(self.v, x))


def unit(input_shape, outputs):
    print("building my unit")
    return Perceptron(jnp.zeros(outputs), jnp.zeros(input_shape[0]))
"""


@pytest.mark.slow
def test_a_unit_that_prints_leaves_the_json_alone(inputs, tmp_path):
    (tmp_path / "unit.py").write_text(PRINTING_UNIT)
    result = run_nqf(
        "predict", "--data", inputs / "ok.npz", "--unit", "unit.py:unit", "--width", "4", "--sigma0", "1e-3",
        "--lr", "0.05", "--steps", "20", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"]["width"] == 4  # stdout is the JSON alone
    for printed in ("loading my unit", "a write to file descriptor 1", "building my unit", "tracing my unit"):
        assert printed in result.stderr and printed not in result.stdout, printed


@pytest.mark.slow
@pytest.mark.parametrize("where", ["at import", "in the function"])
def test_a_unit_that_calls_os_exit_is_one_line(where, inputs, tmp_path):
    body = "import os\nos._exit(0)\n" if where == "at import" else "import os\n\ndef unit():\n    os._exit(0)\n"
    (tmp_path / "unit.py").write_text(body + ("\ndef unit():\n    pass\n" if where == "at import" else ""))
    result = run_nqf(
        "predict", "--data", inputs / "ok.npz", "--unit", "unit.py:unit", "--width", "4", "--sigma0", "1e-3",
        "--lr", "0.05", "--steps", "20", "--json", cwd=tmp_path,
    )  # fmt: skip
    line = one_error_line(result)
    assert "called os._exit(0)" in line, line
    assert result.stdout == ""


# -- Ctrl-C on a sweep -------------------------------------------------------------------------


@pytest.mark.slow
def test_an_interrupted_sweep_says_what_it_kept(tmp_path):
    """Ctrl-C after some points are stored: the line says how many are kept and where (it said
    "nothing was written"); they stay, and nothing else was written."""
    (tmp_path / "spec.toml").write_text(SPEC.format(seeds="{range = [0, 300]}"))
    records = tmp_path / "out" / "store" / "runs"
    proc = subprocess.Popen(
        [str(NQF), "sweep", "spec.toml", "--out", "out", "--batch-size", "1", "--quiet"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(list(records.glob("*/*.json"))) < 2 and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    stored = len(list(records.glob("*/*.json")))
    assert 2 <= stored < 300, stored
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    kept = int(lines[0].split("interrupted: ", 1)[1].split(" of ", 1)[0])
    assert lines[0].endswith(f"of 300 point(s) are stored in {Path('out') / 'store'} (kept; the table and figures "
                             "were not written); run the same command again to resume"), lines[0]  # fmt: skip
    assert 2 <= kept <= stored, (kept, stored)
    assert not (tmp_path / "out" / "points.parquet").exists() and not (tmp_path / "out" / "failed.json").exists()
