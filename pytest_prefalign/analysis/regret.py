"""Selection regret: what picking a reward method by RM accuracy loses (docs/metrics.md).

Per (suite, size, decoder) with at least two reward methods, and per y (policy accuracy,
ROUGE-1): how much worse the method with the best RM accuracy is than the best method by y.

Measured on the same users that chose them, that figure is biased upward by construction: the
best of several noisy figures is above its own truth (the winner's curse), so "best minus
picked" is at least 0 even when every method is equally good, and a bootstrap interval of it
fires on noise. The estimate here is **cross-fitted** (sample splitting, Cox 1975; cross-fitting
as in Chernozhukov et al. 2018): the users are split in two halves at random; on one half the
pick (by RM accuracy) and the best method (by y) are chosen, on the other half their y's are
compared; the halves then swap roles; the estimate is the mean over ``SPLITS`` random splits.
Choosing and measuring on different users, it is 0 in expectation when the methods are equally
good, and it can be negative.

**Test.** Null: picking by RM accuracy loses nothing on y. Its least favourable case is every
method's mean y the same, whatever their spreads, and the test is the bootstrap under that null
(Efron & Tibshirani 1993, section 16.4; Hall & Wilson 1991): each method's per-user y is
centred on its own mean (the figure's weighting), so that the means are equal while each
method's spread, its correlation with the other methods and with RM accuracy are kept; the
deviations are scaled by ``sqrt(n / (n - 1))`` (a resample's spread is otherwise smaller than
the users'); users are drawn with replacement, each resample split by the same halves. The
statistic is **studentised** (the bootstrap-t; Hall 1992, *The Bootstrap and Edgeworth
Expansion*; Efron & Tibshirani 1993, chapter 12): in each split and direction, the mean over
the held half of the per-user difference "best minus picked" over its standard error, the
difference's spread taken over every user (``studentised``); the statistic is the mean of these
t's, on the users and on every resample alike. The regret itself (a difference of means) was
the statistic before: where only the method picked most often varied on its own (sd 0.16, four
times calibration's unit) its test fired in 0.065 of null runs at 20 users, and in 0.077 where
that spread is also right-skewed as real per-user ROUGE-1 is (benchmarks/calibration.py, "one
spread 4x, skewed"), since a resample's mean of a few wide or skewed figures varies less than
the mean of new users does; the t carries its own scale (0.050; at 40 users in the skewed world
it still fired in 0.066 against 0.075: docs/metrics.md gives the rates). The
p-value is one-sided (a regret is a loss): the share of resamples whose statistic is at least
the observed one. Resampling after centring keeps the two halves of a resample independent
draws, as the halves of the real users are (centring the users in place, the halves'
differences would cancel and the test would fire on noise).

An earlier test shuffled each user's y across the methods, a null of exchangeable methods: it
also assumes equal spreads, and fired too often when one method's outputs vary more than the
others' (benchmarks/calibration.py, "unequal spreads"; docs/metrics.md). The interval (users
resampled, the splits kept) describes; it does not decide.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from pytest_prefalign.analysis import catalogue, nulls, users
from pytest_prefalign.analysis.metrics import FIGURE_DIGITS, finite, resample_counts
from pytest_prefalign.runs.entries import RegretEntry
from pytest_prefalign.runs.records import CaseResult

SPLITS = 50  # random halvings of the users behind every cross-fitted estimate
NULL_DRAWS = 2000  # resamples of the users under the null behind its p-value
N_BOOT = 500  # user resamples behind its interval
SEED = 0
# the least standard error a t is divided by: where every user differs by the same amount, the
# t is large, not infinite
SE_FLOOR = 1e-9
BLOCK = 250  # resamples computed at once
CELLS = 2_000_000  # about the numbers of one (resamples, splits, users) array of a block
TEST = "cross-fitted regret; studentised bootstrap over users under equal means (spreads kept)"


def in_sample(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(R,)`` regret measured on the users that chose: the best ``y`` minus the mean ``y`` of
    the methods with the best ``x``, for rows of figures ``x``, ``y`` ``(R, methods)``; nan
    where a row has a nan. Biased upward (see the module's docstring); kept for reference."""
    best_x = np.nanmax(x, axis=1, keepdims=True)
    picked = np.where(x == best_x, y, np.nan)
    with np.errstate(invalid="ignore"):
        out = np.nanmax(y, axis=1) - np.nanmean(picked, axis=1)
    return np.where(np.isfinite(x).all(1) & np.isfinite(y).all(1), out, np.nan)


