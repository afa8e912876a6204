"""Permutation tests over users, for the verdicts that compare methods (docs/metrics.md#verdicts).

A user is the unit of every test: one user's pairs and items share the user and a reward head,
so they are not independent, while users are. Each test states a null under which some
rearrangement of the per-user figures leaves their joint distribution unchanged, draws that
rearrangement (exactly, every arrangement, when they are few; else ``PERMUTATIONS``, seeded), and
gives the share of arrangements whose statistic is at least as extreme as the observed one,
counting the observed arrangement (so p is never 0 and the test holds its level exactly):

- ``sign_flip_greater``: the one-sided sign-flip test (a row's share above another's, e.g. a
  row's not-an-answer share above base's);
- ``swap``: two methods exchangeable within each user (the paired sign-flip test, for any
  statistic of the two methods' per-user figures, e.g. the mean of the worst decile);
- ``within_user``: several methods exchangeable within each user (each user's figures shuffled
  across the methods), for a statistic of the whole table, e.g. the range of several methods;
- ``joint_sign_flip_lowest``: one method against the best of several, each user's differences
  to all of them flipped together (the differences symmetric about 0 jointly, whatever each
  method's spread), for the lowest of the studentized mean differences: a best-of-several
  comparison whose selection on the same data would bias a plain paired test;
- ``intersection_union``: a statement that needs several things at once (an inversion: above by
  one figure and below by the other) is significant when each of them is; its p-value is the
  largest of theirs (Berger 1982), a test at the same level with no correction.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from itertools import product

import numpy as np

PERMUTATIONS = 50_000  # sign patterns drawn where the exact set is larger (2^15 < it)
SHUFFLES = 10_000  # within-user shuffles of several methods drawn
SEED = 0

Statistic = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (R, users) x2 -> (R,)


def p_from_draws(observed: float, draws: np.ndarray, *, exact: bool) -> float:
    """The share of ``draws`` at least as large as ``observed``; a sampled set of draws counts
    the observed arrangement once more (``(k + 1) / (n + 1)``), an exact one already holds it.
    Figures are compared with a relative tolerance, so that the same value computed in another
    order counts as equal."""
    tolerance = 1e-9 * max(1.0, abs(observed))
    hits = int(np.count_nonzero(draws >= observed - tolerance))
    if exact:
        return min(1.0, hits / len(draws))
    return min(1.0, (hits + 1) / (len(draws) + 1))


@functools.lru_cache(maxsize=64)
def sign_patterns(n: int, *, seed: int = SEED) -> tuple[np.ndarray, bool]:
    """``(R, n)`` patterns of +-1: all ``2^n`` of them when that is at most ``PERMUTATIONS``
    (the first is all +1, the observed arrangement), else ``PERMUTATIONS`` drawn; and whether
    they are exact. Made once per ``(n, seed)`` (read-only)."""
    if 2**n <= PERMUTATIONS:
        signs = np.array(list(product((1.0, -1.0), repeat=n)))
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(PERMUTATIONS, n))
    signs.flags.writeable = False
    return signs, 2**n <= PERMUTATIONS


def sign_flip(diffs: np.ndarray, weights: np.ndarray, *, seed: int = SEED) -> tuple[float, bool]:
    """Two-sided p-value of the weighted mean of per-user differences under the null that each
    difference is as likely negative as positive (the two methods exchangeable within each
    user), and whether it is exact: the share of sign patterns whose ``|sum w s d| / sum w``
    is at least the observed one. One matrix product over all the patterns."""
    d, w = np.asarray(diffs, dtype=float), np.asarray(weights, dtype=float)
    observed = abs(float(w @ d) / float(w.sum()))
    if observed == 0.0:
        return 1.0, True
    signs, exact = sign_patterns(len(d), seed=seed)
    draws = np.abs(signs @ (w * d)) / float(w.sum())
    return p_from_draws(observed, draws, exact=exact), exact


def sign_flip_greater(
    diffs: np.ndarray, weights: np.ndarray, *, seed: int = SEED
) -> tuple[float, bool]:
    """One-sided p-value of the weighted mean of per-user differences being above 0, under the
    null that each difference is as likely negative as positive, and whether it is exact: the
    share of sign patterns whose ``sum w s d / sum w`` is at least the observed one (the
    observed pattern among them). With ``n`` users no p-value is below ``0.5**n``."""
    d, w = np.asarray(diffs, dtype=float), np.asarray(weights, dtype=float)
    if d.ndim != 1 or d.shape != w.shape or len(d) == 0:
        raise ValueError(f"expected one difference and one weight per user, got {d.shape}")
    if not d.any():
        return 1.0, True
    observed = float(w @ d) / float(w.sum())
    signs, exact = sign_patterns(len(d), seed=seed)
    draws = (signs @ (w * d)) / float(w.sum())
    return p_from_draws(observed, draws, exact=exact), exact


def swap(
    a: np.ndarray, b: np.ndarray, statistic: Statistic, *, seed: int = SEED
) -> tuple[float, bool]:
    """Two-sided p-value of ``statistic(a, b)`` under the null that ``a`` and ``b`` (each
    ``(users,)``) are exchangeable within each user, and whether it is exact: every pattern of
    swapped users (all ``2^n`` up to ``PERMUTATIONS``), the share whose ``|statistic|`` is at
    least the observed one. ``statistic`` takes two ``(R, users)`` arrays and returns ``(R,)``."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"expected two equal non-empty 1-D arrays, got {a.shape} and {b.shape}")
    observed = float(abs(statistic(a[None], b[None])[0]))
    if observed == 0.0 or not math.isfinite(observed):
        return 1.0, True
    signs, exact = sign_patterns(len(a), seed=seed)
    keep = signs > 0
    draws = np.abs(statistic(np.where(keep, a, b), np.where(keep, b, a)))
    return p_from_draws(observed, draws, exact=exact), exact


