"""Verdicts from stated tolerances, figure checks, configs, and the self-contained HTML report."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nqf.core.errors import NqfError
from nqf.report import SavedFigure, axis_label, curve, new_figure, save_figure, setup_axes
from nqf_paper import Experiment, ExperimentResult, build_config, load_config_file, parse_overrides
from nqf_paper._base import ExperimentOutcome, RunStatus
from nqf_paper.report_page import build_report
from nqf_paper.verdict import CONFIRMED, NOT_APPLICABLE, NOT_CONFIRMED, Claim, Tolerance, judge
from tests._toy_experiments import ToyConfig, make_registry

pytestmark = pytest.mark.slow  # a headless browser

ROOT = Path(__file__).resolve().parents[1]


def _claim(predicted, measured, tolerance, **kw):
    return Claim("switch-on step of mode 1", "first step with m_1 >= m_1*/2", predicted, measured, tolerance, **kw)


# ---------------------------------------------------------------- verdicts


def test_wrong_prediction_is_not_confirmed_and_right_one_is():
    tol = Tolerance("relative", 0.05)  # 5 %
    assert _claim(94.0, 93.0, tol).verdict.status == CONFIRMED  # 1.1 % off
    wrong = _claim(140.0, 93.0, tol).verdict  # a deliberately wrong prediction
    assert wrong.status == NOT_CONFIRMED
    assert "> 0.05·|predicted| = 7" in wrong.reason
    assert judge(_claim(94.0, 93.0, tol)) == _claim(94.0, 93.0, tol).verdict


def test_missing_numbers_are_not_applicable_with_the_reason():
    tol = Tolerance("absolute", 5)
    verdict = _claim(None, 93.0, tol, why_missing="LV needs a shared eigenbasis").verdict
    assert verdict.status == NOT_APPLICABLE and verdict.reason == "LV needs a shared eigenbasis"
    assert _claim(94.0, None, tol).verdict == type(verdict)(NOT_APPLICABLE, "nothing was measured")
    assert _claim(None, None, tol).verdict.reason == "the theory gives no prediction here"
    with pytest.raises(NqfError, match="why_missing"):  # no hand-written "not applicable" with both numbers
        _claim(94.0, 93.0, tol, why_missing="I do not like it")


def test_non_finite_numbers_are_not_confirmed():
    tol = Tolerance("relative", 1.0)
    assert _claim(94.0, float("nan"), tol).verdict.status == NOT_CONFIRMED
    assert _claim(float("inf"), 93.0, tol).verdict.reason == "predicted value is not finite"


@pytest.mark.parametrize(
    "tolerance, predicted, inside, outside",
    [
        (Tolerance("relative", 0.1), 100.0, 110.0, 110.5),
        (Tolerance("relative", 0.1), -100.0, -90.0, -89.0),
        (Tolerance("absolute", 2.0), 10.0, 8.0, 12.5),
        (Tolerance("interval", (-1.0, 10.0)), 100.0, 110.0, 98.5),
        (Tolerance("at_least", 0.5), 1.0, 0.5, 0.49),
        (Tolerance("at_most", 0.0), 1e-3, 1e-3, 1.01e-3),
    ],
)
def test_tolerance_kinds_at_their_boundaries(tolerance, predicted, inside, outside):
    assert _claim(predicted, inside, tolerance).verdict.status == CONFIRMED
    assert _claim(predicted, outside, tolerance).verdict.status == NOT_CONFIRMED


def test_bad_tolerances_and_claims_raise():
    for bad in [
        ("relative", -0.1),
        ("absolute", float("nan")),
        ("interval", (2.0, 1.0)),
        ("interval", 1.0),
        ("close", 1),
    ]:
        with pytest.raises(NqfError):
            Tolerance(*bad)
    with pytest.raises(NqfError, match="number or None"):
        _claim("94", 93.0, Tolerance("absolute", 1))
    assert _claim(np.float32(94.0), np.int64(93), Tolerance("absolute", 1)).measured == 93.0
    assert Tolerance("interval", [-2, 10]).describe() == "measured − predicted in [-2, 10]"
    assert Tolerance("relative", 0.05).describe() == "±5% of predicted"


def test_a_claim_about_the_network_has_a_second_verdict_from_its_own_prediction():
    """``network_predicted`` (the mean-field flow's number) is judged against the same measurement and
    tolerance; the quadratic theory's verdict is unchanged by it."""
    tol = Tolerance("relative", 0.05)
    claim = _claim(491.0, 363.0, tol, network_predicted=359.0)  # mode 4 of the tanh staircase
    assert claim.verdict.status == NOT_CONFIRMED
    second = claim.network_verdict
    assert second is not None and second.status == CONFIRMED and "≤ 0.05·|predicted|" in second.reason
    assert _claim(94.0, 93.0, tol).network_verdict is None  # not a claim about a nonlinear network
    routed = _claim(201.0, 220.0, tol, network_why_missing="a router couples the units").network_verdict
    assert routed is not None and routed == type(routed)(NOT_APPLICABLE, "a router couples the units")
    unmeasured = _claim(94.0, None, tol, why_missing="mode 4 never switched on", network_predicted=90.0)
    assert unmeasured.network_verdict == type(routed)(NOT_APPLICABLE, "mode 4 never switched on")
    with pytest.raises(NqfError, match="network_why_missing is only"):
        _claim(94.0, 93.0, tol, network_predicted=93.0, network_why_missing="no")
    with pytest.raises(NqfError, match="number or None"):
        _claim(94.0, 93.0, tol, network_predicted="93")


def test_the_report_shows_and_counts_the_second_verdicts(tmp_path):
    tol = Tolerance("relative", 0.05)
    claims = (
        _claim(491.0, 363.0, tol, network_predicted=359.0),
        _claim(201.0, 220.0, tol, network_why_missing="a router couples the units"),
        _claim(94.0, 93.0, tol),
    )
    outcome = ExperimentOutcome(
        "E5", "architectures", "", {}, (RunStatus("r", "d" * 64, "stored"),), ExperimentResult(claims, text="t")
    )
    text = build_report(tmp_path, [outcome], {}, [], mode="quick", version="0.1.0").read_text()
    assert "<th>Network's own</th><th>Its verdict</th>" in text
    assert "a second verdict on 2 claims about trained networks" in text
    group = re.search(r'<details class="claims-group" id="claims-E5"><summary>(.*?)</summary>', text).group(1)
    assert "network's own prediction, 2:" in html.unescape(group)
    assert "359 steps" not in text and '<td class="num">359</td>' in text  # its number, in its column
    assert text.count("a router couples the units") == 1


# ---------------------------------------------------------------- configs


def test_config_file_and_overrides_are_typed_by_the_dataclass(tmp_path):
    toy = make_registry()["T1"]
    path = tmp_path / "nqf.toml"
    path.write_text('[T1]\nscale = 3\nsizes = [4, 5]\n[T1.full]\nruns = 7\n[T1.quick]\nkind = "squared"\n')
    tables = load_config_file(path)
    sets = parse_overrides(["T1.seed=4", "T1.cutoff=1e-3", "T1.verbose=yes", "T1.sizes=1,2,3"])
    quick = build_config(toy, "quick", tables["T1"], sets["T1"])
    assert quick == ToyConfig(runs=3, scale=3.0, seed=4, kind="squared", sizes=(1, 2, 3), cutoff=1e-3, verbose=True)
    assert isinstance(quick.scale, float)
    full = build_config(toy, "full", tables["T1"], {"cutoff": "none", "runs": "1e1"})
    assert full == ToyConfig(runs=10, scale=3.0, sizes=(4, 5))
    bad = [
        ({"sigma": "1"}, "has no field 'sigma'"),
        ({"runs": "2.5"}, "expected an integer"),
        ({"kind": "cubed"}, "is not one of"),
        ({"verbose": "maybe"}, "true or false"),
        ({"runs": "0"}, "runs must be >= 1"),  # the dataclass's own check
    ]
    for override, message in bad:
        with pytest.raises(NqfError, match=message):
            build_config(toy, "quick", None, override)
    with pytest.raises(NqfError, match="EXPERIMENT.FIELD=VALUE"):
        parse_overrides(["sigma0=1"])
    (tmp_path / "bad.toml").write_text("[T1\n")
    with pytest.raises(NqfError, match="not valid TOML"):
        load_config_file(tmp_path / "bad.toml")


def test_experiment_checks_its_config_type():
    @__import__("dataclasses").dataclass
    class Mutable:
        x: int = 0

    with pytest.raises(NqfError, match="frozen"):
        Experiment("E9", "bad", Mutable, lambda c: [], lambda c, r: None)
    with pytest.raises(NqfError, match="classmethod quick"):
        Experiment("E9", "bad", Tolerance, lambda c: [], lambda c, r: None)


# ---------------------------------------------------------------- figures


def test_save_figure_requires_labels_and_legends_and_is_byte_identical(tmp_path):
    x = np.arange(1, 50)
    fig, ax = new_figure()
    ax.plot(x, 1 / x, **curve("network", 0, "GD"))
    ax.plot(x, 1.1 / x, **curve("quadratic model", 1))
    with pytest.raises(NqfError, match="label"):
        save_figure(fig, tmp_path, "E0_loss", "Loss.")
    setup_axes(ax, axis_label("training step", "steps"), axis_label("loss", "1"), xscale="log", yscale="log")
    with pytest.raises(NqfError, match="no legend"):
        save_figure(fig, tmp_path, "E0_loss", "Loss.")
    ax.legend()
    first = save_figure(fig, tmp_path, "E0_loss", "Loss against step, log-log.")
    png, pdf = first.png.read_bytes(), first.pdf.read_bytes()
    assert png.startswith(b"\x89PNG") and pdf.startswith(b"%PDF")
    save_figure(fig, tmp_path, "E0_loss", "Loss against step, log-log.")
    assert first.png.read_bytes() == png and first.pdf.read_bytes() == pdf
    assert sorted(p.name for p in tmp_path.iterdir()) == ["E0_loss.pdf", "E0_loss.png"]  # no temp files left

    fig, ax = new_figure()
    ax.plot(x, x)
    ax.plot(x, 2 * x)
    setup_axes(ax, "step [steps]", "m [1]")
    ax.legend(["a", "b"])
    with pytest.raises(NqfError, match="without a legend label"):
        save_figure(fig, tmp_path, "E0_bad", "Unnamed curves.")
    with pytest.raises(NqfError, match="unknown curve source"):
        curve("my guess")
    with pytest.raises(NqfError, match="unit"):
        axis_label("loss", "")


# ---------------------------------------------------------------- HTML


def _outcomes_and_figures(tmp_path):
    claims = (
        Claim(
            "mode 1 switches on at the predicted step",
            "switch-on step",
            94,
            93,
            Tolerance("relative", 0.05),
            unit="steps",
        ),
        Claim("a <deliberately> wrong prediction & more", "plateau loss", 0.5, 0.25, Tolerance("absolute", 0.01)),
        Claim("LV plateau", "plateau", None, 0.25, Tolerance("absolute", 0.01), why_missing="no shared eigenbasis"),
    )
    result = ExperimentResult(claims, text="First paragraph.\n\nSecond <b>paragraph</b>.")
    done = ExperimentOutcome("E1", "staircase", "", {"sigma0": 1e-6}, (RunStatus("gd", "a" * 64, "computed"),), result)
    missing = ExperimentOutcome(
        "E2", "deep", "", {}, (RunStatus("gd", "b" * 64, "stored"), RunStatus("adam", "c" * 64, "missing")), None
    )
    fig, ax = new_figure()
    ax.plot([1, 2, 3], [3, 2, 1], **curve("M-flow"))
    setup_axes(ax, "step [steps]", "loss [1]")
    figures = {"E1": [save_figure(fig, tmp_path / "figures", "E1_loss", "Loss.")]}
    return [done, missing], figures


def test_report_is_self_contained_summary_first_then_the_claims(tmp_path):
    outcomes, figures = _outcomes_and_figures(tmp_path)
    path = build_report(
        tmp_path, outcomes, figures, ["runs/E1/x.json: not valid JSON; skipped"], mode="quick", version="0.1.0"
    )
    text = path.read_text()
    assert path == tmp_path / "report.html" and text.startswith("<!DOCTYPE html>")
    assert not re.search(r"(?i)(https?:|file:)//", text) and 'src="file' not in text
    assert "<script" not in text and "<link" not in text
    sources = re.findall(r'<img src="([^"]*)"', text)
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    # E1's one figure, in its section, and a thumbnail of it on its summary card
    shown = re.findall(r'<figure[^>]*><img src="([^"]*)"', text)
    assert len(shown) == 1 and base64.b64decode(shown[0].split(",", 1)[1]) == figures["E1"][0].png.read_bytes()
    thumbs = re.findall(r'<a class="thumb" href="#exp-E1"><img src="([^"]*)"', text)
    assert len(thumbs) == 1 and len(sources) == 2
    thumb = base64.b64decode(thumbs[0].split(",", 1)[1])
    assert thumb.startswith(b"\x89PNG") and len(thumb) < len(figures["E1"][0].png.read_bytes())
    claims_at, first_section = text.index('<section id="claims">'), text.index('<section id="exp-E1">')
    assert text.index('<section id="summary">') < claims_at < first_section
    assert claims_at < first_section and text.index("<table>") < first_section
    for column in ("Claim", "What was measured", "Predicted", "Measured", "Tolerance", "Verdict"):
        assert f"<th>{column}</th>" in text
    assert text.count('<tr class="confirmed">') == 1 and text.count('<tr class="refuted">') == 1
    assert text.count('<tr class="na">') == 2  # the LV claim and the incomplete E2
    assert "a &lt;deliberately&gt; wrong prediction &amp; more" in text and "Second &lt;b&gt;" in text
    assert "runs missing from the store: adam" in text and "not valid JSON; skipped" in text
    assert "94 steps" in text and "no shared eigenbasis" in text

    # The summary: a card per experiment with its counts; the contents link every section.
    summary = text[text.index('<section id="summary">') : claims_at]
    for name in ("E1", "E2"):
        assert f'id="summary-{name}"' in summary and f'<li><a href="#exp-{name}">{name} · ' in summary
    card_e1 = summary[summary.index('id="summary-E1"') : summary.index('id="summary-E2"')]
    assert "✓ 1 confirmed" in card_e1 and "✗ 1 not confirmed" in card_e1 and "– 1 not applicable" in card_e1
    assert "No result: 1 run(s) missing or failed." in summary
    assert '<a href="#store-problems">1 problem(s) met while building the report</a>' in text
    # Claims folded per experiment, closed, their counts on the summary line.
    groups = re.findall(r"<details([^>]*)><summary>(.*?)</summary>", text[claims_at:first_section])
    assert [attrs for attrs, _ in groups] == [
        ' class="claims-group" id="claims-E1"',
        ' class="claims-group" id="claims-E2"',
    ]
    assert "3 claims:" in groups[0][1] and "✗ 1 not confirmed" in groups[0][1]
    assert "1 claim:" in groups[1][1] and '<span class="confirmed zero">✓ 0 confirmed</span>' in groups[1][1]


def _outcome(name: str, text: str) -> ExperimentOutcome:
    result = ExperimentResult((Claim("a claim", "a number", 1.0, 1.0, Tolerance("absolute", 0.1)),), text=text)
    return ExperimentOutcome(name, f"title of {name}", "", {}, (RunStatus("r", "d" * 64, "stored"),), result)


def test_long_not_confirmed_explanations_fold_after_their_first_sentence(tmp_path):
    why = "The curves change there by 0.38% per step; the network settles more slowly than its model. " * 3
    text = (
        "Plateau losses per group.\n\n"
        "Lead-in of the list. Not confirmed: mode 2's plateau equals the M-flow's (0.6977 against 0.6243). "
        + why
        + "Not confirmed: E = 2. Short first sentence. "
        + why
        + "Not confirmed: mode 3 is late (12 against 10). Only a short reason."
    )
    page = build_report(tmp_path, [_outcome("E5", text)], {}, [], mode="quick", version="0").read_text()
    section = page[page.index('<section id="exp-E5">') :]
    assert "<p>Plateau losses per group.</p><p>Lead-in of the list.</p>" in section
    items = re.findall(r"<li>(.*?)</li>", section[section.index('<ul class="not-confirmed">') :])
    assert len(items) == 3
    # the first sentence shows, the long rest is folded
    assert items[0].startswith(
        '<details class="why"><summary><b>Not confirmed:</b> mode 2&#x27;s plateau equals the M-flow&#x27;s '
        "(0.6977 against 0.6243).</summary><p>The curves change there"
    )
    # a short first sentence shows with the second
    assert items[1].startswith(
        '<details class="why"><summary><b>Not confirmed:</b> E = 2. Short first sentence.</summary>'
    )
    # a short explanation is not folded at all
    assert items[2] == "<b>Not confirmed:</b> mode 3 is late (12 against 10). Only a short reason."
    phrase = why.split(";")[0]
    assert section.count(phrase) == text.count(phrase) == 6  # nothing is lost: every explanation is in the page


def _png(path: Path, width: int, height: int, dpi: float | None = 150.0) -> Path:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(image).line([(0, height - 1), (width - 1, 0)], fill="#0072B2", width=5)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="PNG", **({"dpi": (dpi, dpi)} if dpi else {}))
    return path


