"""Record the JSON that ``nqf predict``, ``nqf compare`` and ``nqf structure`` print on a fixed set
of cases, one file per case, through the real console script.

Run it before and after a change that must not alter behaviour (moving modules, new protocols)
and compare the two folders byte for byte::

    python scripts/record_outputs.py /tmp/before      # on the old code
    python scripts/record_outputs.py /tmp/after       # on the new code
    python scripts/record_outputs.py --compare /tmp/before /tmp/after

(a file that differs only in its measured durations, the ``seconds`` entries, is reported as such).

The cases cover every built-in architecture (structure), the predict routes, steppings,
engines and optimizers on synthetic data and on scikit-learn's iris and breast cancer sets
(written to the output folder as npz), and compare with each optimizer. Runs ``--jobs``
processes at once (default 2).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

NQF = Path(sys.executable).with_name("nqf")

STRUCTURE = [
    ["mlp"],
    ["mlp", "--activation", "gelu", "--inputs", "5", "--outputs", "2"],
    ["mlp", "--activation", "relu"],
    ["mlp-fixed"],
    ["mlp-fixed", "--activation", "tanh", "--inputs", "6"],
    ["attention"],
    ["attention", "--readout", "pool"],
    ["linear-attention"],
    ["moe"],
    ["moe", "--routing", "topk"],
    ["conv1d"],
    ["conv1d", "--padding", "valid"],
    ["conv2d", "--rows", "5", "--columns", "5"],
]

IRIS = ["--data", "{out}/iris.npz", "--arch", "mlp", "--inputs", "4", "--outputs", "3"]
CANCER = ["--data", "{out}/cancer.npz", "--arch", "mlp", "--inputs", "6", "--outputs", "2"]
STAIR = ["--data", "{out}/stair.npz", "--arch", "mlp", "--inputs", "6", "--outputs", "1"]
PREDICT = [
    [*IRIS, "--width", "16", "--lr", "0.05", "--steps", "600", "--sigma0", "1e-4"],
    [*IRIS, "--width", "16", "--lr", "0.05", "--steps", "600", "--sigma0", "1e-4", "--stepping", "every"],
    [*IRIS, "--width", "16", "--lr", "0.05", "--steps", "600", "--sigma0", "1e-4", "--route", "samples"],
    [*IRIS, "--width", "16", "--lr", "0.05", "--steps", "600", "--sigma0", "1e-6", "--optimizer", "momentum"],
    [
        *IRIS,
        "--width",
        "16",
        "--lr",
        "0.05",
        "--steps",
        "300",
        "--sigma0",
        "1e-4",
        "--optimizer",
        "sgd",
        "--batch",
        "32",
    ],
    [*IRIS, "--width", "16", "--lr", "0.05", "--steps", "600", "--sigma0", "1e-4", "--loss", "cross_entropy"],
    [*IRIS, "--width", "16", "--lr", "0.05", "--steps", "600", "--sigma0", "1e-4", "--departure"],
    [*CANCER, "--width", "32", "--lr", "0.05", "--steps", "800", "--sigma0", "1e-5"],
    [*CANCER, "--width", "32", "--lr", "0.05", "--steps", "800", "--sigma0", "1e-5", "--optimizer", "momentum"],
    [*STAIR, "--width", "32", "--lr", "0.05", "--steps", "2000", "--sigma0", "1e-6"],
    [*STAIR, "--width", "32", "--lr", "0.05", "--steps", "2000", "--sigma0", "1e-9", "--stepping", "every"],
    [*STAIR, "--width", "32", "--lr", "0.02", "--steps", "3000", "--sigma0", "1e-6", "--seed", "3"],
    [*STAIR, "--width", "8", "--lr", "0.05", "--steps", "1500", "--sigma0", "1e-3", "--departure"],
]

STAIRCASE = ["--task", "staircase", "--width", "16", "--sigma0", "1e-6"]
COMPARE = [
    [*STAIRCASE, "--lr", "0.05", "--steps", "600"],
    [*STAIRCASE, "--lr", "0.05", "--steps", "600", "--optimizers", "momentum"],
    [*STAIRCASE, "--lr", "0.05", "--steps", "400", "--optimizers", "sgd", "--batch", "64"],
    [*STAIRCASE, "--lr", "0.01", "--steps", "400", "--optimizers", "adam,muon"],
    [*STAIRCASE, "--lr", "0.05", "--steps", "600", "--seeds", "2"],
    ["--task", "icl", "--width", "4", "--sigma0", "1e-4", "--lr", "0.1", "--steps", "600"],
    ["--task", "powerlaw", "--width", "16", "--sigma0", "1e-6", "--lr", "0.05", "--steps", "600"],
    ["--task", "staircase", "--width", "8", "--sigma0", "1e-4", "--lr", "0.05", "--steps", "600", "--departure"],
]


def _write_data(out: Path) -> None:
    from sklearn.datasets import load_breast_cancer, load_iris

    def whiten(X: np.ndarray, keep: int) -> np.ndarray:
        X = X - X.mean(0)
        w, v = np.linalg.eigh(np.cov(X.T))
        top = np.argsort(w)[::-1][:keep]
        return X @ v[:, top] / np.sqrt(w[top])

    iris = load_iris()
    np.savez(out / "iris.npz", X=whiten(iris.data, 4), Y=np.eye(3)[iris.target])
    cancer = load_breast_cancer()
    np.savez(out / "cancer.npz", X=whiten(cancer.data, 6), Y=np.eye(2)[cancer.target])
    rng = np.random.default_rng(0)
    X = rng.standard_normal((256, 6))
    np.savez(out / "stair.npz", X=X, Y=X[:, :4] @ np.array([2.0, 1.0, 0.5, 0.25]))


def _cases(out: Path) -> list[tuple[str, list[str]]]:
    cases = [(f"structure_{i:02d}", ["structure", *args, "--json"]) for i, args in enumerate(STRUCTURE)]
    cases += [
        (f"predict_{i:02d}", ["predict", *[a.format(out=out) for a in args], "--json"])
        for i, args in enumerate(PREDICT)
    ]
    cases += [(f"compare_{i:02d}", ["compare", *args, "--json"]) for i, args in enumerate(COMPARE)]
    return cases


def _run(out: Path, name: str, args: list[str]) -> str:
    done = subprocess.run([str(NQF), *args], capture_output=True, text=True, timeout=900)
    (out / f"{name}.json").write_text(done.stdout)
    (out / f"{name}.args").write_text(" ".join(args) + f"\nexit {done.returncode}\n" + done.stderr[-2000:])
    return f"{name}: exit {done.returncode}"


def record(out: Path, jobs: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _write_data(out)
    cases = _cases(out)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for line in pool.map(lambda case: _run(out, *case), cases):
            print(line, flush=True)
    print(f"{len(cases)} cases recorded in {out}")


def _without_seconds(value):
    """The JSON without its measured durations (``seconds`` entries), which no two runs share."""
    if isinstance(value, dict):
        return {k: _without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_without_seconds(v) for v in value]
    return value


def compare(before: Path, after: Path) -> int:
    names = sorted(p.name for p in before.glob("*.json"))
    same = [n for n in names if (before / n).read_bytes() == (after / n).read_bytes()]
    timed, differ = [], []
    for n in sorted(set(names) - set(same)):
        try:
            a, b = (json.loads((folder / n).read_text()) for folder in (before, after))
        except json.JSONDecodeError:
            differ.append(n)
            continue
        (timed if _without_seconds(a) == _without_seconds(b) else differ).append(n)
    for n in timed:
        print(f"equal but for measured seconds: {n}")
    for n in differ:
        print(f"differs: {n}")
    print(f"{len(same)} of {len(names)} outputs byte-identical, {len(timed)} equal but for measured seconds")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--compare", action="store_true", help="compare two recorded folders")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if args.compare:
        before, after = args.folders
        return compare(before, after)
    (out,) = args.folders
    record(out.resolve(), args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
