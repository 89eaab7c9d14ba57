"""The self-contained ``report.html``: a one-screen summary on top, then claims and experiments.

Layout, top to bottom:

* a header with the provenance (mode, nqf version, number of claims, experiments) and the
  verdict counts of all claims;
* ``<section id="summary">``: one card per experiment (title, its claim in a line, its
  verdict counts, a thumbnail of its headline figure linking to its section) and the
  table of contents (``<nav id="contents">``). At 1400 px width it fits in the first
  1000 px, header included;
* ``<section id="claims">``: the claims table, one folded ``<details>`` per experiment
  (``id="claims-E1"``) whose summary line holds the experiment's counts. All groups are
  closed: their counts are on that line and in the summary, so a not-confirmed claim is
  never out of sight, and opening the groups with one would put most of the table back
  above the figures;
* failed runs and problems met while building the report, when there are any;
* one section per experiment: its text, figures and configuration. In the text, each
  ``Not confirmed: ...`` item is a list entry showing its first sentence (or two, when
  the first is short), with the rest of a long explanation folded.

Figures are capped by their panel count, which is read from the PNG's width in inches
(a panel is about 5 in wide; single panels are no longer drawn at full width). The
headline figure of an experiment is the first its ``plot`` function returns; its
thumbnail is a downscaled copy (Pillow, a dependency of matplotlib), so the page does
not carry every headline PNG twice.

Self-contained means one file that needs nothing else: CSS inline, figures embedded as
``data:image/png;base64`` URIs, no scripts, no external or local references (the PDFs
sit next to it in ``figures/`` for print, but the page does not load them). Folded parts
are ``<details>``, which need no script; printed, the claims and folded explanations
open (``::details-content``, where the browser has it). The output depends only on its
inputs (no timestamps), so an interrupted-then-resumed reproduction writes the same
bytes as an uninterrupted one.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from nqf.report.style import OKABE_ITO, SavedFigure
from nqf.store.results import atomic_write_bytes
from nqf_paper._base import ExperimentOutcome
from nqf_paper.plan import REPORT_NAME as REPORT_NAME
from nqf_paper.verdict import CONFIRMED, NOT_APPLICABLE, NOT_CONFIRMED, Claim

_MARK = {CONFIRMED: "✓", NOT_CONFIRMED: "✗", NOT_APPLICABLE: "–"}
_RUN_STATE = {"stored": "finished", "computed": "finished"}
_CLASS = {CONFIRMED: "confirmed", NOT_CONFIRMED: "refuted", NOT_APPLICABLE: "na"}

# Figure widths by panel count: a panel is about 5 in wide (new_figure draws 5.2 in a column),
# so a PNG narrower than 9 in holds one panel column, narrower than 13.5 in two, else three or more.
_PANEL_BREAKS_IN = (9.0, 13.5)
_DEFAULT_DPI = 150.0  # what save_figure writes; used when a PNG does not state its resolution
# Thumbnails are downscaled to at most this many pixels (twice their CSS box, for sharp screens).
_THUMB_PX = (560, 240)

# "Not confirmed:" items of an experiment's text: the first sentence shows, a long rest folds.
_NOT_CONFIRMED_ITEM = re.compile(r"(?=\bNot confirmed: )")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
_SHORT_HEAD = 60  # a first sentence shorter than this shows together with the second
_FOLD_AT = 160  # a rest shorter than this is shown, not folded

_GREEN, _RED = OKABE_ITO["bluish green"], OKABE_ITO["vermillion"]
_CSS = f"""
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.25rem auto;
       max-width: 78rem; padding: 0 1rem; color: #1a1a1a; line-height: 1.45; }}
