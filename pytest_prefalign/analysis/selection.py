"""What picking a reward method by RM accuracy costs, and paired comparisons of two rows.

- **Selection regret** (per suite, size and decoder): the policy accuracy and the ROUGE-1 lost by
  taking the reward method with the best RM accuracy instead of the best one by the figure
  itself. Where several methods tie on RM accuracy the pick is one of them at random, so the
  regret is the best figure minus their mean. Its interval resamples users and makes the pick
  again in every resample: it includes the luck of the selection itself. A regret is stated
  only when its interval's lower end is above 0.
- **In-context learning against reward-guided decoding** (per suite and size): each ICL row
  (``icl``, ``icl_rag``) minus the best reward-guided row by ROUGE-1 (by policy accuracy where
  the suite has no ROUGE), paired over the shared users: the paper's central comparison.
- ``compare_rows``: every metric of two rows of one run, paired over their shared users (the
  ``prefalign compare RUN --rows A,B`` command).

Every paired comparison (``paired``) gives the difference over the shared users, its interval
with users resampled, the exact sign-flip p-value over users (``stats.sign_flip``) and a
verdict: one row better only when the p-value is below ``ALPHA`` and the interval excludes 0;
"not enough evidence" below ``stats.sign_test_floor(ALPHA)`` users (6), where no sign-flip test
can reach ``ALPHA``; else no significant difference.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from pytest_prefalign.analysis import catalogue, stats, users
from pytest_prefalign.analysis.metrics import FIGURE_DIGITS
from pytest_prefalign.runs.records import CaseResult

X_METRIC = "rm_acc"
Y_METRICS = ("policy_acc", "rouge1")
ICL_DECODERS = ("icl", "icl_rag")
ALPHA = 0.05

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
    observed = round(float(regret(xs, ys)[0]), FIGURE_DIGITS)
    top = max(r.metrics[X_METRIC] for r in rows)
    tx, ty = users.tables(rows, X_METRIC, y)  # over the users both figures have
    ci = None
    if tx.users:
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
            entries.append(
                {
                    "suite": suite,
                    "size": size,
                    "metric": metric,
                    "icl": icl.method,
                    "rgd": best.method,
                    **paired(icl, best, metric),
                }
            )
    return entries


def paired(a: CaseResult, b: CaseResult, metric: str, n_boot: int = users.N_BOOT) -> Row:
    """``a - b`` on ``metric`` over the users both rows have: ``diff``, its interval ``ci``
    with users resampled, ``n_users``, the sign-flip ``p_value`` over users, and a
    ``verdict``."""
    diff, ci, n = users.difference(a, b, metric, n_boot)
    p_value, exact = math.nan, True
    if n:
        _, d, w = users.paired_differences(a, b, metric)
        p_value, exact = stats.sign_flip(d.tolist(), w.tolist())
    return {
        "diff": diff,
        "ci": ci,
        "n_users": n,
        "p_value": p_value if math.isfinite(p_value) else None,
        "p_method": "exact sign flip" if exact else "sign flip (sampled)",
        "verdict": verdict(a.method, b.method, metric, ci, p_value, n),
    }


def verdict(
    a: str, b: str, metric: str, ci: list[float] | None, p_value: float, n_users: int
) -> str:
    """Which of two rows is better on ``metric``, when the data can say."""
    floor = stats.sign_test_floor(ALPHA)
    if n_users == 0:
        return "not enough evidence: no shared users"
    if n_users < floor:
        return (
            f"not enough evidence: {n_users} users: p >= {2 * 0.5**n_users:.2g} "
            "even if every user moved one way"
        )
    if ci is None or not math.isfinite(p_value):
        return "not enough evidence: no interval"
    if p_value < ALPHA and (ci[0] > 0 or ci[1] < 0):
        found = catalogue.find(metric)
        higher = found.higher_is_better if found is not None else True
        return f"{a if (ci[0] > 0) == higher else b} better"
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
                found.append(
                    {
                        "suite": suite,
                        "size": size,
                        "metric": metric.name,
                        "a": a,
                        "b": b,
                        "value_a": rows[a].metrics.get(metric.name),
                        "value_b": rows[b].metrics.get(metric.name),
                        **paired(rows[a], rows[b], metric.name),
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
