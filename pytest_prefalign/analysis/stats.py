"""Statistics across methods and between runs: Kendall's tau-b, inversions, paired tests.

``kendall`` and ``inversions`` compare *methods* (does RM accuracy order them as policy accuracy
does?); ``mcnemar_exact`` and ``paired_bootstrap`` compare *two runs* of one method on the same
pairs or users (the regression gate).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pytest_prefalign.analysis import nulls
from pytest_prefalign.analysis.metrics import (
    FIGURE_DIGITS,
    percentile_interval,
    resample_counts,
)

# --------------------------------------------------------------------------------------------
# Kendall's tau-b across methods
# --------------------------------------------------------------------------------------------


PERMUTATIONS = 50_000  # permutations drawn for the p-value where n! is larger (n >= 9)


@dataclass(frozen=True)
class Tau:
    """Kendall's tau-b with its p-value over ``n`` methods; ``reason`` says why tau is nan;
    ``exact``: the p-value enumerates every permutation (else it samples ``PERMUTATIONS``,
    and ``mc_se`` is its Monte Carlo standard error, sqrt(p (1 - p) / PERMUTATIONS))."""

    tau: float
    p_value: float
    n: int
    reason: str = ""
    exact: bool = True
    mc_se: float = 0.0


def kendall(x: Sequence[float], y: Sequence[float], *, seed: int = 0) -> Tau:
    """Kendall's tau-b between two figures of the same methods, with its two-sided permutation
    p-value: the share of the orderings of ``y`` against ``x`` whose tau-b is at least as far
    from 0 (``scipy.stats.permutation_test``). Exact for up to 8 methods, where scipy's
    large-sample p-value (``kendalltau``) is wrong, most of all with ties; sampled, seeded,
    beyond.

    Methods where either figure is nan are left out (e.g. a method without a reward has no RM
    accuracy). tau is nan, with a ``reason``, when fewer than 3 methods remain or a series is
    constant: with 2 points tau is always +-1 and carries no information.
    """
    from scipy import stats as sps

    xs, ys = _paired_floats(x, y)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    n = len(xs)
    if n < 3:
        return Tau(math.nan, math.nan, n, f"fewer than 3 methods with both figures ({n})")
    for name, series in (("x", xs), ("y", ys)):
        if np.all(series == series[0]):
            return Tau(math.nan, math.nan, n, f"{name} is the same for every method")

    def distance(y_perm: np.ndarray, axis: int = -1) -> np.ndarray:
        rows = np.atleast_2d(y_perm)
        return np.abs(tau_b_rows(np.broadcast_to(xs, rows.shape), rows))

    # the share of orderings whose |tau-b| is at least the observed one: with ties the null
    # distribution is not symmetric, and scipy's "two-sided" (twice the smaller one-sided p)
    # is another, larger figure
    exact = math.factorial(n) <= PERMUTATIONS
    result = sps.permutation_test(
        (ys,),
        distance,
        permutation_type="pairings",
        vectorized=True,
        n_resamples=PERMUTATIONS,
        alternative="greater",
        rng=np.random.default_rng(seed),
    )
    tau = float(tau_b_rows(xs[None], ys[None])[0])
    p_value = float(min(1.0, result.pvalue))
    mc_se = 0.0 if exact else math.sqrt(p_value * (1 - p_value) / PERMUTATIONS)
    return Tau(tau, p_value, n, exact=exact, mc_se=mc_se)


def tau_b_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row of ``x`` against the same row of ``y``: ``(rows, n)`` in,
    ``(rows,)`` out.

    tau-b = (concordant - discordant) / sqrt(pairs untied in x * pairs untied in y), the same
    figure as ``scipy.stats.kendalltau(variant="b")``, for all rows at once.
    """
    i, j = np.triu_indices(x.shape[1], k=1)
    sx, sy = np.sign(x[:, i] - x[:, j]), np.sign(y[:, i] - y[:, j])
    denominator = np.sqrt(np.count_nonzero(sx, axis=1) * np.count_nonzero(sy, axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.nansum(sx * sy, axis=1) / denominator
    defined = np.isfinite(x).all(axis=1) & np.isfinite(y).all(axis=1) & (denominator > 0)
    return np.where(defined, tau, np.nan)


# --------------------------------------------------------------------------------------------
# Ranking inversions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inversion:
    """Method ``a`` is strictly above ``b`` by x (``x_a > x_b``) but strictly below by y."""

    a: str
    b: str
    x_a: float
    x_b: float
    y_a: float
    y_b: float


def inversions(names: Sequence[str], x: Sequence[float], y: Sequence[float]) -> list[Inversion]:
    """Every pair of methods ordered strictly one way by ``x`` and strictly the other by ``y``.

    A tie on either figure is not an inversion, nor is a pair where a figure is nan. Each
    inversion is reported once, with ``a`` the method that ``x`` ranks higher.
    """
    xs, ys = _paired_floats(x, y)
    if len(names) != len(xs):
        raise ValueError(f"names has {len(names)} entries but x and y have {len(xs)}")
    found = []
    for i in range(len(names)):
        for j in range(len(names)):
            if xs[i] > xs[j] and ys[i] < ys[j]:  # False for nan, so nan pairs drop out
                found.append(Inversion(names[i], names[j], xs[i], xs[j], ys[i], ys[j]))
    return found


# --------------------------------------------------------------------------------------------
# Paired tests between two runs
# --------------------------------------------------------------------------------------------


def mcnemar_exact(old: Sequence[float], new: Sequence[float]) -> float:
    """Two-sided exact McNemar p-value for paired outcomes (1, 0.5 or 0) of two runs.

    Without ties this is ``binomtest(b, b + c, 0.5)`` on the discordant counts (b: old right,
    new wrong; c: the reverse). A tie (0.5) is half a win, as in the accuracy itself, so a pair
    like (1, 0.5) is *half* discordant. Under the null the two runs are exchangeable within a
    pair, so each pair's difference ``new - old`` is as likely positive as negative; the test
    is the exact sign-flip test of its sum, in which full and half discordances weigh 1 and 1/2.
    With no half discordances this is exactly McNemar's exact test. (Dropping tied pairs instead
    would let a reward that collapses to a constant, 1 -> 0.5 everywhere, pass the gate.)
    """
    from scipy import stats as sps

    if len(old) != len(new):
        raise ValueError(f"old has {len(old)} outcomes but new has {len(new)}")
    diff = _outcomes("new", new) - _outcomes("old", old)
    full = np.abs(diff) == 1.0
    half = np.abs(diff) == 0.5
    n_full, n_half = int(full.sum()), int(half.sum())
    if n_full + n_half == 0:
        return 1.0
    if n_half == 0:
        c = int((diff[full] > 0).sum())
        return float(sps.binomtest(c, n_full, 0.5).pvalue)
    return _sign_flip_p(n_full, n_half, observed=int(round(2 * diff.sum())))


def _sign_flip_p(n_full: int, n_half: int, observed: int) -> float:
    """P(|T| >= |observed|) where T = sum of n_full fair signs of weight 2 and n_half of weight 1.

    (T is twice the summed difference, so every value is an integer and compares exactly.)
    Conditioned on the number k of + signs among the full ones, T = a + 2 K with
    a = 2 (2k - n_full) - n_half and K ~ Binomial(n_half, 1/2), so each tail is one binomial
    cdf: memory linear in the number of pairs.
    """
    from scipy import stats as sps

    t = abs(observed)
    if t == 0:
        return 1.0
    k = np.arange(n_full + 1)
    a = 2 * (2 * k - n_full) - n_half
    upper = sps.binom.sf(-((a - t) // 2) - 1, n_half, 0.5)  # P(a + 2K >= t) = P(K >= ceil((t-a)/2))
    lower = sps.binom.cdf((-t - a) // 2, n_half, 0.5)  # P(a + 2K <= -t)
    weights = sps.binom.pmf(k, n_full, 0.5)
    return float(min(1.0, weights @ (upper + lower)))


def paired_bootstrap(
    old_per_user: Mapping[str, float],
    new_per_user: Mapping[str, float],
    n_boot: int = 2000,
    seed: int = 0,
    *,
    weights: Mapping[str, float] | None = None,
    level: float = 0.95,
) -> tuple[float, tuple[float, float], float]:
    """Mean difference ``new - old`` over the shared users, its interval, and a two-sided p-value.

    Users are resampled with replacement. ``weights`` (e.g. each user's item count) turns the
    mean over users into the mean over items, ROUGE's "mean over items"; without it every user
    weighs 1 (macro). The p-value is twice the smaller share of resampled differences on either
    side of 0 (each share counted with the observed sample, (k + 1) / (n_boot + 1), so it is
    never 0); it falls below ``1 - level`` about when the interval excludes 0.
    """
    users = sorted(set(old_per_user) & set(new_per_user))
    if not users:
        raise ValueError("the two runs share no users: nothing to compare")
    if weights is not None and (missing := [u for u in users if u not in weights]):
        raise ValueError(f"weights has no entry for {len(missing)} users, e.g. {missing[0]!r}")
    d = np.array([new_per_user[u] - old_per_user[u] for u in users], dtype=float)
    w = np.array([1.0 if weights is None else weights[u] for u in users], dtype=float)
    if not (np.isfinite(d).all() and np.isfinite(w).all() and (w > 0).all()):
        raise ValueError("per-user figures must be finite and weights positive")
    diff = float((w @ d) / w.sum())
    boots = np.concatenate(
        [(c @ (w * d)) / (c @ w) for c in resample_counts(len(users), n_boot, seed)]
    )
    below = (np.count_nonzero(boots <= 0.0) + 1) / (n_boot + 1)
    above = (np.count_nonzero(boots >= 0.0) + 1) / (n_boot + 1)
    return diff, percentile_interval(boots, level), float(min(1.0, 2.0 * min(below, above)))


def sign_flip_over_users(
    old_per_user: Mapping[str, float],
    new_per_user: Mapping[str, float],
    weights: Mapping[str, float] | None = None,
) -> float:
    """The exact sign-flip p-value of the weighted mean of each shared user's change ``new -
    old`` (``weights``: each user's items for a micro figure; without, users weigh 1)."""
    users = sorted(set(old_per_user) & set(new_per_user))
    diffs = [new_per_user[u] - old_per_user[u] for u in users]
    w = [1.0 if weights is None else float(weights[u]) for u in users]
    return sign_flip(diffs, w)[0]


def sign_flip(
    diffs: Sequence[float], weights: Sequence[float] | None = None, *, seed: int = 0
) -> tuple[float, bool]:
    """Two-sided p-value of the paired sign-flip test of a mean difference over users, and
    whether it is exact.

    ``diffs``: each user's difference between two methods (``a_u - b_u``); the statistic is
    their weighted mean (``weights``: each user's number of observations for a micro figure;
    without, every user weighs 1). Under the null the two methods are exchangeable within a
    user, so each difference is as likely negative as positive; the p-value is the share of the
    2^n sign patterns whose mean is at least as far from 0 as the observed one
    (``nulls.sign_flip``: one matrix product over the patterns; the same figure as
    ``scipy.stats.permutation_test``, paired, where exact). Exact up to 15 users (2^15 <=
    PERMUTATIONS), sampled, seeded, beyond, counting the observed pattern once more. With n
    users no p-value is below ``2 / 2^n``, so below ``sign_test_floor(alpha)`` users nothing
    can be significant.
    """
    d = np.asarray(diffs, dtype=float)
    w = np.ones_like(d) if weights is None else np.asarray(weights, dtype=float)
    if d.ndim != 1 or d.shape != w.shape or len(d) == 0:
        raise ValueError(
            f"expected one difference and one weight per user, got {d.shape}, {w.shape}"
        )
    if not (np.isfinite(d).all() and np.isfinite(w).all() and (w > 0).all()):
        raise ValueError("differences must be finite and weights positive")
    if not d.any():
        return 1.0, True
    return nulls.sign_flip(d, w, seed=seed)


# --------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------


def _paired_floats(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1:
        raise ValueError(f"x and y must be 1-D and the same length, got {xs.shape} and {ys.shape}")
    # equal figures summed in another order differ in the last bit: they tie (as users.Table)
    return np.round(xs, FIGURE_DIGITS), np.round(ys, FIGURE_DIGITS)


def _outcomes(name: str, values: Sequence[float]) -> np.ndarray:
    """Outcomes checked to be 0, 0.5 or 1; names the first bad one."""
    array = np.asarray(values, dtype=float)
    bad = np.flatnonzero(~np.isin(array, (0.0, 0.5, 1.0)))
    if len(bad):
        raise ValueError(f"{name}[{bad[0]}] is {array[bad[0]]}, expected 0, 0.5 or 1")
    return array


# --------------------------------------------------------------------------------------------
# What a paired test can detect
# --------------------------------------------------------------------------------------------


def sign_test_floor(alpha: float) -> int:
    """The fewest signs, all the same way, that make an exact two-sided sign test significant:
    the smallest ``k`` with ``2 * 0.5**k < alpha`` (6 at alpha 0.05: 2/64 = 0.031, while 5
    give 2/32 = 0.0625).

    It is the most favourable case of two tests. McNemar's exact test needs at least ``k``
    discordant pairs, all one way, before any drop can be significant. And a test over users
    (each user's change one sign) can be significant only with at least ``k`` users, which is
    why the paired bootstrap over users is refused below it: its p-value, about
    ``2 / (n_boot + 1)`` whenever every user dropped, would otherwise claim a significance that
    an exact test over so few users cannot reach.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    k = 1
    while 2.0 * 0.5**k >= alpha:
        k += 1
    return k


def smallest_detectable_drop(users: Sequence[str], alpha: float, pooling: str = "macro") -> float:
    """The smallest drop of an accuracy over these pairs (one entry per pair: its user) that
    McNemar's exact test can find significant at ``alpha``, on the 0..1 scale; ``inf`` when no
    drop can be (fewer pairs than ``sign_test_floor(alpha)``).

    The most favourable split: ``k = sign_test_floor(alpha)`` pairs that went from won to lost,
    none the other way (p = 2 * 0.5**k). Micro accuracy weighs every pair ``1/n``, so the drop
    is ``k/n``; macro accuracy (the mean over users of each user's mean) weighs a pair of user
    ``u`` ``1/(U n_u)``, and the smallest drop takes the ``k`` lightest pairs, those of the
    users with the most pairs. Any smaller drop has fewer discordant pairs and cannot be
    significant. (A pair that went from won to a tie is half a discordance in the accuracy but
    a whole sign in the test, so ties could halve the figure; scores are continuous and rarely
    tie.)
    """
    k, n = sign_test_floor(alpha), len(users)
    if n < k:
        return math.inf
    if pooling == "micro":
        return k / n
    counts: dict[str, int] = {}
    for user in users:
        counts[user] = counts.get(user, 0) + 1
    weights = sorted(1.0 / (len(counts) * counts[user]) for user in users)
    return float(sum(weights[:k]))
