"""The per-user view: what a mean over users hides (docs/report.md).

For each method, per (suite, size, metric) of the catalogue's ``spread`` role (policy and RM
accuracy, ROUGE-1): the mean over users and the mean of its worst
decile of users. Two flags, each a test over users, only with enough users for a worst decile to
be more than one or two people:

- ``close_means``: two methods whose user means are within ``CLOSE`` of each other but whose
  worst deciles differ by at least ``APART``; the test: the two methods exchangeable within
  each user (``nulls.swap``, every user's pair of figures swapped or not), the statistic the
  difference of the worst deciles;
- ``mean_only_gain``: a method above ``base`` on the user mean (the sign-flip test) and at least
  ``APART`` below base on the worst decile (the swap test of the worst deciles), both needed
  (intersection-union).

Every pair examined is a look of the run's family (``family``); a pair whose effect sizes are
not reached is a look that could not fire (``silent_looks``). A flag fires when its adjusted
p-value is below the level; the intervals (users resampled) describe.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from pytest_prefalign.analysis import catalogue, nulls, users
from pytest_prefalign.runs.entries import SpreadEntry
from pytest_prefalign.runs.records import CaseResult

TAIL_SHARE = 0.10
MIN_USERS = 10  # a worst decile of at least one user in ten
CLOSE = 0.02  # means within 2 points count as close
APART = 0.10  # tails 10 points apart count as different


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


def _groups(results: Iterable[CaseResult]) -> dict[tuple[str, str, str], list[CaseResult]]:
    groups: dict[tuple[str, str, str], list[CaseResult]] = defaultdict(list)
    for result in results:
        for metric in catalogue.spread_metrics():
            if len(result.per_user.get(metric, {})) >= MIN_USERS:
                groups[(result.suite, result.size, metric)].append(result)
    return dict(sorted(groups.items()))


def flags(results: Iterable[CaseResult]) -> list[SpreadEntry]:
    """The candidate flags of every (suite, size, metric) whose methods have at least
    ``MIN_USERS``: those whose effect sizes are reached, each with its p-value; the run's
    ``family`` says which fire."""
    found: list[SpreadEntry] = []
    for (suite, size, metric), rows in _groups(results).items():
        found += _close_means(suite, size, metric, rows) + _mean_only_gain(
            suite, size, metric, rows
        )
    return found


def silent_looks(results: Iterable[CaseResult], found: list[SpreadEntry]) -> int:
    """The pairs examined whose effect sizes were not reached (every pair of methods, and every
    method against base, over at least ``MIN_USERS`` shared users, less the candidates ``found``
    by ``flags``): looks that could not fire."""
    looks = 0
    for (_, _, metric), rows in _groups(results).items():
        base = _base(rows)
        for i, a in enumerate(rows):
            for b in rows[i + 1 :]:
                looks += _shared(a, b, metric) >= MIN_USERS
            looks += base is not None and a is not base and _shared(a, base, metric) >= MIN_USERS
    return looks - len(found)


def _shared(a: CaseResult, b: CaseResult, metric: str) -> int:
    return len(set(a.per_user[metric]) & set(b.per_user[metric]))


def _base(rows: list[CaseResult]) -> CaseResult | None:
    return next((r for r in rows if r.decoder == "base" and not r.reward), None)


def _tail_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(R,)`` worst-decile mean of each row of ``a`` minus that of ``b`` (``(R, users)``)."""
    k = max(1, math.ceil(TAIL_SHARE * a.shape[1]))
    return np.sort(a, axis=1)[:, :k].mean(1) - np.sort(b, axis=1)[:, :k].mean(1)


def _mean_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a - b).mean(axis=1)


@dataclass(frozen=True)
class Contrast:
    """Two rows' user means and worst-decile means over their shared users (``tail_users`` of
    ``n_users`` in the decile); tested, the differences' intervals and swap tests' p-values."""

    mean_a: float
    mean_b: float
    tail_a: float
    tail_b: float
    tail_users: int
    n_users: int
    mean_ci: Sequence[float] | None = None
    tail_ci: Sequence[float] | None = None
    p_mean: float | None = None
    p_tail: float | None = None


