"""Rewards on one scale: every reward method's scores standardised on its own training responses.

A reward method's raw scores have whatever offset and spread its training gave them: one
Bradley-Terry head's rewards spread over a few units, another's over dozens. ARGS adds
``w * r`` to the base logits and best-of-N's policy is ``log pi_base + r / beta``, so the same
``w`` or ``beta`` meant a gentle nudge for one method and a takeover for another. Here each
fitted method's ``score`` is taken over every response of its training pairs (both sides of
each pair, with the pair's prompt and user), and its rewards are answered as
``(r - mean) / std`` from then on: mean 0 and unit spread on what it was trained on, so that
``w = 1`` means "one standard deviation of this method's reward is worth one nat" for every
method (docs/metrics.md, "Rewards on one scale").

The map is a positive affine one, the same for every user: a comparison of two responses
(RM accuracy, the win rates, best-of-N's pick) is unchanged; only the weight a decoder gives the
reward changes. ``score``, ``prefix_rewards`` and ``reward_from_hidden`` are standardised; an
autoregressive reward's next-token log-probabilities are a distribution, not a reward, and pass
through (GenARM's ``alpha`` is chosen on validation items instead: ``guidance``).

A method whose rewards are already in nats by construction says so with a class attribute
``rewards_in_nats = True`` (the synthetic suite's oracles: one rule unit is 50 nats, so that the
rule decides a guided policy): its rewards are kept as they are, and the record says so
(``native``). The built-in methods' heads, trained by a logistic loss, have no such unit.

The scale is a value of the fitted method: it is cached under a key of the method's own key
(its configuration, code, model and training pairs) and this module's code, and kept in each
result's ``guidance`` record of the run file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_prefalign import cache, events, versions
from pytest_prefalign.api import Batch, declared

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import Pair, RewardMethod


@dataclass(frozen=True)
class RewardScale:
    """``(r - mean) / std`` over the method's training responses (``n`` of them). A method
    whose training rewards do not vary (``std`` 0 or not finite) keeps a unit spread and its
    offset removed, and one without training responses keeps its rewards as they are; both
    say so (``degenerate``)."""

    mean: float
    std: float
    n: int
    degenerate: bool = False
    native: bool = False  # the method's rewards are in nats already: kept as they are

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> RewardScale:
        if not isinstance(data, dict):
            raise ValueError(f"a reward scale is an object, got {type(data).__name__}")
        scale = cls(
            float(data["mean"]),
            float(data["std"]),
            int(data["n"]),
            bool(data["degenerate"]),
            bool(data.get("native", False)),
        )
        if not (math.isfinite(scale.mean) and math.isfinite(scale.std) and scale.std > 0):
            raise ValueError(f"not a usable reward scale: {data!r}")
        return scale


def fit_scale(rewards: np.ndarray) -> RewardScale:
    """The scale of raw rewards (population spread); none (a method that needs no training
    pairs, on a suite without them): the rewards as they are."""
    values = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if values.size == 0:
        return RewardScale(0.0, 1.0, 0, degenerate=True)
    mean = float(values.mean())
    std = float(values.std())
    if not (math.isfinite(std) and std > 1e-12):
        return RewardScale(mean, 1.0, int(values.size), degenerate=True)
    return RewardScale(mean, std, int(values.size))


def training_responses(pairs: Sequence[Pair]) -> Batch:
    """Both sides of every training pair, side by side."""
    return Batch(
        [p.user for p in pairs for _ in range(2)],
        [p.prompt for p in pairs for _ in range(2)],
        [r for p in pairs for r in (p.chosen, p.rejected)],
    )


def scale_key(reward_key: cache.Key) -> cache.Key:
    """What a fitted method's scale depends on: the method's own key and this code."""
    import sys

    return cache.make_key(
        "reward-scale",
        method=reward_key.inputs.get("method"),
        reward=reward_key.digest,
        code=versions.code_version(sys.modules[__name__]),
    )


def cached_scale(
    disk: cache.Disk, reward_key: cache.Key, reward: RewardMethod, lm: Any, pairs: Sequence[Pair]
) -> RewardScale:
    """The fitted ``reward``'s scale on its training ``pairs``, from the disk cache or
    computed (one ``score`` call over both sides of every pair)."""

    def compute() -> dict[str, Any]:
        if declared(reward, "rewards_in_nats") is True:
            return RewardScale(0.0, 1.0, 0, native=True).to_json()
        if not pairs:  # a method that needs no training pairs: its rewards as they are
            return fit_scale(np.zeros(0)).to_json()
        batch = training_responses(pairs)
        with events.step(f"standardising {reward.name} on {len(batch)} training responses"):
            raw = reward.score(lm, batch)
        return fit_scale(np.asarray(raw, dtype=np.float64)).to_json()

    valid = cache.readable_by(RewardScale.from_json)
    return RewardScale.from_json(disk.json(scale_key(reward_key), compute, valid=valid))


class StandardisedReward:
    """A fitted reward method answering ``(r - mean) / std``; every other attribute (its name,
    capabilities, next-token log-probabilities) passes through to the method it wraps."""

    def __init__(self, inner: Any, scale: RewardScale) -> None:
        self._inner = inner
        self.scale = scale

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def _standard(self, values: Any) -> Any:
        return (values - self.scale.mean) / self.scale.std

    def score(self, lm: Any, batch: Batch) -> np.ndarray:
        raw = np.asarray(self._inner.score(lm, batch), dtype=np.float64)
        return self._standard(raw)

    def prefix_rewards(self, lm: Any, batch: Batch) -> list[np.ndarray]:
        found = self._inner.prefix_rewards(lm, batch)
        return [self._standard(np.asarray(v, dtype=np.float64)) for v in found]

    def reward_from_hidden(self, users: Sequence[str], hidden: Any) -> Any:
        return self._standard(self._inner.reward_from_hidden(users, hidden))
