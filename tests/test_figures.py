"""Figures that stay readable: legends off the data, y ranges from the data that matter, distinct
colours for many series, contrasting text on heat-map cells, uncrowded switch-on marks, one
font-to-width ratio (issue 23). Synthetic inputs: no training, no prediction, a second or two."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from nqf.report import predict_plot, style, sweep_figures
from nqf.report.panels import LINED_MODES, mode_numbers
from nqf.report.style import (
    PALETTE,
    PANEL_WIDTH,
    contrast_ratio,
    new_figure,
    series_colours,
    text_colour_on,
)
from nqf_paper.e1_staircase import figures as figures_e1

# ---------------------------------------------------------------- helpers


@pytest.fixture
def captured(monkeypatch):
    """Each figure a module writes (through write_figure / save_figure), drawn, for inspection."""
    figures: list[Figure] = []

    def keep(writer):
        def wrapped(fig, *args, **kwargs):
            figures.append(fig)
            return writer(fig, *args, **kwargs)

        return wrapped

    monkeypatch.setattr(figures_e1, "save_figure", keep(figures_e1.save_figure))
    monkeypatch.setattr(sweep_figures, "write_figure", keep(sweep_figures.write_figure))
    monkeypatch.setattr(predict_plot, "write_figure", keep(predict_plot.write_figure))
    return figures


def _renderer(fig: Figure):
    """Lay out and draw ``fig`` on an Agg canvas (the figures carry none: no pyplot); its renderer."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _overlap(a: Bbox, b: Bbox) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _legend_boxes(fig: Figure, renderer) -> list[Bbox]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    assert legends, "the figure has no legend"
    return [legend.get_window_extent(renderer) for legend in legends]


def _assert_legend_off_the_data(fig: Figure, ax) -> None:
    """Every legend lies outside the data axes, and no drawn curve point lies under it."""
    renderer = _renderer(fig)
    frame = ax.get_window_extent(renderer)
    for box in _legend_boxes(fig, renderer):
        assert not _overlap(box, frame), f"legend {box} overlaps the axes {frame}"
        for line in ax.get_lines():
            xy = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
            xy = xy[np.all(np.isfinite(xy), axis=1)]
            drawn = (xy[:, 0] >= frame.x0) & (xy[:, 0] <= frame.x1) & (xy[:, 1] >= frame.y0) & (xy[:, 1] <= frame.y1)
            xy = xy[drawn]  # what is drawn: curves are clipped to the axes
            inside = (xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1)
            assert not inside.any(), f"{line.get_label()} runs under the legend"


def _staircase(t, switches, plateaus, start, width=0.04):
    """A loss that steps from ``start`` down through ``plateaus`` at the ``switches`` (log time)."""
    levels = np.concatenate([[start], plateaus])
    loss = np.full(t.shape, float(levels[-1]))
    for k, s in enumerate(switches):
        loss += (levels[k] - levels[k + 1]) / (1.0 + np.exp((np.log(t) - np.log(s)) / width))
    return loss


# ---------------------------------------------------------------- colour helpers


def test_contrast_ratio_and_text_colour_follow_wcag():
    assert contrast_ratio("black", "white") == pytest.approx(21.0)
    assert contrast_ratio("#777777", "#777777") == pytest.approx(1.0)
    assert text_colour_on("#fde725") == "black"  # viridis's yellow end: white text was unreadable
    assert text_colour_on("#440154") == "white"
    for colour in ("#21918c", "#3b528b", "#5ec962", "#E69F00", "#808080", "#0072B2"):
        assert contrast_ratio(text_colour_on(colour), colour) >= 4.5


@pytest.mark.parametrize("count", [1, 4, 6, 7, 12, 28, 32])
def test_series_colours_are_distinct_and_never_cycle(count):
    colours = series_colours(count)
    assert len(colours) == count
    assert len({to_hex(c) for c in colours}) == count
    if count <= 6:
        assert colours == list(PALETTE[:count])


