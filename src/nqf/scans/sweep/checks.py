"""Checking a sweep's points against the data, before anything is computed (JAX started, float64).

Each check runs once per distinct case (an architecture, a size, an M-flow), and every problem is
reported as one line naming the spec key it is about (an axis, else the [settings] or [task] /
[arch] entry), all of them at once (:class:`nqf.scans.sweep.spec.SpecError`).
"""

from __future__ import annotations

import json

from nqf.core.errors import NqfError
from nqf.optimizers import MINIBATCH_OPTIMIZERS, REFERENCE_FLOW, optimizer_record

from .points import Point, Resolver, blame, note
from .spec import TRACED, Spec, SpecError

# the settings besides width and steps that the memory estimate reads
_MEMORY_SETTINGS = ("loss", "route", "optimizer", "stepping", "optimizers")


def _frozen(value):
    """A setting as a dict key (the optimizers are a list)."""
    return tuple(value) if isinstance(value, list) else value


def _where(spec: Spec, name: str) -> str:
    """The key that sets a setting: its axis, else its [settings] entry."""
    if name in spec.axes:
        return f"axes.{name}"
    return f"settings.{name}"


def check_points(spec: Spec, points: list[Point], resolver: Resolver | None = None, data: bool = True) -> None:
    """The checks that need the architectures, per distinct group: the width (mixture of
    experts) and the memory estimate (``nqf.comparison.checks``); and with ``data`` (JAX started,
    float64) those that compute: the theory gate and one 1-step prediction per learning rate and
    flow, which applies ``predict``'s own checks (the learning rate against the stability bound
    ``nqf.theory.flow.stable_lr_bound``, the init scale against underflow at the group's smallest sigma0, a
    mode that grows). SpecError, one line per key."""
    resolver = resolver or Resolver()
    problems: dict[str, str] = {}
    flows = _check_statics(spec, points, resolver, problems, data)
    if problems:
        raise SpecError(list(problems.values()))
    if not data:
        return
    for key, group in flows.items():
        flow_args = key[-4:]  # flow, beta, batch, loss
        bound = _stable_bound(spec, group, flow_args, resolver, problems)
        if bound is not None:
            _check_learning_rates(flow_args[0], group, bound, problems)
    if problems:
        raise SpecError(list(problems.values()))


def _check_statics(spec: Spec, points: list[Point], resolver: Resolver, problems: dict[str, str], data: bool):
    """The checks that need no prediction, each once per distinct case: the width, the memory
    estimate (per task, architecture and the settings it reads) and, with ``data``, the theory
    gate (per architecture). Returns, with ``data``, the (point, lr, spec key of lr) of every
    M-flow by ``_flow_key``. Per point only tuples are compared: the task and architecture of a
    point's case are named once, and without ``data`` (a dry run) points of one case that differ
    only in sigma0 and seed (which none of these checks reads) are checked once."""
    gated: set[tuple] = set()
    widths: set[tuple] = set()
    sized: set[tuple] = set()
    flows: dict[tuple, list] = {}
    names: dict[str, tuple[str, str]] = {}
    seen: set[tuple] = set()
    for p in points:
        c, s = p.config, p.config["settings"]
        if p.case and not data:
            same = (p.case, *(repr(v) for k, v in p.values.items() if k not in TRACED))
            if same in seen:
                continue
            seen.add(same)
        named = names.get(p.case) if p.case else None
        if named is None:
            named = (
                json.dumps([c["arch"], c["arch_options"]], sort_keys=True),
                json.dumps([c["task"], c["task_options"], c["arch"], c["arch_options"]], sort_keys=True),
            )
            if p.case:
                names[p.case] = named
        arch_name, case_name = named
        if data and (arch_name, s["allow_inapplicable"]) not in gated:
            gated.add((arch_name, s["allow_inapplicable"]))
            _check_gate(spec, resolver.arch(c["arch"], c["arch_options"]), s, problems)
        if (arch_name, s["width"]) not in widths:
            widths.add((arch_name, s["width"]))
            _check_width(spec, resolver.arch(c["arch"], c["arch_options"]), s, problems)
        size_key = (case_name, s["width"], s["steps"], *(_frozen(s.get(k)) for k in _MEMORY_SETTINGS))
        if size_key not in sized:
            sized.add(size_key)
            task = resolver.task(c["task"], c["task_options"])
            _check_memory(spec, task, resolver.arch(c["arch"], c["arch_options"]), s, problems)
        if data:
            for flow, lr, lr_key in _flows(spec, s):
                flows.setdefault(_flow_key(case_name, s, flow), []).append((p, lr, lr_key))
    return flows


def _check_gate(spec: Spec, arch, s: dict, problems: dict[str, str]) -> None:
    """The theory applies to the architecture (unless ``allow_inapplicable``)."""
    from nqf.architectures.expansion import theory_gate

    try:
        theory_gate(arch, s["allow_inapplicable"])
    except NqfError as err:
        note(problems, blame(str(err), spec, "arch"), err)


