"""Paired comparisons of rows of one run.

- **In-context learning against reward-guided decoding** (per suite and size): each ICL row
  (``icl``, ``icl_rag``) against the best reward-guided row by the leaderboard's sort key
  (``catalogue.rank_key``: ROUGE-1, or policy accuracy where the suite has no ROUGE), over the
  users they all have: the paper's central comparison. The best row is chosen on the same
  users, so a plain paired test of ICL against it would favour the chosen row (the best of
  several noisy figures is above its truth). ICL is above the best where it is above every
  guided row: each pair's one-sided sign-flip test significant (the largest of their p-values,
  an intersection-union test, Berger 1982). The best is above ICL where ICL's lowest
  studentized mean difference to the guided rows (each divided by its spread under sign
  flips) is below what flipping each user's differences together gives
  (``nulls.joint_sign_flip_lowest``: the best chosen again in every pattern). Both tests flip
  the signs of differences, so each row keeps its own per-user spread: a within-user shuffle
  of the rows, which assumes them exchangeable, fired on its own in 0.135 (20 users) and 0.195
  (40) of the nulls where ICL's rows vary 3 times as much as the guided rows, every mean equal
  (issue 38; docs/metrics.md, "The ICL comparison: sign flips, not shuffles").
- ``compare_rows``: every metric of two rows of one run, paired over their shared users (the
  ``prefalign compare RUN --rows A,B`` command), each by the exact sign-flip test over users
  (``stats.sign_flip``), the metrics of one command adjusted together by Holm.

A verdict states one row better only when its p-value is below ``ALPHA`` (for the ICL rows,
once adjusted with the run's other looks, ``family``); "not enough evidence" below
``stats.sign_test_floor(ALPHA)`` users (6), where no sign-flip test can reach ``ALPHA``; else no
significant difference. The intervals (users resampled) describe the differences; they do not
decide.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from pytest_prefalign.analysis import catalogue, family, nulls, stats, users
from pytest_prefalign.analysis.metrics import FIGURE_DIGITS, finite
from pytest_prefalign.runs.entries import IclEntry
from pytest_prefalign.runs.records import CaseResult

ICL_DECODERS = ("icl", "icl_rag")
ALPHA = 0.05

Row = dict[str, Any]


@dataclass(frozen=True)
class Paired:
    """``a - b`` on one metric over the users both rows have (``paired``): ``diff``, its
    interval ``ci`` with users resampled (a description; None without shared users),
    ``n_users``, the sign-flip ``test`` and its ``p_value`` (None without shared users), and
    the ``verdict`` at that p-value alone."""

    diff: float
    ci: Sequence[float] | None
    n_users: int
    test: str
    p_value: float | None
    verdict: str


@dataclass(frozen=True)
class RowComparison:
    """Two rows of one run on one metric (``compare_rows``): their figures, ``a - b`` paired
    over their shared users with its interval and test, the p-value adjusted over the
    command's comparisons (``p_holm``) and the verdict at it."""

    suite: str
    size: str
    metric: str
    a: str
    b: str
    value_a: float | None
    value_b: float | None
    diff: float | None
    ci: Sequence[float] | None
    n_users: int
    test: str
    p_value: float | None
    verdict: str
    p_holm: float | None = None


# --------------------------------------------------------------------------------------------
# In-context learning against the best reward-guided row
# --------------------------------------------------------------------------------------------


def icl_entries(results: Iterable[CaseResult]) -> list[IclEntry]:
    """Each ICL row against the best reward-guided row of its (suite, size), with the p-value
    of ``against_best``'s sign-flip tests; the verdict is set once the run's looks are adjusted
    together (``icl_verdict``)."""
    by_group: dict[tuple[str, str], list[CaseResult]] = defaultdict(list)
    for result in results:
        by_group[(result.suite, result.size)].append(result)
    entries = []
    for (suite, size), rows in sorted(by_group.items()):
        guided = [r for r in rows if r.reward]
        metric = catalogue.rank_key({name for r in guided for name in r.metrics})
        guided = [r for r in guided if metric in r.per_user and finite(r.metrics.get(metric))]
        if not guided:
            continue
        for icl in (r for r in rows if r.decoder in ICL_DECODERS and not r.reward):
            if metric in icl.per_user:
                found = against_best(icl, guided, metric)
                entry = IclEntry(
                    suite=suite,
                    size=size,
                    metric=metric,
                    icl=icl.method,
                    rgd=found.pop("best"),
                    **found,
                )
                entries.append(replace(entry, verdict=icl_verdict(entry, entry.p_value)))
    return entries


