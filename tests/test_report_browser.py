"""The HTML report in a real headless browser (benchmarks/report_browser.py): the page loads, the
plot decodes as an image of its size, and every table has its rows. Skips where no Chromium is
installed (Debian: ``apt-get install chromium``)."""

from __future__ import annotations

from pathlib import Path

import benchmark_scripts
import pytest

from pytest_prefalign.analysis import report


def _module():
    return benchmark_scripts.load("report_browser")


@pytest.mark.slow
def test_the_report_renders_in_chromium(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    browser_check = _module()
    binary = browser_check.browser()
    if binary is None:
        pytest.skip("no Chromium installed (apt-get install chromium)")
    from test_report import RUN, analysed

    page = report.write_report(analysed(RUN), tmp_path / "out")
    found = browser_check.check(page, binary)
    # the leaderboards (two suites), tau, regret, ICL, the circular table: each with its rows
    assert len(found.rows) >= 5 and min(found.rows) >= 1, found.rows
    width, height = (int(v) for v in found.plot.split("x"))
    assert width > 100 and height > 100  # the embedded PNG decoded
    shot = tmp_path / "page.png"
    browser_check.screenshot(page, binary, shot, size="1200,900")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