def within_user(
    values: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    *,
    n_perm: int = SHUFFLES,
    seed: int = SEED,
) -> tuple[float, float, np.ndarray]:
    """The observed ``statistic`` of ``values`` ``(methods, users)`` and its one-sided p-values
    ``(upper, lower)`` under the null that each user's figures are exchangeable across the
    methods: ``n_perm`` tables with every user's column shuffled independently (seeded), the
    share at or above (``upper``) and at or below (``lower``) the observed figure, each counting
    the observed table. ``statistic`` maps ``(R, methods, users)`` to ``(R,)``. Also returns the
    draws."""
    values = np.asarray(values, dtype=float)
    observed = float(statistic(values[None])[0])
    (shuffled,) = shuffled_within_users([values], n_perm, seed)
    draws = statistic(shuffled)
    upper = p_from_draws(observed, draws, exact=False)
    lower = p_from_draws(-observed, -draws, exact=False)
    return upper, lower, draws


def joint_sign_flip_lowest(
    diffs: np.ndarray, weights: np.ndarray, *, seed: int = SEED
) -> tuple[float, bool]:
    """One-sided p-value that one method is below the best of several others, and whether it is
    exact. ``diffs`` ``(others, users)``: the method's per-user figure minus each other's;
    ``weights`` ``(users,)``. Each difference's weighted mean is divided by its spread under
    sign flips (``sqrt(sum (w d)^2) / sum w``, the same in every pattern), so that a noisy or
    far-off row does not drown the others; the statistic is the lowest of these. Null: every
    mean difference 0 and each user's vector of differences as likely negated as not (true
    where the rows' per-user figures are symmetric about a common mean, with any spreads and
    correlations: each user's column is flipped whole, so every row keeps its own spread). The
    share of sign patterns whose lowest is at most the observed one. A row truly below the
    method only lowers the patterns' lowest, so the test is conservative there: its null's
    least favourable case is all equal."""
    d, w = np.asarray(diffs, dtype=float), np.asarray(weights, dtype=float)
    if d.ndim != 2 or d.shape[1] != len(w) or d.size == 0:
        raise ValueError(
            f"expected (others, users) differences and one weight per user, got {d.shape}"
        )
    if not (np.isfinite(d).all() and np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0):
        raise ValueError("differences and weights must be finite, weights >= 0 and not all 0")
    weighted = d * w
    spread = np.sqrt((weighted**2).sum(axis=1))
    scale = np.divide(1.0, spread, out=np.zeros_like(spread), where=spread > 0)
    observed = float((weighted.sum(axis=1) * scale).min())
    signs, exact = sign_patterns(d.shape[1], seed=seed)
    draws = ((signs @ weighted.T) * scale).min(axis=1)
    return p_from_draws(-observed, -draws, exact=exact), exact


def shuffled_within_users(tables: Sequence[np.ndarray], n: int, seed: int) -> list[np.ndarray]:
    """``n`` copies ``(n, methods, users)`` of each ``(methods, users)`` table with every user's
    column shuffled across the methods, independently per user and copy (seeded); the same
    shuffles for every table, so that a table of values and one of their weights stay
    together."""
    rng = np.random.default_rng(seed)
    k, u = np.shape(tables[0])
    order = np.argsort(rng.random((n, k, u)), axis=1)
    return [np.take_along_axis(np.broadcast_to(t, (n, k, u)), order, axis=1) for t in tables]


def two_sided(upper: float, lower: float) -> float:
    """Twice the smaller one-sided p-value, at most 1."""
    return float(min(1.0, 2.0 * min(upper, lower)))


def intersection_union(*p_values: float | None) -> float | None:
    """The p-value of "all of these at once": the largest of theirs (None if any is None)."""
    known = [p for p in p_values if p is not None and math.isfinite(p)]
    if len(known) < len(p_values):
        return None
    return float(max(known))
