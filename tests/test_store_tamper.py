"""Damaged records: every kind is reported as one problem line and recomputed, never trusted.

Each case starts from a sound record, damages the file the way a crash, a disk error or
a hand edit would, and checks that the store (1) hands back nothing, (2) reports exactly
one line naming the file and the damage, and (3) accepts the recomputed run over it.
The last test does the same through ``nqf reproduce``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nqf.store.results import FORMAT_VERSION, ResultsStore

pytestmark = pytest.mark.slow  # through the real command

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"sigma0": 1e-6, "steps": 300, "seed": 0}
RECORD = {"fixed_point": [1.5, 0.25], "loss": [1.0, 0.5, float("nan")], "steps": 300}


def _edit(change):
    """A damage that rewrites the parsed document with ``change`` (checksum left as it was)."""

    def damage(path: Path) -> None:
        document = json.loads(path.read_text())
        change(document)
        path.write_text(json.dumps(document, indent=1, allow_nan=True))

    return damage


def _text(change):
    """A damage that rewrites the file's text with ``change``."""

    def damage(path: Path) -> None:
        path.write_text(change(path.read_text()))

    return damage


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside.txt").write_text("a folder where the record should be")


def _unreadable(path: Path) -> None:
    path.chmod(0)


def _old_format(document: dict) -> None:
    document["format_version"] = 1
    del document["checksum"]


def _scale_fixed_point(document: dict) -> None:
    document["record"]["fixed_point"][0] *= 10


DAMAGES = {
    "body emptied": (_edit(lambda d: d.update(record={})), "checksum does not match"),
    "number tampered": (_edit(_scale_fixed_point), "checksum does not match"),
    "number set to NaN": (_edit(lambda d: d["record"].update(steps=float("nan"))), "checksum does not match"),
    "NaN token in the header": (_text(lambda t: t.replace('"seed": 0', '"seed": NaN')), "config cannot be hashed"),
    "Infinity token in the body": (_edit(lambda d: d["record"].update(steps=float("inf"))), "checksum does not"),
    "checksum removed": (_edit(lambda d: d.pop("checksum")), "header field 'checksum' missing"),
    "checksum of another record": (_edit(lambda d: d.update(checksum="sha256:" + "0" * 64)), "checksum does not"),
    "truncated": (_text(lambda t: t[: len(t) // 2]), "not valid JSON"),
    "empty file": (_text(lambda t: ""), "not valid JSON"),
    "not JSON": (_text(lambda t: "this is not JSON"), "not valid JSON"),
    "not UTF-8": (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "unreadable (UnicodeDecodeError)"),
    "JSON but not a record": (_text(lambda t: "[1, 2, 3]"), "not an nqf run record"),
    "record of the wrong type": (_edit(lambda d: d.update(record=[1, 2])), "'record' missing or not a dict"),
    "config of the wrong type": (_edit(lambda d: d.update(config="seed=0")), "'config' missing or not a dict"),
    "wrong key in the header": (_edit(lambda d: d.update(key="f" * 64)), "header key does not match"),
    "record of another run": (_edit(lambda d: d.update(run="other")), "header does not hash"),
    "old format without checksum": (_edit(_old_format), "record format version 1 (stale)"),
    "folder instead of file": (_folder, "a folder stands where the record should be"),
    "unreadable permissions": (_unreadable, "unreadable (PermissionError)"),
}


def _permission_bits_bind(folder: Path) -> bool:
    """Whether this process is refused a file it may not read (not so for root with CAP_DAC_OVERRIDE)."""
    probe = folder / "probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        probe.read_text()
    except PermissionError:
        return True
    finally:
        probe.unlink()
    return False


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_record_is_reported_once_and_recomputed(tmp_path, damage):
    if damage == "unreadable permissions" and not _permission_bits_bind(tmp_path):
        pytest.skip("this process (root) reads files whatever their permission bits")
    action, message = DAMAGES[damage]
    store = ResultsStore(tmp_path)
    store.put("E1", "gd", CONFIG, RECORD)
    path = store.path("E1", store.key("E1", "gd", CONFIG))
    action(path)

    damaged = ResultsStore(tmp_path, recompute=True)
    assert damaged.get("E1", "gd", CONFIG) is None
    assert list(damaged.scan()) == []
    (line,) = damaged.problems  # one line, however often the file is read
    assert line.startswith(f"runs/E1/{path.name}: ") and message in line and line.endswith("; to be recomputed"), line
    assert "\n" not in line

    damaged.put("E1", "gd", CONFIG, RECORD)  # the recomputation overwrites the damaged file
    fresh = ResultsStore(tmp_path)
    stored = fresh.get("E1", "gd", CONFIG)
    assert stored["fixed_point"] == [1.5, 0.25] and stored["steps"] == 300
    assert [doc["run"] for doc in fresh.scan()] == ["gd"] and fresh.problems == []


def test_a_sound_record_passes_its_checksum_nan_included(tmp_path):
    store = ResultsStore(tmp_path)
    store.put("E1", "gd", CONFIG, RECORD)
    document = json.loads(store.path("E1", store.key("E1", "gd", CONFIG)).read_text())
    assert document["format_version"] == FORMAT_VERSION == 3
    assert document["checksum"].startswith("sha256:") and len(document["checksum"]) == 7 + 64
    reread = ResultsStore(tmp_path, recompute=True)
    assert reread.get("E1", "gd", CONFIG)["loss"][:2] == [1.0, 0.5] and reread.problems == []
    # Reformatting the file (indentation, key order) changes no value, so the checksum still holds.
    path = store.path("E1", store.key("E1", "gd", CONFIG))
    path.write_text(json.dumps(dict(reversed(list(document.items()))), indent=4, allow_nan=True))
    again = ResultsStore(tmp_path)
    assert again.get("E1", "gd", CONFIG)["steps"] == 300 and again.problems == []


def _cli(args: list[str], markers: Path) -> subprocess.CompletedProcess:
    code = (
        "import sys; from tests._toy_experiments import register; register();"
        "from nqf.cli import main; main(sys.argv[1:])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NQF_TOY_MARKERS": str(markers)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_reproduce_reports_and_recomputes_a_tampered_record(tmp_path):
    out, markers = tmp_path / "out", tmp_path / "markers"
    first = _cli(["reproduce", "--only", "T1", "--out", str(out)], markers)
    assert first.returncode == 0, first.stderr
    store = ResultsStore(out)
    (victim,) = [store.path("T1", doc["key"]) for doc in store.scan() if doc["run"] == "r1"]
    original = victim.read_bytes()
    document = json.loads(original)
    document["record"]["value"] *= 10  # the value the claim sums, edited by hand
    victim.write_text(json.dumps(document, indent=1))
    markers.unlink()

    second = _cli(["reproduce", "--only", "T1", "--out", str(out)], markers)
    assert second.returncode == 0, second.stderr
    problems = [line for line in second.stdout.splitlines() if line.startswith("problem:")]
    message = "checksum does not match the contents (edited or corrupt); to be recomputed"
    assert problems == [f"problem: runs/T1/{victim.name}: {message}"]
    assert "T1   toy sum: 3 runs (2 stored, 1 computed); 3 claims: 2 confirmed, 1 not applicable" in second.stdout
    assert markers.read_text().split() == ["start", "T1/r1", "end", "T1/r1"]
    assert victim.read_bytes() == original  # recomputed to the very same bytes

    third = _cli(["reproduce", "--only", "T1", "--out", str(out)], markers)
    assert "problem:" not in third.stdout and "3 runs (3 stored)" in third.stdout
