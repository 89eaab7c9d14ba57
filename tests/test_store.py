"""The results store: keys, atomic writes, file modes, claims, and corrupt, huge or foreign files reported, never
raised (a huge record recomputed; a foreign file left alone by ``nqf store gc``)."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import nqf
from nqf.core.errors import NqfError
from nqf.store.code import code_identity
from nqf.store.results import ResultsStore, package_version, run_key, to_jsonable

CONFIG = {"sigma0": 1e-6, "steps": 300, "seed": 0, "widths": (4, 8)}


def test_key_changes_with_config_seed_code_and_run_but_not_dict_order():
    base = run_key("E1", "gd", CONFIG, "0.1.0")
    assert base == run_key("E1", "gd", dict(reversed(list(CONFIG.items()))), "0.1.0")
    assert base == run_key("E1", "gd", {**CONFIG, "widths": [4, 8]}, "0.1.0")  # tuples hash as lists
    variants = [
        run_key("E1", "gd", {**CONFIG, "seed": 1}, "0.1.0"),
        run_key("E1", "gd", {**CONFIG, "sigma0": 1e-8}, "0.1.0"),
        run_key("E1", "gd", CONFIG, "0.1.0+code.0000000000000001"),
        run_key("E1", "adam", CONFIG, "0.1.0"),
        run_key("E2", "gd", CONFIG, "0.1.0"),
    ]
    assert len({base, *variants}) == 1 + len(variants)
    # an experiment's records are keyed by its own code identity (nqf, the shared modules, its folder)
    assert ResultsStore("unused").key("E1", "gd", CONFIG) == run_key("E1", "gd", CONFIG, code_identity("E1"))
    assert code_identity("E1") != code_identity()
    # a store given another code keys every experiment by that code
    assert ResultsStore("unused", "0.1.0").key("E1", "gd", CONFIG) == base


def test_put_get_roundtrip_converts_arrays_and_keeps_nan(tmp_path):
    store = ResultsStore(tmp_path)
    assert store.get("E1", "gd", CONFIG) is None
    record = {"loss": np.array([1.0, 0.5, np.nan]), "steps": np.int64(7), "nested": {"m": np.eye(2)}}
    returned = store.put("E1", "gd", CONFIG, record)
    stored = store.get("E1", "gd", CONFIG)
    assert stored["steps"] == 7 and stored["nested"]["m"] == [[1.0, 0.0], [0.0, 1.0]]
    assert stored["loss"][:2] == [1.0, 0.5] and math.isnan(stored["loss"][2])
    assert json.dumps(returned) == json.dumps(stored)  # put hands back what get reads
    document = json.loads(store.path("E1", store.key("E1", "gd", CONFIG)).read_text())
    assert document["format"] == "nqf-run" and document["experiment"] == "E1" and document["run"] == "gd"
    assert document["config"]["widths"] == [4, 8] and document["nqf_code"] == store.code_of("E1") == code_identity("E1")
    assert store.code == code_identity()  # the whole tree's, which workers check
    assert document["nqf_version"] == package_version() == nqf.__version__
    assert store.problems == []


def test_bad_records_and_configs_raise_nqf_error(tmp_path):
    store = ResultsStore(tmp_path)
    with pytest.raises(NqfError, match="cannot be stored"):
        store.put("E1", "gd", CONFIG, {"f": lambda x: x})
    with pytest.raises(NqfError, match="NaN"):
        store.key("E1", "gd", {"sigma0": float("nan")})
    with pytest.raises(NqfError, match="string key"):
        to_jsonable({1: 2})
    with pytest.raises(NqfError, match="run name"):
        store.put("E1", "../escape", CONFIG, {})
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.json"))


def test_put_is_atomic_a_crash_leaves_no_file_and_stray_temp_files_are_ignored(tmp_path, monkeypatch):
    store = ResultsStore(tmp_path)
    path = store.path("E1", store.key("E1", "gd", CONFIG))

    def crash(fd):
        raise KeyboardInterrupt  # the process dies between writing and renaming

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        store.put("E1", "gd", CONFIG, {"value": 1.0})
    monkeypatch.undo()
    assert not path.exists()
    assert list(path.parent.iterdir()) == []  # the temporary file was removed too

    # A temp file left behind by a killed process (half-written JSON) is never read.
    stray = path.parent / f".{path.name}.abc123.tmp"
    stray.write_text('{"format": "nqf-run", "record": {"val')
    assert store.get("E1", "gd", CONFIG) is None
    assert list(store.scan()) == [] and store.problems == []
    store.put("E1", "gd", CONFIG, {"value": 2.0})
    assert store.get("E1", "gd", CONFIG) == {"value": 2.0}
    assert [doc["run"] for doc in store.scan()] == ["gd"] and store.problems == []


def _write(store, experiment, key, content):
    path = store.root / "runs" / experiment / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_corrupt_and_foreign_files_are_reported_and_skipped(tmp_path):
    store = ResultsStore(tmp_path)
    good = json.loads(json.dumps({"value": 1.0}))
    store.put("E1", "good", CONFIG, good)
    good_doc = json.loads(store.path("E1", store.key("E1", "good", CONFIG)).read_text())

    truncated_key = store.key("E1", "truncated", CONFIG)
    _write(store, "E1", truncated_key, '{"format": "nqf-run", "rec')
    foreign_key = store.key("E1", "foreign", CONFIG)
    _write(store, "E1", foreign_key, {"hello": "world"})
    edited_key = store.key("E1", "edited", CONFIG)
    _write(store, "E1", edited_key, {**good_doc, "run": "edited", "key": edited_key, "config": {**CONFIG, "seed": 9}})
    _write(store, "E1", "0" * 64, good_doc)  # a sound record copied under another name
    (store.root / "runs" / "E1" / "notes.txt").write_text("not a record")
    (store.root / "runs" / "stray.json").write_text("{}")

    assert store.get("E1", "truncated", CONFIG) is None
    assert store.get("E1", "foreign", CONFIG) is None
    assert store.get("E1", "edited", CONFIG) is None
    assert store.get("E1", "good", CONFIG) == good
    assert [doc["run"] for doc in store.scan()] == ["good"]
    problems = store.problems
    assert len(problems) == 6, problems
    assert all("\n" not in line and line.endswith("skipped") for line in problems)
    text = "\n".join(problems)
    assert f"E1/{truncated_key}.json: not valid JSON" in text
    assert f"E1/{foreign_key}.json: not an nqf run record" in text
    assert f"E1/{edited_key}.json: header does not hash" in text
    assert f"E1/{'0' * 64}.json: header key does not match" in text
    assert "E1/notes.txt: foreign file" in text and "stray.json: foreign file" in text

    # A recompute overwrites the corrupt file with a sound one.
    store.put("E1", "truncated", CONFIG, good)
    assert ResultsStore(tmp_path).get("E1", "truncated", CONFIG) == good


@pytest.mark.no_shape_checks  # the library as a user runs it, without the test-time checks
def test_a_huge_record_is_reported_and_recomputed(tmp_path):
    from nqf.store.maintenance import summarise
    from nqf.store.results import MARKER, MAX_READ_BYTES, read_marker

    config, record = {"seed": 0}, {"loss": [1.0, 0.5]}
    store = ResultsStore(tmp_path)
    store.put("E1", "gd", config, record)
    path = store.path("E1", store.key("E1", "gd", config))
    with open(path, "r+b") as handle:
        handle.truncate(MAX_READ_BYTES + 1)  # sparse: a huge file, no disk taken, never read

    damaged = ResultsStore(tmp_path, recompute=True)
    assert damaged.get("E1", "gd", config) is None and list(damaged.scan()) == []
    (line,) = damaged.problems
    assert line == f"runs/E1/{path.name}: 256.0 MiB, more than the 256.0 MiB nqf reads (not read); to be recomputed"
    summary = summarise(tmp_path)
    assert summary.experiments["E1"]["damaged"] == 1, summary.experiments
    damaged.put("E1", "gd", config, record)  # the recomputation replaces it
    assert ResultsStore(tmp_path).get("E1", "gd", config) == record

    with open(tmp_path / MARKER, "r+b") as handle:
        handle.truncate(2**20 + 1)
    assert read_marker(tmp_path) == (None, "nqf-store.json holds 1.0 MiB, more than the 1.0 MiB nqf reads")


@pytest.mark.slow  # through the console script
def test_store_gc_leaves_a_record_named_file_holding_no_record_alone(tmp_path):
    """Was: ``removed: ...`` with ``problem: ...: not an nqf run record (foreign file); a damaged
    record``, and ``store ls`` counting it damaged: a file it called foreign, removed as its own."""
    store = ResultsStore(tmp_path / "store")
    store.put("E1", "a", {"x": 1}, {"y": 1.0})
    folder = store.path("E1", store.key("E1", "a", {"x": 1})).parent
    foreign, truncated = folder / f"{'7' * 64}.json", folder / f"{'6' * 64}.json"
    foreign.write_text("{}")
    truncated.write_text("{")  # nqf's record cut short: damaged, removed as before

    def command(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "nqf", "store", *args, str(store.root)], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done

    listing = command("ls").stdout
    assert re.search(r"^E1\s+1\s+0\s+1$", listing, re.M), listing  # current 1, stale 0, damaged 1: the truncated
    assert listing.count(foreign.name) == 1
    assert f"runs/E1/{foreign.name}: not an nqf run record (foreign file); skipped" in listing
    for args in (("gc", "--dry-run"), ("gc",)):
        out = command(*args).stdout
        assert out.count(foreign.name) == 1, out  # said once, never "removed"
        assert f"problem: runs/E1/{foreign.name}: not an nqf run record (foreign file); left alone" in out
        assert f"remove: {truncated}" in out or f"removed: {truncated}" in out
    assert foreign.read_text() == "{}" and not truncated.exists()
    assert ResultsStore(store.root).get("E1", "a", {"x": 1}) == {"y": 1.0}


def _put_under_umask(root, umask: int) -> int:
    """Mode of a record written by a fresh process whose umask is ``umask`` (read at import)."""
    code = (
        "import sys; from nqf.store.results import ResultsStore; s = ResultsStore(sys.argv[1]);"
        "s.put('E1', 'gd', {'seed': 0}, {'value': 1.0});"
        "print(oct(s.path('E1', s.key('E1', 'gd', {'seed': 0})).stat().st_mode & 0o777))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.umask(umask),
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip(), 8)


def test_written_files_respect_the_umask(tmp_path):
    assert _put_under_umask(tmp_path / "a", 0o022) == 0o644
    assert _put_under_umask(tmp_path / "b", 0o077) == 0o600
    assert _put_under_umask(tmp_path / "c", 0o002) == 0o664
    assert not list((tmp_path / "a").rglob("*.tmp"))


def test_a_claim_excludes_others_until_released_and_leaves_no_lock_file(tmp_path):
    store = ResultsStore(tmp_path)
    key = store.key("E1", "gd", CONFIG)
    lock = store.path("E1", key).with_name(f".{key}.lock")
    with store.claim("E1", key) as held:
        assert lock.is_file() and held is not None
        assert store.claim("E1", key) is None  # flock excludes a second open file, even in this process
        assert store.claim("E1", store.key("E1", "adam", CONFIG)) is not None  # other runs are free
    assert not lock.exists()
    again = store.claim("E1", key)
    assert again is not None
    again.release()
    again.release()  # idempotent
    assert [doc for doc in store.scan()] == [] and store.problems == []  # lock files are not records


@pytest.mark.slow  # a second Python process
def test_a_waiting_claim_gets_the_run_when_the_holder_releases_or_dies(tmp_path):
    store = ResultsStore(tmp_path)
    key = store.key("E1", "gd", CONFIG)
    lock = store.path("E1", key).with_name(f".{key}.lock")
    holder = store.claim("E1", key)
    got = []
    waiter = threading.Thread(target=lambda: got.append(store.claim("E1", key, wait=True)))
    waiter.start()
    time.sleep(0.3)
    assert got == []  # still waiting
    holder.release()  # unlinks the file the waiter has open: the waiter must lock the new one
    waiter.join(10)
    (claim,) = got
    assert lock.is_file() and store.claim("E1", key) is None
    claim.release()

    # A holder killed by SIGKILL leaves its lock file, but not its lock.
    code = (
        "import os, signal, sys; from nqf.store.results import ResultsStore; s = ResultsStore(sys.argv[1]);"
        "c = s.claim('E1', sys.argv[2]); print(c is not None, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path), key], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL and done.stdout.strip() == "True"
    assert lock.is_file()
    claim = store.claim("E1", key)
    assert claim is not None
    claim.release()
    assert not lock.exists()


def test_a_lock_file_left_on_a_stored_run_is_cleared_and_a_held_claim_is_not(tmp_path):
    # A holder killed between storing its run and releasing the claim leaves the lock file of
    # a stored run, which no later claimant meets: the plan of the next attempt removes it.
    store = ResultsStore(tmp_path)
    store.put("E1", "a", {"x": 1}, {"y": 2})
    key = store.key("E1", "a", {"x": 1})
    lock = store.path("E1", key).with_name(f".{key}.lock")
    assert store.clear_stale_claim("E1", key) is False  # nothing to clear
    lock.write_text("")  # what the killed holder leaves: a file no one holds
    assert store.clear_stale_claim("E1", key) is True and not lock.exists()
    held = store.claim("E1", key)
    assert held is not None and store.clear_stale_claim("E1", key) is False and lock.is_file()
    held.release()
    assert not lock.exists()


_SOURCE = b'''"""A module's docstring."""
import math  # a trailing comment
# a comment line

