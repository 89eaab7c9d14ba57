"""Expanding a spec's axes into points and grouping them into batches (the points' checks against
the data: :mod:`nqf.scans.sweep.checks`).

A *point* is one value per axis on top of the fixed settings; its ``config`` (a plain JSON
dict: mode, task and its full options, architecture and its full options, every setting)
fully determines its record and keys it in the results store. Points are numbered in
product order (the last axis varies fastest; zipped axes move together).

Batches: points whose configs agree in everything except the values a compiled training
run takes as traced arguments (``sigma0`` and ``seed``: ``train_grid`` vmaps over both)
share shapes and static settings, and go to a worker as one task
(:func:`nqf.scans.sweep.compute.compute_batch`). Within such a group, points are ordered by
(sigma0, seed) and cut into batches of at most ``batch_size`` points, whole sigma0 rows where
they fit, so that a batch is (nearly) a product grid: one ``train_grid`` call over its
sigma0s x seeds trains every point, and nothing is trained that is not asked for unless
rows carry different seeds.

In predict mode the points of a batch may differ in lr too: the batch is one
``nqf.predict_grid`` over its lrs x sigma0s x seeds (``nqf.scans.sweep.compute``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

from nqf.core.errors import NqfError
from nqf.optimizers import RATE_OPTIMIZERS

from .spec import SETTINGS, TRACED, Spec, SpecError

EXPERIMENT = {"compare": "sweep-compare", "predict": "sweep-predict"}
RUN = "point"
DEFAULT_MAX_BATCH = 32
TASKS_PER_WORKER = 4


@dataclass(frozen=True)
class Point:
    """One point: ``index`` in product order, ``values`` (axis -> value), ``config`` (what is stored)."""

    index: int
    values: dict[str, Any]
    config: dict[str, Any]
    # which task and architecture options the point has (points of one case share them; the
    # config's task_options and arch_options dicts are shared between them too: read-only)
    case: str = ""

    @property
    def sigma0(self) -> float:
        return float(self.config["settings"]["sigma0"])

    @property
    def seed(self) -> int:
        return int(self.config["settings"]["seed"])


def _plain(value):
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def file_digest(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def axis_assignments(spec: Spec):
    """Every point's axis values, in product order."""
    factors = []
    for group in spec.groups:
        length = len(spec.axes[group[0]])
        factors.append([{name: spec.axes[name][i] for name in group} for i in range(length)])
    for combo in itertools.product(*factors):
        values: dict[str, Any] = {}
        for part in combo:
            values.update(part)
        yield values


def _settings_of(spec: Spec):
    """``values -> settings`` of a point: every setting of the mode (given, axis or default); in
    compare mode the optimizers as a list and, for ``lr_OPT``, ``learning_rates`` (optimizer -> the
    rates given). What no axis changes is worked out once: a point then costs a dict copy and its
    axis values."""
    fixed = {name: spec.settings.get(name, default) for name, (_, default) in SETTINGS[spec.mode].items()}
    varied = tuple(name for name in fixed if name in spec.axes)
    compare = spec.mode == "compare"
    rates_vary = compare and any(name.startswith("lr_") for name in varied)
    if compare and not rates_vary:
        fixed = _with_rates(fixed)  # the same at every point

    def settings(values: dict[str, Any]) -> dict[str, Any]:
        out = dict(fixed)
        for name in varied:
            out[name] = values[name]
        if out.get("network_budget") == math.inf:  # no limit: None, as the store's JSON has no infinity
            out["network_budget"] = None
        if rates_vary:
            return _with_rates(out)
        if compare:  # each point's config owns its list and table
            out["optimizers"], out["learning_rates"] = list(out["optimizers"]), dict(out["learning_rates"])
        return out

    return settings


def _with_rates(settings: dict[str, Any]) -> dict[str, Any]:
    """Compare ``settings`` (changed in place) with the optimizers as a list and ``lr_OPT`` as ``learning_rates``."""
    settings["optimizers"] = list(settings["optimizers"])
    rates = {o: settings.pop(f"lr_{o}") for o in RATE_OPTIMIZERS}
    settings["learning_rates"] = {o: lr for o, lr in rates.items() if lr is not None}
    return settings


