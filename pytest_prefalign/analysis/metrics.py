"""The metrics of docs/metrics.md: ROUGE, pair outcomes, micro/macro accuracy, bootstrap intervals.

Pure numpy (and ``rouge-score`` for ROUGE). Every interval is a *cluster* bootstrap over users:
a user's pairs are not independent of each other (same user, same reward head), so resampling
pairs would make the intervals too narrow. Resampling is vectorised: each resample is a row of
"how many times each user was drawn", and a statistic is a matrix product with it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

import numpy as np

from pytest_prefalign.cache import PROCESS, Slot

Numbers = Sequence[float] | np.ndarray  # scores, outcomes: lists or numpy arrays

if TYPE_CHECKING:  # pragma: no cover
    from rouge_score.rouge_scorer import RougeScorer

Statistic = Literal["macro", "micro", "mean"]
STATISTICS: tuple[str, ...] = ("macro", "micro", "mean")
# figures are rounded to this many decimals wherever they are made or ordered: the same figure
# summed in another order (users, resamples) differs in its last bit, and must tie
FIGURE_DIGITS = 12

# Resamples are drawn in blocks of at most this many (resample, user) cells, to bound memory.
_BLOCK_CELLS = 1 << 22

# the one ROUGE scorer of the process (building it loads the stemmer)
_SCORER = Slot("ROUGE scorer", lambda: _new_scorer())


# --------------------------------------------------------------------------------------------
# ROUGE
# --------------------------------------------------------------------------------------------


def _new_scorer() -> RougeScorer:
    from rouge_score.rouge_scorer import RougeScorer

    return RougeScorer(["rouge1", "rougeL"], use_stemmer=True)


def rouge(outputs: Sequence[str], references: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per-item ROUGE-1 and ROUGE-L F1 of each output against its reference, two ``(n,)`` arrays.

    Stemming is on (``rouge-score``'s Porter stemmer, words longer than 3 letters), so "runs"
    matches "running". An empty output or reference scores 0.
    """
    _check_same_length("outputs", outputs, "references", references)
    for name, texts in (("outputs", outputs), ("references", references)):
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"{name}[{i}] is {type(text).__name__}, expected str")
    scorer = PROCESS[_SCORER]
    r1 = np.empty(len(outputs))
    rl = np.empty(len(outputs))
    for i, (out, ref) in enumerate(zip(outputs, references, strict=True)):
        scores = scorer.score(ref, out)  # (target, prediction); F1 is symmetric anyway
        r1[i], rl[i] = scores["rouge1"].fmeasure, scores["rougeL"].fmeasure
    return r1, rl


# --------------------------------------------------------------------------------------------
# Pair outcomes and accuracy
# --------------------------------------------------------------------------------------------


def pair_outcomes(chosen_scores: Numbers, rejected_scores: Numbers) -> np.ndarray:
    """``1[s_w > s_l]`` per pair, ``0.5`` on an exact tie: the summand of RM and policy accuracy.

    A tie is exact float equality; a constant reward therefore scores 0.5, not 0 or 1.
    Non-finite scores are refused, since ``nan > x`` is silently False.
    """
    chosen = _finite_array("chosen_scores", chosen_scores)
    rejected = _finite_array("rejected_scores", rejected_scores)
    _check_same_length("chosen_scores", chosen, "rejected_scores", rejected)
    return np.where(chosen > rejected, 1.0, np.where(chosen == rejected, 0.5, 0.0))


@dataclass(frozen=True)
class Accuracy:
    """Micro (mean over pairs) and macro (mean over users of each user's mean) accuracy."""

    micro: float
    macro: float
    n_users: int
    n_pairs: int
    per_user: dict[str, float] = field(default_factory=dict)


def accuracy(outcomes: Numbers, users: Sequence[Any]) -> Accuracy:
    """Micro and macro accuracy of pair outcomes (1, 0.5 or 0), with the per-user means.

    Macro is the headline figure: it weighs every user equally, however many pairs they have.
    No pairs gives ``nan`` for both.
    """
    values = _outcome_array(outcomes)
    per_user = per_user_mean(values, users)
    if not per_user:
        return Accuracy(math.nan, math.nan, 0, 0, {})
    macro = float(np.mean(list(per_user.values())))
    return Accuracy(float(values.mean()), macro, len(per_user), len(values), per_user)


