"""`nqf store gc` prunes only what nqf wrote, in a folder nqf marked as its store (issue 22, item 1).

Every case goes through the real command (``python -m nqf store gc``) and compares a
snapshot of the folder (type, bytes, mtime, link target of every entry) before and after:
a TensorBoard-like ``runs/`` is refused whole, a symbolic link is never followed, a FIFO
is never opened (the command must not hang), records of another code identity (a sweep of
another checkout running on the same store) are kept unless ``--other-code``, an older
nqf's unmarked store is marked with ``--adopt``, and a marked store is still pruned of its
damaged records and leftovers.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nqf.store.results import FORMAT_VERSION, MARKER, ResultsStore

pytestmark = pytest.mark.slow  # every test starts the command

OTHER_CODE = "0.0.9+code.0000000000000000"


def _nqf(*args: str | os.PathLike, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real command in a fresh process; a hang (a FIFO opened for reading) fails after ``timeout``."""
    return subprocess.run(
        [sys.executable, "-m", "nqf", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def _snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder`` (symbolic links not followed): kind and contents."""
    seen: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = path.lstat()
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                seen[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                seen[rel] = ("folder",)
            elif path.is_file():
                seen[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), info.st_mtime_ns)
            else:
                seen[rel] = ("special", info.st_mode)
    return seen


def _error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return done.stderr


def _store(root: Path) -> tuple[ResultsStore, Path]:
    """A marked store with one current record; returns the store and that record's path."""
    store = ResultsStore(root)
    store.put("E1", "a", {"x": 1}, {"y": 1.0})
    return store, store.path("E1", store.key("E1", "a", {"x": 1}))


def test_a_tensorboard_project_is_refused_whole_and_listed_read_only(tmp_path):
    project = tmp_path / "project"
    (project / "runs" / "exp1").mkdir(parents=True)
    (project / "runs" / "exp1" / "events.out.tfevents.123").write_bytes(b"\x00tensorboard events")
    (project / "runs" / "exp2" / "sub").mkdir(parents=True)
    (project / "runs" / "exp2" / "sub" / "events.out.tfevents.456").write_bytes(b"more events")
    before = _snapshot(project)

    for args in (("gc", project), ("gc", "--other-code", project), ("gc", "--dry-run", project)):
        line = _error_line(_nqf("store", *args))
        assert "not marked as an nqf results store" in line and "nothing removed" in line and "--adopt" in line
    line = _error_line(_nqf("store", "gc", "--adopt", project))  # foreign files: it cannot be adopted
    assert "cannot be adopted" in line and "runs/exp1/events.out.tfevents.123" in line
    assert _snapshot(project) == before and not (project / MARKER).exists()

    listing = _nqf("store", "ls", project)
    assert listing.returncode == 0, listing.stderr
    assert f"note: {project} is not marked as an nqf store (no nqf-store.json)" in listing.stdout
    assert "problem: runs/exp1/events.out.tfevents.123: foreign file in the store; skipped" in listing.stdout
    assert "problem: runs/exp2/sub: foreign folder in the store; skipped" in listing.stdout
    assert _snapshot(project) == before

    # Nor does a record stored into the mixed folder mark it (nqf shares it with foreign files).
    ResultsStore(project).put("E1", "a", {"x": 1}, {"y": 1.0})
    assert not (project / MARKER).exists()
    _error_line(_nqf("store", "gc", project))


def test_a_symbolic_link_is_never_followed_and_what_it_points_to_survives(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    junk = "0" * 64
    (outside / f"{junk}.json").write_text("not json: gc would remove this in the store")
    (outside / f".{junk}.lock").write_text("")
    (outside / f".{junk}.json.abc.tmp").write_text("half")
    (outside / "precious.txt").write_text("keep me")
    (outside / "E1").mkdir()
    (outside / "E1" / f"{junk}.json").write_text("{}")

    root = tmp_path / "store"
    store, record = _store(root)
    (root / "runs" / "evil").symlink_to(outside, target_is_directory=True)  # an experiment folder that is a link
    (record.parent / f"{'1' * 64}.json").symlink_to(outside / f"{junk}.json")  # a record that is a link
    (record.parent / f".{'2' * 64}.lock").symlink_to(outside / "precious.txt")  # a lock file that is a link...
    (record.parent / f"{'2' * 64}.json").write_text("damaged")  # ...of a damaged record: its claim is not taken
    outside_before = _snapshot(outside)

    for args in (("ls", root), ("gc", "--dry-run", "--other-code", root), ("gc", "--other-code", root)):
        done = _nqf("store", *args)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "problem: runs/evil: a symbolic link in the store (not followed)" in done.stdout
        assert f"problem: runs/E1/{'1' * 64}.json: a symbolic link stands where nqf keeps a file" in done.stdout
        if args[0] == "gc":
            assert f"problem: runs/E1/{'2' * 64}.json: its claim cannot be checked" in done.stdout
    assert _snapshot(outside) == outside_before
    assert (root / "runs" / "evil").is_symlink() and (record.parent / f"{'1' * 64}.json").is_symlink()
    assert (record.parent / f"{'2' * 64}.json").read_text() == "damaged"
    assert store.get("E1", "a", {"x": 1}) == {"y": 1.0}

    # The store itself does not read a record through a link either.
    fresh = ResultsStore(root)
    (record.parent / f"{'1' * 64}.json").unlink()
    record.rename(outside / "moved.json")
    record.symlink_to(outside / "moved.json")
    assert fresh.get("E1", "a", {"x": 1}) is None
    assert any("a symbolic link stands where the record should be" in line for line in fresh.problems)


def test_a_fifo_named_like_a_record_is_reported_never_opened(tmp_path):
    root = tmp_path / "store"
    store, record = _store(root)
    fifo = record.parent / f"{'3' * 64}.json"
    os.mkfifo(fifo)
    os.mkfifo(record.parent / f".{'4' * 64}.lock")  # a FIFO named like a lock file...
    (record.parent / f"{'4' * 64}.json").write_text("damaged")  # ...of a damaged record: its claim is not taken

    for args in (("ls", root), ("gc", "--dry-run", root), ("gc", "--other-code", root)):
        done = _nqf("store", *args)  # a blocked open would run into the timeout
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert f"problem: runs/E1/{fifo.name}: a FIFO stands where nqf keeps a file (not opened)" in done.stdout
        if args[0] == "gc":
            assert f"problem: runs/E1/{'4' * 64}.json: its claim cannot be checked" in done.stdout
    assert fifo.exists() and not fifo.is_file() and (record.parent / f".{'4' * 64}.lock").exists()
    assert (record.parent / f"{'4' * 64}.json").read_text() == "damaged"

    # Reading a record that is a FIFO reports it at once, and the recomputation replaces it.
    code = (
        "import os, sys; from nqf.store.results import ResultsStore; s = ResultsStore(sys.argv[1], recompute=True);"
        "p = s.path('E1', s.key('E1', 'b', {'x': 2})); os.mkfifo(p);"
        "print(s.get('E1', 'b', {'x': 2}), s.problems[0]); s.put('E1', 'b', {'x': 2}, {'y': 2.0});"
        "print(s.get('E1', 'b', {'x': 2}), p.is_file())"
    )
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith("None runs/E1/") and "a FIFO stands where the record should be (not read)" in first
    assert second == "{'y': 2.0} True"


def test_records_of_another_code_survive_a_gc_during_its_sweep_unless_told(tmp_path):
    root = tmp_path / "store"
    store, record = _store(root)
    sweep = ResultsStore(root, code=OTHER_CODE)  # a sweep of another checkout on the same store
    finished = []
    for i in range(5):
        sweep.put("S", "point", {"i": i}, {"value": float(i)})
        finished.append(sweep.path("S", sweep.key("S", "point", {"i": i})))
    in_flight = sweep.key("S", "point", {"i": 5})
    # An older record format (an older nqf) is another code's record too.
    old_format = json.loads(finished[0].read_text())
    old_format.update(format_version=FORMAT_VERSION - 1)
    old = root / "runs" / "S" / f"{'5' * 64}.json"
    old.write_text(json.dumps(old_format))
    before = _snapshot(root)

    with sweep.claim("S", in_flight) as claim:  # the point the sweep is computing now, half written
        assert claim is not None
        tmp = root / "runs" / "S" / f".{in_flight}.json.abc123.tmp"
        tmp.write_text('{"format": "nqf-run", "rec')
        before[str(tmp.relative_to(root))] = _snapshot(root)[str(tmp.relative_to(root))]

        for args in (("--dry-run",), ()):
            done = _nqf("store", "gc", *args, root)
            assert done.returncode == 0, done.stderr
            assert f"kept 6 record(s) of other code (5 of {OTHER_CODE}, 1 of " in done.stdout
            assert "--other-code" in done.stdout
            assert f"kept (in use by another process): {tmp}" in done.stdout
            assert "remove 0 file(s)" in done.stdout or "removed 0 file(s)" in done.stdout
        after = _snapshot(root)
        assert {k: v for k, v in after.items() if not k.endswith(".lock")} == before

        told = _nqf("store", "gc", "--other-code", root)
        assert told.returncode == 0, told.stderr
        assert "removed 6 file(s)" in told.stdout and f"kept (in use by another process): {tmp}" in told.stdout
        assert not any(path.exists() for path in finished) and not old.exists() and tmp.exists()
    assert store.get("E1", "a", {"x": 1}) == {"y": 1.0}  # the running code's record is never stale


def test_adopt_marks_an_older_nqfs_store_then_gc_prunes_it(tmp_path):
    root = tmp_path / "store"
    store, record = _store(root)
    (root / MARKER).unlink()  # as an nqf without markers left it
    damaged = record.parent / f"{'6' * 64}.json"
    damaged.write_text("not json")
    leftover = record.parent / f".{'7' * 64}.json.x1y2.tmp"
    leftover.write_text("half a record")
    before = _snapshot(root)

    line = _error_line(_nqf("store", "gc", root))
    assert f"`nqf store gc --adopt {root}`" in line
    dry = _nqf("store", "gc", "--adopt", "--dry-run", root)
    assert dry.returncode == 0 and f"would mark {root} as an nqf store" in dry.stdout
    assert "would remove 2 file(s)" in dry.stdout
    assert _snapshot(root) == before

    done = _nqf("store", "gc", "--adopt", root)
    assert done.returncode == 0, done.stderr
    assert f"marked {root} as an nqf store" in done.stdout and "removed 2 file(s)" in done.stdout
    marker = json.loads((root / MARKER).read_text())
    assert marker["format"] == "nqf-store" and marker["format_version"] == 1 and marker["created_by"]
    assert not damaged.exists() and not leftover.exists() and store.get("E1", "a", {"x": 1}) == {"y": 1.0}
    again = _nqf("store", "gc", root)  # marked now: no --adopt needed
    assert again.returncode == 0 and "removed 0 file(s)" in again.stdout and "marked" not in again.stdout

    # A store of nqf's files only is marked by the next record stored into it.
    (root / MARKER).unlink()
    ResultsStore(root).put("E1", "b", {"x": 2}, {"y": 2.0})
    assert json.loads((root / MARKER).read_text())["format"] == "nqf-store"


def test_a_bad_or_newer_marker_is_refused(tmp_path):
    root = tmp_path / "store"
    _store(root)
    before = _snapshot(root)
    for content, words in (
        ("not json", "not valid JSON"),
        (json.dumps({"format": "something-else"}), "not an nqf store marker"),
        (json.dumps({"format": "nqf-store", "format_version": 2}), "format version 2"),
    ):
        (root / MARKER).write_text(content)
        for args in (("gc",), ("gc", "--adopt")):
            line = _error_line(_nqf("store", *args, root))
            assert words in line and "nothing removed" in line
    (root / MARKER).write_text(json.dumps({"format": "nqf-store", "format_version": 1, "created_by": "test"}))
    assert {k: v for k, v in _snapshot(root).items() if k != MARKER} == {k: v for k, v in before.items() if k != MARKER}


def test_a_marked_store_is_still_pruned_of_damage_and_leftovers_and_foreign_files_stay(tmp_path):
    root = tmp_path / "store"
    store, record = _store(root)
    folder = record.parent
    damaged = {
        "not json": folder / f"{'8' * 64}.json",
        "edited": folder / f"{'9' * 64}.json",
    }
    damaged["not json"].write_text("{")
    edited = json.loads(record.read_text())
    edited["record"]["y"] = 2.0
    damaged["edited"].write_text(json.dumps(edited))
    lock = folder / f".{'a' * 64}.lock"
    lock.write_text("")  # left by a killed claimant: nobody holds it
    tmp = folder / f".{'b' * 64}.json.q9.tmp"
    tmp.write_text("half")
    ResultsStore(root, code=OTHER_CODE).put("E2", "c", {"x": 1}, {"y": 1.0})  # E2 holds only another code's record
    (root / "runs" / "E3").mkdir()  # an emptied experiment folder
    foreign = {
        folder / "notes.txt": "a note",
        folder / f"{'c' * 64}.txt": "named almost like a record",
        root / "runs" / "README": "top-level foreign file",
    }
    for path, text in foreign.items():
        path.write_text(text)
    record_folder = folder / f"{'d' * 64}.json"  # a folder where a record would go: nqf did not make it
    record_folder.mkdir()
    (record_folder / "inside.txt").write_text("kept")

    done = _nqf("store", "gc", "--other-code", root)
    assert done.returncode == 0, done.stderr
    assert "removed 5 file(s)" in done.stdout, done.stdout
    for path in (*damaged.values(), lock, tmp):
        assert f"removed: {path}" in done.stdout and not path.exists()
    assert f"problem: runs/E1/{'8' * 64}.json: not valid JSON" in done.stdout
    assert f"problem: runs/E1/{'9' * 64}.json: header key does not match" in done.stdout
    for path, text in foreign.items():
        assert path.read_text() == text and f"problem: {path.relative_to(root)}: foreign file" in done.stdout
    assert (record_folder / "inside.txt").read_text() == "kept"
    assert f"problem: runs/E1/{record_folder.name}: a folder stands where nqf keeps a file; left alone" in done.stdout
    assert not (root / "runs" / "E2").exists() and not (root / "runs" / "E3").exists()  # emptied folders go
    assert store.get("E1", "a", {"x": 1}) == {"y": 1.0}
