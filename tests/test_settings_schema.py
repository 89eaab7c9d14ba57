"""The run settings written once (``nqf.comparison.settings``): the sweep spec's settings and the
command line options of ``nqf compare`` and ``nqf predict`` derive from the same pydantic models,
and a bad spec reports every error at once, one ``spec KEY: ...`` line each with its key path.

Nothing here computes: the spec reader and the command line's definition need no data and no JAX
(one test runs ``nqf sweep --dry-run`` through the console script, to see the line a user sees).
"""

from __future__ import annotations

import math
import time

import pytest

from nqf.comparison.settings import BETA, SETTINGS_MODELS, CompareSettings, PredictSettings, defaults, required
from nqf.core.names import LOSSES, ROUTES, STEPPINGS
from nqf.optimizers import OPTIMIZERS, PREDICT_OPTIMIZERS, RATE_OPTIMIZERS
from nqf.scans.sweep.spec import REQUIRED, SETTINGS, SpecError, parse_spec
from tests.conftest import run_cli, run_nqf

BASE = {"width": 4, "steps": 50, "lr": 0.05, "sigma0": 1e-3}


def _errors(raw: dict, tmp_path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_spec(raw, tmp_path / "spec.toml")
    return caught.value.lines


# -- the schema and the spec agree ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["compare", "predict"])
def test_every_model_field_is_a_spec_setting_with_its_default(mode):
    model = SETTINGS_MODELS[mode]
    assert list(SETTINGS[mode]) == list(model.model_fields)  # the same settings, in the same order
    assert {name: default for name, (_, default) in SETTINGS[mode].items()} == defaults(model)
    assert REQUIRED == required(model) == ("width", "steps", "lr", "sigma0")
    for name, field in model.model_fields.items():
        assert field.description and "\n" not in field.description, name


def test_the_models_follow_the_library_lists():
    compare, predict = CompareSettings.model_fields, PredictSettings.model_fields
    assert [f"lr_{name}" for name in RATE_OPTIMIZERS] == [name for name in compare if name.startswith("lr_")]
    assert defaults(PredictSettings)["beta"] == BETA == 0.9
    assert defaults(CompareSettings)["beta"] is None  # the momentum record's (CompareConfig)
    for name, choices in (
        ("optimizer", PREDICT_OPTIMIZERS),
        ("loss", LOSSES),
        ("route", ROUTES),
        ("stepping", STEPPINGS),
    ):
        assert all(PredictSettings.model_validate({**BASE, name: c}) for c in choices), name
    assert CompareSettings.model_validate({**BASE, "optimizers": ",".join(OPTIMIZERS)}).optimizers == OPTIMIZERS
    assert "optimizers" in compare and "optimizer" in predict


@pytest.mark.parametrize("mode", ["compare", "predict"])
def test_a_spec_giving_every_default_reads_them_back(mode, tmp_path):
    given = {name: default for name, default in defaults(SETTINGS_MODELS[mode]).items() if default is not None}
    raw = {"sweep": {"mode": mode}, "task": {"name": "staircase"}, "settings": {**BASE, **given}}
    spec = parse_spec(raw, tmp_path / "spec.toml")
    assert spec.settings == {**BASE, **given}
    assert all(type(spec.settings[k]) is type(v) for k, v in given.items())  # tuples stay tuples, floats floats


def test_the_schema_checks_what_the_spec_checks():
    """The models themselves refuse what a spec refuses (bool for int, NaN, a seed past 2^32 - 1, ...)."""
    from pydantic import ValidationError

    for bad in ({"width": True}, {"lr": math.nan}, {"seed": 2**32}, {"steps": 2**31}, {"sigma0": 0}, {"batch": 1.0}):
        with pytest.raises(ValidationError):
            CompareSettings.model_validate({**BASE, **bad})
    with pytest.raises(ValidationError):
        PredictSettings.model_validate({**BASE, "optimizer": "adam"})  # adam has no M-flow
    for bad in ({"network_budget": 0.0}, {"network_budget": math.nan}, {"network_method": "both"}, {"network": 1}):
        with pytest.raises(ValidationError):
            PredictSettings.model_validate({**BASE, **bad})
    assert PredictSettings.model_validate({**BASE, "network_budget": math.inf}).network_budget == math.inf


@pytest.mark.parametrize("mode", ["compare", "predict"])
def test_a_points_network_settings_reach_the_librarys_config(mode):
    """The network's own prediction is a setting like the others: a sweep point's values reach the
    config it runs (an infinite budget is no limit)."""
    from nqf.scans.sweep.compute import compare_config, predict_config

    settings = {
        **defaults(SETTINGS_MODELS[mode]),
        **BASE,
        "network": False,
        "network_budget": math.inf,
        "network_method": "networks",
    }
    if mode == "compare":
        settings["learning_rates"] = {}
    config = (compare_config if mode == "compare" else predict_config)(settings)
    assert (config.network, config.network_budget, config.network_method) == (False, None, "networks")


# -- every error at once, with its key path -------------------------------------------------------


def test_a_compare_spec_reports_every_error_with_its_key_path(tmp_path):
    raw = {
        "colour": "red",
        "sweep": {"mode": "compare", "batch_size": 0, "wobble": 1},
        "task": {"name": "staircase", "samples": 1.5, "wobble": 3},
        "settings": {"width": 0, "steps": 50, "lr": math.nan, "optimizers": ["gd", "rmsprop"], "beta": 1.0},
        "axes": {"sigma0": [1e-3, 1e-4, -1.0], "task.inputs": [2, "x"], "seed": [0, 1], "learning_rate": [0.1]},
        "figures": {"curves": -1},
    }
    assert _errors(raw, tmp_path) == [
        "spec colour: unknown key; a spec has sweep, task, arch, settings, axes, figures",
        "spec sweep.batch_size: must be a positive integer, got 0",
        "spec sweep.wobble: unknown key; [sweep] takes mode, zip, batch_size, name",
        "spec task.samples: takes an integer, got 1.5",
        "spec task.wobble: task staircase has no option wobble; its options are inputs, outputs, singular_values, "
        "samples, whiten, correlation, activation",
        "spec settings.width: must be a positive integer, got 0",
        "spec settings.lr: must be a positive finite number, got nan",
        f"spec settings.optimizers[1]: unknown optimizer 'rmsprop'; choose from {', '.join(OPTIMIZERS)}",
        "spec settings.beta: must lie in [0, 1), got 1.0",
        "spec axes.sigma0[2]: must be a positive finite number, got -1.0",
        "spec axes.learning_rate: unknown axis; an axis is a setting of mode compare ("
        + ", ".join(SETTINGS["compare"])
        + "), task.OPTION or arch.OPTION",
        "spec axes.task.inputs[1]: takes an integer, got 'x'",
        "spec figures.curves: must be a count >= 0 or a list of point indices, got -1",
    ]


def test_a_predict_spec_reports_every_error_with_its_key_path(tmp_path):
    raw = {
        "sweep": {"mode": "predict", "zip": "lr", "name": 5},
        "task": {"name": "staircase"},
        "arch": {"activation": 3},
        "settings": {"steps": 0, "lr": 0.1, "sigma0": 1e-3, "optimizer": "adam", "closure": True, "seed": -1},
        "axes": {"width": [8, True], "route": ["auto", "fast"], "stepping": {"range": [0, 2]}},
        "figures": {"heatmap": ["width"]},
    }
    assert _errors(raw, tmp_path) == [
        'spec sweep.zip: must be a list of lists of axis names, e.g. [["lr", "steps"]]',
        "spec sweep.name: must be text, got 5",
        "spec arch.activation: takes text, got 3",
        "spec settings.steps: must be a positive integer <= 2147483647, got 0",
        f"spec settings.optimizer: must be one of {', '.join(PREDICT_OPTIMIZERS)}, got 'adam'",
        "spec settings.closure: unknown setting (a setting of mode compare); mode predict takes "
        + ", ".join(SETTINGS["predict"]),
        "spec settings.seed: must be an integer in [0, 4294967295], got -1",
        "spec axes.width[1]: must be a positive integer, got True",
        "spec axes.route[1]: must be one of auto, moments, samples, got 'fast'",
        "spec axes.stepping[0]: must be one of adaptive, every, got 0",
        'spec figures.heatmap: names two axes, e.g. ["sigma0", "lr"]',
    ]


def test_tables_of_the_wrong_kind_and_values_pydantic_cannot_hold(tmp_path):
    raw = {"sweep": 3, "task": {"name": "staircase"}, "settings": {**BASE, "lr": 10**400}, "figures": [1]}
    assert _errors(raw, tmp_path) == [
        "spec sweep: must be a table ([sweep])",
        "spec figures: must be a table ([figures])",
        f"spec settings.lr: must be a positive finite number, got {10**400!r}",  # a traceback before
    ]


def test_an_axis_of_a_million_bad_values_is_one_line_in_well_under_a_second(tmp_path):
    raw = {"task": {"name": "staircase"}, "settings": BASE, "axes": {"seed": {"range": [-900_000, 0]}}}
    start = time.perf_counter()
    lines = _errors(raw, tmp_path)
    assert time.perf_counter() - start < 5
    assert lines == ["spec axes.seed[0]: must be an integer in [0, 4294967295], got -900000"]


@pytest.mark.slow  # through the console script
def test_a_top_level_mode_gets_the_error_the_sweep_table_gets(tmp_path):
    (tmp_path / "top.toml").write_text('mode = "train"\n')
    (tmp_path / "table.toml").write_text('[sweep]\nmode = "train"\n')
    top = run_nqf("sweep", "top.toml", "--out", "out", "--dry-run", cwd=tmp_path)
    table = run_nqf("sweep", "table.toml", "--out", "out", "--dry-run", cwd=tmp_path)
    assert top.returncode == table.returncode == 2
    assert top.stderr.splitlines()[0] == (
        "error: spec mode: unknown key at the top level; mode is a key of [sweep]: put it below a [sweep] line, "
        "where it must be one of compare, predict, got 'train'"
    )  # was: "error: spec mode: unknown key; a spec has sweep, task, arch, settings, axes, figures"
    assert table.stderr.splitlines()[0] == "error: spec sweep.mode: must be one of compare, predict, got 'train'"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.toml", "top.toml"]


# -- the command line's defaults and help come from the schema ------------------------------------


def _options(command: str) -> dict:
    import typer

    from nqf.cli import app

    return {p.name: p for p in typer.main.get_command(app).commands[command].params}  # type: ignore[attr-defined]


@pytest.mark.slow  # loads the command line (typer)
def test_cli_defaults_and_help_come_from_the_schema():
    compare, predict = _options("compare"), _options("predict")
    for options, model in ((compare, CompareSettings), (predict, PredictSettings)):
        for name, field in model.model_fields.items():
            if name not in options:  # spec-only: closure
                continue
            option = options[name]
            assert option.help == field.description, name
            if name == "sigma0" and model is PredictSettings:
                assert not option.required and option.default is None  # or --init W0.npz
            elif field.is_required():
                assert option.required, name
            else:
                default = field.default
                assert option.default == (",".join(default) if isinstance(default, tuple) else default), name
    assert compare["seed"].help == CompareSettings.model_fields["seed"].description
    assert predict["beta"].default == BETA
    assert compare["lr_adam"].help == "Learning rate of adam (default --lr)."
    assert {n for n in CompareSettings.model_fields if n not in compare} == {"closure"}
    assert {n for n in PredictSettings.model_fields if n not in predict} == set()  # --data-seed: with --task


def test_compare_without_beta_passes_the_momentum_records_default():
    """--beta's default is the schema's (None: the record's 0.9); the JSON's config still says 0.9."""
    from nqf.cli.compare import CompareArgs, compare_config

    args = CompareArgs(
        task="staircase", width=4, sigma0=1e-3, lr=0.05, steps=10, arch=None, unit=None, optimizers="momentum",
        rates=(), seeds=1, seed=0, data_seed=0, batch=None, beta=None, as_json=True, plot=None, csv_dir=None,
        overlay=None, departure=False, network=False, network_budget=5.0, network_method="auto",
        allow_inapplicable=False, extra=(),
    )  # fmt: skip
    assert compare_config(args, ("momentum",)).beta == BETA
    assert compare_config(CompareArgs(**{**args.__dict__, "beta": 0.5}), ("momentum",)).beta == 0.5


@pytest.mark.parametrize(
    ("command", "option", "text", "value"),
    [
        ("predict", "--width", "0", 0),
        ("predict", "--steps", "3000000000", 3000000000),
        ("predict", "--lr", "inf", math.inf),
        ("predict", "--seed", "-1", -1),
        ("predict", "--route", "fast", "fast"),
        ("predict", "--stepping", "0", "0"),
        ("predict", "--network-method", "both", "both"),
        ("predict", "--network-budget", "-1", -1.0),
        ("compare", "--sigma0", "nan", math.nan),
        ("compare", "--lr-adam", "-1", -1.0),
        ("compare", "--beta", "1", 1.0),
        ("compare", "--data-seed", "-3", -3),
    ],
)
def test_a_bad_option_is_the_line_a_spec_gives_for_its_setting(command, option, text, value, tmp_path, capsys):
    """The command line checks its run settings with the schema, before JAX: the line it prints
    for a value is the spec's for the same value, ``--KEY: ...`` for ``spec settings.KEY: ...``."""
    given = {"--width": "4", "--steps": "50", "--lr": "0.05", "--sigma0": "0.001", option: text}
    code, _, err = run_cli([command, "--task", "staircase", *(p for pair in given.items() for p in pair)], capsys)
    setting = option.removeprefix("--").replace("-", "_")
    raw = {"sweep": {"mode": command}, "task": {"name": "staircase"}, "settings": {**BASE, setting: value}}
    (line,) = _errors(raw, tmp_path)
    assert line.startswith(f"spec settings.{setting}: ")
    assert (code, err) == (2, f"error: {option}: {line.split(': ', 1)[1]}\n")
