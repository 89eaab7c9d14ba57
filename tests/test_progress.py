"""The library's progress reports (``nqf.core.progress``): silent by default, and the departure's
corrections report every plateau segment to an installed callback, ending at done == total."""

import pytest

import nqf
from nqf.core.progress import progress_to, report


def test_reports_go_nowhere_without_a_callback_and_stop_with_the_block():
    seen = []
    report("stage", 1, 2)  # no callback: nothing happens
    with progress_to(lambda *args: seen.append(args)):
        report("stage", 1, 2)
    report("stage", 2, 2)
    assert seen == [("stage", 1, 2)]


@pytest.mark.slow  # 2.8-5.7 s
def test_the_departure_reports_its_plateau_segments():
    X, Y = nqf.get_task("staircase").generate(0)
    config = nqf.PredictConfig(width=16, lr=0.05, steps=600, sigma0=1e-4, departure=True)
    seen = []
    with progress_to(lambda stage, done, total: seen.append((stage, done, total))):
        prediction = nqf.predict(nqf.get_architecture("mlp"), X, Y, config)
    assert prediction.departure is not None and seen
    assert {stage for stage, _, _ in seen} == {"departure: network-corrected switch-on steps (plateaus)"}
    done = [d for _, d, _ in seen]
    assert done[0] == 0 and done == sorted(done) and all(d <= t for _, d, t in seen)
    assert seen[-1][1] == seen[-1][2]  # the bar ends full
