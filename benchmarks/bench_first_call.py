"""The first call, as a researcher meets it: every case in fresh processes with empty caches.

``first_call``: the README's five lines (staircase, mlp tanh, width 32, lr 0.05, sigma0 1e-6,
800 steps) and scikit-learn's iris (4 whitened inputs, one-hot targets, width 64, lr 0.05,
3000 steps): the first ``nqf.predict`` in a fresh process against the first ``nqf.train`` of
the same network (GD, same steps) in another fresh process, and against an independent
numpy loop (written here, no nqf or JAX) training the same tanh network with full-batch GD.
Each process gets its own empty ``NQF_CACHE_DIR``. Reported: the call itself (wall), the
import before it, the process CPU time (user + sys), and how many XLA programs the call
compiled (``jax.monitoring``'s backend-compile events).

``new_config``: in the predict process, a second ``predict`` with another lr, sigma0, steps
and seed (no recompilation wanted); and a third process, with the cache the first one left,
on a data set of another size (the staircase with 200 samples instead of 256).

``theory_grid``: 1000 predictions (10 lr x 100 sigma0) through ``nqf.predict_grid`` against one
cold ``predict``, and ``nqf sweep`` over 100 predict points against one cold ``nqf predict``.

``cli_cold``: ``nqf predict`` on iris through the console script with an empty cache,
against the independent numpy loop for the same steps (process wall times).

Run against another checkout (the figures before a change) with
``PYTHONPATH=/path/to/other/src python benchmarks/run.py --only first_call``: the child
processes import whichever nqf comes first on the path.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
from _timing import Outcome, median_run

NQF = Path(sys.executable).parent / "nqf"
FIRST_CALL_TARGET = 0.5  # first predict, the quadratic theory alone (network=False) / first train
NETWORK_TARGET = 1.0  # first predict as it comes (the network's own prediction on) / first train
CLI_TARGET = 3.0  # nqf predict (cold) / independent numpy training
NEW_CONFIG_TARGET = 0.05  # second predict / first predict

STAIRCASE = {"width": 32, "lr": 0.05, "steps": 800, "sigma0": 1e-6}
IRIS = {"width": 64, "lr": 0.05, "steps": 3000, "sigma0": 1e-6}

# What every child runs first: the clock, float64 (as the README's five lines), and a count of
# the XLA programs compiled (backend compiles) and of their seconds.
_PRELUDE = """
import json, resource, sys, time
t_start = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import nqf
compiled = [0, 0.0]
def _count(event, duration, **_):
    if event == "/jax/core/compile/backend_compile_duration":
        compiled[0] += 1
    if event.startswith("/jax/core/compile/"):
        compiled[1] += duration
jax.monitoring.register_event_duration_secs_listener(_count)
t_import = time.perf_counter() - t_start
def load(case):
    if case == "staircase":
        return nqf.get_task("staircase").generate(0)
    if case == "staircase200":
        return nqf.get_task("staircase", samples=200).generate(0)
    data = np.load(case)
    return data["X"], data["Y"]
def arch_for(X, Y):
    return nqf.get_architecture("mlp", activation="tanh", inputs=X.shape[1], outputs=Y.shape[1])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
"""

_PREDICT = """
X, Y = load(sys.argv[1])
arch = arch_for(X, Y)
settings = json.loads(sys.argv[2])
before = list(compiled)
t = time.perf_counter()
p = nqf.predict(arch, X, Y, nqf.PredictConfig(**settings))
first = time.perf_counter() - t
first_programs, first_compile = compiled[0] - before[0], compiled[1] - before[1]
again = dict(settings, lr=settings["lr"] * 0.8, sigma0=settings["sigma0"] * 0.1, steps=settings["steps"] + 100, seed=7)
t = time.perf_counter()
q = nqf.predict(arch, X, Y, nqf.PredictConfig(**again))
second = time.perf_counter() - t
print(json.dumps({"import_s": t_import, "call_s": first, "programs": first_programs, "compile_s": first_compile,
                  "second_s": second, "second_programs": compiled[0] - first_programs - before[0], "cpu_s": cpu(),
                  "switch": [None if v != v else float(v) for v in p.mflow_switch_steps], "route": p.route}))