def test_figures_are_capped_by_their_panel_count(tmp_path):
    """The max width comes from the PNG's width in inches, a panel being about 5 in: CSS only, PNGs untouched."""
    figure_dir = tmp_path / "figures"
    sizes = {
        "one": (1050, 660, 150),
        "one_100dpi": (700, 440, 100),
        "one_no_dpi": (1050, 660, None),  # save_figure's 150 dpi assumed
        "two": (1650, 630, 150),
        "three": (2640, 1170, 150),
    }
    figures = []
    for stem, (width, height, dpi) in sizes.items():
        png = _png(figure_dir / f"E1_{stem}.png", width, height, dpi)
        figures.append(SavedFigure(png, png.with_suffix(".pdf"), stem))
    broken = figure_dir / "E1_broken.png"
    broken.write_bytes(b"not a PNG")
    figures.append(SavedFigure(broken, broken.with_suffix(".pdf"), "broken"))
    before = {f.png: f.png.read_bytes() for f in figures}
    page = build_report(tmp_path, [_outcome("E1", "")], {"E1": figures}, [], mode="quick", version="0").read_text()
    classes = re.findall(r'<figure class="(panels-\d)"><img[^>]*alt="([^"]*)"', page)
    assert classes == [
        ("panels-1", "one"),
        ("panels-1", "one_100dpi"),
        ("panels-1", "one_no_dpi"),
        ("panels-2", "two"),
        ("panels-3", "three"),
        ("panels-3", "broken"),  # unreadable: full width, as every figure was before
    ]
    assert {f.png: f.png.read_bytes() for f in figures} == before
    for rule in ("figure.panels-1 {", "figure.panels-2 { max-width: 62rem; }", "figure img { width: 100%;"):
        assert rule in page


