"""Rendering only: the terminal's leaderboards and the comparison table, as text (tabulate). No
computation beyond sorting and formatting: the figures come from the run's results. The crisis
analysis is rendered by ``summary``."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from pytest_prefalign.analysis import catalogue, wrap
from pytest_prefalign.analysis.compare import Comparison, fraction, p_text, signed, tolerance_text
from pytest_prefalign.runs.parts import Data, Design, Model
from pytest_prefalign.runs.records import CaseResult

Row = dict[str, Any]

# --------------------------------------------------------------------------------------------
# Leaderboards
# --------------------------------------------------------------------------------------------


def leaderboards(results: Sequence[CaseResult], width: int | None = None) -> list[str]:
    """One table per (suite, size), best first: by ROUGE-1 where the suite has the users' own
    text (what the tool is about: writing what the user wants), else by policy accuracy; and
    after it one table per strength of the sweep (``boards``), where the run has one. With
    a ``width`` (the terminal's), a row wider than it has its cells wrapped (``wrap``), and a
    heading line wider than it is wrapped under its indent."""
    lines: list[str] = []
    for (suite, size), rows in by_suite(results):
        for heading, board in boards(rows):
            lines.append("")
            for line in [heading] if heading else header(suite, size, board):
                indent = " " * (len(line) - len(line.lstrip()) + 2)
                lines += wrap.prose(line, width, indent=indent)
            lines += table(board, width).splitlines()
    return lines


def boards(rows: Sequence[CaseResult]) -> list[tuple[str | None, list[CaseResult]]]:
    """The tables of one (suite, size): its rows at their working points (heading None: the
    suite's ``header``), then, for ``--prefalign-guidance sweep``, one table per strength of
    the sweep with the reward-guided rows at that strength, its heading naming it."""
    working = [r for r in rows if r.sweep is None]
    by_strength: dict[float, list[CaseResult]] = defaultdict(list)
    for row in rows:
        if row.sweep is not None:
            by_strength[row.sweep.value or 0.0].append(row)
    found: list[tuple[str | None, list[CaseResult]]] = [(None, working)] if working else []
    for value, swept in sorted(by_strength.items()):
        found.append((sweep_heading(rows[0], value, swept), swept))
    return found


def sweep_heading(first: CaseResult, value: float, swept: Sequence[CaseResult]) -> str:
    """The heading of the sweep's table at ``value``: which option of which decoder it sets."""
    options = sorted({f"{r.decoder}.{r.sweep.option or '?'}" for r in swept if r.sweep})
    return (
        f"{first.suite} · {first.size} · strength sweep: {', '.join(options)} = {value:g} of "
        "the standardised reward, every reward method alike (tau and the claims per strength)"
    )


def by_suite(results: Sequence[CaseResult]) -> list[tuple[tuple[str, str], list[CaseResult]]]:
    groups: dict[tuple[str, str], list[CaseResult]] = defaultdict(list)
    for result in results:
        groups[(result.suite, result.size)].append(result)
    return sorted(groups.items())


def header(suite: str, size: str, rows: Sequence[CaseResult]) -> list[str]:
    """The table's heading: the suite, size, model and the dtype its passes ran in; the data
    line (its source, counts, what was dropped, the policy score's reduction, the pairs'
    design); and notes on the design (``design_notes``)."""
    model, data = rows[0].model, rows[0].data
    users = max(r.n_users for r in rows)
    items = max(r.n_items for r in rows)
    pairs = max(r.n_pairs for r in rows)
    design = pairs_design(data)
    first = f"{suite} · {size} · {model.name or '?'}"
    # the dtype the passes ran in (--prefalign-dtype): figures in bf16 are not fp32's
    dtypes = sorted({r.environment.dtype for r in rows if r.environment.dtype})
    if dtypes:
        first += f" · {'/'.join(dtypes)}"
    second = f"  data: {data.source or '?'} · {users} users · {items} items · {pairs} pairs"
    if pairs and users:
        # a user's accuracy moves in steps of one over their pairs: how coarse a figure is
        second += f" ({pairs / users:.1f} per user)"
    if design is not None:
        second += f" · pairs: {design.label or '?'}"
    release = data.provenance.pairs_release
    if release:  # which released pairs, so that two runs' pairs can be told apart at a glance
        second += f" (released {release.version}, sha256 {str(release.sha256)[:12]})"
    dropped = {k: v for k, v in data.dropped.items() if v}
    if dropped:
        second += " · dropped: " + ", ".join(f"{k} {v}" for k, v in sorted(dropped.items()))
    reduce = rows[0].settings.reduce
    if reduce and any(name in r.metrics for r in rows for name in catalogue.reduced()):
        second += f" · policy score: {reduce} over tokens"  # what policy accuracy compares
    return [first, second, *working_points(rows), *design_notes(design, model)]


def working_points(rows: Sequence[CaseResult]) -> list[str]:
    """The line naming each reward-guided row's guidance strength and how it was set
    (``guidance.strength`` of the run file: chosen on validation items, or fixed); none where
    no row has one."""
    found = []
    for row in sorted(rows, key=lambda r: r.method):
        strength = row.guidance.strength if row.guidance else None
        if strength is None or strength.swept:  # the sweep's rows: in tables of their own
            continue
        how = strength.how or "?"
        if how == "chosen" and strength.fallback:
            how = "chosen, none passed"
        values = strength.values or [strength.value or 0]  # a pooled run's folds
        shown = "/".join(f"{v:g}" if isinstance(v, (int, float)) else "?" for v in values)
        found.append(f"{row.method} {strength.option or '?'}={shown} ({how})")
    if not found:
        return []
    return ["  working points: " + ", ".join(found)]


def pairs_design(data: Data) -> Design | None:
    """How the suite made its pairs, as it describes it in its provenance (``design``: a
    ``label``, a ``note``, the ``writer_fingerprint`` of the model that wrote a side, if one
    did, and its ``writer_weights``; docs/suites.md); None for data that does not say."""
    return data.provenance.design


def design_notes(design: Design | None, model: Model) -> list[str]:
    """The header's notes on the pairs: that the evaluated model wrote them (its fingerprint
    is the design's writer's, or its weights the writer's weights), and the design's own
    note."""
    if design is None:
        return []
    notes = []
    writer, weights = design.writer_fingerprint, design.writer_weights
    same_weights = weights is not None and weights == model.weights
    if same_weights or (writer is not None and writer == model.fingerprint):
        notes.append(
            f"  note: the pairs were written by this very model ({design.label or '?'}): its "
            "policy accuracy measures distance from its own writing, not only the users' "
            "preference"
        )
    if design.note:
        notes.append(f"  note: {design.note}")
    return notes


def sort_key(rows: Sequence[CaseResult]) -> str:
    """What the rows are ranked by (``catalogue.rank_key``): ROUGE-1 where the suite has the
    users' own text, else policy accuracy."""
    return catalogue.rank_key({name for r in rows for name in r.metrics})


def ordered(rows: Sequence[CaseResult]) -> list[CaseResult]:
    key = sort_key(rows)
    return sorted(rows, key=lambda r: -_rank_value(r, key))


def _rank_value(row: CaseResult, key: str) -> float:
    """``row``'s figure of ``key``; -inf where it has none, so that it ranks last."""
    value = row.metrics.get(key)
    return float("-inf") if value is None else value


def columns(
    rows: Sequence[CaseResult], extra: Sequence[catalogue.Metric] = ()
) -> list[catalogue.Metric]:
    """The leaderboard's metric columns that some row has, in catalogue order."""
    return [m for m in (*catalogue.columns(), *extra) if any(m.name in r.metrics for r in rows)]


def table(rows: Sequence[CaseResult], width: int | None = None) -> str:
    present = columns(rows)
    body = [
        [rank, row.method, *(fmt(row, m) for m in present), f"{row.timings.get('total_s', 0):.1f}s"]
        for rank, row in enumerate(ordered(rows), 1)
    ]
    headers = ["#", "method", *(m.title for m in present), "time"]
    return wrap.table(body, headers, width=width)


def fmt(row: CaseResult, metric: catalogue.Metric) -> str:
    value = row.metrics.get(metric.name)
    if value is None:
        return "-"
    ci = row.ci.get(metric.name)
    text = format(value, metric.fmt)
    if ci:
        text += f" [{ci[0]:.2f},{ci[1]:.2f}]"
    ties = tie_count(row, metric)
    if ties is not None:
        text += f" ({ties} tie{'' if ties == 1 else 's'})"
    return text


def tie_count(row: CaseResult, metric: catalogue.Metric) -> int | None:
    """The ties beside a win rate, which counts strict wins (the row's judge's ``counts``);
    None for another metric, or a row from before ties were counted."""
    counts = row.judge.counts.get(metric.name) if row.judge else None
    return counts.ties if counts is not None else None


# --------------------------------------------------------------------------------------------
# Comparisons with a baseline
# --------------------------------------------------------------------------------------------


def comparison_table(comparisons: Sequence[Comparison]) -> str:
    """All comparisons as a text table; figures as fractions, as on the leaderboard.
    ``detectable``: for a McNemar row, the smallest drop its test could find significant with
    these pairs (``never``: none could)."""
    rows = [
        [c.suite, c.method, c.size, c.metric, fraction(c.old), fraction(c.new), signed(c.diff),
         f"[{signed(c.ci[0])}, {signed(c.ci[1])}]", p_text(c.p_value), c.n,
         tolerance_text(c.tolerance) if c.gated else "", _detectable(c.detectable), c.status]
        for c in comparisons
    ]  # fmt: skip
    headers = ["suite", "method", "size", "metric", "old", "new", "diff", "CI", "p", "n",
               "tolerance", "detectable", "status"]  # fmt: skip
    return tabulate(rows, headers=headers, disable_numparse=True)


def _detectable(value: float) -> str:
    if math.isnan(value):
        return ""
    return "never" if math.isinf(value) else f"{value * 100:.2f}pp"
