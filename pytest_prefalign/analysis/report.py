"""The HTML report of a run file: leaderboards, the same few items' outputs of every row beside
their reference, the selection-crisis tables and a scatter plot of RM accuracy against policy
accuracy. One self-contained page (inline CSS, the PNG embedded as base64 and also written beside
it).

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
from pytest_prefalign.analysis import catalogue, claims, family, power, spread, summary, table
from pytest_prefalign.analysis.plot import (
    Extras,
    Point,
    render_plot,
    scatter_extras,
    scatter_points,
)
from pytest_prefalign.runs import records
from pytest_prefalign.runs.entries import (
    CircularEntry,
    Crisis,
    Family,
    IclEntry,
    InversionEntry,
    RegretEntry,
    SpreadEntry,
    TauEntry,
)
from pytest_prefalign.runs.parts import Data
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
table.outputs td, table.outputs th { vertical-align: top; max-width: 16em; }
tr.reference td { background: #eef4ea; } tr.degenerate td { color: #a40; }
"""
SHOWN_ITEMS = 5  # items whose outputs the page shows per (suite, size)

# --------------------------------------------------------------------------------------------
# Page
# --------------------------------------------------------------------------------------------


def write_report(run: RunFile, out_dir: Path, power_sims: int = 0) -> Path:
    """Write ``out_dir/report.html`` (and the plot beside it, when matplotlib is there), with
    the users each of the paper's claims needs simulated from the run's own noise
    (``power_sims`` simulated runs per number of users; 0 leaves them out)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_html = _plot_section(scatter_points(run.results), out_dir, scatter_extras(run.results))
    curves = None
    if power_sims:
        by_kind = run.crisis.family.by_kind if run.crisis.family else None
        curves = power.run_curves(run.results, by_kind, sims=power_sims)
    page = out_dir / PAGE
    storage.atomic_write_text(page, render_page(run, plot_html, curves))
    return page


def _plot_section(
    points: dict[tuple[str, str], list[Point]],
    out_dir: Path,
    extras: dict[tuple[str, str], Extras],
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


def render_page(
    run: RunFile, plot_html: str, curves: dict[tuple[power.Where, str], power.Curve] | None = None
) -> str:
    """The page, from the run's results and the analysis stored with them (and the claims'
    power curves, where simulated)."""
    body = [f"<h1>pytest-prefalign report</h1>{_meta(run)}", "<h2>Leaderboards</h2>"]
    body += [
        _leaderboard(suite, size, board, heading)
        for (suite, size), rows in table.by_suite(run.results)
        for heading, board in table.boards(rows)
    ]
    body += ["<h2>Outputs</h2>", _outputs_note()]
    flagged = degenerate_rows(run.crisis)
    body += [
        _outputs(suite, size, rows, flagged) for (suite, size), rows in table.by_suite(run.results)
    ]
    body += [
        "<h2>Does RM accuracy pick the method that generates best?</h2>",
        _tau_section([claims.projected(e, run.results) for e in run.tau]),
        "<h2>Selection regret</h2>",
        _regret_section(run.crisis.regret),
        "<h2>In-context learning against reward-guided decoding</h2>",
        _icl_section(run.crisis.icl_vs_rgd),
        "<h2>Ranking inversions</h2>",
        _inversion_section(run.crisis.inversions),
        "<h2>Circular evaluation</h2>",
        _circular_section(run.crisis.circular),
        "<h2>Per-user spread</h2>",
        _spread_section(run.crisis.spread),
        _family_note(run.crisis.family),
        "<h2>The paper's claims: how many users each needs</h2>",
        _claims_section(run, curves),
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
    config = run.config.to_json() if run.config else {}
    for key in ("sizes", "limit", "reduce", "seed"):
        if key in config:
            parts.append(f"{key} {config[key]}")
    parts += [f"{size}: {m.name or '?'}" for size, m in sorted(run.models.items())]
    return f'<p class="meta">{html.escape(" · ".join(str(p) for p in parts))}</p>'


def _extra_columns() -> list[catalogue.Metric]:
    """The page shows the circular win rate beside the leaderboard's columns, marked as such."""
    return [
        dataclasses.replace(m, title="win, own RM (circular)")
        for m in catalogue.with_role("own_judge")
    ]


