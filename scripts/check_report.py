#!/usr/bin/env python3
"""Check that an nqf report.html is self-contained and renders in headless Chromium.

    python scripts/check_report.py results/report.html [--screenshot shot.png] [--chromium PATH]

Three checks, each must pass (exit 0; 1 on failure; 2 when Chromium is missing):

1. Static: no <script>, <link>, <iframe>, <object>, <embed>; every ``src`` is a
   ``data:image/png;base64`` URI that decodes to a PNG; every ``href`` is an in-page
   ``#anchor``; the claims table has its seven columns.
2. Rendered DOM: a copy of the page with a small probe script appended is loaded with
   ``--dump-dom``; the probe records how many images decoded (naturalWidth > 0) and any
   page error; no console message may appear (the report itself has no scripts).
3. Screenshot: the unmodified page is rendered with ``--screenshot`` at 1280 px wide;
   the PNG must exist and not be blank.

Chromium runs headless, sandbox-less (containers), without GPU, networking, sync or
component updates, in a fresh throw-away profile (``--user-data-dir``).
"""

from __future__ import annotations

import argparse
import base64
import html.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
)
COLUMNS = ("Claim", "What was measured", "Predicted", "Measured", "Tolerance", "Verdict")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FORBIDDEN_TAGS = {"script", "link", "iframe", "object", "embed", "base"}

PROBE = """<script>
window.addEventListener("error", function (e) { window.__nqfErrors = (window.__nqfErrors || 0) + 1; });
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  var rows = document.querySelectorAll("#claims tbody tr").length;
  document.body.setAttribute("data-nqf-probe",
    "images=" + ok + "/" + imgs.length + ";rows=" + rows + ";errors=" + (window.__nqfErrors || 0));
});
</script>"""


class _Audit(html.parser.HTMLParser):
    """Collects what makes a page depend on anything outside itself."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[str] = []
        self.images = 0
        self.headers: list[str] = []
        self._in_th = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in FORBIDDEN_TAGS:
            self.failures.append(f"<{tag}> element (the report must have no scripts or external resources)")
        values = dict(attrs)
        if "style" in values and "url(" in (values["style"] or ""):
            self.failures.append("inline style with url(...)")
        if "src" in values:
            self._check_src(tag, values["src"] or "")
        if "href" in values and not (values["href"] or "").startswith("#"):
            self.failures.append(f"<{tag} href={values['href']!r}> leaves the page")
        if tag == "th":
            self._in_th = True
            self.headers.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "th":
            self._in_th = False

    def handle_data(self, data: str) -> None:
        if self._in_th:
            self.headers[-1] += data

    def _check_src(self, tag: str, src: str) -> None:
        prefix = "data:image/png;base64,"
        if not src.startswith(prefix):
            self.failures.append(f"<{tag} src={src[:60]!r}> is not an embedded PNG")
            return
        self.images += 1
        try:
            data = base64.b64decode(src[len(prefix):], validate=True)
        except ValueError:
            self.failures.append(f"<{tag}> data URI is not valid base64")
            return
        if not data.startswith(PNG_SIGNATURE):
            self.failures.append(f"<{tag}> data URI does not hold a PNG")


def static_check(text: str) -> tuple[list[str], int]:
    """Failures of the self-containment check and the number of embedded images."""
    audit = _Audit()
    audit.feed(text)
    failures = list(audit.failures)
    if re.search(r"(?i)(https?:|file:)//", text):
        failures.append("the page mentions an http(s):// or file:// address")
    if "@import" in text:
        failures.append("the CSS imports another file")
    missing = [c for c in COLUMNS if c not in audit.headers]
    if missing:
        failures.append(f"the claims table lacks column(s) {', '.join(missing)}")
    return failures, audit.images


def find_chromium(explicit: str | None) -> str | None:
    candidates = [explicit, os.environ.get("CHROMIUM"), "/usr/bin/chromium"]
    candidates += [shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _chromium(chromium: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="nqf-chromium-") as profile:
        return subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def dom_check(chromium: str, report: Path, images: int, timeout: float) -> list[str]:
    """Load a probed copy of the page; all images must decode, no page error or console message."""
    text = report.read_text(encoding="utf-8")
    probed = text.replace("</body>", PROBE + "</body>") if "</body>" in text else text + PROBE
    with tempfile.TemporaryDirectory(prefix="nqf-probe-") as folder:
        page = Path(folder) / "probe.html"
        page.write_text(probed, encoding="utf-8")
        done = _chromium(
            chromium, ["--virtual-time-budget=10000", "--dump-dom", page.resolve().as_uri()], timeout
        )
    failures = []
    if done.returncode != 0:
        failures.append(f"chromium --dump-dom exited with {done.returncode}")
    match = re.search(r'data-nqf-probe="images=(\d+)/(\d+);rows=(\d+);errors=(\d+)"', done.stdout)
    if not match:
        return failures + ["the page did not finish loading (probe did not run)"]
    decoded, total, rows, errors = map(int, match.groups())
    if total != images or decoded != total:
        failures.append(f"{decoded} of {total} images decoded (expected {images})")
    if rows == 0:
        failures.append("the claims table has no rows")
    if errors:
        failures.append(f"{errors} page error(s)")
    failures += [f"console: {line.split(']', 1)[-1].strip()}" for line in _console_messages(done.stderr)]
    return failures


def screenshot_check(chromium: str, report: Path, screenshot: Path, timeout: float) -> list[str]:
    """Render the unmodified page to ``screenshot``; it must be a non-blank PNG."""
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    if screenshot.exists():
        screenshot.unlink()
    done = _chromium(
        chromium, ["--window-size=1280,2400", f"--screenshot={screenshot.resolve()}", report.resolve().as_uri()], timeout
    )
    failures = [f"console: {line.split(']', 1)[-1].strip()}" for line in _console_messages(done.stderr)]
    if done.returncode != 0:
        failures.append(f"chromium --screenshot exited with {done.returncode}")
    if not screenshot.is_file() or not screenshot.read_bytes().startswith(PNG_SIGNATURE):
        return failures + ["no screenshot was written"]
    try:
        import matplotlib.image

        pixels = matplotlib.image.imread(screenshot)
        if float(pixels[..., :3].std()) < 0.01:
            failures.append("the screenshot is blank")
    except ImportError:  # without matplotlib only the PNG signature is checked
        pass
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--screenshot", type=Path, help="where to write the PNG (default: next to the report)")
    parser.add_argument("--chromium", help="Chromium binary (default: $CHROMIUM, /usr/bin/chromium, PATH)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per Chromium call")
    args = parser.parse_args(argv)
    report: Path = args.report
    if not report.is_file():
        print(f"error: {report} does not exist", file=sys.stderr)
        return 1
    failures, images = static_check(report.read_text(encoding="utf-8"))
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("error: Chromium not found (install it, e.g. apt-get install chromium, or pass --chromium)", file=sys.stderr)
        return 2
    screenshot = args.screenshot or report.with_name("report_screenshot.png")
    try:
        failures += dom_check(chromium, report, images, args.timeout)
        failures += screenshot_check(chromium, report, screenshot, args.timeout)
    except subprocess.TimeoutExpired:
        failures.append(f"chromium took longer than {args.timeout:.0f} s")
    if failures:
        for line in failures:
            print(f"FAIL: {line}", file=sys.stderr)
        return 1
    print(f"ok: {report} is self-contained, renders in Chromium ({images} figure(s) decoded); screenshot {screenshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