def _seven_experiments(tmp_path):
    """E1..E7 with their real titles and descriptions, a few claims and a figure each (varied shapes)."""
    from nqf_paper import EXPERIMENTS

    shapes = [(1050, 660), (1950, 660), (1650, 660), (1725, 720), (2250, 1380), (2070, 1050), (1800, 690)]
    outcomes, figures = [], {}
    for i, (name, exp) in enumerate(sorted(EXPERIMENTS.items())):
        width, height = shapes[i % len(shapes)]
        claims = [
            Claim(f"{name} claim {k}", "a number", 10.0, 10.0 + 2 * k, Tolerance("absolute", 1.0)) for k in range(3)
        ]
        result = ExperimentResult(tuple(claims), text="Result text.")
        runs = (RunStatus("r", "e" * 64, "stored"),)
        outcomes.append(ExperimentOutcome(name, exp.title, exp.description, {}, runs, result))
        png = _png(tmp_path / "figures" / f"{name}_main.png", width, height)
        figures[name] = [SavedFigure(png, png.with_suffix(".pdf"), f"{name}'s figure.")]
    return outcomes, figures


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium); see docs/report.md")
def test_report_renders_in_headless_chromium(tmp_path):
    outcomes, figures = _outcomes_and_figures(tmp_path)
    path = build_report(tmp_path, outcomes, figures, [], mode="quick", version="0.1.0")
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_report.py"), str(path), "--screenshot", str(shot)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 figure(s) decoded" in done.stdout and shot.read_bytes().startswith(b"\x89PNG")  # figure, thumbnail

    # The checker does fail: an external image reference is caught.
    broken = tmp_path / "broken.html"
    broken.write_text(path.read_text().replace("data:image/png;base64,", "figures/E1_loss.png#", 1))
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_report.py"), str(broken), "--screenshot", str(shot)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "not an embedded PNG" in done.stderr


