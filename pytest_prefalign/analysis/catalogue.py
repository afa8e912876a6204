"""Every metric a run reports, declared once: what one observation is, which per-pair or
per-item record field holds it, how observations are pooled, which way is better, whether a gate
may test it, its leaderboard column, its format, and the roles it plays in the analysis (the x
that picks a method, the y's that picking should serve, ...). The evaluation computes the record
fields and pools them as declared; the leaderboard, the run file's checks, the floors, the
regression gates and the analysis (tau, inversions, regret, the plot, the per-user spread) all
ask this list, so adding a metric is one declaration here plus the computation of its record
field (docs/metrics.md defines each figure). A plugin adds its own through the
``pytest_prefalign_metrics`` hook (``register``; docs/metrics.md#adding-a-metric).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runs.parts import Record

Level = Literal["pair", "item"]
Pooling = Literal["macro", "micro"]

# The roles a metric plays in the analysis, each asked by name (``with_role`` and the functions
# below), never by a metric's name: what each role means, and whether one metric plays it at most.
ROLES: dict[str, str] = {
    "x": "the figure a method is picked by (RM accuracy): the x of tau, the inversions, the "
    "selection regret and the plot",
    "y": "a figure picking should serve (policy accuracy, ROUGE-1): tau, the inversions and the "
    "selection regret test each against the x",
    "plotted": "the y of the report's plot, against the x (and of the paper's weak-tau claim)",
    "rank": "a leaderboard sort key, in catalogue order: the first that some row has sorts the "
    "rows (and chooses the best reward-guided row that in-context learning is compared with)",
    "spread": "examined per user for the per-user spread flags",
    "reduced": "computed under the run's --prefalign-reduce (the leaderboard says which)",
    "text": "the generated text against the user's own: the circular flag's loss to base",
    "own_judge": "the win rate over base judged by the method's own reward model (circular)",
    "independent_judge": "the win rate over base judged by the independent reward model",
}
SINGLE = frozenset({"x", "plotted", "text", "own_judge", "independent_judge"})


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
    roles: tuple[str, ...] = ()  # what it is in the analysis (``ROLES``)
    # for a metric whose field the evaluation does not write (a plugin's): the observation of
    # one record (a ``runs.parts.PairRecord`` or ``ItemRecord``), None where it has none;
    # added to each record as ``field`` before the figures are pooled
    compute: Callable[[Record], float | None] | None = dataclasses.field(
        default=None, compare=False
    )

    def __post_init__(self) -> None:
        if self.level not in ("pair", "item"):
            raise ValueError(f"metric {self.name!r}: level {self.level!r} is not 'pair' or 'item'")
        if self.pooling not in ("macro", "micro"):
            raise ValueError(
                f"metric {self.name!r}: pooling {self.pooling!r} is not 'macro' or 'micro'"
            )
        unknown = sorted(set(self.roles) - set(ROLES))
        if unknown:
            raise ValueError(
                f"metric {self.name!r}: unknown role {', '.join(map(repr, unknown))}; "
                f"roles: {', '.join(ROLES)}"
            )

    @property
    def test(self) -> str:
        """The paired test a comparison runs: McNemar's exact test on 0/1 pair outcomes, a
        exact sign-flip test over users on per-item scores."""
        return "mcnemar" if self.level == "pair" else "signflip"

    def plays(self, role: str) -> bool:
        return role in self.roles


METRICS: tuple[Metric, ...] = (
    Metric(
        "rouge1",
        "item",
        "rouge1",
        "micro",
        "ROUGE-1",
        gateable=True,
        roles=("y", "rank", "spread", "text"),
    ),
    Metric("rougeL", "item", "rougeL", "micro", "ROUGE-L", gateable=True),
    # whether the outputs are text at all, beside how close they are to the user's: the base
    # model's mean negative log-likelihood per token (nats) of each output given the plain
    # prompt, and the share of outputs that break a rule of analysis/answers.py; a row far
    # from base on either is flagged degenerate (analysis/degenerate.py)
    Metric(
        "fluency",
        "item",
        "fluency",
        "micro",
        "NLL/tok",
        higher_is_better=False,
        high=100.0,
        fmt=".2f",
    ),
    Metric("not_answer", "item", "not_answer", "micro", "not ans", higher_is_better=False),
    Metric(
        "policy_acc",
        "pair",
        "policy_correct",
        "macro",
        "policy acc",
        gateable=True,
        roles=("y", "plotted", "rank", "spread", "reduced"),
    ),
    # the same outcomes pooled over pairs: the leaderboard's accuracies are the macro ones
    Metric(
        "policy_acc_micro", "pair", "policy_correct", "micro", alternative=True, roles=("reduced",)
    ),
    # the policy score under each reduction, whichever the run used (--prefalign-reduce)
    Metric(
        "policy_acc_sum", "pair", "policy_correct_sum", "macro", compared=False, alternative=True
    ),
    Metric(
        "policy_acc_mean", "pair", "policy_correct_mean", "macro", compared=False, alternative=True
    ),
    Metric(
        "rm_acc",
        "pair",
        "rm_correct",
        "macro",
        "RM acc",
        gateable=True,
        needs_reward=True,
        roles=("x", "spread"),
    ),
    Metric("rm_acc_micro", "pair", "rm_correct", "micro", needs_reward=True, alternative=True),
    # win rates count strict wins (a tie is no win); each row's judge.counts holds the
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
        roles=("independent_judge",),
    ),
    Metric(
        "win_self",
        "item",
        "win_self",
        "micro",
        compared=False,
        needs_reward=True,
        roles=("own_judge",),
    ),
)

# Everything else is derived from METRICS and the registered metrics when asked, so that the
# list is the one place to edit.

# the metrics plugins registered for this run (``register``), after the built-ins
_registered: dict[str, Metric] = {}


def metrics() -> tuple[Metric, ...]:
    """Every metric: the built-ins, then those registered, in the order they were."""
    return (*METRICS, *_registered.values())


def find(name: str) -> Metric | None:
    return next((m for m in metrics() if m.name == name), None)


def names() -> tuple[str, ...]:
    return tuple(m.name for m in metrics())


def gateable() -> tuple[str, ...]:
    """The metrics a regression gate may be set on."""
    return tuple(m.name for m in metrics() if m.gateable)


def columns() -> tuple[Metric, ...]:
    """The leaderboard's metric columns, in order."""
    return tuple(m for m in metrics() if m.title)


