"""Reading what a sweep spec varies: ``[axes]`` (each a setting, ``task.OPTION`` or ``arch.OPTION``),
the axes zipped together (``[sweep] zip``), ``[figures]`` (which name axes and points), and the
checks across settings and axes (the optimizers' learning rates and minibatch).

The readers note problems in a :class:`nqf.scans.sweep.spec_values.Problems` and go on; the
format is in :mod:`nqf.scans.sweep.spec`.
"""

from __future__ import annotations

from nqf.optimizers import MINIBATCH_OPTIMIZERS, OPTIMIZER_SETTINGS, RATE_OPTIMIZERS, unused_setting

from .spec_values import (
    MAX_POINTS,
    REQUIRED,
    SETTING_AXES,
    SETTINGS,
    Owner,
    Problems,
    expand_axis,
    option_model,
    validate,
)


def read_axes(
    table: dict, mode: str, settings: dict, task: Owner, arch: Owner, natural: tuple | None, problems: Problems
) -> dict[str, list]:
    """``[axes]``: name -> checked values, in the table's order. ``settings``: [settings] as given.
    An ``arch.OPTION`` axis with no architecture named settles it on the task's own (``arch`` is updated)."""
    by_owner: dict[str, dict[str, list]] = {"": {}, "task": {}, "arch": {}}
    for key, spec in table.items():
        values, problem = expand_axis(spec)
        owner, _, option = key.partition(".")
        if not problem and option and owner not in ("task", "arch"):
            problem = "unknown axis; an axis is a setting, task.OPTION or arch.OPTION"
        elif not problem and not option:
            problem = _not_an_axis(key, mode, settings)
        if problem:
            problems.bad(f"axes.{key}", problem)
            continue
        by_owner[owner if option else ""][option or key] = values
    if by_owner["arch"] and arch.name is None and natural is not None:
        from nqf.architectures import architecture_options

        arch.name = natural[0]
        arch.known = architecture_options(arch.name)
    known = SETTINGS[mode]
    unknown = f"unknown axis; an axis is a setting of mode {mode} ({', '.join(known)}), task.OPTION or arch.OPTION"
    checked = validate(SETTING_AXES[mode], by_owner[""], "axes", problems, lambda key: unknown)
    for owner in (task, arch):
        checked.update(
            {f"{owner.section}.{k}": v for k, v in _option_axes(owner, by_owner[owner.section], problems).items()}
        )
    return {key: checked[key] for key in table if key in checked}


def _not_an_axis(key: str, mode: str, settings: dict) -> str:
    """The problem of a setting of the mode that cannot be an axis here ("" when it can)."""
    if key not in SETTINGS[mode]:
        return ""  # an unknown axis: validate says so
    if key == "optimizers":
        return "optimizers is not an axis (every point trains each listed optimizer)"
    return "also given in [settings]; give it in one place" if key in settings else ""


def _option_axes(owner: Owner, axes: dict[str, list], problems: Problems) -> dict[str, list]:
    """The axes over options of the task or the architecture (option -> values), checked; none
    when the owner has no name."""
    if owner.name is None or not axes:
        return {}
    noun, table = ("task", "task") if owner.section == "task" else ("architecture", "arch")
    for option in [o for o in axes if o in owner.options]:
        problems.bad(
            f"axes.{owner.section}.{option}", f"{noun} option {option} is given in [{table}] too; give it in one place"
        )
        del axes[option]
    model = option_model(owner.section, owner.known, listed=True)
    return validate(model, axes, f"axes.{owner.section}", problems, owner.no_option)


def check_required(tables: dict[str, dict], problems: Problems) -> None:
    """Every required setting is given, in [settings] or as an axis."""
    for key in REQUIRED:
        if key not in tables["settings"] and key not in tables["axes"]:
            problems.bad(f"settings.{key}", "missing; give it in [settings] or as an axis")


def read_zip(
    zipped: list[list[str]], given: dict, axes: dict[str, list], problems: Problems
) -> tuple[tuple[str, ...], ...]:
    """The axes as product factors, in the order of [axes]: each group of ``zip`` (two or more axes
    of equal length), and every other axis alone. ``given``: the axes as written, ``axes``: the good ones."""
    groups: list[tuple[str, ...]] = []
    in_zip: set[str] = set()
    for i, group in enumerate(zipped):
        if _zip_group(f"sweep.zip[{i}]", group, given, axes, in_zip, problems):
            in_zip.update(group)
            groups.append(tuple(group))
    ordered: list[tuple[str, ...]] = []
    for key in axes:
        factor = next((g for g in groups if key in g), (key,))
        if factor not in ordered and (key in in_zip or len(factor) == 1):
            ordered.append(factor)
    return tuple(ordered)