def _compare(a: CaseResult, b: CaseResult, metric: str, test: bool = True) -> Contrast | None:
    """Means and worst deciles of ``a`` and ``b`` over their shared users, the differences
    ``a - b`` of both, their intervals with users resampled, and (``test``) the p-values of
    the swap tests of both differences."""
    shared = sorted(set(a.per_user[metric]) & set(b.per_user[metric]))
    if len(shared) < MIN_USERS:
        return None
    va = np.array([a.per_user[metric][u] for u in shared])
    vb = np.array([b.per_user[metric][u] for u in shared])
    tail_a, k = tail_mean(va)
    tail_b, _ = tail_mean(vb)
    found = Contrast(float(va.mean()), float(vb.mean()), tail_a, tail_b, k, len(shared))
    if not test:
        return found
    mean_d, tail_d = [], []
    for counts in users.resamples(len(shared)):
        n = counts.sum(1)
        mean_d.append((counts @ va - counts @ vb) / n)
        tail_d.append(resampled_tails(va, counts) - resampled_tails(vb, counts))
    return replace(
        found,
        mean_ci=users.interval(np.concatenate(mean_d)),
        tail_ci=users.interval(np.concatenate(tail_d)),
        p_mean=nulls.swap(va, vb, _mean_difference)[0],
        p_tail=nulls.swap(va, vb, _tail_difference)[0],
    )


def _flag(
    kind: str,
    where: tuple[str, str, str],
    a: str,
    b: str,
    c: Contrast,
    text: str,
    test: str,
    p_value: float | None,
) -> SpreadEntry:
    """The flag of ``a`` against ``b`` on ``where``'s (suite, size, metric), from their
    comparison ``c`` (``_compare``)."""
    suite, size, metric = where
    return SpreadEntry(
        suite=suite,
        size=size,
        metric=metric,
        kind=kind,
        a=a,
        b=b,
        **asdict(c),
        text=text,
        test=test,
        p_value=p_value,
    )


def _close_means(suite: str, size: str, metric: str, rows: list[CaseResult]) -> list[SpreadEntry]:
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            c = _compare(a, b, metric, test=False)
            if c is None or abs(c.mean_a - c.mean_b) > CLOSE or abs(c.tail_a - c.tail_b) < APART:
                continue
            lo, hi = (b, a) if c.tail_a > c.tail_b else (a, b)  # the worse tail first
            c = _compare(lo, hi, metric)
            assert c is not None  # the same users, perhaps the other way round
            text = (
                f"{metric}: {lo.method} and {hi.method} have close user means "
                f"({c.mean_a:.3f} vs {c.mean_b:.3f}) but different worst deciles "
                f"({c.tail_a:.3f} vs {c.tail_b:.3f}, difference interval "
                f"{_ci(c.tail_ci)}, p {c.p_tail:.3g}; worst {c.tail_users} of "
                f"{c.n_users} users)"
            )
            test = "swap test of the worst deciles"
            where = (suite, size, metric)
            out.append(_flag("close_means", where, lo.method, hi.method, c, text, test, c.p_tail))
    return out


def _mean_only_gain(
    suite: str, size: str, metric: str, rows: list[CaseResult]
) -> list[SpreadEntry]:
    base = _base(rows)
    if base is None:
        return []
    out = []
    for row in rows:
        c = _compare(row, base, metric, test=False) if row is not base else None
        if c is None or c.mean_a <= c.mean_b or c.tail_b - c.tail_a < APART:
            continue
        c = _compare(row, base, metric)
        assert c is not None
        text = (
            f"{metric}: {row.method} beats base on the user mean ({c.mean_a:.3f} vs "
            f"{c.mean_b:.3f}, interval {_ci(c.mean_ci)}, p {c.p_mean:.3g}) but its "
            f"worst decile is lower ({c.tail_a:.3f} vs {c.tail_b:.3f}, interval "
            f"{_ci(c.tail_ci)}, p {c.p_tail:.3g}): it helps on average and hurts the "
            "worst-served users"
        )
        p_value = nulls.intersection_union(c.p_mean, c.p_tail)
        test = "intersection-union of two swap tests"
        where = (suite, size, metric)
        out.append(_flag("mean_only_gain", where, row.method, base.method, c, text, test, p_value))
    return out


def _ci(ci: Sequence[float] | None) -> str:
    return "-" if not ci else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
