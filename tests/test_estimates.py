"""Estimates are computed from what will run (issue 34, item 6): the M-flow's time note says the
adaptive stepping jumps only where it can (the jump's state s = D (D + 1) / 2 within
MAX_KRYLOV_STATE: a dense affine model up to MAX_JUMP_STATE, a Krylov one beyond), and agrees
with the flow's own test of the same condition."""

import numpy as np
import pytest

from nqf.architectures import mlp
from nqf.cli.checks import check_departure
from nqf.comparison import checks
from nqf.core.memory import MAX_KRYLOV_STATE, can_jump
from nqf.theory.costs import departure_cost


def _note(capsys, arch, momentum: bool) -> str:
    checks.check_predict(arch, 10_000, 64, 10**7, "squared", "auto", "momentum" if momentum else "gd", adaptive=True)
    return capsys.readouterr().err


# d = 64 and momentum at d = 24 jump by the Krylov model; beyond MAX_KRYLOV_STATE (d = 1104, and
# momentum at d = 804: 2 d rows) nothing jumps
@pytest.mark.parametrize(
    ("inputs", "momentum", "jumps"),
    [(8, False, True), (60, False, True), (20, True, True), (1100, False, False), (800, True, False)],
)
def test_the_time_note_says_whether_the_flow_can_jump(capsys, inputs, momentum, jumps):
    arch = mlp(inputs=inputs, outputs=4, activation="tanh")  # d = inputs + outputs
    note = _note(capsys, arch, momentum)
    assert note.startswith("note: M-flow of 10000000 steps")
    if jumps:
        assert "usually jumps most of them" in note and "up to roughly" in note
    else:
        assert f"no jump at d = {arch.dim}" in note and "up to" not in note


def test_can_jump_is_the_flows_own_condition():
    """The JAX-free test the command line reads is the one the M-flow's stepping applies."""
    from nqf.optimizers import closed_optimizer
    from nqf.theory.flow import maps

    for d in range(1, 80):
        for kind in ("gd", "momentum", "nesterov"):
            optimizer = closed_optimizer(kind)
            D = (1 + optimizer.buffers) * d
            jumps = D * (D + 1) // 2 <= MAX_KRYLOV_STATE
            assert can_jump(d, 1 + optimizer.buffers) == maps._jumpable(optimizer, d) == jumps
    assert can_jump(1023, 1) and not can_jump(1024, 1) and np.isscalar(MAX_KRYLOV_STATE)
    for d in (1023, 1024, 511, 512):
        for kind in ("gd", "momentum"):
            optimizer = closed_optimizer(kind)
            assert can_jump(d, 1 + optimizer.buffers) == maps._jumpable(optimizer, d)


def test_the_departure_curve_is_estimated_before_it_runs(capsys):
    """The departure is the curve alone: its memory grows with the samples (at most 2048) and the
    width, its time with the evaluated steps; a long one is announced in one note."""
    arch = mlp(inputs=16, outputs=10)
    small, fast = departure_cost(arch, 1797, 32, 2000)
    wide, slow = departure_cost(arch, 1797, 64, 2000)
    assert wide > small and slow > fast
    assert departure_cost(arch, 5000, 32, 2000) == departure_cost(arch, 2048, 32, 2000)  # a subset beyond 2048
    check_departure(mlp(), 256, 32, 1000, "squared", "auto")  # the staircase's: about 2 s, no note
    assert capsys.readouterr().err == ""
    check_departure(arch, 1797, 64, 10**6, "squared", "auto")
    note = capsys.readouterr().err.strip().splitlines()[-1]
    assert note.startswith("note: departure (--departure)")
