"""docs/tutorial.md is executed, so it cannot rot.

The tutorial is a markdown notebook: its ```python blocks run in order as one script, its
```sh blocks line by line through bash (with this venv's ``nqf`` on PATH), all in one
fresh folder, so files written by one block are read by the next. A block that fails
fails the test with the block's text; the figures and tables it says it writes must
exist and be non-empty.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"
_BLOCK = re.compile(r"^```(python|sh)\n(.*?)^```", re.S | re.M)


def tutorial_blocks(text: str) -> list[tuple[str, str]]:
    """The (language, code) of every ```python and ```sh block, in order."""
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(text)]


def test_blocks_are_found():
    blocks = tutorial_blocks(TUTORIAL.read_text(encoding="utf-8"))
    assert {lang for lang, _ in blocks} == {"python", "sh"}
    assert len(blocks) >= 8


# Runs the blocks in one interpreter (python blocks share a namespace, as in a notebook),
# sh blocks through bash; stops at the first failure and names the block.
_DRIVER = """
import json, subprocess, sys, traceback
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for number, (lang, code) in enumerate(blocks, 1):
    print(f"--- block {number} ({lang})", flush=True)
    if lang == "python":
        try:
            exec(compile(code, f"<tutorial block {number}>", "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print(f"BLOCK FAILED {number}", file=sys.stderr)
            sys.exit(1)
    else:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code])
        if done.returncode != 0:
            print(f"BLOCK FAILED {number} (exit {done.returncode})", file=sys.stderr)
            sys.exit(1)
"""


@pytest.mark.timeout(900)
def test_tutorial_runs(tmp_path):
    import json

    text = TUTORIAL.read_text(encoding="utf-8")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["MPLBACKEND"] = "Agg"
    (tmp_path / "blocks.json").write_text(json.dumps(tutorial_blocks(text)), encoding="utf-8")
    (tmp_path / "driver.py").write_text(_DRIVER, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "driver.py", "blocks.json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=850,
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-4000:]}"
    for name in re.findall(r"`([\w.-]+\.(?:png|csv|json))`", text):
        matches = list(tmp_path.rglob(name))
        assert matches and all(p.stat().st_size > 0 for p in matches), f"the tutorial's {name} was not written"