"""

_TRAIN = """
X, Y = load(sys.argv[1])
arch = arch_for(X, Y)
settings = json.loads(sys.argv[2])
before = list(compiled)
t = time.perf_counter()
r = nqf.train(arch, X, Y, nqf.TrainConfig(optimizer="gd", **settings))
loss = np.asarray(r.loss)
first = time.perf_counter() - t
print(json.dumps({"import_s": t_import, "call_s": first, "programs": compiled[0] - before[0],
                  "compile_s": compiled[1] - before[1],
                  "cpu_s": cpu(), "final_loss": float(loss[-1])}))
"""

# An independent training loop: numpy only, the tanh network f(x) = sum_i a_i tanh(v_i . x) with
# full-batch GD on the mean squared loss (1/2N) sum |f(x) - y|^2 from W0 ~ N(0, sigma0^2).
_NUMPY_TRAIN = """
import json, sys, time
t_start = time.perf_counter()
import numpy as np
data = np.load(sys.argv[1]); X, Y = data["X"], data["Y"]
s = json.loads(sys.argv[2])
rng = np.random.default_rng(0)
N, D = X.shape; K = Y.shape[1]; n = s["width"]
A = s["sigma0"] * rng.standard_normal((K, n)); V = s["sigma0"] * rng.standard_normal((D, n))
t = time.perf_counter()
for _ in range(s["steps"]):
    H = np.tanh(X @ V)            # (N, n)
    R = (H @ A.T - Y) / N         # (N, K): the residual, scaled
    gA = R.T @ H                  # (K, n)
    gV = X.T @ ((R @ A) * (1.0 - H * H))
    A -= s["lr"] * gA; V -= s["lr"] * gV
loss = 0.5 * np.mean(np.sum((np.tanh(X @ V) @ A.T - Y) ** 2, axis=1))
print(json.dumps({"call_s": time.perf_counter() - t, "process_s": time.perf_counter() - t_start, "final_loss": loss}))
"""


def iris_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled iris: X whitened (zero mean, identity covariance) (150, 4), Y one-hot (150, 3)."""
    from sklearn.datasets import load_iris

    X, labels = load_iris(return_X_y=True)
    X = X - X.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov(X, rowvar=False, bias=True))
    return X @ vectors / np.sqrt(values), np.eye(3)[labels]


def write_iris(path: Path) -> Path:
    """:func:`iris_arrays` as an npz file (X, Y) at ``path``."""
    X, Y = iris_arrays()
    np.savez(path, X=X, Y=Y)
    return path


def _env(cache: Path) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", NQF_CACHE_DIR=str(cache))
    env.pop("EQX_ON_ERROR", None)
    return env


