"""What a worker runs for one batch of points: compute and store every point's record.

:func:`compute_batch` is the executor task (module level, picklable arguments, a small
return value). For each point it follows the store's protocol (as ``nqf_paper.reproduce``
does): claim the point's key, look in the store again, compute, ``put``, release. Each point
is stored as soon as it is done, so a batch killed midway loses only its unstored points;
a point that raises is reported (its error line) and the others go on.

Batching (``compare``): the points of a batch differ only in sigma0 and seed, so every
training run of the batch, the network per optimizer and the quadratic model, is one
``train_grid`` over the batch's sigma0s x seeds (looped on one CPU device, vmapped and
sharded over several devices: ``nqf.training.grid``). The per-point computation is
``nqf.compare`` itself, with its ``train`` argument set to :class:`SharedRuns`, which answers
a one-point call with its slice of the batch's call (made on first use, with the same
config, data and basis). So every point's record is what ``compare`` computes for it alone;
only a vmapped batch may order floating-point operations differently (rounding level:
1e-14 relative in the loss curves of the staircase). The theory (``predict``, the closure diagnostic) runs per point.
``predict`` points share the batch's data matrices (``flow_data``), as ``compare`` shares them
between its flows, and a predict batch (its points differ in lr, sigma0 and seed only) is one
``nqf.predict_grid`` over its lrs x sigma0s x seeds, each point's record the grid's
``prediction(i, j, k)``: ``predict``'s numbers for the point (``engine`` "grid"). Where the grid
does not apply (another route or optimizer, a batch that is far from a product grid) or
refuses (one point's lr unstable, one init underflowing), every point runs ``predict`` alone,
so that a failure stays with its point.

Records keep every number of ``Comparison.to_json()`` / ``Prediction.to_json()``; their loss
curves are thinned to at most ``CURVE_POINTS`` log- and linearly spaced records (first and
last kept), which is what the sweep's figures draw.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import replace
from typing import Any

import numpy as np

from nqf.comparison.settings import run_config
from nqf.optimizers import MINIBATCH_OPTIMIZERS, optimizer_record

CURVE_POINTS = 512


def _error_line(err: BaseException) -> str:
    from nqf.executors.base import error_line

    return error_line(err)


def _start_worker() -> None:
    """Float64, as the CLI computes (a worker is a fresh process; the library never flips this)."""
    os.environ.setdefault("EQX_ON_ERROR", "nan")
    import jax

    jax.config.update("jax_enable_x64", True)


def _digest(*arrays) -> str:
    h = hashlib.sha1()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


class SharedRuns:
    """A stand-in for ``train_grid`` serving one batch (module docstring).

    A call for one (sigma0, seed) of the batch's grid is answered from one ``train_grid``
    over the whole grid with the same architecture, data, config (sigma0 and seed aside) and
    basis; any other call goes to ``train_grid`` itself. If the batch's call fails (e.g. one
    sigma0 underflows), each point runs alone, so the failure stays with its point.
    """

    def __init__(self, sigma0s, seeds):
        from nqf.training.grid import train_grid

        self._train_grid = train_grid
        self.sigma0s = np.unique(np.asarray(sigma0s, dtype=np.float64))
        self.seeds = np.unique(np.asarray(seeds, dtype=np.int64))
        self._runs: dict[tuple, Any] = {}
        self.calls = 0  # batched train_grid calls made
        self.seconds = 0.0  # time spent in them

    def __call__(self, arch, X, Y, config, sigma0s, seeds, basis=None):
        s, k = np.asarray(sigma0s, dtype=np.float64).ravel(), np.asarray(seeds).ravel()
        if s.size != 1 or k.size != 1 or s[0] not in self.sigma0s or int(k[0]) not in self.seeds:
            return self._train_grid(arch, X, Y, config, sigma0s, seeds, basis=basis)
        from nqf.architectures.architecture import arch_key  # an id() could be reused by another architecture

        key = (
            arch_key(arch),
            replace(config, sigma0=0.0, seed=0),
            _digest(X, Y),
            None if basis is None else _digest(basis),
        )
        if key not in self._runs:
            start = time.perf_counter()
            try:
                self.calls += 1
                self._runs[key] = self._train_grid(arch, X, Y, config, self.sigma0s, self.seeds, basis=basis)
            except Exception:  # noqa: BLE001 (run alone: the point that fails then says why)
                self._runs[key] = None
            finally:
                self.seconds += time.perf_counter() - start
        whole = self._runs[key]
        if whole is None:
            return self._train_grid(arch, X, Y, config, sigma0s, seeds, basis=basis)
        i = int(np.flatnonzero(self.sigma0s == s[0])[0])
        j = int(np.flatnonzero(self.seeds == int(k[0]))[0])
        per_run = ("loss", "occupations", "weight_norm", "block_norms", "diverged_at", "W_final")
        return replace(
            whole,
            config=config,
            sigma0s=whole.sigma0s[i : i + 1],
            seeds=whole.seeds[j : j + 1],
            **{name: getattr(whole, name)[i : i + 1, j : j + 1] for name in per_run},
        )


def thin_indices(n: int, count: int = CURVE_POINTS) -> np.ndarray:
    """At most ``count`` indices into n records: half log-, half linearly spaced, first and last kept."""
    if n <= count:
        return np.arange(n)
    log = np.unique(np.round(np.geomspace(1, n, count // 2)).astype(int) - 1)
    lin = np.unique(np.round(np.linspace(0, n - 1, count - log.size)).astype(int))
    return np.union1d(log, lin)


def _thin(steps: list, *series: list) -> tuple:
    idx = thin_indices(len(steps))
    return ([steps[i] for i in idx],) + tuple([row[i] for i in idx] for row in series)


def thin_compare(result: dict) -> dict:
    for per_opt in result.get("curves", {}).values():
        for entry in per_opt.values():
            entry["steps"], *entry["loss"] = _thin(entry["steps"], *entry["loss"])
    return result


def thin_predict(result: dict) -> dict:
    for name in ("mflow", "lv"):
        block = result[name]
        block["steps"], block["loss"] = _thin(block["steps"], block["loss"])
    return result


def compare_config(settings: dict):
    """The ``CompareConfig`` of a compare point (its rates: ``learning_rates``, optimizer -> lr)."""
    return run_config("compare", settings, learning_rates=settings["learning_rates"])


def predict_config(settings: dict):
    """The ``PredictConfig`` of a predict point."""
    return run_config("predict", settings)


class _Batch:
    """The task, architecture and shared data of one batch (every point has the same)."""

    def __init__(self, config: dict):
        from .points import Resolver

        resolver = Resolver()
        self.task = resolver.task(config["task"], config["task_options"])
        self.arch = resolver.arch(config["arch"], config["arch_options"])
        self._data: dict[tuple, Any] = {}

    def predict_data(self, settings: dict):
        from nqf.theory.data_matrices.build import flow_data

        minibatches = settings["optimizer"] in MINIBATCH_OPTIMIZERS
        key = (settings["data_seed"], settings["loss"], settings["route"], minibatches)
        if key not in self._data:
            X, Y = self.task.generate(settings["data_seed"])
            data, choice = flow_data(
                self.arch,
                X,
                Y,
                loss=settings["loss"],
                route=settings["route"],
                minibatches=minibatches,
            )
            self._data[key] = (X, Y, data, choice)
        return self._data[key]


# A predict batch runs as a grid only when the product of its axes is at most this many
# times its points (a zipped lr x sigma0 batch would otherwise compute mostly unasked points).
GRID_OVERHEAD = 4


def predict_grid_records(batch: _Batch, configs: list[dict]) -> list[dict] | None:
    """Every point's record from one ``predict_grid`` over the batch (module docstring), in the
    order of ``configs``; None where the grid does not apply or refuses (then each point runs
    alone). The grid's time is charged to the points in equal parts."""
    from nqf.core.errors import NqfError
    from nqf.theory.departure.mean_field import points_budget
    from nqf.theory.predict.grid import predict_grid

    start = time.perf_counter()
    settings = [c["settings"] for c in configs]
    first = settings[0]
    if len(configs) < 2 or not optimizer_record(first["optimizer"]).deterministic_flow:
        return None
    lrs = sorted({float(s["lr"]) for s in settings})
    sigma0s = sorted({float(s["sigma0"]) for s in settings})
    seeds = sorted({int(s["seed"]) for s in settings})
    if len(lrs) * len(sigma0s) * len(seeds) > GRID_OVERHEAD * len(configs):
        return None
    X, Y, data, choice = batch.predict_data(first)
    if choice.route != "moments":
        return None
    config = predict_config(first)
    # a point's network_budget is its own, as when it runs alone: the grid's flows share one budget
    config = replace(config, network_budget=points_budget(config.network_budget, len(lrs) * len(sigma0s) * len(seeds)))
    try:
        grid = predict_grid(batch.arch, X, Y, config, lrs=lrs, sigma0s=sigma0s, seeds=seeds, data=data)
    except NqfError:
        return None
    shared = (time.perf_counter() - start) / len(configs)
    records = []
    for s in settings:
        begin = time.perf_counter()
        point = grid.prediction(
            lrs.index(float(s["lr"])), sigma0s.index(float(s["sigma0"])), seeds.index(int(s["seed"]))
        )
        result = thin_predict(point.to_json())
        records.append({"result": result, "seconds": shared + time.perf_counter() - begin})
    return records


