"""Win rates over the ``base`` decoder (docs/metrics.md), by two judges.

- **self**: the reward method that guided decoding scores the method's output and base's output
  for the same item. This is circular (the decoder optimised exactly this score), so the report
  marks it and shows it next to:
- **independent**: the judge registered as ``api.INDEPENDENT_JUDGE`` (the built-in one is
  ``prefalign_methods.rewards.judge``, a reward model of another family trained on other data),
  reached through the registry: the evaluation imports no plugin.

A win rate counts strict wins: an item is won when the judge scores the method's output above
base's. A tie (equal scores, or the same text from both decoders) is no win; ties and losses are
counted beside the wins, and each item keeps its outcome (1 win, 1/2 tie, 0 loss).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_prefalign import versions
from pytest_prefalign.analysis import metrics
from pytest_prefalign.api import (
    INDEPENDENT_JUDGE,
    Batch,
    CaseContext,
    FittedJudge,
    Item,
    Judge,
    JudgeUnavailable,
    RewardMethod,
)
from pytest_prefalign.registry import UnknownName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.registry import Registry


def independent(registry: Registry) -> Judge:
    """The registered independent judge; where none is (its plugin failed to load, say), a
    judge that is unavailable for the registry's reason."""
    try:
        return registry.judge(INDEPENDENT_JUDGE).obj
    except UnknownName as exc:
        return Missing(str(exc))


@dataclass(frozen=True)
class Missing:
    """No independent judge: every win rate it would give is unavailable, saying why."""

    reason: str

    def fit(self, ctx: CaseContext) -> FittedJudge:
        raise JudgeUnavailable(self.reason)

    def identity(self) -> dict[str, Any]:
        return {"missing": self.reason}


def judge_key(judge: Judge) -> dict[str, Any]:
    """What a reward-guided test's results depend on of the independent judge: what it is and
    its code (the judge's training pairs are the data's, keyed beside it)."""
    return {**judge.identity(), "code": versions.code_version(judge)}


def win_rates(
    ctx: CaseContext,
    items: Sequence[Item],
    outputs: Sequence[str],
    base_outputs: Sequence[str],
    independent: Judge,
) -> dict[str, Any]:
    """Share of items where each judge, the reward method that guided decoding and the
    ``independent`` judge, scores the method's output strictly above base's.

    Returns ``win_self``, ``win_independent`` (``None`` with ``reason_independent`` when that
    judge cannot be built), ``n`` (items), ``judge_self`` and ``judge_independent`` (names), the
    per-item outcomes ``outcomes_self`` / ``outcomes_independent`` (1 win, 1/2 tie, 0 loss: for
    per-user figures and intervals) and their ``counts_self`` / ``counts_independent``
    (``{"wins", "ties", "losses"}``).
    """
    reward = _check_inputs(ctx, items, outputs, base_outputs)
    both = Batch.of_items(items, outputs) + Batch.of_items(items, base_outputs)
    same = [a == b for a, b in zip(outputs, base_outputs, strict=True)]
    raw = reward.score(ctx.lm, both)
    self_scores = _finite_scores(raw, 2 * len(items), f"reward method {reward.name!r}")
    won_self = outcomes(self_scores[: len(items)], self_scores[len(items) :], same)
    result: dict[str, Any] = {
        "n": len(items),
        "judge_self": reward.name,
        **_judged("self", won_self),
        **_judged("independent", None),
        "reason_independent": None,
    }
    try:
        judge = independent.fit(ctx)
    except JudgeUnavailable as exc:
        result.update(judge_independent="unavailable", reason_independent=str(exc))
        return result
    scores = judge.score(both)
    won = outcomes(scores[: len(items)], scores[len(items) :], same)
    result.update(judge_independent=judge.description, **_judged("independent", won))
    return result


def _judged(judge: str, won: np.ndarray | None) -> dict[str, Any]:
    """One judge's win rate, per-item outcomes and counts (all None without the judge)."""
    if won is None:
        return {f"win_{judge}": None, f"outcomes_{judge}": None, f"counts_{judge}": None}
    return {
        f"win_{judge}": float(strict_wins(won).mean()),
        f"outcomes_{judge}": won.tolist(),
        f"counts_{judge}": counts(won),
    }


def outcomes(method: np.ndarray, base: np.ndarray, same_text: Sequence[bool]) -> np.ndarray:
    """Each item's outcome: 1 where ``method > base`` (a win), 1/2 on a tie, 0 (a loss). The
    same text from both decoders is a tie by definition, even if batching moved its score in
    the last bit."""
    won = metrics.pair_outcomes(method.tolist(), base.tolist())
    return np.where(np.asarray(same_text, dtype=bool), 0.5, won)


def strict_wins(won: np.ndarray) -> np.ndarray:
    """1 where an item's outcome is a win, 0 where it is a tie or a loss: what a win rate
    averages."""
    return (np.asarray(won) == 1.0).astype(np.float64)


def counts(won: np.ndarray) -> dict[str, int]:
    """How many of the outcomes are wins, ties and losses."""
    won = np.asarray(won)
    return {
        "wins": int(np.sum(won == 1.0)),
        "ties": int(np.sum(won == 0.5)),
        "losses": int(np.sum(won == 0.0)),
    }


def _check_inputs(
    ctx: CaseContext, items: Sequence[Item], outputs: Sequence[str], base_outputs: Sequence[str]
) -> RewardMethod:
    """The reward method that guided decoding, once the inputs are checked."""
    if ctx.reward is None:
        raise ValueError(
            "win rates need the reward method that guided decoding (ctx.reward is "
            "None): call win_rates only for reward-guided methods"
        )
    if not items:
        raise ValueError("win rates need at least one generation item")
    for name, texts in (("outputs", outputs), ("base_outputs", base_outputs)):
        if len(texts) != len(items):
            raise ValueError(f"{name} has {len(texts)} texts for {len(items)} items")
        if not all(isinstance(t, str) for t in texts):
            raise ValueError(f"{name} must be strings")
    return ctx.reward


def _finite_scores(values: Any, n: int, what: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.shape[0] != n:
        raise ValueError(f"{what} returned {array.shape[0]} scores for {n} texts")
    if not np.isfinite(array).all():
        raise ValueError(f"{what} returned a non-finite score")
    return array
