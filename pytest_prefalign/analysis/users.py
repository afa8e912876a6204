"""Figures of several methods resampled over users, for every interval that compares methods.

A method's per-user figures (``CaseResult.per_user``) are the unit of every comparison: users are
the independent draws (a user's pairs share the user and the reward head), so intervals resample
users, one draw shared by all the methods compared. A method's figure in a resample is the
weighted mean of its drawn users' figures: weight 1 per user for the macro metrics (RM and policy
accuracy), the user's number of observations for the micro ones (ROUGE, win rates), as the
metric catalogue declares.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from pytest_prefalign.analysis import catalogue, stats
from pytest_prefalign.analysis.metrics import (
    FIGURE_DIGITS,
    finite,
    percentile_interval,
    resample_counts,
)
from pytest_prefalign.runs.records import CaseResult

N_BOOT = 2000  # resamples of users behind every interval of the analysis
SEED = 0


@dataclass(frozen=True)
class Table:
    """``values`` ``(methods, users)`` of one metric (nan where a method has no figure for a
    user) and ``weights`` of the same shape (0 there)."""

    methods: list[str]
    users: list[str]
    values: np.ndarray
    weights: np.ndarray

    def means(self) -> np.ndarray:
        """``(methods,)`` the figures over all users."""
        return self.resampled(np.ones((1, len(self.users))))[0]

    def resampled(self, counts: np.ndarray) -> np.ndarray:
        """``(resamples, methods)`` figures for each row of user draw counts ``(R, users)``;
        nan where a method drew none of its users."""
        w = counts[:, None, :] * self.weights[None]
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (w * np.nan_to_num(self.values)[None]).sum(-1) / w.sum(-1)
        return np.round(out, FIGURE_DIGITS)  # two methods with the same figures tie exactly


def figure(row: CaseResult, metric: str) -> float:
    """``row``'s figure of ``metric`` (``CaseResult.metrics``), for rows already chosen for having
    it; ValueError naming the row and the metric where it is missing or not a finite number."""
    value = row.metrics.get(metric)
    if not finite(value):
        raise ValueError(
            f"{row.suite} {row.size} {row.method}: {metric} is {value!r}, expected a finite figure"
        )
    return value


def table(rows: Sequence[CaseResult], metric: str) -> Table:
    """The per-user figures of ``metric`` of these rows over the users any of them has."""
    users = sorted({u for r in rows for u in r.per_user.get(metric, {})})
    index = {u: j for j, u in enumerate(users)}
    values = np.full((len(rows), len(users)), np.nan)
    weights = np.zeros((len(rows), len(users)))
    micro = _pooling(metric) == "micro"
    for i, row in enumerate(rows):
        counts = _observations(row, metric) if micro else {}
        for user, value in row.per_user.get(metric, {}).items():
            values[i, index[user]] = value
            weights[i, index[user]] = counts.get(user, 1.0) if micro else 1.0
    return Table([r.method for r in rows], users, values, weights)


def tables(rows: Sequence[CaseResult], x: str, y: str) -> tuple[Table, Table]:
    """The tables of ``x`` and ``y`` over the users both have, so that one draw of users
    resamples both (on Polis, RM accuracy has every voter, ROUGE-1 only those who wrote)."""
    tx, ty = table(rows, x), table(rows, y)
    if tx.users == ty.users:
        return tx, ty
    shared = sorted(set(tx.users) & set(ty.users))
    return _restricted(tx, shared), _restricted(ty, shared)


def shared_table(rows: Sequence[CaseResult], metric: str) -> Table:
    """The per-user figures of ``metric`` of these rows over the users every row has (a
    comparison of several rows at once draws or shuffles users whom all of them have)."""
    t = table(rows, metric)
    every = np.isfinite(t.values).all(axis=0)
    return _restricted(t, [u for u, kept in zip(t.users, every, strict=True) if kept])


def _restricted(t: Table, keep: list[str]) -> Table:
    columns = [t.users.index(u) for u in keep]
    return Table(t.methods, keep, t.values[:, columns], t.weights[:, columns])


def resamples(n_users: int, n_boot: int = N_BOOT, seed: int = SEED) -> Iterator[np.ndarray]:
    """Blocks of user draw counts, one row per resample, the same for every comparison."""
    return resample_counts(n_users, n_boot, seed)


def interval(values: np.ndarray, level: float = 0.95) -> list[float] | None:
    lo, hi = percentile_interval(values, level)
    return None if not (np.isfinite(lo) and np.isfinite(hi)) else [float(lo), float(hi)]


def difference(
    a: CaseResult, b: CaseResult, metric: str, n_boot: int = N_BOOT, seed: int = SEED
) -> tuple[float, list[float] | None, int]:
    """``a - b`` on ``metric`` over the users both have, its interval with users resampled,
    and the number of shared users."""
    shared = sorted(set(a.per_user.get(metric, {})) & set(b.per_user.get(metric, {})))
    if not shared:
        return float("nan"), None, 0
    t = table([only(a, metric, shared), only(b, metric, shared)], metric)
    observed = t.means()
    diffs = np.concatenate(
        [
            (m[:, 0] - m[:, 1])
            for m in (t.resampled(c) for c in resamples(len(shared), n_boot, seed))
        ]
    )
    return float(observed[0] - observed[1]), interval(diffs), len(shared)


def paired_differences(
    a: CaseResult, b: CaseResult, metric: str
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The users both rows have on ``metric``, each one's ``a - b``, and its weight (the mean of
    the two rows' weights: 1 for a macro figure, the observations for a micro one), so that the
    weighted mean of the differences is ``difference``'s figure where the weights agree."""
    shared = sorted(set(a.per_user.get(metric, {})) & set(b.per_user.get(metric, {})))
    if not shared:
        return [], np.zeros(0), np.zeros(0)
    t = table([only(a, metric, shared), only(b, metric, shared)], metric)
    return shared, t.values[0] - t.values[1], t.weights.mean(axis=0)


def sign_flip(a: CaseResult, b: CaseResult, metric: str, alpha: float = 0.05) -> float | None:
    """The two-sided exact sign-flip p-value of ``a - b`` on ``metric`` over the users both
    have (``stats.sign_flip``), or None below ``stats.sign_test_floor(alpha)`` of them, where
    no sign-flip test can be significant."""
    _, d, w = paired_differences(a, b, metric)
    if len(d) < stats.sign_test_floor(alpha):
        return None
    return stats.sign_flip(d.tolist(), w.tolist())[0]


def only(row: CaseResult, metric: str, users: list[str]) -> CaseResult:
    """``row`` with ``metric``'s per-user figures of ``users`` alone."""
    keep = {u: v for u, v in row.per_user[metric].items() if u in set(users)}
    return CaseResult(
        row.suite, row.method, row.size, per_user={metric: keep}, items=row.items, pairs=row.pairs
    )


def _pooling(metric: str) -> str:
    found = catalogue.find(metric)
    return found.pooling if found is not None else "macro"


def _observations(row: CaseResult, metric: str) -> dict[str, float]:
    """Each user's number of observations of ``metric`` (its records), for micro weights."""
    found = catalogue.find(metric)
    if found is None:
        return {}
    records = row.items if found.level == "item" else row.pairs
    counts: dict[str, float] = {}
    for record in records:
        if record.value(found.field) is not None:
            counts[record.user] = counts.get(record.user, 0.0) + 1.0
    return counts
