"""Rendering only: the terminal's leaderboards, the crisis tables and the comparison table, as
text (tabulate). No computation beyond sorting and formatting: the figures come from the run's
results and from the analysis stored with them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from pytest_prefalign.analysis import catalogue, crisis
from pytest_prefalign.analysis.compare import Comparison, fraction, p_text, signed, tolerance_text
from pytest_prefalign.runs.records import CaseResult, RunFile

Row = dict[str, Any]
MAX_LISTED = crisis.MAX_LISTED

# --------------------------------------------------------------------------------------------
# Leaderboards
# --------------------------------------------------------------------------------------------


def leaderboards(results: Sequence[CaseResult]) -> list[str]:
    """One table per (suite, size), best first: by ROUGE-1 where the suite has the users' own
    text (what the tool is about: writing what the user wants), else by policy accuracy."""
    lines: list[str] = []
    for (suite, size), rows in by_suite(results):
        lines += [""] + header(suite, size, rows)
        lines += table(rows).splitlines()
    return lines


def by_suite(results: Sequence[CaseResult]) -> list[tuple[tuple[str, str], list[CaseResult]]]:
    groups: dict[tuple[str, str], list[CaseResult]] = defaultdict(list)
    for result in results:
        groups[(result.suite, result.size)].append(result)
    return sorted(groups.items())


def header(suite: str, size: str, rows: Sequence[CaseResult]) -> list[str]:
    model, data = rows[0].model, rows[0].data
    users = max(r.n_users for r in rows)
    items = max(r.n_items for r in rows)
    pairs = max(r.n_pairs for r in rows)
    first = f"{suite} · {size} · {model.get('name', '?')}"
    second = f"  data: {data.get('source', '?')} · {users} users · {items} items · {pairs} pairs"
    dropped = {k: v for k, v in (data.get("dropped") or {}).items() if v}
    if dropped:
        second += " · dropped: " + ", ".join(f"{k} {v}" for k, v in sorted(dropped.items()))
    return [first, second]


def sort_key(rows: Sequence[CaseResult]) -> str:
    return "rouge1" if any("rouge1" in r.metrics for r in rows) else "policy_acc"


def ordered(rows: Sequence[CaseResult]) -> list[CaseResult]:
    key = sort_key(rows)
    return sorted(rows, key=lambda r: -r.metrics.get(key, float("-inf")))


def columns(
    rows: Sequence[CaseResult], extra: Sequence[catalogue.Metric] = ()
) -> list[catalogue.Metric]:
    """The leaderboard's metric columns that some row has, in catalogue order."""
    return [m for m in (*catalogue.columns(), *extra) if any(m.name in r.metrics for r in rows)]


def table(rows: Sequence[CaseResult]) -> str:
    present = columns(rows)
    body = [
        [rank, row.method, *(fmt(row, m) for m in present), f"{row.timings.get('total_s', 0):.1f}s"]
        for rank, row in enumerate(ordered(rows), 1)
    ]
    headers = ["#", "method", *(m.title for m in present), "time"]
    return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True)


def fmt(row: CaseResult, metric: catalogue.Metric) -> str:
    value = row.metrics.get(metric.name)
    if value is None:
        return "-"
    ci = row.ci.get(metric.name)
    text = format(value, metric.fmt)
    if ci:
        text += f" [{ci[0]:.2f},{ci[1]:.2f}]"
    return text


# --------------------------------------------------------------------------------------------
# Comparisons with a baseline
# --------------------------------------------------------------------------------------------


def comparison_table(comparisons: Sequence[Comparison]) -> str:
    """All comparisons as a text table; figures as fractions, as on the leaderboard."""
    rows = [
        [c.suite, c.method, c.size, c.metric, fraction(c.old), fraction(c.new), signed(c.diff),
         f"[{signed(c.ci[0])}, {signed(c.ci[1])}]", p_text(c.p_value), c.n,
         tolerance_text(c.tolerance) if c.gated else "", c.status]
        for c in comparisons
    ]  # fmt: skip
    headers = ["suite", "method", "size", "metric", "old", "new", "diff", "CI", "p", "n",
               "tolerance", "status"]  # fmt: skip
    return tabulate(rows, headers=headers, disable_numparse=True)


# --------------------------------------------------------------------------------------------
# The crisis analysis
# --------------------------------------------------------------------------------------------