def test_colour_bar_needs_a_label():
    fig, ax = new_figure()
    ax.plot([1, 2], [1, 2], label="x")
    ax.set(xlabel="x", ylabel="y")
    style.series_colour_bar(fig, ax, list(range(1, 11)), "mode k")
    style._check(fig, "ok")  # labelled: accepted
    fig, ax = new_figure()
    image = ax.imshow(np.eye(2))
    ax.set(xlabel="x", ylabel="y")
    fig.colorbar(image, ax=ax)
    with pytest.raises(Exception, match="colour bar lacks a label"):
        style._check(fig, "bad")


# ---------------------------------------------------------------- E1_loss


def _e1_data(last_plateau: float):
    t = np.arange(0, 1001, dtype=float)
    switches = [93.0, 136.0, 256.0, 491.0]
    plateaus = [2.625, 0.625, 0.125, 0.0]
    start = 7.125
    tt = np.maximum(t, 1.0)
    model = _staircase(tt, switches, plateaus, start) + 1e-24  # decays to rounding after mode 4
    network = _staircase(tt, [94, 138, 240, 363], [2.66, 0.69, 0.15, 0.03], start) * (1 - 0.3 * tt / 1000)
    return {
        "steps": t.tolist(),
        "loss": {"network": network, "quadratic": model, "mflow": model, "lv": model},
        "switch": {"M-flow": switches},
        "lv_plateaus": [*plateaus[:-1], last_plateau],  # the last one is zero up to float64 rounding
        "sigma0": 1e-6,
        "lr": 0.05,
    }


@pytest.mark.parametrize("last_plateau", [3.6e-15, -3.6e-15, 0.0])
def test_e1_loss_range_follows_the_plateaus_and_legend_leaves_the_curves(tmp_path, captured, last_plateau):
    data = _e1_data(last_plateau)
    saved = figures_e1._loss_figure(data, tmp_path)
    assert saved.png.is_file()
    (fig,) = captured
    ax = fig.axes[0]
    _renderer(fig)
    bottom, top = ax.get_ylim()
    smallest = 0.125  # the smallest plateau the float64 run resolves (the rounding-level one is not)
    # the floor: one to three decades below the smallest plateau, never the rounding floor (1e-16)
    assert smallest / 1e3 <= bottom <= smallest / 10
    assert top <= 10 * 7.125
    # the staircase (L(0) down to the last plateau) fills a good part of the height (the rounding floor: ~10%)
    assert (math.log10(7.125) - math.log10(smallest)) / (math.log10(top) - math.log10(bottom)) > 0.4
    _assert_legend_off_the_data(fig, ax)


def test_single_panel_fonts_are_not_larger_than_multi_panel_ones(tmp_path, captured):
    """The report sizes a figure by its width in inches (a panel column about PANEL_WIDTH): a
    single-panel figure as wide a panel as the two-panel ones, and fonts of the same points,
    shows its text no larger than they do."""
    data = _e1_data(0.0)
    steps = len(data["steps"])
    growth = np.linspace(-10, 0.3, steps)[:, None] * np.array([[1.0, 0.7, 0.4, 0.2]])
    occupation = np.exp(np.minimum(growth, 0.0)) * 6.0
    data |= {
        "fixed_point": [6.0, 4.0, 2.0, 1.0],
        "occupations": dict.fromkeys(("network", "quadratic", "mflow"), occupation),
    }
    figures_e1._loss_figure(data, tmp_path)
    figures_e1._occupation_figure(data, tmp_path)
    single, double = captured
    columns = len(double.axes)
    assert columns == 2
    assert double.get_figwidth() / columns <= single.get_figwidth() < 2 * PANEL_WIDTH
    for fig in (single, double):
        _renderer(fig)
    sizes = {
        fig: {label.get_fontsize() for ax in fig.axes for label in (*ax.get_xticklabels(), ax.xaxis.label)}
        for fig in (single, double)
    }
    assert max(sizes[single]) <= max(sizes[double])


