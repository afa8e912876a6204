"""The per-user view: what a mean over users hides (docs/report.md).

For each method, per (suite, size, metric): the mean over users and the mean of its worst
decile of users. Two flags, each stated only when its interval over users excludes 0 and only
with enough users for a worst decile to be more than one or two people:

- ``close_means``: two methods whose user means are within ``CLOSE`` of each other but whose
  worst deciles differ by at least ``APART``, significantly;
- ``mean_only_gain``: a method significantly above ``base`` on the user mean and significantly
  at least ``APART`` below base on the worst decile (helps on average, hurts the worst served).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from pytest_prefalign.analysis import users
from pytest_prefalign.runs.records import CaseResult

METRICS = ("policy_acc", "rm_acc", "rouge1")
TAIL_SHARE = 0.10
MIN_USERS = 10  # a worst decile of at least one user in ten
CLOSE = 0.02  # means within 2 points count as close
APART = 0.10  # tails 10 points apart count as different

Row = dict[str, Any]


def tail_mean(values: Sequence[float] | np.ndarray, share: float = TAIL_SHARE) -> tuple[float, int]:
    """Mean of the lowest ``share`` of the values (at least one value), and how many that is."""
    ordered = np.sort(np.asarray(values, dtype=float))
    if len(ordered) == 0:
        raise ValueError("tail_mean of no values")
    k = max(1, math.ceil(share * len(ordered)))
    return float(ordered[:k].mean()), k


def resampled_tails(
    values: np.ndarray, counts: np.ndarray, share: float = TAIL_SHARE
) -> np.ndarray:
    """``(resamples,)`` worst-share means of ``values`` ``(users,)`` drawn ``counts``
    ``(resamples, users)`` times each (a user drawn twice counts twice)."""
    order = np.argsort(values, kind="stable")
    v, c = values[order], counts[:, order]
    k = np.maximum(1, np.ceil(share * c.sum(1)))[:, None]
    before = np.cumsum(c, axis=1) - c
    take = np.clip(k - before, 0, c)
    return (take * v).sum(1) / k[:, 0]


def flags(results: Iterable[CaseResult]) -> list[Row]:
    """The flags of every (suite, size, metric) whose methods have at least ``MIN_USERS``."""
    groups: dict[tuple[str, str, str], list[CaseResult]] = defaultdict(list)
    for result in results:
        for metric in METRICS:
            if len(result.per_user.get(metric, {})) >= MIN_USERS:
                groups[(result.suite, result.size, metric)].append(result)
    found: list[Row] = []
    for (suite, size, metric), rows in sorted(groups.items()):
        found += _close_means(suite, size, metric, rows) + _mean_only_gain(
            suite, size, metric, rows
        )
    return found


def _compare(a: CaseResult, b: CaseResult, metric: str) -> dict[str, Any] | None:
    """Means and worst deciles of ``a`` and ``b`` over their shared users, the differences
    ``a - b`` of both and their intervals with users resampled."""
    shared = sorted(set(a.per_user[metric]) & set(b.per_user[metric]))
    if len(shared) < MIN_USERS:
        return None
    va = np.array([a.per_user[metric][u] for u in shared])
    vb = np.array([b.per_user[metric][u] for u in shared])
    mean_d, tail_d = [], []
    for counts in users.resamples(len(shared)):
        n = counts.sum(1)
        mean_d.append((counts @ va - counts @ vb) / n)
        tail_d.append(resampled_tails(va, counts) - resampled_tails(vb, counts))
    tail_a, k = tail_mean(va)
    tail_b, _ = tail_mean(vb)
    return {
        "mean_a": float(va.mean()),
        "mean_b": float(vb.mean()),
        "tail_a": tail_a,
        "tail_b": tail_b,
        "tail_users": k,
        "n_users": len(shared),
        "mean_ci": users.interval(np.concatenate(mean_d)),
        "tail_ci": users.interval(np.concatenate(tail_d)),
    }


def _flag(
    kind: str, suite: str, size: str, metric: str, a: str, b: str, c: dict[str, Any], text: str
) -> Row:
    return {
        "suite": suite,
        "size": size,
        "metric": metric,
        "kind": kind,
        "a": a,
        "b": b,
        **c,
        "text": text,
    }


def _close_means(suite: str, size: str, metric: str, rows: list[CaseResult]) -> list[Row]:
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            c = _compare(a, b, metric)
            if (
                c is None
                or abs(c["mean_a"] - c["mean_b"]) > CLOSE
                or abs(c["tail_a"] - c["tail_b"]) < APART
                or not _excludes_zero(c["tail_ci"])
            ):
                continue
            lo, hi = a, b
            if c["tail_a"] > c["tail_b"]:  # the flag names the worse tail first
                lo, hi = b, a
                c = _compare(lo, hi, metric)
                if c is None:  # pragma: no cover - the same users, the other way round
                    continue
            text = (
                f"{metric}: {lo.method} and {hi.method} have close user means "
                f"({c['mean_a']:.3f} vs {c['mean_b']:.3f}) but different worst deciles "
                f"({c['tail_a']:.3f} vs {c['tail_b']:.3f}, difference interval "
                f"{_ci(c['tail_ci'])}; worst {c['tail_users']} of {c['n_users']} users)"
            )
            out.append(_flag("close_means", suite, size, metric, lo.method, hi.method, c, text))
    return out


def _mean_only_gain(suite: str, size: str, metric: str, rows: list[CaseResult]) -> list[Row]:
    base = next((r for r in rows if r.decoder == "base" and not r.reward), None)
    if base is None:
        return []
    out = []
    for row in rows:
        c = _compare(row, base, metric) if row is not base else None
        if (
            c is None
            or not (c["mean_ci"] and c["mean_ci"][0] > 0)
            or not (c["tail_ci"] and c["tail_ci"][1] < 0)
            or c["tail_b"] - c["tail_a"] < APART
        ):
            continue
        text = (
            f"{metric}: {row.method} beats base on the user mean ({c['mean_a']:.3f} vs "
            f"{c['mean_b']:.3f}, interval {_ci(c['mean_ci'])}) but its worst decile is "
            f"lower ({c['tail_a']:.3f} vs {c['tail_b']:.3f}, interval {_ci(c['tail_ci'])}): "
            "it helps on average and hurts the worst-served users"
        )
        out.append(_flag("mean_only_gain", suite, size, metric, row.method, base.method, c, text))
    return out


def _excludes_zero(ci: list[float] | None) -> bool:
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


def _ci(ci: list[float] | None) -> str:
    return "-" if not ci else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
