"""The HTML report of a run file: leaderboards, the selection-crisis tables and a scatter plot of
RM accuracy against policy accuracy. One self-contained page (inline CSS, the PNG embedded as
base64 and also written beside it).

    prefalign report RUN.json --out DIR      (and ``--prefalign-report DIR`` at the end of a run)

The plot (``plot.py``) needs matplotlib (``pip install pytest-prefalign[report]``); without it the
page says so and everything else is still written.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import html
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from pytest_prefalign import storage
from pytest_prefalign.analysis import catalogue, family, spread, summary, table
from pytest_prefalign.analysis.plot import Point, render_plot, scatter_extras, scatter_points
from pytest_prefalign.runs import records
from pytest_prefalign.runs.records import CaseResult, RunFile, RunFileError

PAGE = "report.html"
PLOT = "rm_vs_policy.png"
PLOT_HINT = "The plot needs matplotlib: pip install pytest-prefalign[report]"

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; }
th { background: #f4f4f4; } tr:nth-child(even) td { background: #fafafa; }
.meta, .note { color: #555; font-size: .9em; } .warn { color: #a40; }
img { max-width: 100%; border: 1px solid #eee; }
"""

# --------------------------------------------------------------------------------------------
# Page
# --------------------------------------------------------------------------------------------


def write_report(run: RunFile, out_dir: Path) -> Path:
    """Write ``out_dir/report.html`` (and the plot beside it, when matplotlib is there)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_html = _plot_section(scatter_points(run.results), out_dir, scatter_extras(run.results))
    page = out_dir / PAGE
    storage.atomic_write_text(page, render_page(run, plot_html))
    return page


def _plot_section(
    points: dict[tuple[str, str], list[Point]],
    out_dir: Path,
    extras: dict[tuple[str, str], dict[str, Any]],
) -> str:
    if not points:
        return '<p class="note">No reward method has both RM and policy accuracy: no plot.</p>'
    try:
        png, _ = render_plot(points, extras)
    except ImportError:
        return f'<p class="note">{html.escape(PLOT_HINT)}</p>'
    storage.atomic_write_bytes(out_dir / PLOT, png)
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<img alt="RM accuracy against policy accuracy, one point per method" '
        f'src="data:image/png;base64,{data}">'
        f'<p class="note">Also written as {PLOT}. Points above the dashed line: the policy '
        "ranks pairs better than its RM does.</p>"
    )


def render_page(run: RunFile, plot_html: str) -> str:
    """The page, from the run's results and the analysis stored with them."""
    body = [f"<h1>pytest-prefalign report</h1>{_meta(run)}", "<h2>Leaderboards</h2>"]
    body += [_leaderboard(suite, size, rows) for (suite, size), rows in table.by_suite(run.results)]
    body += [
        "<h2>Does RM accuracy pick the method that generates best?</h2>",
        _tau_section(run.tau),
        "<h2>Selection regret</h2>",
        _regret_section(run.crisis.get("regret", [])),
        "<h2>In-context learning against reward-guided decoding</h2>",
        _icl_section(run.crisis.get("icl_vs_rgd", [])),
        "<h2>Ranking inversions</h2>",
        _inversion_section(run.crisis.get("inversions", [])),
        "<h2>Circular evaluation</h2>",
        _circular_section(run.crisis.get("circular", [])),
        "<h2>Per-user spread</h2>",
        _spread_section(run.crisis.get("spread", [])),
        _family_note(run.crisis.get("family")),
        "<h2>RM accuracy against policy accuracy</h2>",
        plot_html,
        "<h2>Data</h2>",
        _data_section(run.results),
    ]
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>pytest-prefalign report</title><style>{CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def _meta(run: RunFile) -> str:
    parts = [f"created {run.created or '?'}", f"commit {run.commit or '-'}"]
    for key in ("sizes", "limit", "reduce", "seed"):
        if key in run.config:
            parts.append(f"{key} {run.config[key]}")
    parts += [f"{size}: {m.get('name', '?')}" for size, m in sorted(run.models.items())]
    return f'<p class="meta">{html.escape(" · ".join(str(p) for p in parts))}</p>'


def _extra_columns() -> list[catalogue.Metric]:
    """The page shows the circular win rate beside the leaderboard's columns, marked as such."""
    return [
        dataclasses.replace(m, title="win, own RM (circular)")
        for m in catalogue.with_role("own_judge")
    ]


def _leaderboard(suite: str, size: str, rows: list[CaseResult]) -> str:
    present = table.columns(rows, _extra_columns())
    body = [
        [
            rank,
            row.method,
            *(table.fmt(row, m) for m in present),
            f"{row.timings.get('total_s', 0):.1f}s",
        ]
        for rank, row in enumerate(table.ordered(rows), 1)
    ]
    headers = ["#", "method", *(m.title for m in present), "time"]
    first, second, *notes = table.header(suite, size, rows)  # a note on the pairs, maybe
    key = table.sort_key(rows)
    return (
        f'<h3>{html.escape(first)}</h3><p class="meta">{html.escape(second.strip())}; '
        f"sorted by {html.escape(key)}; [95% CI, users resampled]</p>"
        + "".join(f'<p class="meta">{html.escape(n.strip())}</p>' for n in notes)
        + _html_table(body, headers)
    )


def _html_table(body: list[list[Any]], headers: list[str]) -> str:
    """tabulate's ``html`` format escapes every cell."""
    return tabulate(body, headers=headers, tablefmt="html", disable_numparse=True)


def _tau_section(entries: list[dict[str, Any]]) -> str:
    if not entries:
        return '<p class="note">No reward methods in this run.</p>'
    return (
        summary.tau_table(entries, tablefmt="html")
        + '<p class="note">Kendall\'s tau-b across the reward methods of one suite, size and '
        "decoder, with its exact permutation p-value over the methods, p_holm (adjusted with "
        "the run's other looks, which decides) and an interval with users resampled (which "
        "describes). Where the data cannot say something (saturated or tied RM accuracies, fewer "
        "than 5 methods or 5 users), the estimate is shown in parentheses and makes no look.</p>"
    )


def _regret_section(entries: list[dict[str, Any]]) -> str:
    if not entries:
        return '<p class="note">Fewer than two reward methods per decoder: no selection.</p>'
    return summary.regret_table(entries, tablefmt="html") + (
        '<p class="note">The figure lost by taking the reward method with the best RM accuracy '
        "instead of the best one, cross-fitted: both are chosen on half of the users and "
        "compared on the other half, over many random halvings, so that the winner's curse does "
        "not make a regret out of noise. p: the within-user permutation of the figure across "
        "the methods; the interval resamples users.</p>"
    )


def _icl_section(entries: list[dict[str, Any]]) -> str:
    if not entries:
        return '<p class="note">No ICL row beside a reward-guided row in this run.</p>'
    return summary.icl_table(entries, tablefmt="html") + (
        '<p class="note">Each ICL row minus the best reward-guided row of its suite and size, '
        "over the users they all have: the interval resamples users; p is the within-user "
        "permutation of the ICL row and every reward-guided row, the best chosen again in each "
        "permutation; one row is called better only when p_holm is below 0.05, and with fewer "
        "than 6 users there is not enough evidence.</p>"
    )


def _inversion_section(entries: list[dict[str, Any]]) -> str:
    significant = [e for e in entries if e.get("significant", True)]
    note = (
        f'<p class="note">{len(entries) - len(significant)} more pair(s) ordered one way '
        "by RM accuracy and the other by the second figure, not significantly.</p>"
        if len(entries) > len(significant)
        else ""
    )
    if not significant:
        return (
            note
            or '<p class="note">None: RM accuracy orders the methods as the other figures do.</p>'
        )
    return summary.inversion_table(significant, tablefmt="html") + note


def _circular_section(entries: list[dict[str, Any]]) -> str:
    if not entries:
        return '<p class="note">No win rates in this run.</p>'
    text = summary.circular_table(entries, tablefmt="html")
    notes = [
        line
        for line in summary.circular_lines(entries)
        if line.startswith(("!", "  no independent"))
    ]
    return text + "".join(f'<p class="warn">{html.escape(n.strip())}</p>' for n in notes)


def _spread_section(entries: list[dict[str, Any]]) -> str:
    flags = [f for f in entries if f.get("fires", True)]
    if not flags:
        return (
            f'<p class="note">Nothing flagged (rule: means within {spread.CLOSE:g} but worst '
            f"deciles {spread.APART:g} apart, or a gain over base on the mean with a loss of "
            f"{spread.APART:g} on the worst decile; at least {spread.MIN_USERS} users; a swap "
            "test over users, adjusted with the run's other looks).</p>"
        )
    items = "".join(
        f"<li>{html.escape(f['suite'])} · {html.escape(f['size'])}: {html.escape(f['text'])}</li>"
        for f in flags
    )
    return f"<ul>{items}</ul>"


def _family_note(found: dict[str, Any] | None) -> str:
    """How many looks the run made and how they were controlled (every verdict above)."""
    text = family.describe(found)
    return f'<p class="note">{html.escape(text)}</p>' if text else ""


def _data_section(results: Sequence[CaseResult]) -> str:
    """Each suite's data: where it was read, its licence and the attribution its licence asks
    for (CC BY: wherever the data is used, so with every figure computed from it)."""
    seen: dict[str, dict[str, Any]] = {}
    for row in results:
        seen.setdefault(row.suite, row.data)
    lines = []
    for suite, data in sorted(seen.items()):
        provenance = data.get("provenance") or {}
        parts = [f"<b>{html.escape(suite)}</b>: {html.escape(str(data.get('source', '?')))}"]
        for field in ("licence", "attribution"):
            if provenance.get(field):
                parts.append(f"{field}: {html.escape(str(provenance[field]))}")
        lines.append(f"<li>{'<br>'.join(parts)}</li>")
    return (
        f"<ul>{''.join(lines)}</ul>"
        '<p class="note">The figures on this page are computed from these data; keep the '
        "attribution with them wherever they are shown.</p>"
    )


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def report_main(argv: Sequence[str]) -> int:
    """``prefalign report RUN.json --out DIR``: 0 when written, 2 on a bad path or file."""
    parser = argparse.ArgumentParser(
        prog="prefalign report", description="Write the HTML report of a run file."
    )
    parser.add_argument("run", metavar="RUN.json", help="a run file (.prefalign/runs/*.json)")
    parser.add_argument("--out", metavar="DIR", required=True, help="folder for report.html")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:  # argparse has printed the usage error
        return int(exc.code or 0)
    out = Path(args.out)
    try:
        run = records.read(Path(args.run))
    except RunFileError as exc:
        print(f"prefalign report: {exc}", file=sys.stderr)
        return 2
    if out.exists() and not out.is_dir():
        print(f"prefalign report: --out {out}: exists and is not a folder", file=sys.stderr)
        return 2
    try:
        written = write_report(run, out)
    except OSError as exc:  # a folder that cannot be made or written
        print(f"prefalign report: --out {exc.filename or out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"prefalign report: wrote {written}")
    return 0