def against_best(one: CaseResult, others: list[CaseResult], metric: str) -> Row:
    """``one`` minus the best of ``others`` on ``metric`` over the users every row has, the
    best chosen on them: ``best`` (its method), ``diff`` and its interval (a description),
    ``n_users`` and the two-sided p-value (None below ``stats.sign_test_floor(ALPHA)`` users):
    twice the smaller of ``one`` above every other row (``above_every``) and the best of them
    above ``one`` (``nulls.joint_sign_flip_lowest``, the choice of the best on the same data
    part of its null)."""
    t = users.shared_table([one, *others], metric)
    n = len(t.users)
    p_value, best = None, max(others, key=lambda r: users.figure(r, metric))
    if n:
        w = t.weights.mean(axis=0)
        best = others[int(np.argmax(_weighted_means(t.values[None], w)[0, 1:]))]
        if n >= stats.sign_test_floor(ALPHA):
            diffs = t.values[0][None, :] - t.values[1:]
            below, _ = nulls.joint_sign_flip_lowest(diffs, w)
            p_value = nulls.two_sided(above_every(diffs, w), below)
    # over the users the test saw, so that the direction stated is the tested one (the two
    # rows alone may share users the others lack, where the difference may change sign)
    diff, ci, _ = users.difference(
        users.only(one, metric, t.users), users.only(best, metric, t.users), metric
    )
    return {
        "best": best.method,
        "diff": diff,
        "ci": ci,
        "n_users": n,
        "n_others": len(others),
        "test": "minus the best of the others; sign flips over users (above every one, "
        "below the best with each user's differences flipped together)",
        "p_value": p_value,
    }


def above_every(diffs: np.ndarray, w: np.ndarray) -> float:
    """The one-sided p-value of one row above every other: ``diffs`` ``(others, users)``, its
    per-user figure minus each other's, each tested by the one-sided sign flip; the largest of
    their p-values (an intersection-union test: no correction, Berger 1982)."""
    return max(nulls.sign_flip_greater(d, w)[0] for d in diffs)


def range_test(rows: list[CaseResult], metric: str) -> float | None:
    """The one-sided p-value that the rows differ on ``metric``: the highest minus the lowest
    figure over the users every row has, against the within-user permutation of all the rows
    (None below ``stats.sign_test_floor(ALPHA)`` users or with fewer than two rows)."""
    t = users.shared_table(rows, metric)
    if len(rows) < 2 or len(t.users) < stats.sign_test_floor(ALPHA):
        return None
    w = t.weights.mean(axis=0)

    def statistic(tables: np.ndarray) -> np.ndarray:
        means = _weighted_means(tables, w)
        return means.max(axis=1) - means.min(axis=1)

    return nulls.within_user(t.values, statistic)[0]


def gap_lower(rows: list[CaseResult], metric: str, high: int, low: int) -> float | None:
    """A lower 95% bound for row ``high`` minus row ``low`` on ``metric`` that holds whichever
    pair of ``rows`` the data chose (``simultaneous_lower``), over the users every row has,
    users resampled (``users.N_BOOT``, the analysis's seed); None below two shared users."""
    t = users.shared_table(rows, metric)
    if len(t.users) < 2:
        return None
    boot = np.concatenate([t.resampled(c) for c in users.resamples(len(t.users))])
    return simultaneous_lower(t.means(), boot, high, low, len(t.users))


def simultaneous_lower(
    observed: np.ndarray,
    boot: np.ndarray,
    high: int,
    low: int,
    n_users: int,
    alpha: float = ALPHA,
) -> float:
    """The one-sided ``1 - alpha`` lower bound of ``observed[high] - observed[low]`` that covers
    every ordered pair of rows at once, so that it holds for the pair the same data chose (the
    highest and the lowest figures are above and below their truths on average, so a bound
    made for that pair alone lies above its true difference too often: issue 38,
    benchmarks/calibration.py --gap-level).

    A max-t bound (Romano and Wolf 2005): each pair's deviation in a resample, ``(d* - d) /
    se`` (``se`` the spread of the pair's ``d*``), the ``1 - alpha`` quantile ``c`` of the
    largest over the pairs in each resample, and the bound ``d - c se``; then widened as
    Hesterberg's expanded percentile interval is, by ``sqrt(n / (n - 1)) t(n - 1) / z`` at
    ``1 - alpha`` (a resample's spread is below the users' at few users, and its tails lighter
    than a t's), so that it holds at 8 users. ``observed`` ``(rows,)``, ``boot``
    ``(resamples, rows)``; a pair that never varies counts no deviation."""
    d = observed[:, None] - observed[None, :]
    d_star = boot[:, :, None] - boot[:, None, :]
    se = np.nanstd(d_star, axis=0)
    varies = se > 0
    deviations = np.where(varies, (d_star - d) / np.where(varies, se, 1.0), 0.0)
    largest = np.nanmax(deviations.reshape(len(boot), -1), axis=1)
    c = float(np.quantile(largest[np.isfinite(largest)], 1 - alpha))
    return float(d[high, low] - max(c, 0.0) * se[high, low] * expansion(n_users, alpha))


