"""Estimates are computed from what will run (issue 34, item 6): the M-flow's time note says the
adaptive stepping jumps only where it can (the jump's state s = D (D + 1) / 2 within
MAX_JUMP_STATE), and agrees with the flow's own test of the same condition."""

import numpy as np
import pytest

from nqf.architectures import mlp
from nqf.comparison import limits
from nqf.core.memory import MAX_JUMP_STATE, can_jump


def _note(capsys, arch, momentum: bool) -> str:
    limits.check_predict(
        arch, 10_000, 64, 10**7, "squared", "auto", minibatches=False, adaptive=True, momentum=momentum
    )
    return capsys.readouterr().err


@pytest.mark.parametrize(("inputs", "momentum", "jumps"), [(8, False, True), (60, False, False), (20, True, False)])
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
    from nqf.theory.flow import maps

    for d in range(1, 80):
        for kind in ("gd", "momentum"):
            D = 2 * d if kind == "momentum" else d
            assert can_jump(d, kind == "momentum") == maps._jumpable(kind, d) == (D * (D + 1) // 2 <= MAX_JUMP_STATE)
    assert can_jump(39, False) and not can_jump(40, False) and np.isscalar(MAX_JUMP_STATE)