def summary_lines(run: RunFile) -> list[str]:
    """The crisis section printed after the leaderboards, from the analysis stored in the run:
    tau, inversions, circular evaluation, per-user spread. Empty when the run has no
    reward-guided method."""
    taus, circular = run.tau, run.crisis.get("circular", [])
    if not taus and not circular:
        return []
    lines = [
        "",
        "Does RM accuracy pick the method that generates best? Kendall's tau-b across "
        "reward methods (95% CI: users resampled)",
    ]
    lines += tau_table(taus).splitlines()
    lines += inversion_lines(run.crisis.get("inversions", []))
    lines += circular_lines(circular)
    lines += spread_lines(run.crisis.get("spread", []))
    return lines


def _num(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _ci(ci: Sequence[float] | None) -> str:
    return "-" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _where(entry: Row) -> str:
    return f"{entry['suite']} · {entry['size']}"


def tau_table(entries: list[Row], tablefmt: str = "simple") -> str:
    body = [
        [
            _where(e),
            e["decoder"],
            f"{e['x']} ~ {e['y']}",
            e["n_methods"],
            _num(e["tau"], "+.3f"),
            _num(e["p_value"]),
            _ci(e["ci"]),
            e["warning"] or "",
        ]
        for e in entries
    ]
    headers = ["suite · size", "decoder", "x ~ y", "methods", "tau", "p", "95% CI", "warning"]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def inversion_lines(entries: list[Row]) -> list[str]:
    if not entries:
        return [
            "",
            "No ranking inversions: RM accuracy orders the methods as the other figures "
            "do (or too few methods to compare).",
        ]
    lines = [
        "",
        f"Ranking inversions ({len(entries)}): A is above B by RM accuracy, below B by "
        "the other figure",
    ]
    # the clearest ones (largest smaller gap), shown in the order of their groups
    clearest = sorted(range(len(entries)), key=lambda i: -crisis.disagreement(entries[i]))[
        :MAX_LISTED
    ]
    lines += inversion_table([entries[i] for i in sorted(clearest)]).splitlines()
    if len(entries) > MAX_LISTED:
        lines.append(
            f"... and {len(entries) - MAX_LISTED} less clear ones (all in the run "
            "file and the report)"
        )
    return lines


def inversion_table(entries: list[Row], tablefmt: str = "simple") -> str:
    body = [
        [
            _where(e),
            e["decoder"],
            e["y"],
            e["a"],
            e["b"],
            f"{e['x_a']:.3f} > {e['x_b']:.3f}",
            f"{e['y_a']:.3f} < {e['y_b']:.3f}",
        ]
        for e in entries
    ]
    headers = ["suite · size", "decoder", "y", "A", "B", "RM acc A > B", "y A < B"]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def circular_lines(entries: list[Row]) -> list[str]:
    if not entries:
        return []
    lines = [
        "",
        "Circular evaluation: win rate over base judged by the method's own RM "
        "(circular) and by an independent RM",
    ]
    lines += circular_table(entries).splitlines()
    for e in entries:
        if e["win_self"] > 0.5 and e["rouge1_vs_base"] is not None and e["rouge1_vs_base"] < 0:
            lines.append(
                f"! {e['method']} ({_where(e)}): wins {e['win_self']:.0%} over base "
                f"under its own RM but its ROUGE-1 is {-e['rouge1_vs_base']:.3f} below "
                "base's"
            )
        if e["reason"] and e["win_independent"] is None:
            lines.append(f"  no independent judge for {e['method']}: {e['reason']}")
    return lines


def circular_table(entries: list[Row], tablefmt: str = "simple") -> str:
    body = [
        [
            _where(e),
            e["method"],
            f"{e['win_self']:.3f} (circular)",
            _num(e["win_independent"]),
            _num(e["gap"], "+.3f"),
            e["n"] if e["n"] else "-",
            e["judge_independent"] or "-",
        ]
        for e in entries
    ]
    headers = [
        "suite · size",
        "method",
        "win, own RM",
        "win, independent",
        "gap",
        "items",
        "independent judge",
    ]
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def spread_lines(flags: list[Row]) -> list[str]:
    if not flags:
        return []
    lines = ["", "Per-user spread: what the mean hides"]
    lines += [f"- {_where(f)}: {f['text']}" for f in flags[:MAX_LISTED]]
    if len(flags) > MAX_LISTED:
        lines.append(f"... and {len(flags) - MAX_LISTED} more")
    return lines