# ---------------------------------------------------------------- sweep: switch_steps.png, heatmap.png


def _sweep_rows(modes: int, measured: bool):
    rows = []
    for point, sigma0 in enumerate((1e-8, 1e-6, 1e-4)):
        for mode in range(1, modes + 1):
            base = 200.0 * mode * math.log(1 / sigma0) / 10
            row = {
                "point": point,
                "sigma0": sigma0,
                "mode": mode,
                "switch_mflow": base,
                "switch_lv": base - 1,
                "switch_singular_limit": 0.95 * base,
                "relerr_lv": 0.001 * mode,
            }
            if measured:
                row |= {"switch_network_gd": 1.05 * base, "switch_quadratic": base, "relerr_network_gd": 0.05}
            rows.append(row)
    return rows


def _mode_colours(ax) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for line in ax.get_lines():
        mode = int(str(line.get_label()).rstrip(")").rsplit("mode ", 1)[1])
        found.setdefault(mode, set()).add(to_hex(line.get_color()))
    return found


@pytest.mark.parametrize("modes, measured", [(28, False), (32, True), (4, True), (6, False)])
def test_switch_steps_one_distinct_colour_per_mode_and_legend_outside(tmp_path, captured, modes, measured):
    path = sweep_figures.switch_figure(_sweep_rows(modes, measured), tmp_path / "switch_steps.png")
    assert path is not None and path.is_file()
    (fig,) = captured
    ax = fig.axes[0]
    _renderer(fig)
    colours = _mode_colours(ax)
    assert sorted(colours) == list(range(1, modes + 1))
    assert all(len(c) == 1 for c in colours.values()), "a mode's curves differ in colour"
    assert len({c for (c,) in colours.values()}) == modes, "two modes share a colour (a repeating cycle)"
    bars = [a for a in fig.axes if getattr(a, "_colorbar", None) is not None]
    legend = fig.legends[0]
    if modes > style.DISTINCT_COLOURS:
        assert len(bars) == 1 and bars[0].get_ylabel() == "mode k"
        assert len(legend.get_texts()) <= 5  # the sources only, not one entry per curve
    else:
        assert not bars
        assert {t.get_text() for t in legend.get_texts()} >= {f"mode {m}" for m in range(1, modes + 1)}
    _assert_legend_off_the_data(fig, ax)


def test_heatmap_text_contrasts_with_its_cell_and_has_a_colour_bar(tmp_path, captured):
    rows = []
    for i, sigma0 in enumerate((1e-10, 1e-8, 1e-6, 1e-4)):
        for j, lr in enumerate((0.05, 0.025, 0.0125)):
            for mode in (1, 2):
                rows.append({"sigma0": sigma0, "lr": lr, "mode": mode, "relerr_lv": 0.002 * 3.0 ** (i + j)})
    rows.append({"sigma0": 1e-4, "lr": 0.1, "mode": 1, "relerr_lv": None})  # a cell with no data
    path = sweep_figures.heatmap_figure(rows, ("sigma0", "lr"), tmp_path / "heatmap.png")
    assert path is not None and path.is_file()
    (fig,) = captured
    ax = fig.axes[0]
    (image,) = ax.get_images()
    grid = np.ma.masked_invalid(image.get_array())
    texts = ax.texts
    assert len(texts) == int(grid.count())  # every cell with data carries its value
    shades = set()
    for text in texts:
        col, row = (round(v) for v in text.get_position())
        cell = image.to_rgba(grid[row, col])
        assert contrast_ratio(text.get_color(), cell) >= 4.5, (text.get_text(), to_hex(cell), text.get_color())
        shades.add(text.get_color())
    assert shades == {"black", "white"}  # the dark and the light end of the map are both there
    bars = [a for a in fig.axes if getattr(a, "_colorbar", None) is not None]
    assert len(bars) == 1 and "relative error" in bars[0].get_ylabel()


# ---------------------------------------------------------------- nqf predict --plot


