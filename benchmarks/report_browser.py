"""The HTML report in a real browser: headless Chromium loads the page, the plot decodes as an
image of its size, every table has its rows, and a screenshot shows what a reader sees.

    python benchmarks/report_browser.py RUN.json [--out DIR] [--screenshot docs/report.png]

Needs Chromium (Debian: ``apt-get install chromium``); tests/test_report_browser.py runs the same
checks and skips where no browser is installed. The checks read the DOM as Chromium built it
after loading the page (``--dump-dom``), and the plot by running a script in the page that
reports the image's natural size (an image that failed to decode has 0).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# a script the page runs once loaded: the plot's natural size, written into the DOM
PROBE = (
    "<script>window.addEventListener('load', () => { const i = document.querySelector('img');"
    " document.body.dataset.plot = i ? i.naturalWidth + 'x' + i.naturalHeight : 'none'; });"
    "</script>"
)


def browser() -> str | None:
    """The first Chromium on PATH, or None."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def _run(binary: str, *args: str) -> str:
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{binary} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


class Tables(HTMLParser):
    """Counts each table's body rows, and reads the probe's answer from the body."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []  # per table, the rows with data cells
        self.plot = ""
        self._cells = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.rows.append(0)
        elif tag == "tr":
            self._cells = 0
        elif tag == "td":
            self._cells += 1
        elif tag == "body":
            self.plot = dict(attrs).get("data-plot") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._cells and self.rows:
            self.rows[-1] += 1


def check(page: Path, binary: str) -> Tables:
    """Load ``page`` (a copy with the probe) in the browser and read back what it built."""
    with tempfile.TemporaryDirectory() as tmp:
        probed = Path(tmp) / page.name
        probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
        dom = _run(binary, "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    tables = Tables()
    tables.feed(dom)
    return tables


def screenshot(page: Path, binary: str, out: Path, size: str = "1400,2400") -> None:
    _run(binary, f"--window-size={size}", f"--screenshot={out}", page.as_uri())


def main() -> None:
    from pytest_prefalign.analysis import report
    from pytest_prefalign.runs import records

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()))
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args()
    binary = browser()
    if binary is None:
        sys.exit("no Chromium found (apt-get install chromium)")
    page = report.write_report(records.read(args.run), args.out)
    found = check(page, binary)
    print(f"page: {page}")
    print(f"tables: {len(found.rows)}, rows per table: {found.rows}")
    print(f"plot: {found.plot or 'not reported'}")
    if args.screenshot:
        screenshot(page, binary, args.screenshot.resolve())
        print(f"screenshot: {args.screenshot}")
    if not found.rows or min(found.rows) == 0 or found.plot in ("", "none", "0x0"):
        sys.exit("the page is missing a table's rows or its plot")


if __name__ == "__main__":
    main()
