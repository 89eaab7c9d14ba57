"""A setting that the chosen optimizer does not use (``--batch`` / ``--beta``) is refused, no longer
ignored: ``nqf predict``, ``nqf compare`` and a sweep spec say so in one ``error:`` line (exit 2)
before any work and write nothing; the settings the optimizers do use are taken. Each case through
the real command."""

from __future__ import annotations

import json

import pytest

from nqf.optimizers import OPTIMIZER_SETTINGS
from tests.conftest import SWEEP_BASE, error_line, predict_args, run_nqf

# the optimizers whose M-flow carries a momentum, as the messages name them (the registry's)
BETA_USERS = " and ".join(OPTIMIZER_SETTINGS["beta"][1])
BETA_QUOTED = " or ".join(f'"{name}"' for name in OPTIMIZER_SETTINGS["beta"][1])

REFUSED_SETTINGS = {
    "predict-gd-batch": (
        ["--batch", "8"],
        "error: --batch is not used by optimizer gd (full batch): it is the minibatch size of sgd only; drop it",
    ),
    "predict-gd-beta": (
        ["--beta", "0.5"],
        f"error: --beta is not used by optimizer gd: it is the momentum of {BETA_USERS} only; drop it",
    ),
    "predict-momentum-batch": (
        ["--optimizer", "momentum", "--batch", "8"],
        "error: --batch is not used by optimizer momentum (full batch): it is the minibatch size of sgd only; drop it",
    ),
    "predict-sgd-beta": (
        ["--optimizer", "sgd", "--batch", "8", "--beta", "0.5"],
        f"error: --beta is not used by optimizer sgd: it is the momentum of {BETA_USERS} only; drop it",
    ),
}


@pytest.mark.slow  # through the console script
@pytest.mark.parametrize("case", list(REFUSED_SETTINGS))
def test_predict_refuses_a_setting_its_optimizer_does_not_use(case, mlp_data, tmp_path):
    extra, expected = REFUSED_SETTINGS[case]
    assert error_line(run_nqf(*predict_args(mlp_data["ok"], *extra, "--csv", tmp_path / "out"))) == expected
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # through the console script
@pytest.mark.parametrize(
    "optimizers, extra, expected",
    [
        ("gd", ["--beta", "0.5"], f"--beta is not used by optimizer gd: it is the momentum of {BETA_USERS} only"),
        ("gd,adam", ["--beta", "0.5"], "--beta is not used by optimizers gd, adam: it is the momentum of"),
        ("gd", ["--batch", "8"], "--batch is not used by optimizer gd (full batch): it is the minibatch size of sgd"),
    ],
)
def test_compare_refuses_a_setting_no_listed_optimizer_uses(optimizers, extra, expected):
    common = ["compare", "--task", "staircase", "--width", "4", "--sigma0", "0.01", "--lr", "0.05", "--steps", "20"]
    line = error_line(run_nqf(*common, "--optimizers", optimizers, *extra))
    assert line.startswith(f"error: {expected}") and line.endswith("to --optimizers or drop it"), line


@pytest.mark.slow  # through the console script
@pytest.mark.parametrize(
    "spec, expected",
    [
        (
            '[sweep]\nmode = "predict"\n' + SWEEP_BASE + "batch = 8\n",
            "error: spec settings.batch: batch is not used by optimizer gd (full batch): it is the minibatch size "
            'of sgd only; drop it or set optimizer = "sgd"',
        ),
        (
            '[sweep]\nmode = "predict"\n' + SWEEP_BASE + 'optimizer = "sgd"\nbatch = 8\nbeta = 0.5\n',
            f"error: spec settings.beta: beta is not used by optimizer sgd: it is the momentum of {BETA_USERS} "
            f"only; drop it or set optimizer = {BETA_QUOTED}",
        ),
        (
            SWEEP_BASE + "beta = 0.5\n",
            f"error: spec settings.beta: beta is not used by optimizer gd: it is the momentum of {BETA_USERS} "
            f"only; add {' or '.join(OPTIMIZER_SETTINGS['beta'][1])} to the optimizers or drop it",
        ),
    ],
)
def test_sweep_spec_refuses_a_setting_no_optimizer_uses(spec, expected, tmp_path):
    (tmp_path / "spec.toml").write_text(spec)
    assert error_line(run_nqf("sweep", "spec.toml", "--out", "out", "--dry-run", cwd=tmp_path)) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


@pytest.mark.slow  # through the console script
def test_settings_the_optimizers_use_are_taken(mlp_data, tmp_path):
    """momentum takes --beta; a predict sweep whose optimizer axis holds sgd takes batch."""
    done = run_nqf(*predict_args(mlp_data["ok"], "--optimizer", "momentum", "--beta", "0.5", "--json"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["config"]["beta"] == 0.5
    spec = '[sweep]\nmode = "predict"\n' + SWEEP_BASE + 'batch = 8\n[axes]\noptimizer = ["gd", "sgd"]\n'
    (tmp_path / "spec.toml").write_text(spec)
    dry = run_nqf("sweep", "spec.toml", "--out", "out", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and "2 point(s) (predict)" in dry.stdout, dry.stderr