def _prediction(modes: int):
    """A Prediction-shaped stand-in: a power-law staircase of ``modes`` modes, no computing."""
    horizon = 20000
    t = np.arange(0, horizon + 1, dtype=float)
    s = np.arange(1, modes + 1, dtype=float) ** -1.0
    start = 0.5 * float(np.sum(s**2))
    plateaus = np.array([0.5 * float(np.sum(s[k + 1 :] ** 2)) for k in range(modes)])
    switch = 250.0 * np.arange(1, modes + 1) ** 1.2  # mode 30 at 15000 steps
    loss = _staircase(np.maximum(t, 1.0), switch, plateaus, start, width=0.08) + 1e-30
    singular = SimpleNamespace(steps=lambda: 0.95 * switch, plateau_losses=plateaus, initial_loss=start, eps=13.8)
    return SimpleNamespace(
        config=SimpleNamespace(width=32, optimizer="gd", lr=0.05, steps=horizon, seed=0),
        arch_name="mlp",
        flow=SimpleNamespace(steps=t, loss=loss),
        lv_steps=t,
        lv_loss=loss * 1.01,
        lv_applies=True,
        singular=singular,
        lv_plateau_losses=plateaus,
        mflow_switch_steps=switch,
        lv_switch_steps=switch * 1.01,
        singular_switch_steps=0.95 * switch,
        departure=None,
        network=None,
        degenerate=False,  # distinct c_k: per-mode steps (Prediction.group_readings otherwise)
    )


@pytest.mark.parametrize("modes", [4, 12, 30])
def test_predict_plot_marks_switch_ons_without_crowding(tmp_path, captured, modes):
    prediction = _prediction(modes)
    assert predict_plot.plot_prediction(prediction, tmp_path / "p.png").is_file()
    (fig,) = captured
    ax = fig.axes[0]
    renderer = _renderer(fig)
    # full-height lines: one per mode up to a few modes, none beyond; the rest are short ticks
    tall = [
        segment
        for c in ax.collections
        if isinstance(c, LineCollection) and c.get_transform() == ax.get_xaxis_transform()
        for segment in c.get_segments()
        if abs(segment[1][1] - segment[0][1]) > 0.5
    ]
    assert len(tall) == (modes if modes <= LINED_MODES else 0)
    # mode numbers above the axes: the first and the last, none overlapping another
    numbers = [t for t in ax.texts if t.get_text().isdigit()]
    named = [int(t.get_text()) for t in numbers]
    assert 1 in named and modes in named
    boxes = sorted((t.get_window_extent(renderer) for t in numbers), key=lambda b: b.x0)
    assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:], strict=False)), "mode numbers overlap"
    if modes <= 12:
        assert len(named) >= min(modes, 8)  # thinned only where crowded
    # the ticks at the top stay clear of the curves
    ticks = [c for c in ax.collections if isinstance(c, LineCollection) and c.get_label().startswith("switch-on")]
    lowest_tick = min(seg[:, 1].min() for c in ticks for seg in c.get_segments() if np.ptp(seg[:, 1]) < 0.5)
    to_axes = ax.transAxes.inverted()
    for line in ax.get_lines():
        xy = to_axes.transform(line.get_transform().transform(np.column_stack(line.get_data()).astype(float)))
        inside = (xy[:, 0] >= 0) & (xy[:, 0] <= 1)
        assert np.all(xy[inside, 1] < lowest_tick), f"{line.get_label()} reaches the switch-on ticks"
    _assert_legend_off_the_data(fig, ax)


def test_mode_numbers_thin_a_crowded_run_but_keep_the_ends():
    fig, ax = new_figure()
    ax.set(xscale="log", xlabel="x", ylabel="y")
    ax.set_xlim(10, 1e4)
    steps = np.concatenate([[100.0], np.linspace(3000, 3300, 20)])  # twenty modes within a few points
    named = mode_numbers(ax, steps, "black")
    assert named[0] == 1 and named[-1] == 21 and len(named) < 6