def expansion(n_users: int, alpha: float = ALPHA) -> float:
    """Hesterberg's (2015) widening of a one-sided bootstrap bound at ``1 - alpha`` over
    ``n_users``: ``sqrt(n / (n - 1))`` times the t quantile with ``n - 1`` degrees of freedom
    over the normal's (1.23 at 8 users, 1.08 at 20, 1.04 at 40)."""
    from scipy import special  # the quantiles scipy.stats's t and norm compute, without
    # importing scipy.stats (over a second of a warm rerun, whose other figures are kept)

    n = max(n_users, 2)
    return math.sqrt(n / (n - 1)) * float(
        special.stdtrit(n - 1, 1 - alpha) / special.ndtri(1 - alpha)
    )


def _weighted_means(tables: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``(R, rows)`` means of ``(R, rows, users)`` tables with user weights ``w``."""
    return np.round((tables * w).sum(axis=-1) / w.sum(), FIGURE_DIGITS)


def icl_verdict(entry: IclEntry, p_value: float | None) -> str:
    """The ICL comparison's verdict at ``p_value`` (the run's adjusted one once known)."""
    diff = math.nan if entry.diff is None else entry.diff
    return verdict(entry.icl, entry.rgd, entry.metric, diff, p_value, entry.n_users)


def paired(a: CaseResult, b: CaseResult, metric: str, n_boot: int = users.N_BOOT) -> Paired:
    """``a - b`` on ``metric`` over the users both rows have, tested by sign flips over users."""
    diff, ci, n = users.difference(a, b, metric, n_boot)
    p_value, exact = None, True
    if n:
        _, d, w = users.paired_differences(a, b, metric)
        p_value, exact = stats.sign_flip(d.tolist(), w.tolist())
    return Paired(
        diff=diff,
        ci=ci,
        n_users=n,
        test="exact sign flip over users" if exact else "sign flip over users (sampled)",
        p_value=p_value,
        verdict=verdict(a.method, b.method, metric, diff, p_value, n),
    )


def verdict(a: str, b: str, metric: str, diff: float, p_value: float | None, n_users: int) -> str:
    """Which of two rows is better on ``metric``, when the data can say: the test's p-value
    below ``ALPHA``, the direction from the difference."""
    floor = stats.sign_test_floor(ALPHA)
    if n_users == 0:
        return "not enough evidence: no shared users"
    if n_users < floor:
        return (
            f"not enough evidence: {n_users} users: p >= {2 * 0.5**n_users:.2g} "
            "even if every user moved one way"
        )
    if p_value is None or not math.isfinite(p_value) or not math.isfinite(diff):
        return "not enough evidence: no test"
    if p_value < ALPHA and diff != 0:
        found = catalogue.find(metric)
        higher = found.higher_is_better if found is not None else True
        return f"{a if (diff > 0) == higher else b} better"
    return "no significant difference"


# --------------------------------------------------------------------------------------------
# Any two rows
# --------------------------------------------------------------------------------------------


def compare_rows(results: Sequence[CaseResult], a: str, b: str) -> list[RowComparison]:
    """Every metric both rows have, ``a - b`` paired over their shared users, per (suite,
    size) where both methods ran; ValueError naming what is missing. The comparisons of one
    command are one family: each gets ``p_holm`` (Holm over them) and its verdict at it."""
    found = []
    keys = {(r.suite, r.size) for r in results}
    for suite, size in sorted(keys):
        rows = {r.method: r for r in results if (r.suite, r.size) == (suite, size)}
        if a not in rows or b not in rows:
            continue
        for metric in (m for m in catalogue.metrics() if not m.alternative):
            if metric.name in rows[a].per_user and metric.name in rows[b].per_user:
                found.append(
                    RowComparison(
                        suite=suite,
                        size=size,
                        metric=metric.name,
                        a=a,
                        b=b,
                        value_a=rows[a].metrics.get(metric.name),
                        value_b=rows[b].metrics.get(metric.name),
                        **asdict(paired(rows[a], rows[b], metric.name)),
                    )
                )
    if not found:
        methods = sorted({r.method for r in results})
        raise ValueError(
            f"no (suite, size) of the run has both {a!r} and {b!r} with per-user "
            f"figures; its methods: {', '.join(methods)}"
        )
    tested = [(e, e.p_value) for e in found if e.p_value is not None]
    adjusted = family.holm([p for _, p in tested])
    holm = {id(e): float(p) for (e, _), p in zip(tested, adjusted, strict=True)}
    return [_stated(e, holm[id(e)]) if id(e) in holm else e for e in found]


def _stated(entry: RowComparison, p_holm: float) -> RowComparison:
    """A comparison with its adjusted p-value and its verdict at it: a new record."""
    diff = math.nan if entry.diff is None else entry.diff
    text = verdict(entry.a, entry.b, entry.metric, diff, p_holm, entry.n_users)
    return replace(entry, p_holm=p_holm, verdict=text)
