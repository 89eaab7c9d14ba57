"""``nqf reproduce --set``: a value the experiment's runs refuse is refused with the config, in one
``error:`` line (exit 2), before any run computes and before the results folder is made."""

from __future__ import annotations

import time

import pytest

from tests.conftest import error_line, run_nqf


@pytest.mark.slow  # through the console script
@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "E5.fixed_activation=nope",
            "error: E5: fixed_activation must be one of tanh, gelu, sin, silu, linear, square, one_minus_cos, "
            "relu, abs, softplus, sigmoid, got 'nope'",
        ),
        ("E5.fixed_width=0", "error: E5: fixed_width must be a positive integer, got 0"),
        ("E5.icl_dim=3", "error: E5 run linear-attention: task icl: task_variances needs 3 entries (dim), got 4"),
        # already refused before (the key, the value's type): kept so
        ("E5.nosuch=1", "error: --set E5: ArchitecturesConfig has no field 'nosuch'; its fields are sigma0, "),
        ("E5.fixed_width=abc", "error: --set E5.fixed_width: expected an integer, got 'abc'"),
    ],
)
def test_reproduce_refuses_a_set_value_before_any_run(override, expected, tmp_path):
    """Was: 7 of E5's 8 runs computed (13 s), then ``error: 1 run(s) failed`` and a results folder."""
    started = time.monotonic()
    line = error_line(run_nqf("reproduce", "--only", "E5", "--set", override, "--out", tmp_path / "out"))
    assert line.startswith(expected), line
    assert not (tmp_path / "out").exists()
    print(f"{override}: refused in {time.monotonic() - started:.1f} s")  # 4 s (start-up), no run