# Records, after the page has loaded, where the summary lies and what it and the contents link to.
SUMMARY_PROBE = """<script>
window.addEventListener("load", function () {
  var box = document.getElementById("summary").getBoundingClientRect();
  var links = function (selector) {
    var found = document.querySelectorAll(selector);
    return Array.prototype.map.call(found, function (a) { return a.getAttribute("href"); });
  };
  var groups = document.querySelectorAll("#claims details.claims-group");
  document.body.setAttribute("data-probe", JSON.stringify({
    viewport: document.documentElement.clientWidth, scrollWidth: document.documentElement.scrollWidth,
    summary: [box.left, box.top, box.right, box.bottom],
    cards: links("#summary article.card h3 a"), thumbs: links("#summary article.card a.thumb"),
    contents: links("#contents a"),
    groups: groups.length, open: Array.prototype.filter.call(groups, function (g) { return g.open; }).length,
    rows: document.querySelectorAll("#claims tbody tr").length
  }));
});
</script>"""


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    return subprocess.run(
        [str(CHROMIUM), *flags, f"--user-data-dir={profile}", "--window-size=1400,1000", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium); see docs/report.md")
def test_summary_fits_the_first_screen_in_headless_chromium(tmp_path):
    """At 1400 px width the header and the summary of E1..E7 (real titles and descriptions) fit in 1400 x 1000."""
    outcomes, figures = _seven_experiments(tmp_path)
    path = build_report(tmp_path, outcomes, figures, [], mode="quick", version="0.1.0+code.0123456789abcdef")
    probed = tmp_path / "probed.html"
    probed.write_text(path.read_text().replace("</body>", SUMMARY_PROBE + "</body>"))
    done = _chromium(["--virtual-time-budget=10000", "--dump-dom", probed.as_uri()], tmp_path / "profile-dom")
    match = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert match, done.stderr[-2000:]
    probe = json.loads(html.unescape(match.group(1)))
    left, top, right, bottom = probe["summary"]
    assert probe["viewport"] <= 1400 and probe["scrollWidth"] <= probe["viewport"]  # no sideways scrolling
    assert 0 <= left and right <= 1400 and 0 < top < bottom <= 1000, probe
    names = [o.name for o in outcomes]
    assert len(names) >= 7 and {"E1", "E7"} <= set(names)
    sections = [f"#exp-{name}" for name in names]
    assert probe["cards"] == sections and probe["thumbs"] == sections  # every experiment, with its thumbnail
    assert [link for link in probe["contents"] if link.startswith("#exp-")] == sections
    assert probe["contents"][0] == "#claims"
    assert probe["groups"] == len(names) and probe["open"] == 0 and probe["rows"] == 3 * len(names)

    # The first screen as a picture: 1400 x 1000, and not blank.
    shot = tmp_path / "first_screen.png"
    done = _chromium(["--hide-scrollbars", f"--screenshot={shot}", path.as_uri()], tmp_path / "profile-shot")
    assert shot.is_file(), done.stderr[-2000:]
    header = shot.read_bytes()[:24]
    assert header.startswith(b"\x89PNG") and struct.unpack(">II", header[16:24]) == (1400, 1000)
    import matplotlib.image

    assert float(matplotlib.image.imread(shot)[..., :3].std()) > 0.05
