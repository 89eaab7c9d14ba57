"""Text from the user or from a results store reaches report.html and the figures as typed: markup
(``<script>``, ``&``) in an experiment's title, description, config, run names, errors and problem
lines is escaped in the report; a ``$`` pair in a name drawn in a figure (an architecture's name, an
overlay file's name) is drawn as typed, not parsed as mathtext."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import nqf

pytestmark = pytest.mark.no_shape_checks  # as the library runs without the test-time checks


@pytest.fixture(scope="module")
def staircase():
    task = nqf.get_task("staircase")
    X, Y = (np.asarray(a) for a in task.generate(0))
    return task, task.architecture(), X, Y


def predict_config(**change) -> nqf.PredictConfig:
    return nqf.PredictConfig(**{"width": 8, "lr": 0.05, "steps": 60, "sigma0": 1e-3, **change})


def test_the_report_escapes_markup_wherever_it_comes_from():
    from nqf_paper._base import ExperimentOutcome, RunStatus
    from nqf_paper.report_page import render_report

    attack = "<script>alert(1)</script>&<img src=x onerror=alert(2)>"
    outcome = ExperimentOutcome(
        name="E1",
        title=f"title {attack}",
        description=f"description {attack}",
        config={"label": attack},
        runs=(RunStatus(f"run {attack}", "a" * 64, "failed", f"ValueError: {attack}"),),
        result=None,
        error=f"summarising failed: ValueError: could not convert string to float: {attack!r}",
    )
    page = render_report([outcome], {}, [f"runs/E1/x.json: {attack}"], mode="quick", version=f"0 {attack}")
    assert "<script>alert" not in page and "<img src=x" not in page and "onerror=alert(2)>" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;&amp;&lt;img src=x onerror=alert(2)&gt;") >= 6


def test_dollars_in_names_are_drawn_as_typed(staircase, tmp_path):
    """A ``$`` pair in an architecture's name (the title) and in an overlay file's name (the
    legend) was mathtext to matplotlib: ``$\\frac$`` failed to parse when the figure was saved."""
    from matplotlib.figure import Figure

    from nqf.comparison.curves import compare_overlay, read_loss_curve
    from nqf.report.predict_plot import plot_prediction
    from nqf.report.style import plain_text

    _, arch, X, Y = staircase
    prediction = dataclasses.replace(nqf.predict(arch, X, Y, predict_config()), arch_name="u$\\frac$x.py:f <b>&")
    curve = tmp_path / "m$\\frac$x.csv"
    curve.write_text("step,loss\n" + "".join(f"{t},{2.0 / (1 + t)}\n" for t in range(1, 60)))
    overlay = compare_overlay(read_loss_curve(curve), prediction)
    written = plot_prediction(prediction, tmp_path / "p.png", overlay)
    assert written.is_file() and written.stat().st_size > 0

    assert plain_text("a $x$ and $\\frac$") == "a \\$x\\$ and \\$\\frac\\$"
    fig = Figure()
    text = fig.text(0.5, 0.5, plain_text("$\\frac$ costs $5"))
    fig.canvas.draw()  # draws without parsing mathtext
    assert text.get_window_extent().width > 0