class Resolver:
    """Builds (and caches) the task and architecture of a point config."""

    def __init__(self):
        self._built: dict[str, Any] = {}

    def task(self, name: str, options: dict):
        from nqf.training.tasks import get_task

        return self._build(get_task, name, options)

    def arch(self, name: str, options: dict):
        from nqf.architectures import get_architecture

        return self._build(get_architecture, name, options)

    def _build(self, make, name: str, options: dict):
        key = json.dumps([make.__name__, name, _plain(options)], sort_keys=True)
        if key not in self._built:
            self._built[key] = make(name, **{k: tuple(v) if isinstance(v, list) else v for k, v in options.items()})
        return self._built[key]


def _arch_choice(spec: Spec, task, arch_opts: dict) -> tuple[str, dict]:
    """(name, options) of a point's architecture: the task's natural one (its options, then the
    spec's) when no other is named, as ``nqf compare`` does."""
    if spec.task == "npz":
        assert spec.arch is not None  # the spec refuses an npz task without [arch] name
        return spec.arch, dict(arch_opts)
    natural_name, natural_options = task.natural_architecture()
    if spec.arch is None or spec.arch == natural_name:
        return natural_name, {**natural_options, **arch_opts}
    return spec.arch, dict(arch_opts)


def expand(spec: Spec, resolver: Resolver | None = None) -> list[Point]:
    """Every point of the spec (SpecError naming the axis or key when a task or an architecture
    cannot be built from a point's options).

    The task and the architecture are built once per distinct combination of their options
    (``case``), not once per point: a 10^5-point grid over settings builds one of each."""
    resolver = resolver or Resolver()
    digest = file_digest(spec.data_file) if spec.data_file is not None else None
    points: list[Point] = []
    problems: dict[str, str] = {}
    cases: dict[tuple, tuple[tuple[dict, str, dict], str] | None] = {}
    settings_of = _settings_of(spec)
    case_axes = tuple(k for k in spec.axes if k.startswith(("task.", "arch.")))
    for index, values in enumerate(axis_assignments(spec)):
        case_values = tuple(repr(values[k]) for k in case_axes)
        if case_values not in cases:
            built = _case(spec, values, resolver, problems)
            cases[case_values] = (
                None if built is None else (built, repr(list(zip(case_axes, case_values, strict=True))))
            )
        case = cases[case_values]
        if case is None:
            continue
        (task_options, arch_name, arch_options), case_name = case
        config = {
            "mode": spec.mode,
            "task": spec.task,
            "task_options": task_options,
            "arch": arch_name,
            "arch_options": arch_options,
            "settings": settings_of(values),
        }
        if digest is not None:
            config["data_sha256"] = digest
        points.append(Point(index, values, config, case=case_name))
    if problems:
        raise SpecError(list(problems.values()))
    return points


def _case(spec: Spec, values: dict[str, Any], resolver: Resolver, problems: dict[str, str]):
    """(task options, architecture name, architecture options) of a point, as plain data, or None
    when the task or the architecture cannot be built (the problem noted under its spec key)."""
    task_opts = {**spec.task_options, **{k[5:]: v for k, v in values.items() if k.startswith("task.")}}
    arch_opts = {**spec.arch_options, **{k[5:]: v for k, v in values.items() if k.startswith("arch.")}}
    try:
        task = resolver.task(spec.task, task_opts)
    except (NqfError, TypeError, ValueError) as err:
        note(problems, blame(str(err), spec, "task"), err)
        return None
    arch_name, arch_options = _arch_choice(spec, task, arch_opts)
    try:
        arch = resolver.arch(arch_name, arch_options)
    except (NqfError, TypeError, ValueError) as err:
        note(problems, blame(str(err), spec, "arch"), err)
        return None
    return _plain(task.options()), arch_name, _plain(dict(arch.options))