def _child(script: str, args: list[str], env: dict) -> tuple[dict, float, float]:
    """(the child's JSON, process wall s, process CPU s)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=1200)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"child exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(done.stdout.strip().splitlines()[-1]), wall, cpu


def _case(tmp: Path, label: str, data: str, settings: dict, repeats: int) -> tuple[dict, dict, dict, dict]:
    """The median of ``repeats`` fresh processes of each: predict as it comes (the network's own
    prediction on), predict with the quadratic theory alone (``network=False``) and train, taken in
    turn (predict, quadratic, train, predict, ...), each with its own empty cache: a single cold
    process varies by +-0.05 s on this machine, as much as the difference the ratio measures."""
    predicts, quadratics, trains = [], [], []
    for r in range(repeats):
        cache = tmp / f"{label}-predict-{r}"
        predict, p_wall, p_cpu = _child(_PREDICT_SCRIPT, [data, json.dumps(settings)], _env(cache))
        quadratic, q_wall, q_cpu = _child(
            _PREDICT_SCRIPT, [data, json.dumps(dict(settings, network=False))], _env(tmp / f"{label}-quadratic-{r}")
        )
        train, t_wall, t_cpu = _child(_TRAIN_SCRIPT, [data, json.dumps(settings)], _env(tmp / f"{label}-train-{r}"))
        predict.update(process_s=p_wall, process_cpu_s=p_cpu, cache=str(cache))
        quadratic.update(process_s=q_wall, process_cpu_s=q_cpu)
        train.update(process_s=t_wall, process_cpu_s=t_cpu)
        predicts.append(predict)
        quadratics.append(quadratic)
        trains.append(train)
    return median_run(predicts), median_run(quadratics), median_run(trains), settings


_PREDICT_SCRIPT = textwrap.dedent(_PRELUDE) + textwrap.dedent(_PREDICT)
_TRAIN_SCRIPT = textwrap.dedent(_PRELUDE) + textwrap.dedent(_TRAIN)


def first_call(quick: bool, repeats: int) -> Outcome:
    rows, summary, targets = [], {}, {}
    caches: dict[str, Path] = {}  # the median predict process's cache, per case
    with tempfile.TemporaryDirectory(prefix="nqf-bench-first-") as tmp:
        tmp = Path(tmp)
        staircase = tmp / "staircase.npz"
        iris = write_iris(tmp / "iris.npz")
        cases = {"staircase": "staircase", "iris": str(iris)}
        settings = {"staircase": STAIRCASE, "iris": IRIS}
        import nqf

        X, Y = nqf.get_task("staircase").generate(0)
        np.savez(staircase, X=np.asarray(X), Y=np.asarray(Y))
        for label, data in cases.items():
            predict, quadratic, train, s = _case(tmp, label, data, settings[label], repeats | 1)
            caches[label] = Path(predict["cache"])
            independent, ind_wall, _ = _child(
                _NUMPY_TRAIN, [str(staircase if label == "staircase" else iris), json.dumps(s)], _env(tmp / "unused")
            )
            ratio = predict["call_s"] / train["call_s"]
            rows.append(
                {
                    "case": label,
                    "run": "predict (first call)",
                    "call_s": predict["call_s"],
                    "import_s": predict["import_s"],
                    "programs": predict["programs"],
                    "compile_s": predict["compile_s"],
                    "process_s": predict["process_s"],
                    "process_cpu_s": predict["process_cpu_s"],
                    "ratio_to_train": ratio,
                    "ratio_to_numpy": predict["call_s"] / independent["call_s"],
                }
            )
            quadratic_ratio = quadratic["call_s"] / train["call_s"]
            rows.append(
                {
                    "case": label,
                    "run": "predict, quadratic theory alone (network=False)",
                    "call_s": quadratic["call_s"],
                    "import_s": quadratic["import_s"],
                    "programs": quadratic["programs"],
                    "compile_s": quadratic["compile_s"],
                    "process_s": quadratic["process_s"],
                    "process_cpu_s": quadratic["process_cpu_s"],
                    "ratio_to_train": quadratic_ratio,
                    "ratio_to_numpy": quadratic["call_s"] / independent["call_s"],
                }
            )
            rows.append(
                {
                    "case": label,
                    "run": "nqf.train (first call)",
                    "call_s": train["call_s"],
                    "import_s": train["import_s"],
                    "programs": train["programs"],
                    "compile_s": train["compile_s"],
                    "process_s": train["process_s"],
                    "process_cpu_s": train["process_cpu_s"],
                }
            )
            rows.append(
                {
                    "case": label,
                    "run": "numpy GD loop (independent)",
                    "call_s": independent["call_s"],
                    "process_s": ind_wall,
                }
            )
            for run, what in (
                (predict, "second predict (new lr, sigma0, steps, seed)"),
                (quadratic, "second predict, network=False"),
            ):
                rows.append(
                    {
                        "case": label,
                        "run": what,
                        "call_s": run["second_s"],
                        "programs": run["second_programs"],
                        "ratio_to_first": run["second_s"] / run["call_s"],
                    }
                )
            summary[f"{label}_predict_over_train"] = ratio
            summary[f"{label}_quadratic_over_train"] = quadratic_ratio
            summary[f"{label}_second_over_first"] = predict["second_s"] / predict["call_s"]
            summary[f"{label}_quadratic_second_over_first"] = quadratic["second_s"] / quadratic["call_s"]
            summary[f"{label}_predict_programs"] = predict["programs"]
            targets[f"{label}: first predict <= {NETWORK_TARGET} x first train"] = ratio <= NETWORK_TARGET
            targets[f"{label}: first predict, network=False <= {FIRST_CALL_TARGET} x first train"] = (
                quadratic_ratio <= FIRST_CALL_TARGET
            )
            targets[f"{label}: second predict (new config), network=False <= {NEW_CONFIG_TARGET:.0%} of the first"] = (
                quadratic["second_s"] / quadratic["call_s"] <= NEW_CONFIG_TARGET
            )
        # a data set of another size, with the cache the first staircase process left
        other, _, _ = _child(_PREDICT_SCRIPT, ["staircase200", json.dumps(STAIRCASE)], _env(caches["staircase"]))
        first = rows[0]["call_s"]
        rows.append(
            {
                "case": "staircase, 200 samples",
                "run": "predict, cache of the 256-sample run",
                "call_s": other["call_s"],
                "programs": other["programs"],
                "ratio_to_first": other["call_s"] / first,
            }
        )
        summary["other_size_over_first"] = other["call_s"] / first
    return Outcome(
        params={"staircase": STAIRCASE, "iris": IRIS, "JAX_PLATFORMS": "cpu", "float": "float64"},
        rows=rows,
        summary=summary,
        targets=targets,
        notes=[
            "each predict / train row is its own fresh process with an empty NQF_CACHE_DIR, the median of `repeats` "
            "(odd) such processes taken in turn; call_s is the call alone, "
            "import_s the `import jax, numpy, nqf` before it, process_s / process_cpu_s the whole child",
            "programs: XLA programs compiled during the call (jax.monitoring backend-compile events)",
            "predict as it comes computes the network's own prediction (the mean-field flow: training's arithmetic on "
            "2 x 64 particles, so a second call costs about a training run); network=False: the quadratic theory alone",
            "the numpy GD loop is independent code (no nqf, no JAX): the same tanh network, full batch, same steps",
        ],
    )


def cli_cold(quick: bool, repeats: int) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="nqf-bench-cli-cold-") as tmp:
        tmp = Path(tmp)
        iris = write_iris(tmp / "iris.npz")
        args = [
            "--arch",
            "mlp",
            "--inputs",
            "4",
            "--outputs",
            "3",
            "--width",
            str(IRIS["width"]),
            "--lr",
            str(IRIS["lr"]),
            "--steps",
            str(IRIS["steps"]),
            "--sigma0",
            str(IRIS["sigma0"]),
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            [str(NQF), "predict", "--data", str(iris), *args],
            capture_output=True,
            text=True,
            env=_env(tmp / "cache"),
            timeout=1200,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"nqf predict exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        independent, ind_wall, ind_cpu = _child(_NUMPY_TRAIN, [str(iris), json.dumps(IRIS)], _env(tmp / "unused"))
    ratio = wall / ind_wall
    return Outcome(
        params={"command": f"nqf predict --data iris.npz {' '.join(args)}", "JAX_PLATFORMS": "cpu"},
        rows=[
            {"run": "nqf predict, empty cache (process)", "wall_s": wall, "cpu_s": cpu},
            {
                "run": "numpy GD loop, tanh network (process)",
                "wall_s": ind_wall,
                "cpu_s": ind_cpu,
                "loop_s": independent["call_s"],
            },
        ],
        summary={"ratio_cli_over_numpy": ratio, "cli_s": wall, "numpy_s": ind_wall},
        targets={f"nqf predict (cold) <= {CLI_TARGET:g} x the numpy training (process wall)": ratio <= CLI_TARGET},
        notes=["both are whole processes; the numpy loop imports only numpy"],
    )


# theory_grid: 10 learning rates x 100 init scales on the five lines' staircase (one cold process)
GRID_LRS = [0.01 + 0.005 * i for i in range(10)]  # 0.01 ... 0.055, all below the bound 0.0625
GRID_SIGMA0S = np.geomspace(1e-8, 1e-3, 100).tolist()
GRID_TARGET = 3.0  # 1000 predictions through predict_grid / one cold predict
SWEEP_TARGET = 5.0  # nqf sweep, 100 predict points / one cold nqf predict
LOOP_POINTS = 100  # the same predictions as a loop of predict calls, timed on this many

_GRID = """
X, Y = load("staircase")
arch = arch_for(X, Y)
settings, lrs, sigma0s, loop = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
config = nqf.PredictConfig(**settings)
before = list(compiled)
t = time.perf_counter()
grid = nqf.predict_grid(arch, X, Y, config, lrs=lrs, sigma0s=sigma0s)
call = time.perf_counter() - t
programs = compiled[0] - before[0]
cpu_grid = cpu()
# the same predictions as a loop of predict calls (warm: the grid's process compiled what they share)
points = [(i, j) for i in range(len(lrs)) for j in range(len(sigma0s))][:: max(1, len(lrs) * len(sigma0s) // loop)][:loop]
t = time.perf_counter()
worst = 0
for i, j in points:
    p = nqf.predict(arch, X, Y, nqf.PredictConfig(**dict(settings, lr=lrs[i], sigma0=sigma0s[j])))
    a, b = p.mflow_switch_steps, grid.mflow_switch_steps[i, j, 0]
    worst = max(worst, int(np.sum(~((a == b) | (np.isnan(a) & np.isnan(b))))))
loop_s = time.perf_counter() - t
# the network's own prediction at every point of a 10 x 10 grid, whatever its time (network_budget None)
t = time.perf_counter()
net = nqf.predict_grid(arch, X, Y, nqf.PredictConfig(**dict(settings, network_budget=None)), lrs=lrs,
                       sigma0s=sigma0s[::10])
net_s = time.perf_counter() - t
print(json.dumps({"import_s": t_import, "call_s": call, "programs": programs, "cpu_s": cpu_grid,
                  "loop_s": loop_s, "loop_points": len(points), "mismatched_switch_steps": worst,
                  "points": int(grid.mflow_switch_steps[..., 0].size),
                  "network": bool(np.isfinite(grid.network_switch_steps).any()),
                  "network_grid_s": net_s, "network_grid_points": int(net.mflow_switch_steps[..., 0].size),
                  "network_grid_computed": int(np.isfinite(net.network_switch_steps[..., 0]).sum())}))
"""
_GRID_SCRIPT = textwrap.dedent(_PRELUDE) + textwrap.dedent(_GRID)

_SWEEP_SPEC = """
[sweep]
mode = "predict"
[task]
name = "staircase"
[settings]
width = {width}
steps = {steps}
[axes]
sigma0 = {{logspace = [-8, -3, 10]}}
lr = {lrs}
"""


def _process(command: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def theory_grid(quick: bool, repeats: int) -> Outcome:
    """1000 predictions (10 lr x 100 sigma0, the five lines' staircase) through ``nqf.predict_grid``
    in a fresh process against one cold ``predict`` in another (the grid's ``network_budget`` holds
    for its points together, so at its default the grid says the network's own prediction is over
    it); then, warm in the grid's process, a 10 x 10 grid with the network at every point
    (``network_budget=None``: its cost); and ``nqf sweep`` in predict mode over 100 points (10 lr x
    10 sigma0; each point's budget its own) against one cold ``nqf predict``, both whole processes
    with empty caches."""
    rows, summary, targets = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="nqf-bench-grid-") as tmp:
        tmp = Path(tmp)
        one, one_wall, one_cpu = _child(_PREDICT_SCRIPT, ["staircase", json.dumps(STAIRCASE)], _env(tmp / "one"))
        grid, grid_wall, grid_cpu = _child(
            _GRID_SCRIPT,
            [json.dumps(STAIRCASE), json.dumps(GRID_LRS), json.dumps(GRID_SIGMA0S), str(LOOP_POINTS)],
            _env(tmp / "grid"),
        )
        ratio = grid["call_s"] / one["call_s"]
        per_point_loop = grid["loop_s"] / grid["loop_points"]
        rows += [
            {
                "run": "one predict (first call)",
                "points": 1,
                "call_s": one["call_s"],
                "programs": one["programs"],
                "process_s": one_wall,
                "process_cpu_s": one_cpu,
            },
            {
                "run": "predict_grid, 10 lr x 100 sigma0 (first call; the network's own prediction "
                + ("computed)" if grid["network"] else "over its network_budget, not computed)"),
                "points": grid["points"],
                "call_s": grid["call_s"],
                "programs": grid["programs"],
                "process_s": grid_wall,
                "process_cpu_s": grid_cpu,
                "ratio_to_one": ratio,
            },
            {
                "run": f"a loop of predict, {grid['loop_points']} of the grid's points (warm)",
                "points": grid["loop_points"],
                "call_s": grid["loop_s"],
                "per_point_s": per_point_loop,
            },
            {
                "run": "predict_grid with the network's own prediction at every point (network_budget None), "
                f"10 lr x 10 sigma0, {grid['network_grid_computed']} computed (warm)",
                "points": grid["network_grid_points"],
                "call_s": grid["network_grid_s"],
                "per_point_s": grid["network_grid_s"] / grid["network_grid_points"],
            },
        ]
        summary.update(
            grid_over_one=ratio,
            grid_points=grid["points"],
            grid_s=grid["call_s"],
            grid_per_point_s=grid["call_s"] / grid["points"],
            loop_per_point_s=per_point_loop,
            mismatched_switch_steps=grid["mismatched_switch_steps"],
        )
        targets[f"1000 predictions through predict_grid <= {GRID_TARGET:g} x one cold predict"] = ratio <= GRID_TARGET
        targets["the grid's M-flow switch steps equal predict's at the looped points"] = (
            grid["mismatched_switch_steps"] == 0
        )

        # the command line: nqf sweep (100 points) against nqf predict (one), whole processes, empty caches
        staircase = tmp / "staircase.npz"
        import nqf

        X, Y = nqf.get_task("staircase").generate(0)
        np.savez(staircase, X=np.asarray(X), Y=np.asarray(Y))
        spec = tmp / "grid100.toml"
        spec.write_text(
            _SWEEP_SPEC.format(width=STAIRCASE["width"], steps=STAIRCASE["steps"], lrs=json.dumps(GRID_LRS))
        )
        predict_args = [
            "--arch",
            "mlp",
            "--width",
            str(STAIRCASE["width"]),
            "--lr",
            str(STAIRCASE["lr"]),
            "--steps",
            str(STAIRCASE["steps"]),
            "--sigma0",
            str(STAIRCASE["sigma0"]),
        ]
        cli_wall, cli_cpu = _process(
            [str(NQF), "predict", "--data", str(staircase), *predict_args], _env(tmp / "cli-cache")
        )
        sweep_wall, sweep_cpu = _process(
            [str(NQF), "sweep", str(spec), "--out", str(tmp / "sweep-out")], _env(tmp / "sweep-cache")
        )
        sweep_ratio = sweep_wall / cli_wall
        rows += [
            {"run": "nqf predict (process, empty cache)", "points": 1, "process_s": cli_wall, "process_cpu_s": cli_cpu},
            {
                "run": "nqf sweep, 10 lr x 10 sigma0, predict mode (process, empty cache)",
                "points": 100,
                "process_s": sweep_wall,
                "process_cpu_s": sweep_cpu,
                "ratio_to_one": sweep_ratio,
            },
        ]
        summary.update(sweep_over_predict=sweep_ratio, sweep_cpu_over_predict_cpu=sweep_cpu / cli_cpu)
        targets[f"nqf sweep, 100 predict points <= {SWEEP_TARGET:g} x one cold nqf predict"] = (
            sweep_ratio <= SWEEP_TARGET
        )
    return Outcome(
        params={
            "staircase": STAIRCASE,
            "lrs": GRID_LRS,
            "sigma0s": "logspace(-8, -3, 100)",
            "sweep": "lr x sigma0 = 10 x logspace(-8, -3, 10)",
            "JAX_PLATFORMS": "cpu",
            "float": "float64",
        },
        rows=rows,
        summary=summary,
        targets=targets,
        notes=[
            "each process starts with an empty NQF_CACHE_DIR; call_s is the call alone (after `import jax, numpy, "
            "nqf`), process_s / process_cpu_s the whole process with its workers",
            "the loop of predict runs in the grid's process after it (warm): what a Python loop would cost a point",
        ],
    )


BENCHMARKS = {"first_call": first_call, "cli_cold": cli_cold, "theory_grid": theory_grid}
COLUMNS = {
    "first_call": [
        "case",
        "run",
        "call_s",
        "import_s",
        "programs",
        "compile_s",
        "process_s",
        "process_cpu_s",
        "ratio_to_train",
        "ratio_to_numpy",
        "ratio_to_first",
    ],
    "cli_cold": ["run", "wall_s", "cpu_s", "loop_s"],
    "theory_grid": ["run", "points", "call_s", "programs", "per_point_s", "process_s", "process_cpu_s", "ratio_to_one"],
}
