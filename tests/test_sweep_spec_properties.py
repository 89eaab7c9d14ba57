"""Property: whatever tables a sweep spec holds, reading it gives a valid plan or one clean
error line per bad key, never a traceback, a hang or an allocation the size of an axis.

Random specs mix valid and invalid keys and values in every section: settings of both modes
and unknown ones; numbers that are negative, zero, huge, NaN or infinite; text where numbers
belong; axes as lists, ranges and spaced forms up to 10^18 values (bounded before they are
expanded), zips of known and unknown axes, figure options. Derandomized (the same examples
on every run), a bounded number of examples. The spec reader needs no data: nothing here
computes.
"""

from __future__ import annotations

import math
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nqf.scans.sweep.spec import MAX_POINTS, SETTINGS, SpecError, parse_spec
from nqf.scans.sweep.spec_axes import count_points

NUMBERS = [0, 1, 2, 16, -1, 10**12, 0.05, 1e-3, -0.5, 1.5, 1e300, math.nan, math.inf, -math.inf]
PLAIN = st.one_of(
    st.sampled_from(NUMBERS),
    st.sampled_from(["", "gd", "momentum", "tanh", "abc", "adaptive", "moments"]),
    st.booleans(),
)
VALUES = st.one_of(PLAIN, st.lists(PLAIN, max_size=3))
SETTING_NAMES = sorted(set(SETTINGS["compare"]) | set(SETTINGS["predict"]) | {"nonsense", "width "})


@st.composite
def axes(draw):
    """An axis: a list (possibly empty or repeating), a range, a spaced form (sizes up to 10^18), or junk."""
    kind = draw(st.sampled_from(["list", "list", "range", "logspace", "linspace", "junk"]))
    if kind == "list":
        return draw(st.lists(PLAIN, max_size=4))
    if kind == "range":
        bounds = draw(st.lists(st.sampled_from([0, 1, 3, -2, 10**9, 10**18, 0.5]), min_size=1, max_size=4))
        return {"range": bounds}
    if kind in ("logspace", "linspace"):
        start, stop = draw(st.sampled_from([-8.0, -2.0, 0.0, 1.0, math.inf])), draw(st.sampled_from([-4.0, -1.0, 1.0]))
        count = draw(st.sampled_from([0, 1, 3, 4, 10**7, 10**18, 2.5]))
        return {kind: [start, stop, count]}
    return draw(
        st.sampled_from([{"range": "x"}, {"other": [1, 2]}, 3, "abc", {"range": [0, 3], "logspace": [0, 1, 2]}])
    )


BASE = {"width": 4, "steps": 50, "lr": 0.05, "sigma0": 1e-3}


@st.composite
def specs(draw):
    """A raw spec (the parsed TOML): a valid one with 0 to 4 random changes, each of which may
    be right or wrong (a setting, an axis, the mode, the task and its options, the architecture,
    zip, figures, an unknown table, a required setting removed)."""
    mode = draw(st.sampled_from(["predict", "compare"]))
    raw: dict = {"sweep": {"mode": mode}, "task": {"name": "staircase"}, "settings": dict(BASE), "axes": {}}
    del raw["settings"]["sigma0"]
    raw["axes"]["sigma0"] = [1e-3, 1e-4]
    for _ in range(draw(st.integers(0, 4))):
        change = draw(
            st.sampled_from(["setting", "setting", "axis", "axis", "mode", "task", "option", "arch", "zip",
                             "figures", "table", "drop"])
        )  # fmt: skip
        if change == "setting":
            name = draw(st.sampled_from(SETTING_NAMES))
            raw["axes"].pop(name, None)
            raw["settings"][name] = draw(VALUES)
        elif change == "axis":
            name = draw(st.sampled_from(["sigma0", "lr", "seed", "steps", "width", "task.inputs", "arch.activation",
                                         "bad"]))  # fmt: skip
            raw["settings"].pop(name, None)
            raw["axes"][name] = draw(axes())
        elif change == "mode":
            raw["sweep"]["mode"] = draw(st.sampled_from(["predict", "compare", "train", 3]))
        elif change == "task":
            raw["task"]["name"] = draw(st.sampled_from(["staircase", "powerlaw", "nosuchtask", 7]))
        elif change == "option":
            raw["task"][draw(st.sampled_from(["inputs", "samples", "nosuchoption"]))] = draw(VALUES)
        elif change == "arch":
            raw["arch"] = {"name": draw(st.sampled_from(["mlp", "nosucharch", "attention"]))}
        elif change == "zip":
            raw["sweep"]["zip"] = draw(
                st.sampled_from([[["lr", "steps"]], [["lr"]], [["lr", "nothing"]], "lr", [["sigma0", "seed"]]])
            )
        elif change == "figures":
            raw["figures"] = {"curves": draw(st.sampled_from([3, -1, [0, 1], [99999999], "x"]))}
        elif change == "table":
            raw[draw(st.sampled_from(["extra", "axis"]))] = {}
        else:
            name = draw(st.sampled_from(sorted(BASE)))
            raw["settings"].pop(name, None)
            raw["axes"].pop(name, None)
    return raw


LINE = re.compile(r"^spec [A-Za-z_.0-9\[\]\"' -]+: \S")


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(raw=specs())
def test_a_spec_is_a_plan_or_one_line_per_bad_key(raw, tmp_path_factory):
    folder = tmp_path_factory.mktemp("spec")
    try:
        spec = parse_spec(raw, folder / "spec.toml")
    except SpecError as err:
        assert err.lines, raw
        keys = []
        for line in err.lines:
            assert "\n" not in line and "Traceback" not in line, line
            assert LINE.match(line), line
            keys.append(line.split(":", 1)[0])
        assert len(keys) == len(set(keys)), f"a key reported twice: {err.lines}"
        return
    total = count_points(spec.axes, spec.groups)
    assert 1 <= total <= MAX_POINTS
    assert all(len(values) >= 1 for values in spec.axes.values())
    assert spec.mode in ("predict", "compare")


def test_the_unchanged_spec_is_valid(tmp_path):
    """The property's starting point is a valid spec (so the property meets valid plans too)."""
    settings_table = {k: v for k, v in BASE.items() if k != "sigma0"}
    raw = {"sweep": {"mode": "predict"}, "task": {"name": "staircase"}, "settings": settings_table}
    spec = parse_spec({**raw, "axes": {"sigma0": [1e-3, 1e-4]}}, tmp_path / "spec.toml")
    assert count_points(spec.axes, spec.groups) == 2