def _leaderboard(suite: str, size: str, rows: list[CaseResult], heading: str | None = None) -> str:
    """One table of ``table.boards``: the rows at their working points under the suite's
    heading, or the rows at one strength of the sweep under ``heading``."""
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
    key = table.sort_key(rows)
    if heading is not None:
        return (
            f'<h3>{html.escape(heading)}</h3><p class="meta">sorted by {html.escape(key)}; '
            "[95% CI, users resampled]</p>" + _html_table(body, headers)
        )
    first, second, *notes = table.header(suite, size, rows)  # a note on the pairs, maybe
    return (
        f'<h3>{html.escape(first)}</h3><p class="meta">{html.escape(second.strip())}; '
        f"sorted by {html.escape(key)}; [95% CI, users resampled]</p>"
        + "".join(f'<p class="meta">{html.escape(n.strip())}</p>' for n in notes)
        + _html_table(body, headers)
    )


# --------------------------------------------------------------------------------------------
# Outputs: what a score stands for
# --------------------------------------------------------------------------------------------


def shown_items(rows: Sequence[CaseResult], most: int = SHOWN_ITEMS) -> list[str]:
    """The ids of the items whose outputs the page shows: the first item of each of the first
    users, then their second items, up to ``most``; items and users in the order the run's
    rows first hold them, so every row is shown on the same items, on every page of the run."""
    by_user: dict[str, list[str]] = {}
    seen: set[str] = set()
    for row in rows:
        for record in row.items:
            ident = str(record.item_id)
            if ident not in seen:
                seen.add(ident)
                by_user.setdefault(str(record.user), []).append(ident)
    chosen: list[str] = []
    depth = 0
    while len(chosen) < most and any(len(ids) > depth for ids in by_user.values()):
        chosen += [ids[depth] for ids in by_user.values() if len(ids) > depth]
        depth += 1
    return chosen[:most]


def degenerate_rows(analysis: Crisis) -> dict[tuple[str, str, str], str]:
    """The rows the run's analysis flags degenerate, by (suite, size, method), with the
    reason; an analysis without degenerate entries (a run file written before they were
    checked) flags nothing. The entries were checked when the run file was read
    (``runs/entries.py``)."""
    return {
        (e.suite, e.size, e.method): e.reason or "flagged degenerate"
        for e in analysis.degenerate
        if e.flagged
    }


def _outputs_note() -> str:
    return (
        f'<p class="note">For each suite and size, the same {SHOWN_ITEMS} items (the first item '
        "of each of the first users): the user's own text (the reference of ROUGE) and every "
        "row's output, in the leaderboard's order. A row the analysis flags degenerate is "
        "marked: its figures describe a broken setting, not the method. All outputs are in the "
        "run's items file (<code>NAME.items.jsonl</code>).</p>"
    )


def _outputs(
    suite: str, size: str, rows: list[CaseResult], flagged: dict[tuple[str, str, str], str]
) -> str:
    """One table: a column per shown item, the reference first, then a row per method."""
    with_items = [r for r in table.ordered(rows) if r.items]
    shown = shown_items([r for r in rows if r.items])  # in the run's order, not the sort's
    title = f"<h3>{html.escape(suite)} · {html.escape(size)}</h3>"
    if not shown:
        return title + '<p class="note">No row of this suite and size has item outputs.</p>'
    records = {r.method: {str(x.item_id): x for x in r.items} for r in with_items}
    first = {
        i: next(records[r.method][i] for r in with_items if i in records[r.method]) for i in shown
    }
    head = "".join(
        f'<th>{html.escape(i)}<br><span class="meta">{html.escape(str(first[i].user))}</span></th>'
        for i in shown
    )
    lines = [f"<tr><th>row</th>{head}</tr>"]
    if any(first[i].reference is not None for i in shown):
        cells = "".join(f"<td>{_text(first[i].reference)}</td>" for i in shown)
        lines.append(f'<tr class="reference"><td>reference (the user\'s own)</td>{cells}</tr>')
    for row in with_items:
        reason = flagged.get((suite, size, row.method))
        name = html.escape(row.method)
        if reason is not None:
            name += f'<br><span class="warn" title="{html.escape(reason)}">degenerate</span>'
        cells = "".join(
            f"<td>{_text(records[row.method][i].output)}</td>"
            if i in records[row.method]
            else "<td>-</td>"
            for i in shown
        )
        css = ' class="degenerate"' if reason is not None else ""
        lines.append(f"<tr{css}><td>{name}</td>{cells}</tr>")
    notes = "".join(
        f'<p class="warn">{html.escape(method)} is flagged degenerate: {html.escape(reason)}</p>'
        for (s, z, method), reason in sorted(flagged.items())
        if (s, z) == (suite, size) and method in records
    )
    return f'{title}<table class="outputs">{"".join(lines)}</table>{notes}'