def note(problems: dict[str, str], key: str, err) -> None:
    """The first problem of a spec key, on one line, is the one reported."""
    problems.setdefault(key, f"spec {key}: {' '.join(str(err).split())}")


def blame(message: str, spec: Spec, owner: str) -> str:
    """The spec key a problem is about: an axis or key of ``owner`` ("task", "arch", "settings")
    whose name the message mentions, else the first one of that owner, else the owner's table."""
    candidates: list[str] = []
    if owner in ("task", "arch"):
        candidates += [f"axes.{k}" for k in spec.axes if k.startswith(owner + ".")]
        given = spec.task_options if owner == "task" else spec.arch_options
        candidates += [f"{owner}.{k}" for k in given]
    else:
        candidates += [f"axes.{k}" for k in spec.axes if "." not in k]
        candidates += [f"settings.{k}" for k in spec.settings]
    lowered = message.lower()
    for key in candidates:
        name = key.rsplit(".", 1)[-1]
        if name.replace("_", " ") in lowered or name in lowered or name.replace("_", "-") in lowered:
            return key
    return candidates[0] if candidates else (owner + ".name" if owner != "settings" else "settings")


# What the points of a batch may differ in, per mode: the traced values, and in predict mode lr
# too (``predict_grid`` takes lr as a grid axis).
BATCHED = {"compare": TRACED, "predict": (*TRACED, "lr")}


def group_key(point: Point) -> str:
    """What a batch shares: the config without the traced values (sigma0, seed; in predict mode
    lr too, a grid axis). Points of one case differ only in their settings, so only those are
    written out per point."""
    config = point.config
    batched = BATCHED[config["mode"]]
    settings = {k: v for k, v in config["settings"].items() if k not in batched}
    if point.case:
        return point.case + repr(sorted(settings.items())) + repr(config.get("data_sha256"))
    return json.dumps({**config, "settings": settings}, sort_keys=True)


def default_batch_size(todo: int, workers: int) -> int:
    """About TASKS_PER_WORKER tasks per worker, at most DEFAULT_MAX_BATCH points a batch."""
    return max(1, min(DEFAULT_MAX_BATCH, math.ceil(todo / (TASKS_PER_WORKER * max(1, workers)))))


def make_batches(points: list[Point], batch_size: int) -> list[list[Point]]:
    """Points grouped by ``group_key`` and cut into batches of at most ``batch_size``
    (whole sigma0 rows where they fit; module docstring). Order: by first point index."""
    if batch_size < 1:
        raise NqfError(f"batch size must be a positive integer, got {batch_size}")
    groups: dict[str, list[Point]] = {}
    # a point's settings follow from its case and its axis values, so the key (a repr of every
    # setting) is worked out once per case and values of the other axes, not once per point
    keys: dict[tuple, str] = {}
    for p in points:
        if p.case:
            batched = BATCHED[p.config["mode"]]
            memo = (p.case, *(repr(v) for k, v in p.values.items() if k not in batched))
            key = keys.get(memo)
            if key is None:
                key = keys[memo] = group_key(p)
        else:
            key = group_key(p)
        groups.setdefault(key, []).append(p)
    batches: list[list[Point]] = []
    for members in groups.values():
        rows: dict[float, list[Point]] = {}
        for p in sorted(members, key=lambda p: (p.sigma0, p.seed, p.index)):
            rows.setdefault(p.sigma0, []).append(p)
        current: list[Point] = []
        for row in rows.values():
            if len(current) + len(row) > batch_size and current:
                batches.append(current)
                current = []
            # cut by index: slicing the rest off again and again is quadratic in a long row
            # (a 10^6-seed axis took minutes)
            start = 0
            while len(row) - start > batch_size:
                batches.append(row[start : start + batch_size])
                start += batch_size
            current.extend(row[start:])
            if len(current) >= batch_size:
                batches.append(current)
                current = []
        if current:
            batches.append(current)
    batches.sort(key=lambda b: min(p.index for p in b))
    return batches
