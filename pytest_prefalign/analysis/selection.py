"""What picking a reward method by RM accuracy costs, and paired comparisons of two rows.

- **Selection regret** (per suite, size and decoder): the policy accuracy and the ROUGE-1 lost by
  taking the reward method with the best RM accuracy instead of the best one by the figure
  itself. Where several methods tie on RM accuracy the pick is one of them at random, so the
  regret is the best figure minus their mean. Its interval resamples users and makes the pick
  again in every resample: it includes the luck of the selection itself. A regret is stated
  only when its interval's lower end is above 0.
- **In-context learning against reward-guided decoding** (per suite and size): each ICL row
  (``icl``, ``icl_rag``) minus the best reward-guided row by ROUGE-1 (by policy accuracy where
  the suite has no ROUGE), with an interval over the shared users: the paper's central
  comparison.
- ``compare_rows``: every metric of two rows of one run, paired over their shared users (the
  ``prefalign compare RUN --rows A,B`` command).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from pytest_prefalign.analysis import catalogue, users
from pytest_prefalign.runs.records import CaseResult

X_METRIC = "rm_acc"
Y_METRICS = ("policy_acc", "rouge1")
ICL_DECODERS = ("icl", "icl_rag")

Row = dict[str, Any]


# --------------------------------------------------------------------------------------------
# Selection regret
# --------------------------------------------------------------------------------------------


def regret(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(R,)`` regret of picking by ``x`` for rows of figures ``x``, ``y`` ``(R, methods)``:
    the best ``y`` minus the mean ``y`` of the methods with the best ``x``; nan where a row has a
    nan."""
    best_x = np.nanmax(x, axis=1, keepdims=True)
    picked = np.where(x == best_x, y, np.nan)
    with np.errstate(invalid="ignore"):
        out = np.nanmax(y, axis=1) - np.nanmean(picked, axis=1)
    return np.where(np.isfinite(x).all(1) & np.isfinite(y).all(1), out, np.nan)


def regret_entries(
    groups: dict[tuple[str, str, str], list[CaseResult]], n_boot: int = users.N_BOOT
) -> list[Row]:
    """One entry per (suite, size, decoder, y) with at least two reward methods."""
    entries = []
    for (suite, size, decoder), rows in groups.items():
        for y in Y_METRICS:
            kept = [r for r in rows if _finite(r.metrics.get(y))]
            if len(kept) >= 2:
                entries.append(_regret_entry(suite, size, decoder, y, kept, n_boot))
    return entries


def _regret_entry(
    suite: str, size: str, decoder: str, y: str, rows: list[CaseResult], n_boot: int
) -> Row:
    xs = np.array([[r.metrics[X_METRIC] for r in rows]])
    ys = np.array([[r.metrics[y] for r in rows]])
    observed = float(regret(xs, ys)[0])
    top = max(r.metrics[X_METRIC] for r in rows)
    tx, ty = users.table(rows, X_METRIC), users.table(rows, y)
    ci = None
    if tx.users == ty.users and tx.users:
        draws = [
            regret(tx.resampled(c), ty.resampled(c)) for c in users.resamples(len(tx.users), n_boot)
        ]
        ci = users.interval(np.concatenate(draws))
    return {
        "suite": suite,
        "size": size,
        "decoder": decoder,
        "x": X_METRIC,
        "y": y,
        "picked": [r.method for r in rows if r.metrics[X_METRIC] == top],
        "best": max(rows, key=lambda r: r.metrics[y]).method,
        "regret": observed,
        "ci": ci,
        "n_methods": len(rows),
        "n_users": len(tx.users),
        "significant": bool(ci and ci[0] > 0),
    }


# --------------------------------------------------------------------------------------------
# In-context learning against the best reward-guided row
# --------------------------------------------------------------------------------------------


def icl_entries(results: Iterable[CaseResult]) -> list[Row]:
    """Each ICL row against the best reward-guided row of its (suite, size)."""
    by_group: dict[tuple[str, str], list[CaseResult]] = defaultdict(list)
    for result in results:
        by_group[(result.suite, result.size)].append(result)
    entries = []
    for (suite, size), rows in sorted(by_group.items()):
        guided = [r for r in rows if r.reward]
        metric = "rouge1" if any("rouge1" in r.metrics for r in guided) else "policy_acc"
        guided = [r for r in guided if _finite(r.metrics.get(metric))]
        if not guided:
            continue
        best = max(guided, key=lambda r: r.metrics[metric])
        for icl in (r for r in rows if r.decoder in ICL_DECODERS and not r.reward):
            if metric not in icl.per_user:
                continue
            diff, ci, n = users.difference(icl, best, metric)
            entries.append(
                {
                    "suite": suite,
                    "size": size,
                    "metric": metric,
                    "icl": icl.method,
                    "rgd": best.method,
                    "diff": diff,
                    "ci": ci,
                    "n_users": n,
                    "verdict": _verdict(icl.method, best.method, ci),
                }
            )
    return entries


def _verdict(a: str, b: str, ci: list[float] | None) -> str:
    if ci is None:
        return "no interval"
    if ci[0] > 0:
        return f"{a} better"
    if ci[1] < 0:
        return f"{b} better"
    return "no significant difference"


# --------------------------------------------------------------------------------------------
# Any two rows
# --------------------------------------------------------------------------------------------


def compare_rows(results: Sequence[CaseResult], a: str, b: str) -> list[Row]:
    """Every metric both rows have, ``a - b`` paired over their shared users, per (suite,
    size) where both methods ran; ValueError naming what is missing."""
    found = []
    keys = {(r.suite, r.size) for r in results}
    for suite, size in sorted(keys):
        rows = {r.method: r for r in results if (r.suite, r.size) == (suite, size)}
        if a not in rows or b not in rows:
            continue
        for metric in catalogue.METRICS:
            if metric.name in rows[a].per_user and metric.name in rows[b].per_user:
                diff, ci, n = users.difference(rows[a], rows[b], metric.name)
                found.append(
                    {
                        "suite": suite,
                        "size": size,
                        "metric": metric.name,
                        "a": a,
                        "b": b,
                        "value_a": rows[a].metrics.get(metric.name),
                        "value_b": rows[b].metrics.get(metric.name),
                        "diff": diff,
                        "ci": ci,
                        "n_users": n,
                        "verdict": _verdict(a, b, ci),
                    }
                )
    if not found:
        methods = sorted({r.method for r in results})
        raise ValueError(
            f"no (suite, size) of the run has both {a!r} and {b!r} with per-user "
            f"figures; its methods: {', '.join(methods)}"
        )
    return found


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)
