"""Claim 1's interval for Kendall's tau where the methods lie close, and what a tau from N
methods can say about methods in general.

Tau is a step function of the methods' means: near ties a percentile bootstrap of tau over
users does not cover (in runs simulated from the kept Pref-LaMP run's own users with a true
tau of 1 imposed at its own spacing, 90% bounds covered it in 0.31 of runs; issue 64). The
interval here is a projection instead: simultaneous intervals on every pairwise difference of
both figures (RM accuracy and the y), users the unit, and tau's interval the lowest and the
highest tau over the orderings those intervals allow. Wherever every true difference lies in
its interval (at least ``LEVEL`` of runs, by construction), the true tau lies in the
projection, so its coverage is at least ``LEVEL`` whatever the spacing.

- **The simultaneous intervals** (``pair_intervals``): a max-t over users (Romano and Wolf
  2005), as ``selection.simultaneous_lower``: users resampled, each pair's deviation in a
  resample ``|d* - d| / se`` (``se`` the spread of the pair's ``d*``), the ``LEVEL`` quantile
  ``c`` of the largest deviation over every pair of both figures, and the intervals ``d +- c
  se``; widened as Hesterberg's expanded percentile interval is (``selection.expansion`` at
  each side's ``(1 - LEVEL) / 2``), so that they hold at few users. A pair whose difference
  never varies over the resamples (two rows with the same per-user figures) is known exactly.
- **The projection** (``tau_range``): a pair of methods whose two differences are both
  resolved (their intervals exclude 0) and agree in sign is concordant, both resolved and
  disagreeing discordant; any other pair may be either. Transitivity is *not* imposed (an
  ordering of three methods whose pairs each allow either sign need not exist as a whole), so
  the range may be wider than the orderings that exist allow: conservative, never narrower.
  A pair tied exactly in a figure (its interval ``[0, 0]``) counts as tau-b counts a tie.

``choice_spread`` answers the other question, which the interval does not: tau over these N
methods, users the unit, is not the paper's claim about methods in general. With unlimited
users, tau from N methods drawn from a population of methods whose tau is 0.5 still varies
from one draw of methods to the next; its standard deviation, computed here by simulation,
is printed beside every tau so that a reader cannot take one for the other.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_prefalign.analysis import stats
from pytest_prefalign.analysis.selection import expansion

LEVEL = 0.95  # the printed interval's level: simultaneous over every pair of both figures
METHOD = (
    "projection of max-t simultaneous 95% intervals on every pairwise difference, users resampled"
)
POPULATION_TAU = 0.5  # the population of methods the spread from the choice of methods is shown at
CHOICE_DRAWS = 4000  # draws of N methods behind that spread


@dataclass(frozen=True)
class Pairs:
    """Each pair ``(i, j)``, ``i < j``, of the methods (``np.triu_indices`` order): the
    difference ``i - j`` of one figure's means and its simultaneous interval."""

    diff: np.ndarray
    lower: np.ndarray
    upper: np.ndarray

    def signs(self) -> np.ndarray:
        """+1 resolved above 0, -1 below, 0 tied exactly, nan unresolved."""
        out = np.full(self.diff.shape, np.nan)
        out[self.lower > 0] = 1.0
        out[self.upper < 0] = -1.0
        out[(self.lower == 0) & (self.upper == 0)] = 0.0
        return out


def pair_intervals(
    observed: Sequence[np.ndarray], boots: Sequence[np.ndarray], n_users: int, level: float = LEVEL
) -> list[Pairs]:
    """Simultaneous ``level`` intervals on every pairwise difference of each figure:
    ``observed[k]`` ``(methods,)`` figure k's means, ``boots[k]`` ``(resamples, methods)`` its
    means in each resample of users (one draw of users shared by every figure)."""
    i, j = np.triu_indices(len(observed[0]), k=1)
    diffs = [np.asarray(o, dtype=float)[i] - np.asarray(o, dtype=float)[j] for o in observed]
    stars = [np.asarray(b, dtype=float)[:, i] - np.asarray(b, dtype=float)[:, j] for b in boots]
    spreads = [np.nanstd(s, axis=0) for s in stars]
    deviations = [
        np.where(se > 0, np.abs(s - d) / np.where(se > 0, se, 1.0), 0.0)
        for d, s, se in zip(diffs, stars, spreads, strict=True)
    ]
    largest = np.nanmax(np.concatenate(deviations, axis=1), axis=1)
    largest = largest[np.isfinite(largest)]
    c = float(np.quantile(largest, level)) if len(largest) else math.inf
    c *= expansion(n_users, (1 - level) / 2)
    return [
        Pairs(d, np.where(se > 0, d - c * se, d), np.where(se > 0, d + c * se, d))
        for d, se in zip(diffs, spreads, strict=True)
    ]