def f(x):
    """f's docstring,
    on two lines."""
    text = "# a string, not a comment"
    return math.sqrt(x) + len(text)


class Unit:
    "a one-line docstring"
    scale = 2.0
'''


def test_the_computing_text_leaves_out_comments_and_docstrings_and_keeps_every_other_byte():
    from nqf.store.code import computing_text

    kept = computing_text(_SOURCE)
    assert kept == (
        b"import math\ndef f(x):\n"
        b'    text = "# a string, not a comment"\n    return math.sqrt(x) + len(text)\n'
        b"class Unit:\n    scale = 2.0\n"
    )
    # edits of comments or docstrings leave it as it was ...
    edited = _SOURCE.replace(b"a trailing comment", b"another").replace(b"on two lines.", b"edited")
    assert computing_text(edited + b"\n\n# appended\n") == kept
    # a blank line inside a string is part of its value
    assert computing_text(b'x = """a\n\nb"""\n') == b'x = """a\n\nb"""\n' != computing_text(b'x = """a\nb"""\n')
    # ... an edit of anything else does not: code, a string, the spacing
    for old, new in [(b"scale = 2.0", b"scale = 3.0"), (b"# a string", b"# A string"), (b"x) +", b"x)  +")]:
        assert computing_text(_SOURCE.replace(old, new)) != kept
    # a string standing alone is a no-op (left out), an f-string may call (kept); strings in a call,
    # in brackets or after a continued line are not statements of their own
    assert computing_text(b'x = 1\n"a no-op"\nf"{x()}"\n') == b'x = 1\nf"{x()}"\n'
    assert computing_text(b'g(\n    "kept",\n)\ny = \\\n    "kept"\n') == b'g(\n    "kept",\n)\ny = \\\n    "kept"\n'
    assert computing_text(b"\xff# not UTF-8\n") == b"\xff# not UTF-8\n"  # hashed whole


def test_the_code_hash_follows_code_edits_and_not_comment_or_docstring_edits(tmp_path):
    from nqf.store.code import code_hash

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "unit.py").write_bytes(_SOURCE)
    before = code_hash(package)
    (package / "unit.py").write_bytes(_SOURCE.replace(b"on two lines.", b"edited") + b"\n# a comment\n")
    assert code_hash(package) == before
    (package / "unit.py").write_bytes(_SOURCE.replace(b"2.0", b"3.0"))
    assert code_hash(package) != before


def _without_bare_strings(tree: ast.AST) -> str:
    """The tree's dump without its bare string statements (not f-strings); an emptied body a pass."""
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [
                    statement
                    for statement in body
                    if not (
                        isinstance(statement, ast.Expr)
                        and isinstance(statement.value, ast.Constant)
                        and isinstance(statement.value.value, str)
                    )
                ]
                setattr(node, name, kept or [ast.Pass()])
    return ast.dump(tree)


@pytest.mark.slow  # parses every Python file of the repository twice: 3.6 s
def test_the_computing_text_of_every_file_here_is_its_code_without_comments_and_docstrings():
    """The lexer against Python's parser on every Python file of the repository: where the text
    left parses, its syntax tree is the file's without its bare strings (comments leave no trace
    in a tree); where it does not, only because a body held nothing but its docstring."""
    from nqf.store.code import computing_text

    root = Path(__file__).resolve().parent.parent
    files = [
        path for folder in ("src", "tests", "benchmarks", "scripts", "docs") for path in (root / folder).rglob("*.py")
    ]
    parsed = 0
    for path in files:
        source = path.read_bytes()
        kept = computing_text(source)
        try:
            tree = ast.parse(kept)
        except SyntaxError:
            # a body of nothing but a docstring: the text is the file's without it, and a pass there parses
            continue
        parsed += 1
        assert ast.dump(tree) == _without_bare_strings(ast.parse(source)), path
    assert parsed > 0.9 * len(files)


def test_an_experiments_code_identity_follows_nqf_the_shared_modules_and_its_own_folder(tmp_path):
    import shutil

    import nqf_paper
    from nqf.store.code import code_hash

    paper = tmp_path / "nqf_paper"
    source = Path(nqf_paper.__file__).resolve().parent
    shutil.copytree(source, paper, ignore=shutil.ignore_patterns("__pycache__"))
    names = ("E1", "E5", "sweep")

    def hashes():
        return {name: code_hash(paper, experiment=name) for name in (*names, None)}

    before = hashes()
    assert len(set(before.values())) == 4
    own = paper / "e5_architectures" / "__init__.py"
    own.write_text(own.read_text() + "\n_EDITED = 1\n")
    after = hashes()
    assert [name for name in (*names, None) if after[name] != before[name]] == ["E5", None]
    shared = paper / "_common.py"
    shared.write_text(shared.read_text() + "\n_EDITED = 1\n")
    assert all(hashes()[name] != after[name] for name in (*names, None))
