"""Warm starts of the ``nqf`` command line: the persistent compilation cache and lazy imports.

``cli``: ``nqf predict`` on the 8-D staircase (mlp, width 32, sigma0 1e-6, lr 0.05, 800
steps), run through the console script twice in a row with a fresh empty
``NQF_CACHE_DIR``: the first invocation compiles and fills the cache, the second loads
from it. Also one ``--no-cache`` invocation (what every run cost before the cache), and
``nqf --help`` / ``nqf predict --help``, whose wall time is the startup of the CLI, with
a check that they do not import JAX. Each invocation is one process, timed end to end
(wall) and by the CPU time of the child (user + sys, less disturbed by other load).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _timing import Outcome

NQF = Path(sys.executable).parent / "nqf"
PREDICT_ARGS = ("--arch", "mlp", "--width", "32", "--sigma0", "1e-6", "--lr", "0.05", "--steps", "800")
RATIO_TARGET = 0.40
HELP_TARGET_S = 1.0

_JAX_CHECK = (
    "import sys\n"
    "from nqf.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit:\n"
    "    pass\n"
    "sys.stderr.write('JAX_IMPORTED=%s' % ('jax' in sys.modules))\n"
)


def _env(cache: Path | str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", NQF_CACHE_DIR=str(cache))
    env.pop("EQX_ON_ERROR", None)  # the CLI's own default
    return env


def _invoke(args: list[str], env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, child CPU s, result) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()[-2000:]}")
    return wall, cpu, result


def _entries(cache: Path) -> int:
    return sum(1 for p in cache.iterdir() if p.name.endswith("-cache")) if cache.is_dir() else 0


def cli(quick: bool, repeats: int) -> Outcome:
    import nqf

    pairs = 1 if quick else 3
    help_calls = max(3, repeats)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="nqf-bench-cli-") as tmp:
        tmp = Path(tmp)
        X, Y = nqf.get_task("staircase").generate(0)
        data = tmp / "staircase.npz"
        np.savez(data, X=np.asarray(X), Y=np.asarray(Y))
        predict = [str(NQF), "predict", "--data", str(data), *PREDICT_ARGS]

        firsts, seconds, first_cpus, second_cpus, outputs = [], [], [], [], []
        for pair in range(1, pairs + 1):
            cache = tmp / f"cache-{pair}"
            wall1, cpu1, out1 = _invoke(predict, _env(cache))
            entries1 = _entries(cache)
            wall2, cpu2, out2 = _invoke(predict, _env(cache))
            entries2 = _entries(cache)
            firsts.append(wall1)
            seconds.append(wall2)
            first_cpus.append(cpu1)
            second_cpus.append(cpu2)
            outputs += [out1.stdout, out2.stdout]
            rows.append(
                {
                    "invocation": f"predict, empty cache ({pair})",
                    "wall_s": wall1,
                    "cpu_s": cpu1,
                    "cache_entries": entries1,
                }
            )
            rows.append(
                {
                    "invocation": f"predict, warm cache ({pair})",
                    "wall_s": wall2,
                    "cpu_s": cpu2,
                    "ratio_to_first": wall2 / wall1,
                    "cpu_ratio_to_first": cpu2 / cpu1,
                    "cache_entries": entries2,
                }
            )

        wall0, cpu0, out0 = _invoke([*predict[:1], "--no-cache", *predict[1:]], _env(tmp / "unused"))
        outputs.append(out0.stdout)
        rows.append(
            {
                "invocation": "predict --no-cache",
                "wall_s": wall0,
                "cpu_s": cpu0,
                "cache_entries": _entries(tmp / "unused"),
            }
        )

        help_rows = {}
        for label, args in (("nqf --help", ["--help"]), ("nqf predict --help", ["predict", "--help"])):
            walls, cpus = [], []
            for _ in range(help_calls):
                wall, cpu, _ = _invoke([str(NQF), *args], _env(tmp / "help-cache"))
                walls.append(wall)
                cpus.append(cpu)
            check = subprocess.run(
                [sys.executable, "-c", _JAX_CHECK, *args],
                capture_output=True,
                text=True,
                env=_env(tmp / "help-cache"),
                timeout=300,
            )
            imported = "JAX_IMPORTED=False" not in check.stderr
            help_rows[label] = {"wall_s": min(walls), "imported": imported}
            rows.append({"invocation": label, "wall_s": min(walls), "cpu_s": min(cpus), "jax_imported": imported})

    first, second = statistics.median(firsts), statistics.median(seconds)
    ratio = second / first
    cpu_ratio = statistics.median(second_cpus) / statistics.median(first_cpus)
    same = all(o == outputs[0] for o in outputs)
    help_s = help_rows["nqf --help"]["wall_s"]
    return Outcome(
        params={
            "command": "nqf predict --data staircase.npz " + " ".join(PREDICT_ARGS),
            "pairs": pairs,
            "help_calls": help_calls,
            "JAX_PLATFORMS": "cpu",
        },
        rows=rows,
        summary={
            "first_s": first,
            "second_s": second,
            "ratio_second_over_first": ratio,
            "cpu_ratio_second_over_first": cpu_ratio,
            "no_cache_s": wall0,
            "help_s": help_s,
            "help_imports_jax": help_rows["nqf --help"]["imported"],
            "predict_help_imports_jax": help_rows["nqf predict --help"]["imported"],
        },
        targets={
            f"warm-cache predict <= {RATIO_TARGET:.2f} x the first (wall)": ratio <= RATIO_TARGET,
            f"nqf --help < {HELP_TARGET_S:g} s": help_s < HELP_TARGET_S,
            "nqf --help and nqf predict --help do not import jax": not any(r["imported"] for r in help_rows.values()),
            "same output with an empty cache, a warm cache and --no-cache": same,
        },
        notes=[
            f"wall times of whole processes (median over {pairs} pair(s) of invocations, each pair with a fresh "
            "empty NQF_CACHE_DIR); cpu_s is the child's user + sys time",
            "what a warm start still pays: Python and JAX imports, tracing and lowering every jitted function "
            "(the cache key is the lowered program), and loading each executable from disk",
        ],
    )


BENCHMARKS = {"cli": cli}
COLUMNS = {
    "cli": ["invocation", "wall_s", "cpu_s", "ratio_to_first", "cpu_ratio_to_first", "cache_entries", "jax_imported"]
}