def _check_width(spec: Spec, arch, s: dict, problems: dict[str, str]) -> None:
    """The width suits the architecture (a mixture of experts has one unit per expert)."""
    from nqf.architectures.architecture import check_width

    try:
        check_width(arch, s["width"])
    except NqfError as err:
        note(problems, _where(spec, "width"), err)


def _check_memory(spec: Spec, task, arch, s: dict, problems: dict[str, str]) -> None:
    """The run fits in memory: ``nqf.comparison.checks``' estimate for compare or predict."""
    from nqf.comparison.checks import check_compare, check_predict, task_samples

    try:
        if spec.mode == "compare":
            check_compare(task, arch, s["width"], s["steps"], 1, tuple(s["optimizers"]))
        else:
            check_predict(
                arch,
                task_samples(task),
                s["width"],
                s["steps"],
                s["loss"],
                s["route"],
                s["optimizer"],
                adaptive=s["stepping"] == "adaptive",
            )
    except NqfError as err:
        note(problems, blame(str(err), spec, "settings"), err)


def _flow_key(case_name: str, s: dict, flow: str) -> tuple:
    """What the stability bound depends on: the data (task, architecture, data seed), the flow and
    its momentum, minibatch and loss; not lr. The last four entries are the flow's."""
    return (case_name, s["data_seed"], flow, s.get("beta"), s.get("batch"), s.get("loss", "squared"))


def _stable_bound(spec: Spec, group: list, flow_args: tuple, resolver: Resolver, problems: dict[str, str]):
    """The stability bound of one M-flow (``flow_args``: flow, beta, batch, loss), from a 1-step
    prediction at the group's smallest lr and sigma0 (which applies predict's checks); None when
    that prediction fails (the problem noted)."""
    from nqf.theory.predict.pipeline import PredictConfig, predict

    flow, beta, batch, loss = flow_args
    first, lr, lr_key = min(group, key=lambda e: (e[1], e[0].sigma0))
    smallest = min(e[0].sigma0 for e in group)
    c, s = first.config, first.config["settings"]
    task = resolver.task(c["task"], c["task_options"])
    arch = resolver.arch(c["arch"], c["arch_options"])
    try:
        X, Y = task.generate(s["data_seed"])
        config = PredictConfig(
            width=s["width"],
            lr=lr,
            steps=1,
            sigma0=smallest,
            optimizer=flow,
            beta=0.9 if beta is None else beta,
            batch_size=batch if flow in MINIBATCH_OPTIMIZERS else None,
            seed=first.seed,
            loss=loss,
            allow_inapplicable=s["allow_inapplicable"],
        )
        return float(predict(arch, X, Y, config).stable_lr)
    except NqfError as err:
        text = str(err)
        note(problems, _prediction_key(spec, text, lr_key), text)
        return None


def _prediction_key(spec: Spec, text: str, lr_key: str) -> str:
    """The spec key a failed 1-step prediction is about: the learning rate, sigma0, the task or a setting."""
    if "learning rate" in text:
        return lr_key
    if "sigma0" in text or "underflow" in text:
        return _where(spec, "sigma0")
    if "mode grows" in text or "no mode" in text:
        return blame(text, spec, "task")
    return blame(text, spec, "settings")


def _check_learning_rates(flow: str, group: list, bound: float, problems: dict[str, str]) -> None:
    """Every learning rate of one M-flow below its stability bound: one line per spec key."""
    for p, lr, lr_key in group:
        if lr >= bound and lr_key not in problems:
            unstable = sorted({e[1] for e in group if e[1] >= bound})
            count = sum(1 for e in group if e[1] >= bound)
            note(
                problems,
                lr_key,
                f"learning rate {', '.join(f'{v:g}' for v in unstable)} is unstable for these data "
                f"({flow}): GD on M is linearly stable only for lr < {bound:.4g} ({count} point(s), "
                f"e.g. point {p.index})",
            )


def _flows(spec: Spec, s: dict) -> list[tuple[str, float, str]]:
    """(flow, lr, spec key of that lr) of every M-flow a point computes (``CompareConfig.flows``)."""
    if spec.mode == "predict":
        return [(s["optimizer"], s["lr"], _where(spec, "lr"))]
    out = [(REFERENCE_FLOW, s["learning_rates"].get(REFERENCE_FLOW, s["lr"]), _where(spec, "lr"))]
    for opt in s["optimizers"]:
        flow = optimizer_record(opt).reference_flow  # the GD flow, already there, for one without its own
        if flow == REFERENCE_FLOW:
            continue
        lr = s["learning_rates"].get(opt, s["lr"])
        key = _where(spec, f"lr_{opt}") if opt in s["learning_rates"] else _where(spec, "lr")
        out.append((flow, lr, key))
    return out