def _zip_group(where: str, group: list, given: dict, axes: dict[str, list], in_zip: set[str], problems) -> bool:
    """Whether one group of ``zip`` is good: two or more distinct axes, not zipped before, of equal lengths."""
    if len(group) < 2:
        problems.bad(where, "zips at least two axes")
        return False
    missing = [n for n in group if n not in given]
    if missing:
        problems.bad(where, f"{missing[0]!r} is not an axis")
        return False
    twice = [n for n in group if n in in_zip]
    if twice or len(set(group)) != len(group):
        problems.bad(where, f"axis {(twice or group)[0]!r} is zipped twice")
        return False
    if not all(n in axes for n in group):
        return False  # the axis itself is bad, reported above
    lengths = {n: len(axes[n]) for n in group}
    if len(set(lengths.values())) != 1:
        problems.bad(where, "zipped axes need equal lengths, got " + ", ".join(f"{n} {k}" for n, k in lengths.items()))
        return False
    return True


def count_points(axes: dict[str, list], groups: tuple[tuple[str, ...], ...]) -> int:
    """The number of points: the product of the groups' lengths."""
    total = 1
    for group in groups:
        total *= len(axes[group[0]])
    return total


def read_heatmap(heatmap: tuple[str, str] | None, given: dict, problems: Problems) -> tuple[str, str] | None:
    """``[figures] heatmap``: two different axes, or None."""
    if heatmap is None:
        return None
    if heatmap[0] == heatmap[1]:
        problems.bad("figures.heatmap", "names the same axis twice")
        return None
    for h in heatmap:
        if h not in given:
            problems.bad("figures.heatmap", f"{h!r} is not an axis")
            return None
    return heatmap


def read_curves(curves: tuple[int, ...] | int, total: int, problems: Problems) -> tuple[int, ...] | int:
    """``[figures] curves``: a count, or point indices (checked against ``total`` when the spec has
    no other problem)."""
    out_of_range = [c for c in curves if not 0 <= c < total] if isinstance(curves, tuple) else []
    if out_of_range and not problems:
        problems.bad(
            "figures.curves",
            f"point index {out_of_range[0]} out of range (the sweep has {total} points: 0..{total - 1})",
        )
    return curves


def check_size(total: int, problems: Problems) -> None:
    """At most MAX_POINTS points."""
    if total > MAX_POINTS:
        problems.bad("axes", f"{total} points; a sweep has at most {MAX_POINTS}")


def check_optimizers(mode: str, settings: dict, axes: dict[str, list], problems: Problems) -> None:
    """Learning rates and the minibatch against the optimizers (only for an otherwise good spec):
    ``lr_OPT`` only for a listed optimizer, ``batch`` exactly when sgd runs, ``beta`` only when momentum does."""
    if problems:
        return
    batched = "batch" in settings or "batch" in axes
    if mode == "compare":
        opts = settings.get("optimizers", ("gd",))
        for name in RATE_OPTIMIZERS:
            key = f"lr_{name}"
            if (key in settings or key in axes) and name not in opts:
                where = f"settings.{key}" if key in settings else f"axes.{key}"
                problems.bad(where, f"{name} is not among the optimizers")
        minibatched = [o for o in opts if o in MINIBATCH_OPTIMIZERS]
        if minibatched and not batched:
            problems.bad("settings.batch", f"optimizer {minibatched[0]} needs a minibatch size (batch = B)")
        if batched and not minibatched:
            where = "settings.batch" if "batch" in settings else "axes.batch"
            names = " or ".join(MINIBATCH_OPTIMIZERS)
            problems.bad(where, f"batch is used by {names} only; add {names} to the optimizers or drop it")
        _unused(("beta",), settings, axes, tuple(opts), "add {users} to the optimizers or drop it", problems)
    if mode == "predict":
        optimizer = settings.get("optimizer", "gd")
        if optimizer in MINIBATCH_OPTIMIZERS and not batched:
            problems.bad("settings.batch", f"optimizer {optimizer} needs a minibatch size (batch = B)")
        # every point's optimizer: the setting, or the values of its axis
        optimizers = tuple(axes.get("optimizer", [optimizer]))
        _unused(("batch", "beta"), settings, axes, optimizers, "drop it or set optimizer = {quoted}", problems, mode)


def _unused(names: tuple[str, ...], settings: dict, axes: dict[str, list], optimizers: tuple[str, ...], remedy: str,
            problems: Problems, mode: str = "compare") -> None:  # fmt: skip
    """A problem for each of the settings ``names`` given (as a setting or an axis) that none of the
    sweep's ``optimizers`` uses (``nqf.optimizers.unused_setting``): refused, not ignored. A
    setting given as its default (predict's ``beta = 0.9``) is the spec without it: taken."""
    for name in names:
        if name not in axes and (name not in settings or settings[name] == SETTINGS[mode][name][1]):
            continue
        unused = unused_setting(name, optimizers)
        if unused:
            users = OPTIMIZER_SETTINGS[name][1]
            where = f"settings.{name}" if name in settings else f"axes.{name}"
            remedy_text = remedy.format(users=" or ".join(users), quoted=" or ".join(f'"{u}"' for u in users))
            problems.bad(where, f"{unused}; {remedy_text}")