def _text(value: Any) -> str:
    """An output or reference as a cell: escaped, an empty one shown as such."""
    if value is None:
        return "-"
    text = str(value)
    return html.escape(text) if text.strip() else '<span class="meta">(empty)</span>'


def _html_table(body: list[list[Any]], headers: list[str]) -> str:
    """tabulate's ``html`` format escapes every cell."""
    return tabulate(body, headers=headers, tablefmt="html", disable_numparse=True)


def _tau_section(entries: Sequence[TauEntry]) -> str:
    if not entries:
        return '<p class="note">No reward methods in this run.</p>'
    return (
        summary.tau_table(entries, tablefmt="html")
        + '<p class="note">Kendall\'s tau-b across the reward methods of one suite, size and '
        "decoder, with its exact permutation p-value over the methods, p_holm (adjusted with "
        "the run's other looks, which decides) and a 95% interval: the lowest and highest tau "
        "over the orderings that simultaneous 95% intervals on every pairwise difference of RM "
        "accuracy and of the other figure allow, users resampled (claim 1 reads it). Where the "
        "data cannot say something (saturated or tied RM accuracies, fewer than 5 methods or 5 "
        "users), the estimate is shown in parentheses and makes no look.</p>"
        + "".join(
            f'<p class="note">{html.escape(line)}</p>' for line in summary.estimand_lines(entries)
        )
    )


def _regret_section(entries: Sequence[RegretEntry]) -> str:
    if not entries:
        return '<p class="note">Fewer than two reward methods per decoder: no selection.</p>'
    return summary.regret_table(entries, tablefmt="html") + (
        '<p class="note">The figure lost by taking the reward method with the best RM accuracy '
        "instead of the best one, cross-fitted: both are chosen on half of the users and "
        "compared on the other half, over many random halvings, so that the winner's curse does "
        "not make a regret out of noise. It is the regret of the rule, which may differ from "
        "the gap between the two rows named (chosen on all users). p: the bootstrap over users "
        "under equal means, each method's spread kept; the interval resamples users.</p>"
    )


def _icl_section(entries: Sequence[IclEntry]) -> str:
    if not entries:
        return '<p class="note">No ICL row beside a reward-guided row in this run.</p>'
    return summary.icl_table(entries, tablefmt="html") + (
        '<p class="note">Each ICL row minus the best reward-guided row of its suite and size, '
        "over the users they all have: the interval resamples users; p is the within-user "
        "permutation of the ICL row and every reward-guided row, the best chosen again in each "
        "permutation; one row is called better only when p_holm is below 0.05, and with fewer "
        "than 6 users there is not enough evidence.</p>"
    )


def _inversion_section(entries: Sequence[InversionEntry]) -> str:
    significant = [e for e in entries if e.fires]
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


def _circular_section(entries: Sequence[CircularEntry]) -> str:
    if not entries:
        return '<p class="note">No win rates in this run.</p>'
    text = summary.circular_table(entries, tablefmt="html")
    notes = [
        line
        for line in summary.circular_lines(entries)
        if line.startswith(("!", "  no independent"))
    ]
    return text + "".join(f'<p class="warn">{html.escape(n.strip())}</p>' for n in notes)


