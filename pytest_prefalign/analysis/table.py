"""Rendering only: leaderboards as text tables (tabulate). No computation beyond sorting."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tabulate import tabulate

COLUMNS = (  # (metric key, header)
    ("rouge1", "ROUGE-1"),
    ("rougeL", "ROUGE-L"),
    ("policy_acc", "policy acc"),
    ("rm_acc", "RM acc"),
    ("win_independent", "win vs base"),  # judged by the independent RM, never the method's own
)


def leaderboards(results: list[dict[str, Any]]) -> list[str]:
    """One table per (suite, size), best first: by ROUGE-1 where the suite has the users' own
    text (what the tool is about: writing what the user wants), else by policy accuracy."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for res in results:
        groups[(res["suite"], res["size"])].append(res)
    lines: list[str] = []
    for (suite, size), rows in sorted(groups.items()):
        lines += [""] + header(suite, size, rows)
        lines += table(rows).splitlines()
    return lines


def header(suite: str, size: str, rows: list[dict[str, Any]]) -> list[str]:
    model = rows[0].get("model", {})
    data = rows[0].get("data", {})
    users = max(r["n_users"] for r in rows)
    items = max(r["n_items"] for r in rows)
    pairs = max(r["n_pairs"] for r in rows)
    first = f"{suite} · {size} · {model.get('name', '?')}"
    second = f"  data: {data.get('source', '?')} · {users} users · {items} items · {pairs} pairs"
    dropped = {k: v for k, v in (data.get("dropped") or {}).items() if v}
    if dropped:
        second += " · dropped: " + ", ".join(f"{k} {v}" for k, v in sorted(dropped.items()))
    return [first, second]


def sort_key(rows: list[dict[str, Any]]) -> str:
    return "rouge1" if any("rouge1" in r["metrics"] for r in rows) else "policy_acc"


def table(rows: list[dict[str, Any]]) -> str:
    key = sort_key(rows)
    ordered = sorted(rows, key=lambda r: -r["metrics"].get(key, float("-inf")))
    present = [(k, h) for k, h in COLUMNS if any(k in r["metrics"] for r in rows)]
    body = []
    for rank, row in enumerate(ordered, 1):
        cells = [rank, row["method"]]
        cells += [fmt(row, k) for k, _ in present]
        cells.append(f"{row['timings'].get('total_s', 0):.1f}s")
        body.append(cells)
    headers = ["#", "method"] + [h for _, h in present] + ["time"]
    return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True)


def fmt(row: dict[str, Any], key: str) -> str:
    value = row["metrics"].get(key)
    if value is None:
        return "-"
    ci = row.get("ci", {}).get(key)
    text = f"{value:.3f}"
    if ci:
        text += f" [{ci[0]:.2f},{ci[1]:.2f}]"
    return text