def halves(n_users: int, n_splits: int = SPLITS, seed: int = SEED) -> np.ndarray:
    """``(n_splits, n_users)`` 0/1 masks, each a random half of the users (the smaller half
    when the count is odd), seeded."""
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random((n_splits, n_users)), axis=1)
    return (order < n_users // 2).astype(float)


def _means(values: np.ndarray, weights: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """``(R, S, K)`` weighted means of ``values`` ``(R, K, U)`` over the users of each mask
    ``(S, U)``; nan where a method has no weight there."""
    weights = np.broadcast_to(weights, np.broadcast_shapes(weights.shape, values.shape))
    num = np.swapaxes((weights * np.nan_to_num(values)) @ masks.T, -1, -2)
    den = np.swapaxes(weights @ masks.T, -1, -2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.round(num / den, FIGURE_DIGITS)


def _top(select: np.ndarray) -> np.ndarray:
    """``(..., K)`` True on the methods (last axis) where ``select`` is highest, all of them
    where several tie; none where every figure is nan."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-nan slices: nan, equal to none
        return select == np.nanmax(select, axis=-1, keepdims=True)


def _at_best(select: np.ndarray, take: np.ndarray) -> np.ndarray:
    """The mean of ``take`` over the methods (last axis) where ``select`` is highest (all of
    them when several tie: the pick is one of them at random)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-nan slices give nan, as meant
        return np.nanmean(np.where(_top(select), take, np.nan), axis=-1)


def crossfit(
    x: np.ndarray, wx: np.ndarray, y: np.ndarray, wy: np.ndarray, masks: np.ndarray
) -> np.ndarray:
    """``(R,)`` cross-fitted regrets for tables ``(R, K, U)`` of x and y (values, weights):
    for each split (``masks``), chosen on one half and measured on the other, both ways,
    averaged over the splits."""
    total: np.ndarray | float = 0.0
    for fit in (masks, 1.0 - masks):
        held = 1.0 - fit
        y_held = _means(y, wy, held)
        picked = _at_best(_means(x, wx, fit), y_held)
        best = _at_best(_means(y, wy, fit), y_held)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            total = total + np.nanmean(best - picked, axis=-1)
    return np.round(np.asarray(total) / 2.0, FIGURE_DIGITS)


def test(tx: users.Table, ty: users.Table, seed: int = SEED) -> tuple[float, float]:
    """The cross-fitted regret of picking by ``tx`` on ``ty`` and its one-sided p-value by the
    studentised bootstrap under equal means (the module's docstring)."""
    masks = halves(len(tx.users), seed=seed)
    x, wx = tx.values[None], tx.weights[None]
    observed = float(crossfit(x, wx, ty.values[None], ty.weights[None], masks)[0])
    seen = float(studentised(x, wx, ty.values[None], ty.weights[None], masks)[0])
    centred = centred_values(ty)
    rng = np.random.default_rng(seed + 1)
    blocks = []
    # the statistic holds a few (resamples, splits, users) arrays: a block's are kept near
    # CELLS numbers each, whatever the users
    block = max(1, min(BLOCK, CELLS // (len(masks) * len(tx.users))))
    for size in _blocks(NULL_DRAWS, block):
        drawn = rng.integers(0, len(tx.users), (size, len(tx.users)))
        x_drawn, wx_drawn = _drawn(tx.values, drawn), _drawn(tx.weights, drawn)
        y_drawn, wy_drawn = _drawn(centred, drawn), _drawn(ty.weights, drawn)
        blocks.append(studentised(x_drawn, wx_drawn, y_drawn, wy_drawn, masks))
    draws = np.concatenate(blocks)
    return observed, nulls.p_from_draws(seen, draws[np.isfinite(draws)], exact=False)


def studentised(
    x: np.ndarray, wx: np.ndarray, y: np.ndarray, wy: np.ndarray, masks: np.ndarray
) -> np.ndarray:
    """``(R,)`` the test's statistic for tables ``(R, K, U)`` of x and y (values, weights): for
    each split (``masks``) and direction, the per-user difference "best by y minus picked by x"
    (both chosen on one half, ties averaged): its mean on the other half over that mean's
    standard error, the spread of the difference taken over every user (a t whose scale has
    ``n - 1`` degrees of freedom, not the half's ``n / 2 - 1``); averaged over the splits and
    the two directions. A split whose best is its pick gives 0; a user without a figure of a
    method compared has no weight there."""
    total: np.ndarray | float = 0.0
    for fit in (masks, 1.0 - masks):
        compared = _chosen(_means(y, wy, fit)) - _chosen(_means(x, wx, fit))  # (R, S, K)
        involved = compared != 0
        diffs = np.einsum("rsk,rku->rsu", compared, np.nan_to_num(y))
        share = involved / np.maximum(involved.sum(-1, keepdims=True), 1)
        weight = np.einsum("rsk,rku->rsu", share, wy)
        missing = np.einsum("rsk,rku->rsu", involved.astype(float), (wy == 0).astype(float))
        weight = np.where(missing > 0, 0.0, weight)
        total = total + _t(diffs, weight, 1.0 - fit, involved.any(-1))
    return np.asarray(total) / 2.0


def _t(diffs: np.ndarray, weight: np.ndarray, held: np.ndarray, compared: np.ndarray) -> np.ndarray:
    """``(R,)`` the mean over splits of t: the weighted mean of ``diffs`` ``(R, S, U)`` over the
    ``held`` ``(S, U)`` users, over its standard error ``sqrt(v sum w^2) / sum w``, where ``v``
    is a user's variance of ``diffs`` over every user with weight (weighted, ``n - 1`` in its
    divisor). 0 where nothing is ``compared``; a split where no held user has the figures
    compared is left out."""
    on = weight * held
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (on * diffs).sum(-1) / on.sum(-1)
        every, users_in = weight.sum(-1), (weight > 0).sum(-1)
        centre = (weight * diffs).sum(-1) / every
        spread = (weight * (diffs - centre[..., None]) ** 2).sum(-1) / every
        var = spread * users_in / np.maximum(users_in - 1, 1)  # a user's, n - 1 in the divisor
        se = np.sqrt(var * (on**2).sum(-1)) / on.sum(-1)
        t = np.where(compared, mean / np.maximum(se, SE_FLOOR), 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.where(compared & (on.sum(-1) <= 0), np.nan, t), axis=-1)


def _chosen(select: np.ndarray) -> np.ndarray:
    """``(..., K)`` the share of each method in the choice: 1 / ties where ``select`` is highest,
    else 0 (all 0 where every figure is nan)."""
    on = _top(select).astype(float)
    ties = on.sum(-1, keepdims=True)
    return np.divide(on, ties, out=np.zeros_like(on), where=ties > 0)


def _drawn(values: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """``(resamples, methods, users)``: ``values`` ``(methods, users)`` at the users ``drawn``
    ``(resamples, users)``."""
    return np.moveaxis(values[:, drawn], 1, 0)


def centred_values(table: users.Table) -> np.ndarray:
    """``(methods, users)`` each method's per-user figures minus its own mean (weighted as the
    figure is), scaled by ``sqrt(n / (n - 1))`` for ``n`` users: equal means, the spreads kept."""
    w = table.weights
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (w * np.nan_to_num(table.values)).sum(1, keepdims=True) / w.sum(1, keepdims=True)
    n = table.values.shape[1]
    return (table.values - means) * math.sqrt(n / (n - 1))


def interval(tx: users.Table, ty: users.Table, seed: int = SEED) -> list[float] | None:
    """The percentile interval of the cross-fitted regret with users resampled (the splits
    kept, a user drawn twice weighing twice in its half)."""
    masks = halves(len(tx.users), seed=seed)
    draws = []
    for counts in resample_counts(len(tx.users), N_BOOT, seed):
        c = counts[:, None, :]
        x, y = tx.values[None], ty.values[None]
        draws.append(crossfit(x, tx.weights * c, y, ty.weights * c, masks))
    return users.interval(np.concatenate(draws))


def _blocks(total: int, size: int = BLOCK) -> list[int]:
    return [min(size, total - start) for start in range(0, total, size)]


def entries(groups: dict[tuple[str, str, str], list[CaseResult]]) -> list[RegretEntry]:
    """One entry per (suite, size, decoder, y) with at least two reward methods."""
    found = []
    for (suite, size, decoder), rows in groups.items():
        for y in catalogue.y_metrics():
            kept = [r for r in rows if finite(r.metrics.get(y))]
            if len(kept) >= 2:
                found.append(_entry(suite, size, decoder, y, kept))
    return found


def _entry(suite: str, size: str, decoder: str, y: str, rows: list[CaseResult]) -> RegretEntry:
    x = catalogue.x_metric()
    xs = np.array([[users.figure(r, x) for r in rows]])
    ys = np.array([[users.figure(r, y) for r in rows]])
    top = max(users.figure(r, x) for r in rows)
    tx, ty = users.tables(rows, x, y)  # over the users both figures have
    estimate, p_value, ci = None, None, None
    if len(tx.users) >= 2:
        estimate, p_value = test(tx, ty)
        ci = interval(tx, ty)
    return RegretEntry(
        suite=suite,
        size=size,
        decoder=decoder,
        x=x,
        y=y,
        picked=tuple(r.method for r in rows if users.figure(r, x) == top),
        best=max(rows, key=lambda r: users.figure(r, y)).method,
        regret=estimate,
        regret_in_sample=round(float(in_sample(xs, ys)[0]), FIGURE_DIGITS),
        ci=ci,
        test=TEST,
        p_value=p_value,
        holds=bool(estimate is not None and estimate > 0),
        n_methods=len(rows),
        n_users=len(tx.users),
    )