def _spread_section(entries: Sequence[SpreadEntry]) -> str:
    flags = [f for f in entries if f.fires]
    if not flags:
        return (
            f'<p class="note">Nothing flagged (rule: means within {spread.CLOSE:g} but worst '
            f"deciles {spread.APART:g} apart, or a gain over base on the mean with a loss of "
            f"{spread.APART:g} on the worst decile; at least {spread.MIN_USERS} users; a swap "
            "test over users, adjusted with the run's other looks).</p>"
        )
    items = "".join(
        f"<li>{html.escape(f.suite)} · {html.escape(f.size)}: {html.escape(f.text)}</li>"
        for f in flags
    )
    return f"<ul>{items}</ul>"


def _family_note(found: Family | None) -> str:
    """How many looks the run made and how they were controlled (every verdict above)."""
    text = family.describe(found)
    return f'<p class="note">{html.escape(text)}</p>' if text else ""


def _claims_section(run: RunFile, curves: dict[tuple[power.Where, str], power.Curve] | None) -> str:
    """Each claim's verdict on this run (the rules of docs/findings.md) and the users it needs:
    the power of runs simulated from this run's own users with the effect stated imposed, with
    its Monte Carlo error."""
    if curves is None:
        return (
            '<p class="note">Not simulated here: <code>prefalign report RUN.json --out DIR</code> '
            "simulates them (<code>--power-sims N</code>, 0 for none).</p>"
        )
    if not curves:
        return '<p class="note">No reward methods to test the claims on.</p>'
    verdicts = claims.run_claims(run)
    rows = []
    for (where, claim), curve in curves.items():
        verdict = verdicts.get((where, claims.base(claim)), "-")
        points = zip(curve.grid, curve.power, curve.se, strict=True)
        cells = ", ".join(f"{n}: {p:.2f} ± {e:.2f}" for n, p, e in points)
        where_text = f"{where[0]} · {where[1]}"
        rows.append(
            [where_text, where[2], claims.TITLES[claims.base(claim)], verdict, curve.effect,
             cells, curve.needed_text()]
        )  # fmt: skip
    headers = ["suite · size", "decoder", "claim", "verdict", "effect imposed", "power by users",
               "users needed"]  # fmt: skip
    sims = next(iter(curves.values())).sims
    return tabulate(rows, headers=headers, tablefmt="html") + (
        '<p class="note">Users needed: the fewest users (of 10, 20, 40, ..., 640) at which runs '
        f"simulated from this run's own users reach the claim's verdict {power.TARGET:.0%} of "
        "the time, with the paper's effect imposed on their figures (each user's deviations "
        f"kept; {sims} simulated runs per number of users, each power ± its Monte Carlo "
        'standard error; docs/metrics.md, "The paper\'s claims"). Claim 2 is simulated at '
        "a ROUGE-1 difference of 0 and at one inside its margin, 0.01, where it is true "
        "too.</p>"
    )


def _data_section(results: Sequence[CaseResult]) -> str:
    """Each suite's data: where it was read, its licence and the attribution its licence asks
    for (CC BY: wherever the data is used, so with every figure computed from it)."""
    seen: dict[str, Data] = {}
    for row in results:
        seen.setdefault(row.suite, row.data)
    lines = []
    for suite, data in sorted(seen.items()):
        provenance = data.provenance
        parts = [f"<b>{html.escape(suite)}</b>: {html.escape(str(data.source or '?'))}"]
        for field, value in (
            ("licence", provenance.licence),
            ("attribution", provenance.attribution),
        ):
            if value:
                parts.append(f"{field}: {html.escape(str(value))}")
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
    parser.add_argument(
        "--power-sims",
        type=int,
        default=power.SIMS,
        metavar="N",
        help="simulated runs per number of users behind the claims' users needed (0: none)",
    )
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
        written = write_report(run, out, args.power_sims)
    except OSError as exc:  # a folder that cannot be made or written
        print(f"prefalign report: --out {exc.filename or out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"prefalign report: wrote {written}")
    return 0