def compared() -> tuple[Metric, ...]:
    """The metrics shown when two runs are compared."""
    return tuple(m for m in metrics() if m.compared)


def fields(level: Level) -> tuple[str, ...]:
    """The record fields the metrics of one level read, in catalogue order."""
    return tuple(dict.fromkeys(m.field for m in metrics() if m.level == level))


def computed(level: str) -> tuple[Metric, ...]:
    """The metrics of one level whose observations ``compute`` gives (a plugin's)."""
    return tuple(m for m in metrics() if m.level == level and m.compute is not None)


# --------------------------------------------------------------------------------------------
# Roles: what the analysis asks for
# --------------------------------------------------------------------------------------------


def with_role(role: str) -> tuple[Metric, ...]:
    """The metrics that play ``role`` (one of ``ROLES``), in catalogue order."""
    if role not in ROLES:
        raise KeyError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    return tuple(m for m in metrics() if m.plays(role))


def one(role: str) -> str:
    """The name of the metric that plays a role one metric plays (``SINGLE``)."""
    found = with_role(role)
    if len(found) != 1:
        raise LookupError(f"{len(found)} metrics play the role {role!r}; one must")
    return found[0].name


def x_metric() -> str:
    """The figure a method is picked by: the x of tau, the inversions, the regret, the plot."""
    return one("x")


def plotted() -> str:
    """The y of the report's plot."""
    return one("plotted")


def y_metrics() -> tuple[str, ...]:
    """The figures tau, the inversions and the regret test against the x: the plotted one first
    (the paper's relation, RM accuracy against policy accuracy), then the others in catalogue
    order."""
    ys = [m.name for m in with_role("y")]
    first = [name for name in ys if name == plotted()]
    return (*first, *(name for name in ys if name not in first))


def rank_key(present: Collection[str]) -> str:
    """The metric rows are ranked by: the first ``rank`` metric among the names ``present``
    (those some row has), else the plotted one."""
    return next((m.name for m in with_role("rank") if m.name in present), plotted())


def spread_metrics() -> tuple[str, ...]:
    """The figures examined per user for the spread flags."""
    return tuple(m.name for m in with_role("spread"))


def reduced() -> tuple[str, ...]:
    """The figures computed under the run's reduction of the policy score."""
    return tuple(m.name for m in with_role("reduced"))


def text_metric() -> str:
    """The generated text against the user's own (the circular flag's loss to base)."""
    return one("text")


def own_judge() -> str:
    """The win rate over base under the method's own reward model."""
    return one("own_judge")


def independent_judge() -> str:
    """The win rate over base under the independent reward model."""
    return one("independent_judge")


# --------------------------------------------------------------------------------------------
# Registration: a plugin's metrics
# --------------------------------------------------------------------------------------------


def register(metric: Metric) -> Metric:
    """Add a metric to the catalogue, after the built-ins: its figure is then pooled from the
    records, checked against its range, stored in the run file, shown as a leaderboard column
    (with a ``title``) and, by its ``roles``, taken into the analysis (a ``y`` into tau, the
    inversions and the regret). A run registers what its plugins' hooks
    ``pytest_prefalign_metrics`` return (``reset`` first). ValueError for a name already
    declared, a role one metric plays that another plays already, or a ``compute`` over a
    field another metric reads."""
    if not isinstance(metric, Metric):
        raise ValueError(f"{metric!r} is not a catalogue.Metric")
    if find(metric.name) is not None:
        raise ValueError(f"metric {metric.name!r} is declared already")
    for role in sorted(SINGLE & set(metric.roles)):
        taken = with_role(role)
        if taken:
            raise ValueError(
                f"metric {metric.name!r}: {taken[0].name!r} plays the role {role!r} already, "
                "and one metric plays it"
            )
    if metric.compute is not None and metric.field in fields(metric.level):
        raise ValueError(
            f"metric {metric.name!r} computes the field {metric.field!r}, which another metric "
            "reads: name a field of its own"
        )
    _registered[metric.name] = metric
    return metric


def reset() -> None:
    """Forget the registered metrics (each run registers its plugins' own)."""
    _registered.clear()
