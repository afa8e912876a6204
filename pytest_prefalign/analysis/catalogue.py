"""Every metric a run reports, declared once: what one observation is, which per-pair or
per-item record field holds it, how observations are pooled, which way is better, whether a gate
may test it, its leaderboard column and its format. The evaluation computes the record fields and
pools them as declared; the leaderboard, the run file's checks, the floors and the regression
gates all follow this list, so adding a metric is one declaration here plus the computation of
its record field (docs/metrics.md defines each figure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["pair", "item"]
Pooling = Literal["macro", "micro"]


@dataclass(frozen=True)
class Metric:
    name: str  # its key in the run file's ``metrics``
    level: Level  # one observation: a test pair or a generation item
    field: str  # the per-pair or per-item record field that holds each observation
    pooling: Pooling  # macro: the mean of users' means; micro: the mean of all observations
    title: str = ""  # leaderboard column header; empty: not a leaderboard column
    higher_is_better: bool = True
    gateable: bool = False  # a regression gate may be set on it (METRIC:Npp)
    compared: bool = True  # shown when two runs are compared
    interval: bool = True  # carries a 95% bootstrap interval over users and per-user values
    needs_reward: bool = False  # only methods with a reward method have it
    # the same outcomes under another pooling or setting: kept in the run file, not one more
    # question when two rows of a run are compared (``prefalign compare RUN --rows``)
    alternative: bool = False
    low: float = 0.0  # the range a valid value lies in
    high: float = 1.0
    fmt: str = ".3f"

    @property
    def test(self) -> str:
        """The paired test a comparison runs: McNemar's exact test on 0/1 pair outcomes, a
        exact sign-flip test over users on per-item scores."""
        return "mcnemar" if self.level == "pair" else "signflip"


METRICS: tuple[Metric, ...] = (
    Metric("rouge1", "item", "rouge1", "micro", "ROUGE-1", gateable=True),
    Metric("rougeL", "item", "rougeL", "micro", "ROUGE-L", gateable=True),
    Metric("policy_acc", "pair", "policy_correct", "macro", "policy acc", gateable=True),
    # the same outcomes pooled over pairs: the leaderboard's accuracies are the macro ones
    Metric("policy_acc_micro", "pair", "policy_correct", "micro", alternative=True),
    # the policy score under each reduction, whichever the run used (--prefalign-reduce)
    Metric(
        "policy_acc_sum", "pair", "policy_correct_sum", "macro", compared=False, alternative=True
    ),
    Metric(
        "policy_acc_mean", "pair", "policy_correct_mean", "macro", compared=False, alternative=True
    ),
    Metric("rm_acc", "pair", "rm_correct", "macro", "RM acc", gateable=True, needs_reward=True),
    Metric("rm_acc_micro", "pair", "rm_correct", "micro", needs_reward=True, alternative=True),
    # win rates count strict wins (a tie is no win); each row's judge["counts"] holds the
    # wins, ties and losses, and each item its outcome in win_self_outcome, ...
    # judged by the independent RM, never the method's own: the leaderboard's win column
    Metric(
        "win_independent",
        "item",
        "win_independent",
        "micro",
        "win vs base",
        compared=False,
        needs_reward=True,
    ),
    Metric("win_self", "item", "win_self", "micro", compared=False, needs_reward=True),
)

# Everything else is derived from METRICS when asked, so that the list is the one place to edit.


def find(name: str) -> Metric | None:
    return next((m for m in METRICS if m.name == name), None)


def names() -> tuple[str, ...]:
    return tuple(m.name for m in METRICS)


def gateable() -> tuple[str, ...]:
    """The metrics a regression gate may be set on."""
    return tuple(m.name for m in METRICS if m.gateable)


def columns() -> tuple[Metric, ...]:
    """The leaderboard's metric columns, in order."""
    return tuple(m for m in METRICS if m.title)


def compared() -> tuple[Metric, ...]:
    """The metrics shown when two runs are compared."""
    return tuple(m for m in METRICS if m.compared)


def fields(level: Level) -> tuple[str, ...]:
    """The record fields the metrics of one level read, in catalogue order."""
    return tuple(dict.fromkeys(m.field for m in METRICS if m.level == level))