def per_user_mean(values: Numbers, users: Sequence[Any]) -> dict[str, float]:
    """Each user's mean of ``values``, keyed by ``str(user)``, in sorted user order."""
    names, sums, counts = _user_sums(_finite_array("values", values), users)
    return {name: float(s / c) for name, s, c in zip(names, sums, counts, strict=True)}


# --------------------------------------------------------------------------------------------
# Bootstrap over users
# --------------------------------------------------------------------------------------------


def bootstrap_ci(
    values: Numbers,
    users: Sequence[Any],
    statistic: Statistic = "macro",
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile interval of a statistic of ``values`` when *users* are resampled with replacement.

    ``macro``: mean over drawn users of each user's mean. ``micro``: mean over all values of the
    drawn users (a user drawn twice counts twice). ``mean`` is ``micro`` under the name
    docs/metrics.md uses for ROUGE ("mean over items"). No values gives ``(nan, nan)``.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    array = _finite_array("values", values)
    if len(array) == 0:
        return (math.nan, math.nan)
    names, sums, counts = _user_sums(array, users)
    if statistic == "macro":
        # each user's mean, each drawn user weighing 1
        sums, counts = sums / counts, np.ones_like(counts)
    stats = np.concatenate(
        [(c @ sums) / (c @ counts) for c in resample_counts(len(names), n_boot, seed)]
    )
    return percentile_interval(stats, level)


def resample_counts(
    n_users: int, n_boot: int, seed: int | np.random.Generator = 0
) -> Iterator[np.ndarray]:
    """Blocks of rows, one row per resample: how often each of ``n_users`` users was drawn.

    Rows hold ``n_users`` draws with replacement, so each sums to ``n_users``. Drawn in blocks
    of a few million cells so that memory stays bounded for large runs.
    """
    if not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    rows_per_block = max(1, _BLOCK_CELLS // max(n_users, 1))
    for start in range(0, n_boot, rows_per_block):
        rows = min(rows_per_block, n_boot - start)
        drawn = rng.integers(0, n_users, size=(rows, n_users))
        # one bincount for the whole block: offset each row's user codes into its own range
        flat = (drawn + n_users * np.arange(rows)[:, None]).ravel()
        yield np.bincount(flat, minlength=rows * n_users).reshape(rows, n_users).astype(float)


def percentile_interval(stats: np.ndarray, level: float) -> tuple[float, float]:
    """The central ``level`` percentile interval of bootstrap statistics, ignoring nan ones."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1 (exclusive), got {level!r}")
    finite = stats[np.isfinite(stats)]
    if len(finite) == 0:
        return (math.nan, math.nan)
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(finite, [tail, 100.0 - tail])
    return (float(lo), float(hi))


# --------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------


def finite(value: Any) -> TypeGuard[float]:
    """A figure that is a finite number (a metric a row lacks is None or nan)."""
    return isinstance(value, int | float) and math.isfinite(value)


def _check_same_length(
    a_name: str, a: Sequence[Any] | np.ndarray, b_name: str, b: Sequence[Any] | np.ndarray
) -> None:
    if len(a) != len(b):
        raise ValueError(f"{a_name} has {len(a)} entries but {b_name} has {len(b)}")


def _finite_array(name: str, values: Numbers) -> np.ndarray:
    """``values`` as a 1-D float array; names the first non-finite entry."""
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numbers: {exc}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    bad = np.flatnonzero(~np.isfinite(array))
    if len(bad):
        raise ValueError(f"{name}[{bad[0]}] is {array[bad[0]]}, expected a finite number")
    return array


def _outcome_array(outcomes: Numbers) -> np.ndarray:
    """Pair outcomes, checked to lie in [0, 1] (1, 0.5 and 0 from ``pair_outcomes``)."""
    array = _finite_array("outcomes", outcomes)
    bad = np.flatnonzero((array < 0.0) | (array > 1.0))
    if len(bad):
        raise ValueError(f"outcomes[{bad[0]}] is {array[bad[0]]}, expected a value in [0, 1]")
    return array


def _user_sums(
    values: np.ndarray, users: Sequence[Any]
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Sorted user names (as str), and each user's sum and count of ``values``."""
    if len(users) != len(values):
        raise ValueError(f"users has {len(users)} entries but values has {len(values)}")
    names, codes = np.unique(np.asarray([str(u) for u in users], dtype=object), return_inverse=True)
    sums = np.bincount(codes, weights=values, minlength=len(names))
    counts = np.bincount(codes, minlength=len(names)).astype(float)
    return [str(name) for name in names], sums, counts
