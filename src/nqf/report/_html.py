"""The self-contained ``report.html``: claims table first, then one section per experiment.

Self-contained means one file that needs nothing else: CSS inline, figures embedded as
``data:image/png;base64`` URIs, no scripts, no external or local references (the PDFs
sit next to it in ``figures/`` for print, but the page does not load them). The output
depends only on its inputs (no timestamps), so an interrupted-then-resumed reproduction
writes the same bytes as an uninterrupted one.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from nqf.store.results import atomic_write_bytes
from nqf.store.verdict import CONFIRMED, NOT_APPLICABLE, NOT_CONFIRMED, Claim

from ..experiments._base import ExperimentOutcome
from ._style import OKABE_ITO, SavedFigure

REPORT_NAME = "report.html"

_MARK = {CONFIRMED: "✓", NOT_CONFIRMED: "✗", NOT_APPLICABLE: "–"}
_RUN_STATE = {"stored": "finished", "computed": "finished"}
_CLASS = {CONFIRMED: "confirmed", NOT_CONFIRMED: "refuted", NOT_APPLICABLE: "na"}

_CSS = f"""
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem auto;
       max-width: 78rem; padding: 0 1rem; color: #1a1a1a; line-height: 1.45; }}
h1 {{ font-size: 1.6rem; margin-bottom: 0.2rem; }}
h2 {{ font-size: 1.25rem; border-bottom: 1px solid #ccc; padding-bottom: 0.2rem; margin-top: 2.2rem; }}
.meta {{ color: #555; margin-top: 0; }}
table {{ border-collapse: collapse; width: 100%; font-size: 0.9rem; }}
th, td {{ border: 1px solid #ccc; padding: 0.3rem 0.45rem; text-align: left; vertical-align: top; }}
th {{ background: #f2f2f2; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
tr.confirmed td.verdict {{ background: {OKABE_ITO["bluish green"]}26;
  border-left: 4px solid {OKABE_ITO["bluish green"]}; }}
tr.refuted td.verdict {{ background: {OKABE_ITO["vermillion"]}26; border-left: 4px solid {OKABE_ITO["vermillion"]}; }}
tr.na td.verdict {{ background: #eeeeee; border-left: 4px solid #888888; }}
td.verdict b {{ white-space: nowrap; }}
td.verdict small {{ display: block; color: #444; }}
.counts span {{ margin-right: 1rem; }}
figure {{ margin: 1rem 0; }}
figure img {{ max-width: 100%; height: auto; border: 1px solid #ddd; }}
figcaption {{ color: #333; font-size: 0.9rem; }}
pre {{ background: #f7f7f7; padding: 0.6rem; overflow-x: auto; font-size: 0.8rem; }}
ul.problems li {{ font-family: ui-monospace, monospace; font-size: 0.85rem; }}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    text = f"{value:.4g}"
    return _e(f"{text} {unit}" if unit else text)


def _anchor(name: str) -> str:
    return "exp-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


def _claim_row(experiment: str, claim: Claim, placeholder: bool) -> str:
    verdict = claim.verdict
    tolerance = "—" if placeholder else _e(claim.tolerance.describe())
    return (
        f'<tr class="{_CLASS[verdict.status]}">'
        f'<td><a href="#{_anchor(experiment)}">{_e(experiment)}</a></td>'
        f"<td>{_e(claim.claim)}</td><td>{_e(claim.measured_what)}</td>"
        f'<td class="num">{_number(claim.predicted, claim.unit)}</td>'
        f'<td class="num">{_number(claim.measured, claim.unit)}</td>'
        f"<td>{tolerance}</td>"
        f'<td class="verdict"><b>{_MARK[verdict.status]} {_e(verdict.status)}</b>'
        f"<small>{_e(verdict.reason)}</small></td>"
        "</tr>"
    )


def _paragraphs(text: str) -> str:
    return "".join(f"<p>{_e(p.strip())}</p>" for p in text.split("\n\n") if p.strip())


def _figure(figure: SavedFigure) -> str:
    data = base64.b64encode(Path(figure.png).read_bytes()).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{_e(figure.caption)}">'
        f"<figcaption>{_e(figure.caption)} <i>(PDF: figures/{_e(Path(figure.pdf).name)})</i></figcaption></figure>"
    )


def _experiment_section(outcome: ExperimentOutcome, figures: Sequence[SavedFigure]) -> str:
    parts = [f'<section id="{_anchor(outcome.name)}"><h2>{_e(outcome.name)} · {_e(outcome.title)}</h2>']
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
        f"<table><thead><tr><th>Run</th><th>State</th><th>Key (prefix)</th><th>Error</th></tr></thead>"
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
    rows = [(o.name, claim, placeholder) for o in outcomes for claim, placeholder in o.rows()]
    counts = {status: 0 for status in _MARK}
    for _, claim, _ in rows:
        counts[claim.verdict.status] += 1
    count_html = "".join(
        f'<span class="{_CLASS[status]}">{_MARK[status]} {counts[status]} {_e(status)}</span>' for status in _MARK
    )
    table = "".join(_claim_row(name, claim, placeholder) for name, claim, placeholder in rows)
    failures = [f"{o.name}/{run.name}: {run.error}" for o in outcomes for run in o.runs if run.state == "failed"] + [
        f"{o.name}: {o.error}" for o in outcomes if o.error and not any(r.state == "failed" for r in o.runs)
    ]
    body = [
        "<header><h1>nqf: does the theory predict training?</h1>",
        f'<p class="meta">{_e(mode)} mode · nqf {_e(version)} · {len(rows)} claims · '
        f"experiments {_e(', '.join(o.name for o in outcomes))}</p></header>",
        '<section id="claims"><h2>Claims</h2>',
        f'<p class="counts">{count_html}</p>',
        "<p>Each verdict is computed from the stated tolerance: confirmed when the measured number lies "
        "within it, not confirmed otherwise; not applicable when the theory makes no prediction or nothing "
        "was measured, with the reason.</p>",
        "<table><thead><tr><th>Exp.</th><th>Claim</th><th>What was measured</th><th>Predicted</th>"
        "<th>Measured</th><th>Tolerance</th><th>Verdict</th></tr></thead>",
        f"<tbody>{table}</tbody></table></section>",
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