h1 {{ font-size: 1.5rem; margin: 0 0 0.15rem; }}
h2 {{ font-size: 1.25rem; border-bottom: 1px solid #ccc; padding-bottom: 0.2rem; margin-top: 2.2rem; }}
a {{ color: #0b57a4; }}
.meta {{ color: #555; margin: 0; }}
header .counts {{ margin: 0.3rem 0 0.6rem; }}
.counts span {{ margin-right: 1rem; }}
.counts .refuted, .warn {{ color: #a23b00; font-weight: 600; }}
.counts .zero {{ color: #999; font-weight: normal; }}
.warn {{ margin: 0 0 0.5rem; }}
#summary .cards {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(16.5rem, 1fr)); gap: 0.7rem; }}
.card {{ border: 1px solid #d4d4d4; border-radius: 6px; padding: 0.45rem 0.55rem; font-size: 0.82rem;
        line-height: 1.35; break-inside: avoid; }}
/* title, counts, thumbnail, claim: rows shared by the cards of a grid row, so they line up */
article.card {{ display: grid; grid-row: span 4; grid-template-rows: subgrid; row-gap: 0.35rem; align-content: start; }}
nav.card {{ grid-row: span 4; }}
.card h3 {{ font-size: 0.98rem; margin: 0; }}
.card h3 a {{ color: inherit; text-decoration: none; }}
.card p {{ margin: 0; color: #333; }}
.card .thumb {{ display: block; height: 7.5rem; border: 1px solid #eee; background: #fff; }}
.card .thumb img {{ width: 100%; height: 100%; object-fit: contain; display: block; }}
.card .thumb.none {{ color: #888; display: flex; align-items: center; justify-content: center; }}
p.tally {{ font-size: 0.8rem; line-height: 1.3; }}
p.tally a {{ color: inherit; text-decoration: none; }}
p.tally span {{ white-space: nowrap; margin-right: 0.6rem; }}
nav#contents h3 {{ font-size: 0.98rem; margin: 0; }}
nav#contents ol {{ margin: 0; padding-left: 1.3rem; }}
nav#contents li {{ margin: 0.05rem 0; }}
details.claims-group {{ border: 1px solid #d4d4d4; border-radius: 4px; margin: 0.4rem 0; }}
details.claims-group > summary {{ cursor: pointer; padding: 0.35rem 0.6rem; background: #f7f7f7; }}
details.claims-group[open] > summary {{ border-bottom: 1px solid #d4d4d4; }}
details.claims-group > summary .counts {{ margin-left: 0.8rem; font-size: 0.9rem; }}
details.claims-group > summary .counts span {{ margin-right: 0.6rem; }}
.section-counts {{ font-size: 0.9rem; color: #444; margin-top: -0.3rem; }}
table {{ border-collapse: collapse; width: 100%; font-size: 0.9rem; table-layout: fixed; }}
th, td {{ border: 1px solid #ccc; padding: 0.3rem 0.45rem; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }}
th {{ background: #f2f2f2; }}
/* one set of column widths for every experiment's table, so the folded tables line up */
details.claims-group th {{ box-sizing: border-box; }}
details.claims-group th:nth-child(1) {{ width: 22%; }}
details.claims-group th:nth-child(2) {{ width: 23%; }}
details.claims-group th:nth-child(3), details.claims-group th:nth-child(4) {{ width: 10.5%; }}
details.claims-group th:nth-child(5) {{ width: 12%; }}
details.claims-group th:nth-child(6) {{ width: 22%; }}
table.runs {{ table-layout: auto; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
tr.confirmed td.verdict {{ background: {_GREEN}26; border-left: 4px solid {_GREEN}; }}
tr.refuted td.verdict {{ background: {_RED}26; border-left: 4px solid {_RED}; }}
tr.na td.verdict {{ background: #eeeeee; border-left: 4px solid #888888; }}
td.verdict b {{ white-space: nowrap; }}
td.verdict small {{ display: block; color: #444; }}
ul.not-confirmed {{ list-style: none; padding-left: 0.4rem; }}
ul.not-confirmed li {{ margin: 0.25rem 0; }}
ul.not-confirmed b, details.why b {{ color: #a23b00; }}
details.why > summary {{ cursor: pointer; }}
details.why:not([open]) > summary::after {{ content: " …"; color: #666; }}
details.why p {{ margin: 0.2rem 0 0.4rem; }}
figure {{ margin: 1rem 0; max-width: 100%; }}
/* single panels side by side where two follow each other */
figure.panels-1 {{ display: inline-block; vertical-align: top; width: 36rem; margin-right: 1rem; }}
figure.panels-2 {{ max-width: 62rem; }}
figure img {{ width: 100%; height: auto; border: 1px solid #ddd; }}
figcaption {{ color: #333; font-size: 0.9rem; }}
pre {{ background: #f7f7f7; padding: 0.6rem; overflow-x: auto; font-size: 0.8rem; }}
ul.problems li {{ font-family: ui-monospace, monospace; font-size: 0.85rem; }}
@media print {{
  body {{ max-width: none; margin: 0; padding: 0; font-size: 10pt; }}
  a {{ color: inherit; text-decoration: none; }}
  table {{ font-size: 8.5pt; }}
  th, td {{ padding: 0.2rem 0.3rem; }}
  td.num {{ white-space: normal; }}
  .jump {{ display: none; }}
  figure, tr, .card {{ break-inside: avoid; }}
  h2, h3, summary {{ break-after: avoid; }}
  details.claims-group > summary, details.why > summary {{ list-style: none; }}
  details.why:not([open]) > summary::after {{ content: ""; }}
}}
@media print {{
  details.claims-group::details-content, details.why::details-content {{ content-visibility: visible; display: block; }}
}}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    text = f"{value:.4g}"
    return _e(f"{text} {unit}" if unit else text)


def _anchor(name: str) -> str:
    return "exp-" + _slug(name)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


def _counts(outcome: ExperimentOutcome) -> dict[str, int]:
    counts = dict.fromkeys(_MARK, 0)
    for claim, _ in outcome.rows():
        counts[claim.verdict.status] += 1
    return counts


def _count_spans(counts: Mapping[str, int], *, mute_zero: bool = False) -> str:
    """``✓ 7 confirmed ✗ 1 not confirmed – 0 not applicable`` as spans (the header's and groups' wording)."""
    return " ".join(
        f'<span class="{_CLASS[status]}{" zero" if mute_zero and not counts[status] else ""}">'
        f"{_MARK[status]} {counts[status]} {_e(status)}</span>"
        for status in _MARK
    )


def _claim_row(claim: Claim, placeholder: bool, network: bool) -> str:
    """One claim; with ``network`` (some claim of the group has the network's own prediction) two
    more cells: the mean-field flow's prediction and its verdict (empty for the others)."""
    verdict = claim.verdict
    tolerance = "—" if placeholder else _e(claim.tolerance.describe())
    second = ""
    if network:
        nv = claim.network_verdict
        second = (
            '<td class="num"></td><td></td>'
            if nv is None
            else f'<td class="num">{_number(claim.network_predicted, claim.unit)}</td>'
            f'<td class="verdict {_CLASS[nv.status]}"><b>{_MARK[nv.status]} {_e(nv.status)}</b>'
            f"<small>{_e(nv.reason)}</small></td>"
        )
    return (
        f'<tr class="{_CLASS[verdict.status]}">'
        f"<td>{_e(claim.claim)}</td><td>{_e(claim.measured_what)}</td>"
        f'<td class="num">{_number(claim.predicted, claim.unit)}</td>'
        f'<td class="num">{_number(claim.measured, claim.unit)}</td>'
        f"<td>{tolerance}</td>"
        f'<td class="verdict"><b>{_MARK[verdict.status]} {_e(verdict.status)}</b>'
        f"<small>{_e(verdict.reason)}</small></td>{second}"
        "</tr>"
    )


def network_counts(claims) -> dict[str, int]:
    """The second verdicts' counts ({status: n}) of the claims that carry the network's own prediction."""
    counts = dict.fromkeys(_MARK, 0)
    for claim in claims:
        if (nv := claim.network_verdict) is not None:
            counts[nv.status] += 1
    return counts


def _claims_group(outcome: ExperimentOutcome) -> str:
    """One experiment's claims as a closed ``<details>``; its summary line holds the counts."""
    rows = outcome.rows()
    counts = _counts(outcome)
    second = network_counts(claim for claim, _ in rows)
    network = sum(second.values()) > 0
    table = "".join(_claim_row(claim, placeholder, network) for claim, placeholder in rows)
    noun = "claim" if len(rows) == 1 else "claims"
    extra = (
        f" · network's own prediction, {sum(second.values())}: {_count_spans(second, mute_zero=True)}"
        if network
        else ""
    )
    head = "<th>Network's own</th><th>Its verdict</th>" if network else ""
    return (
        f'<details class="claims-group" id="claims-{_slug(outcome.name)}">'
        f"<summary><b>{_e(outcome.name)} · {_e(outcome.title)}</b>"
        f'<span class="counts">{len(rows)} {noun}: {_count_spans(counts, mute_zero=True)}{extra}</span>'
        f'<a class="jump" href="#{_anchor(outcome.name)}">section ↓</a></summary>'
        "<table><thead><tr><th>Claim</th><th>What was measured</th><th>Predicted</th>"
        f"<th>Measured</th><th>Tolerance</th><th>Verdict</th>{head}</tr></thead>"
        f"<tbody>{table}</tbody></table></details>"
    )


def _fold(item: str) -> str:
    """A "Not confirmed: ..." item: its first sentence (two if the first is short) and the rest folded."""
    bounds = list(_SENTENCE_END.finditer(item))[:2]
    if not bounds:
        return f"<li>{_bold_lead(item)}</li>"
    first = bounds[0]
    cut = bounds[1] if first.start() < _SHORT_HEAD and len(bounds) > 1 else first
    head, rest = item[: cut.start()], item[cut.end() :]
    if len(rest) < _FOLD_AT:
        return f"<li>{_bold_lead(item)}</li>"
    return f'<li><details class="why"><summary>{_bold_lead(head)}</summary><p>{_e(rest)}</p></details></li>'


def _bold_lead(text: str) -> str:
    lead = "Not confirmed:"
    if text.startswith(lead):
        return f"<b>{lead}</b>{_e(text[len(lead) :])}"
    return _e(text)


def _paragraphs(text: str) -> str:
    """Plain-text paragraphs; a paragraph listing "Not confirmed:" items becomes a list of folded items."""
    parts = []
    for paragraph in (p.strip() for p in text.split("\n\n")):
        if not paragraph:
            continue
        pieces = [p.strip() for p in _NOT_CONFIRMED_ITEM.split(paragraph)]
        items = [p for p in pieces if p.startswith("Not confirmed: ")]
        if not items:
            parts.append(f"<p>{_e(paragraph)}</p>")
            continue
        if pieces[0] and not pieces[0].startswith("Not confirmed: "):
            parts.append(f"<p>{_e(pieces[0])}</p>")
        parts.append('<ul class="not-confirmed">' + "".join(_fold(item) for item in items) + "</ul>")
    return "".join(parts)


def _png_panels(png: Path) -> int:
    """Panel columns of a figure, from its PNG's width in inches (1, 2, or 3 for three or more).

    A file Pillow cannot read counts as three: drawn at full width, as before.
    """
    from PIL import Image

    try:
        with Image.open(png) as image:
            dpi = image.info.get("dpi", (_DEFAULT_DPI,))[0] or _DEFAULT_DPI
            inches = image.width / float(dpi)
    except OSError:  # PIL.UnidentifiedImageError included
        return 1 + len(_PANEL_BREAKS_IN)
    return 1 + sum(inches >= limit for limit in _PANEL_BREAKS_IN)


def _thumbnail(png: Path) -> bytes:
    """A downscaled PNG of ``png`` on white, at most ``_THUMB_PX`` (deterministic bytes).

    A file Pillow cannot read is embedded as it is, like the figure itself.
    """
    try:
        return _downscaled(png)
    except OSError:  # PIL.UnidentifiedImageError included
        return png.read_bytes()


def _downscaled(png: Path) -> bytes:
    from PIL import Image

    with Image.open(png) as image:
        scale = min(1.0, _THUMB_PX[0] / image.width, _THUMB_PX[1] / image.height)
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        rgba = image.convert("RGBA")
    flat = Image.new("RGBA", rgba.size, "white")
    flat.alpha_composite(rgba)
    small = flat.convert("RGB").resize(size, Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    small.save(buffer, format="PNG")
    return buffer.getvalue()


def _data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _figure(figure: SavedFigure) -> str:
    png = Path(figure.png)
    return (
        f'<figure class="panels-{_png_panels(png)}">'
        f'<img src="{_data_uri(png.read_bytes())}" alt="{_e(figure.caption)}">'
        f"<figcaption>{_e(figure.caption)} <i>(PDF: figures/{_e(Path(figure.pdf).name)})</i></figcaption></figure>"
    )


def _tally(outcome: ExperimentOutcome, counts: Mapping[str, int]) -> str:
    """The experiment's counts in the header's wording, linking to its claims."""
    spans = _count_spans(counts, mute_zero=True)
    return f'<p class="tally counts"><a href="#claims-{_slug(outcome.name)}">{spans}</a></p>'


def _card(outcome: ExperimentOutcome, figures: Sequence[SavedFigure]) -> str:
    """One experiment on the summary screen: title, claim, counts, thumbnail of its first figure."""
    anchor = _anchor(outcome.name)
    parts = [
        f'<article class="card" id="summary-{_slug(outcome.name)}">',
        f'<h3><a href="#{anchor}">{_e(outcome.name)} · {_e(outcome.title)}</a></h3>',
        _tally(outcome, _counts(outcome)),
    ]
    if figures:
        headline = figures[0]
        parts.append(
            f'<a class="thumb" href="#{anchor}"><img src="{_data_uri(_thumbnail(Path(headline.png)))}" '
            f'alt="{_e(outcome.name)}: {_e(Path(headline.png).stem)} (thumbnail)"></a>'
        )
    else:
        parts.append(f'<a class="thumb none" href="#{anchor}">no figure</a>')
    warning = ""
    if outcome.error or outcome.result is None:
        missing = f"{len(outcome.missing)} run(s) missing or failed" if outcome.missing else "see its section"
        warning = f'<b class="warn">No result: {missing}.</b> '
    parts.append(f"<p>{warning}{_e(outcome.description)}</p></article>")
    return "".join(parts)


def _contents(outcomes: Sequence[ExperimentOutcome], failures: bool, problems: bool) -> str:
    items = ['<li><a href="#claims">Claims, by experiment</a></li>']
    if failures:
        items.append('<li><a href="#failures">Failed runs</a></li>')
    if problems:
        items.append('<li><a href="#store-problems">Problems met while building the report</a></li>')
    items += [f'<li><a href="#{_anchor(o.name)}">{_e(o.name)} · {_e(o.title)}</a></li>' for o in outcomes]
    return f'<nav id="contents" class="card"><h3>Contents</h3><ol>{"".join(items)}</ol></nav>'


def _experiment_section(outcome: ExperimentOutcome, figures: Sequence[SavedFigure]) -> str:
    counts = _counts(outcome)
    parts = [
        f'<section id="{_anchor(outcome.name)}"><h2>{_e(outcome.name)} · {_e(outcome.title)}</h2>',
        f'<p class="section-counts counts">{_count_spans(counts, mute_zero=True)}'
        f'<span class="jump"><a href="#claims-{_slug(outcome.name)}">its claims</a> · '
        '<a href="#summary">summary</a></span></p>',
    ]
    if outcome.description:
        parts.append(_paragraphs(outcome.description))
    if outcome.error:
        parts.append(f"<p><b>No result:</b> {_e(outcome.error)}</p>")
    elif outcome.result is None:
        parts.append(f"<p><b>Incomplete:</b> runs missing from the store: {_e(', '.join(outcome.missing))}.</p>")
    else:
        parts.append(_paragraphs(outcome.result.text))
    parts.extend(_figure(figure) for figure in figures)
    # "stored" and "computed" both show as "finished": the report must not depend on resume history.
    runs = "".join(
        f"<tr><td>{_e(run.name)}</td><td>{_e(_RUN_STATE.get(run.state, run.state))}</td>"
        f"<td><code>{_e(run.key[:16])}</code></td>"
        f"<td>{_e(run.error)}</td></tr>"
        for run in outcome.runs
    )
    config = json.dumps(outcome.config, indent=1, sort_keys=True)
    parts.append(
        "<details><summary>Configuration and runs</summary>"
        f"<pre>{_e(config)}</pre>"
        f'<table class="runs"><thead><tr><th>Run</th><th>State</th><th>Key (prefix)</th><th>Error</th></tr></thead>'
        f"<tbody>{runs}</tbody></table></details></section>"
    )
    return "".join(parts)


def render_report(
    outcomes: Sequence[ExperimentOutcome],
    figures: Mapping[str, Sequence[SavedFigure]],
    problems: Sequence[str],
    *,
    mode: str,
    version: str,
) -> str:
    """The report as one HTML string (see the module docstring)."""
    counts = dict.fromkeys(_MARK, 0)
    for outcome in outcomes:
        for status, n in _counts(outcome).items():
            counts[status] += n
    total = sum(counts.values())
    second = network_counts(claim for o in outcomes for claim, _ in o.rows())
    failures = [f"{o.name}/{run.name}: {run.error}" for o in outcomes for run in o.runs if run.state == "failed"] + [
        f"{o.name}: {o.error}" for o in outcomes if o.error and not any(r.state == "failed" for r in o.runs)
    ]
    body = [
        "<header><h1>nqf: does the theory predict training?</h1>",
        f'<p class="meta">{_e(mode)} mode · nqf {_e(version)} · {total} claims · '
        f"experiments {_e(', '.join(o.name for o in outcomes))} · theory: docs/theory.md in the nqf repository "
        "(the paper: arXiv:2608.13335)</p>",
        f'<p class="counts">{_count_spans(counts)}</p>',
    ]
    if sum(second.values()):
        body.append(
            f'<p class="counts">the network\'s own prediction (the mean-field flow of its units), a second verdict on '
            f"{sum(second.values())} claims about trained networks: {_count_spans(second)}</p>"
        )
    if failures:
        body.append(f'<p class="warn"><a href="#failures">{len(failures)} failed run(s)</a></p>')
    if problems:
        body.append(
            f'<p class="warn"><a href="#store-problems">{len(problems)} problem(s) met while building the report'
            "</a></p>"
        )
    body.append("</header>")
    cards = "".join(_card(o, figures.get(o.name, ())) for o in outcomes)
    body.append(
        f'<section id="summary"><div class="cards">{cards}{_contents(outcomes, bool(failures), bool(problems))}'
        "</div></section>"
    )
    body += [
        '<section id="claims"><h2>Claims</h2>',
        "<p>Each verdict is computed from the stated tolerance: confirmed when the measured number lies "
        "within it, not confirmed otherwise; not applicable when the theory makes no prediction or nothing "
        "was measured, with the reason. The claims are folded by experiment; the counts are on each line. "
        "A claim about a trained network also has a second verdict: the network's own prediction (the "
        "mean-field flow of its units; for a mixture of experts the networks that share the init's M0; for "
        "an exactly quadratic unit the M-flow itself: docs/departure.md) against the same measurement and "
        "tolerance; the quadratic theory's verdict is the first, unchanged.</p>",
        *(_claims_group(o) for o in outcomes),
        "</section>",
    ]
    if failures:
        items = "".join(f"<li>{_e(line)}</li>" for line in failures)
        body.append(f'<section id="failures"><h2>Failed runs</h2><ul class="problems">{items}</ul></section>')
    if problems:
        items = "".join(f"<li>{_e(line)}</li>" for line in problems)
        body.append(
            '<section id="store-problems"><h2>Problems met while building the report</h2>'
            f'<ul class="problems">{items}</ul></section>'
        )
    body.extend(_experiment_section(o, figures.get(o.name, ())) for o in outcomes)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>nqf report ({_e(mode)})</title><style>{_CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def build_report(
    out_dir: str | Path,
    outcomes: Sequence[ExperimentOutcome],
    figures: Mapping[str, Sequence[SavedFigure]],
    problems: Sequence[str],
    *,
    mode: str,
    version: str,
) -> Path:
    """Write ``out_dir/report.html`` atomically and return its path."""
    path = Path(out_dir) / REPORT_NAME
    text = render_report(outcomes, figures, problems, mode=mode, version=version)
    atomic_write_bytes(path, text.encode("utf-8"))
    return path