def tau_range(x: Pairs, y: Pairs) -> tuple[float, float, int]:
    """The lowest and the highest Kendall tau-b over the orderings that the pairs' intervals
    allow (transitivity not imposed), and the number of pairs both of whose differences are
    resolved (the pairs the data orders)."""
    sx, sy = x.signs(), y.signs()
    tied = (sx == 0) | (sy == 0)
    resolved = np.isfinite(sx) & np.isfinite(sy) & ~tied
    known = float(np.sum(sx[resolved] * sy[resolved]))
    free = int(np.count_nonzero(~resolved & ~tied))
    untied_x = np.count_nonzero(sx != 0)  # nan != 0: an unresolved pair is untied
    untied_y = np.count_nonzero(sy != 0)
    denominator = math.sqrt(untied_x * untied_y)
    if denominator == 0:
        return math.nan, math.nan, int(np.count_nonzero(resolved))
    low = max(-1.0, (known - free) / denominator)
    high = min(1.0, (known + free) / denominator)
    return low, high, int(np.count_nonzero(resolved))


def tau_interval(
    x_means: np.ndarray,
    y_means: np.ndarray,
    x_boot: np.ndarray,
    y_boot: np.ndarray,
    n_users: int,
    level: float = LEVEL,
) -> tuple[float, float, int]:
    """Tau's projection interval from two figures' means ``(methods,)`` and their means in
    each resample of users ``(resamples, methods)``: ``(lower, upper, resolved pairs)``."""
    px, py = pair_intervals([x_means, y_means], [x_boot, y_boot], n_users, level)
    return tau_range(px, py)


@functools.lru_cache(maxsize=64)
def choice_spread(
    n_methods: int, tau: float = POPULATION_TAU, draws: int = CHOICE_DRAWS, seed: int = 0
) -> tuple[float, float]:
    """The standard deviation of Kendall's tau over ``n_methods`` methods drawn from a
    population of methods whose tau is ``tau`` (their two figures bivariate normal with the
    correlation ``sin(pi tau / 2)`` that gives it, Greiner's relation), with unlimited users:
    the spread from the choice of methods alone, and its Monte Carlo standard error
    (``draws`` draws of methods, seeded)."""
    if n_methods < 3:
        return math.nan, math.nan
    rho = math.sin(math.pi * tau / 2)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((draws, n_methods))
    b = rho * a + math.sqrt(1 - rho**2) * rng.standard_normal((draws, n_methods))
    taus = stats.tau_b_rows(a, b)
    sd = float(np.std(taus, ddof=1))
    if sd == 0:
        return 0.0, 0.0
    # the standard error of a standard deviation, from the draws' own fourth moment
    centred = taus - taus.mean()
    kurtosis = float(np.mean(centred**4) / np.mean(centred**2) ** 2)
    return sd, sd * math.sqrt(max(kurtosis - 1, 0.0) / (4 * draws))


def estimand_text(n_methods: int, n_users: int | None = None) -> str:
    """What a tau over these methods states, and what it cannot, in one sentence."""
    users = f"{n_users} users" if n_users else "users"
    sd, se = choice_spread(n_methods)
    return (
        f"tau is about these {n_methods} methods, {users} the unit (the interval covers the "
        f"tau of these methods with more users), not about methods in general: from "
        f"{n_methods} methods drawn from a population of methods whose tau is "
        f"{POPULATION_TAU}, tau varies with the choice of methods alone by SD {sd:.2f} "
        f"(± {se:.3f}, {CHOICE_DRAWS} simulated draws), however many the users"
    )