def compute_point(batch: _Batch, config: dict, train=None) -> dict:
    """One point's record: {"result": the compare/predict JSON (curves thinned), "seconds"}."""
    settings = config["settings"]
    start = time.perf_counter()
    if config["mode"] == "compare":
        from nqf.comparison.compare import compare

        result = thin_compare(compare(batch.task, batch.arch, compare_config(settings), train=train).to_json())
    else:
        from nqf.theory.predict.pipeline import predict

        X, Y, data, choice = batch.predict_data(settings)
        result = thin_predict(
            predict(batch.arch, X, Y, predict_config(settings), data=data, route_choice=choice).to_json()
        )
    return {"result": result, "seconds": time.perf_counter() - start}


def _outcome(index: int, state: str, error: str = "", seconds: float = 0.0) -> dict:
    """What :func:`compute_batch` reports of one point."""
    return {"index": index, "state": state, "error": error, "seconds": seconds}


def compute_batch(
    store_root: str,
    experiment: str,
    points: list[tuple[int, dict]],
    force: bool = False,
    wait: bool = False,
    version: str | None = None,
) -> list[dict]:
    """Compute and store the points of one batch; returns one small dict per point:
    {"index", "state": computed | stored | busy | failed, "error", "seconds"}.

    ``busy``: another process holds the point's claim (only with ``wait`` false). With
    ``force`` a stored point is recomputed (unless ``wait``: then another process has just
    computed it). ``seconds`` of a computed point: its own compute time plus its share of the
    batch's training.
    """
    _start_worker()
    from nqf.store.code import check_same_code
    from nqf.store.results import ResultsStore

    from .points import RUN

    if version is not None:
        check_same_code(version)
    store = ResultsStore(store_root, version)
    out: list[dict] = []
    todo = []
    for index, config in points:
        claim = store.claim(experiment, store.key(experiment, RUN, config), wait=wait)
        if claim is None:
            out.append(_outcome(index, "busy"))
            continue
        if wait or not force:
            if store.get(experiment, RUN, config) is not None:
                claim.release()
                out.append(_outcome(index, "stored"))
                continue
        todo.append((index, config, claim))
    if not todo:
        return out
    try:
        batch = _Batch(todo[0][1])
    except Exception as err:  # noqa: BLE001 (every point of the batch fails with it)
        line = _error_line(err)
        for index, _, claim in todo:
            claim.release()
            out.append(_outcome(index, "failed", line))
        return out
    shared = SharedRuns([c["settings"]["sigma0"] for _, c, _ in todo], [c["settings"]["seed"] for _, c, _ in todo])
    grid_records = predict_grid_records(batch, [c for _, c, _ in todo]) if todo[0][1]["mode"] == "predict" else None
    for n, (index, config, claim) in enumerate(todo):
        start, shared_before = time.perf_counter(), shared.seconds
        try:
            record = compute_point(batch, config, shared) if grid_records is None else grid_records[n]
            # the batch's training is shared: each point is charged an equal part of it
            record["seconds"] += shared.seconds / len(todo) - (shared.seconds - shared_before)
            record["batch_points"] = len(todo)
            store.put(experiment, RUN, config, record)
            out.append(_outcome(index, "computed", seconds=record["seconds"]))
        except Exception as err:  # noqa: BLE001 (a failing point must not stop the others; it is reported)
            out.append(_outcome(index, "failed", _error_line(err), time.perf_counter() - start))
        finally:
            claim.release()
    return out
