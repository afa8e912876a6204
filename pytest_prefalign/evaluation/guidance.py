"""Each reward-guided decoder at its working point: its guidance strength chosen on validation
items of the training users, never on the test items, by one stated rule.

A decoder names the option that sets how strongly the reward guides it and the grid to choose
from (``Decoder.strength`` and ``Decoder.strengths``: ARGS's ``w``, GenARM's ``alpha``). For
each (reward method, decoder, suite, size) the run writes base's greedy outputs for a few
validation items, and the decoder's outputs for the same items at strengths of the grid, each
set measured against base's, item by item:

- fluent: the base model's mean negative log-likelihood per token of the outputs given the
  plain task prompt (``fluency.py``) at most ``FLUENCY_MARGIN`` nats above base's, on average
  over the items;
- answering: the share of outputs that are not an answer (``analysis/answers.py``) not above
  base's by more than ``ANSWER_MARGIN`` with significance: an exact one-sided sign test on the
  items where one of the two answers and the other does not, at level ``ANSWER_LEVEL`` (24
  items give a share a spread of about 0.1 by chance alone);
- intact: the share of outputs that are not text at all (``answers.not_text``: empty, only
  labels, another language, a loop, checked even where the output first copies the input's
  opening) at most ``BROKEN_MARGIN`` above base's: a stated margin, not a test (one more such
  output than base's in 24; with fewer than 20 items, none). Output that is not text is
  never a working point, and base rarely writes it, so no chance rise needs allowing for: a
  sign test at ``ANSWER_LEVEL`` would pass three loops against none (p = 1/8). The
  not-an-answer share cannot see them either: the guided rows' loops take the place of
  base's copies of the abstract, which count the same;
- and, for the record, whether the method's own mean reward (on its standardised scale,
  ``scale.py``) is above base's.

**The rule** (``RULE``): the chosen strength is the strongest of the grid that is fluent,
answering and intact. Guidance is taken to break monotonically (a strength that breaks, any
stronger one breaks too), so the grid is bisected: about log2 of its length strengths are
tried, not all.
Where even the weakest breaks, the weakest is kept and the record says so (``fallback``), so
that the row's own figures, and its degenerate flag, show what guidance at its gentlest does.

Validation items are the users' profile entries (their earlier documents, which are not test
items: the suites split in time) shown with the suite's own instruction, a seeded few per user
in turn; a suite without profiles gives its training pairs' prompts. No test item, reference
or pair enters the choice or its cache key, so changing a test item leaves the choice as it
was (``tests/test_guidance.py``, ``tests/test_cache_plugin.py``).

A strength set by hand (``--prefalign-option args.w=1``) or ``--prefalign-guidance fixed``
keeps the options as they are; the record says so. The choice is cached on disk like every
other value, under a key of everything it depends on.

``--prefalign-guidance sweep`` chooses every working point as ``chosen`` does, and runs each
reward method once more at each strength of the sweep (``plumbing/options.py``'s ``SWEEP``),
common to every method of a decoder: such a test's strength is the sweep's, nothing chosen
(``how`` ``sweep``), and its results are cached under its options, the strength among them.
"""

from __future__ import annotations

import dataclasses
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_prefalign import cache, events, versions
from pytest_prefalign.analysis.answers import not_an_answer, not_text
from pytest_prefalign.api import Batch, Item, declared
from pytest_prefalign.errors import PrefalignError
from pytest_prefalign.evaluation.fluency import fluency
from pytest_prefalign.runs.parts import SWEPT

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import CaseContext, Suite, SuiteData
    from pytest_prefalign.evaluation.context import Case, RunContext
    from pytest_prefalign.evaluation.prepare import FittedReward, RewardPlan

VALIDATION_ITEMS = 24  # validation items per choice, taken from the users in turn
FLUENCY_MARGIN = 0.5  # nats per token above base's mean that still count as fluent
ANSWER_MARGIN = 0.05  # not-an-answer share above base's that still counts as answering ...
ANSWER_LEVEL = 0.1  # ... or that is not significantly above base's (one-sided sign test)
BROKEN_MARGIN = 0.05  # share of such outputs above base's that still counts as intact
RULE = (
    "the strongest strength of the grid whose outputs on the validation items stay fluent "
    f"(mean NLL/token at most {FLUENCY_MARGIN} nats above base's) and answer (not-an-answer "
    f"share not above base's by more than {ANSWER_MARGIN} with a one-sided sign test over "
    f"the items at p < {ANSWER_LEVEL}) and stay text (outputs that are empty, only labels, in "
    f"another language or a loop at most {BROKEN_MARGIN} above base's share); the grid "
    "bisected, breaking taken to be monotone; "
    "none: the weakest (fallback)"
)

# base's validation outputs with their fluency and answers, per (suite, size), by the items'
# fingerprint
BASE = cache.Slot(
    "base's validation outputs",
    dict[str, tuple[list[str], np.ndarray, np.ndarray, np.ndarray]],
)


@dataclass(frozen=True)
class Trial:
    """One strength tried on the validation items (``value`` None: base's greedy outputs),
    and how it stands against base's (``judged``)."""

    value: float | None
    fluency: float  # mean NLL per token under the base model, given the plain task prompt
    not_answer: float  # share of outputs that are not an answer
    reward: float  # the method's own mean standardised reward
    fluent: bool = True  # fluency at most FLUENCY_MARGIN above base's
    answers: bool = True  # not-an-answer share not significantly above base's
    raises: bool = False  # the own reward above base's
    answer_p: float = 1.0  # the sign test's p: more items not answered than base
    broken: float = 0.0  # share of outputs that are not text (answers.not_text)
    intact: bool = True  # that share at most BROKEN_MARGIN above base's

    @property
    def usable(self) -> bool:
        """Fluent, answering and intact: a strength the rule may choose."""
        return self.fluent and self.answers and self.intact

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Outputs:
    """A set of outputs for the validation items, measured item by item."""

    fluency: np.ndarray  # per item
    missed: np.ndarray  # per item: 1 where the output is not an answer
    reward: np.ndarray  # per item
    broken: np.ndarray | None = None  # per item: 1 where it is not text (answers.not_text)

    @property
    def broken_share(self) -> float:
        return float(self.broken.mean()) if self.broken is not None and self.broken.size else 0.0


@dataclass(frozen=True)
class Choice:
    """How a case's guidance strength was set: ``how`` is ``chosen`` (on validation items),
    ``fixed`` (``--prefalign-guidance fixed``), ``set`` (by ``--prefalign-option``) or ``sweep``
    (a test of the strength sweep, at one of its common strengths)."""

    option: str
    value: float
    how: str
    grid: tuple[float, ...] = ()
    rule: str = ""
    n_items: int = 0
    n_users: int = 0
    base: Trial | None = None
    trials: tuple[Trial, ...] = ()
    fallback: bool = False  # even the weakest strength broke: it was kept
    note: str = ""  # why nothing was chosen where a choice was due

    def apply(self, options: Any) -> Any:
        """The decoder's options with the strength set to the chosen value."""
        return dataclasses.replace(options, **{self.option: self.value})

    def to_json(self) -> dict[str, Any]:
        return {
            "option": self.option,
            "value": self.value,
            "how": self.how,
            "grid": list(self.grid),
            "rule": self.rule,
            "n_items": self.n_items,
            "n_users": self.n_users,
            "base": self.base.to_json() if self.base else None,
            "trials": [t.to_json() for t in self.trials],
            "fallback": self.fallback,
            "note": self.note,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Choice:
        base = data.get("base")
        return cls(
            option=str(data["option"]),
            value=float(data["value"]),
            how=str(data["how"]),
            grid=tuple(float(v) for v in data.get("grid", ())),
            rule=str(data.get("rule", "")),
            n_items=int(data.get("n_items", 0)),
            n_users=int(data.get("n_users", 0)),
            base=Trial(**base) if base else None,
            trials=tuple(Trial(**t) for t in data.get("trials", ())),
            fallback=bool(data.get("fallback", False)),
            note=str(data.get("note", "")),
        )


def choose(
    run: RunContext,
    case: Case,
    ctx: CaseContext,
    factory: Any,
    plan: RewardPlan | None,
    fit: Callable[[], FittedReward | None],
) -> Choice | None:
    """The case's guidance strength, or None where its decoder has nothing to choose (no
    ``strength``, or no reward method). ``fit`` fits the reward method, called only when the
    choice is not in the cache."""
    option = declared(factory, "strength")
    grid = tuple(float(v) for v in declared(factory, "strengths") or ())
    if option is None or plan is None:
        return None
    if option not in {f.name for f in dataclasses.fields(ctx.options)}:
        raise PrefalignError(
            f"decoder {case.method.decoder!r} names {option!r} as its strength, "
            "which is not one of its options"
        )
    if case.sweep is not None:  # a test of the strength sweep: the sweep's strength
        return Choice(option, case.sweep[1], SWEPT)
    current = float(getattr(ctx.options, option))
    if option in run.method_options.decoders.get(case.method.decoder, {}):
        return Choice(option, current, "set")
    if run.guidance == "fixed" or not grid:
        return Choice(option, current, "fixed")
    items = validation_items(ctx.suite, ctx.data, ctx.seed)
    if not items:
        return Choice(option, current, "fixed", note="no validation items")
    key = choice_key(run, case, ctx, factory, plan, option, grid, items)

    def compute() -> dict[str, Any]:
        fitted = fit()
        if fitted is None:  # pragma: no cover - a plan is always fitted
            raise PrefalignError(f"{case.method}: no fitted reward method to guide with")
        guided = dataclasses.replace(ctx, reward=fitted.reward)
        return search(run, case, guided, factory, option, grid, items).to_json()

    return Choice.from_json(run.disk.json(key, compute, valid=cache.readable_by(Choice.from_json)))


def search(
    run: RunContext,
    case: Case,
    ctx: CaseContext,
    factory: Any,
    option: str,
    grid: tuple[float, ...],
    items: Sequence[Item],
) -> Choice:
    """The strongest usable strength of ``grid`` on ``items``, by bisection (``RULE``)."""
    values = sorted(grid)
    base = base_outputs(run, ctx, items)
    trials: dict[int, Trial] = {}
    usable, broken = -1, len(values)  # the weakest "usable" is w = 0, base itself
    while broken - usable > 1:
        mid = (usable + broken) // 2
        options = dataclasses.replace(ctx.options, **{option: values[mid]})
        with events.step(
            f"choosing {case.method}'s {option}: {values[mid]:g} on {len(items)} items"
        ):
            outputs = factory().generate(dataclasses.replace(ctx, options=options), items)
            trials[mid] = judged(values[mid], measure(ctx, items, list(outputs)), base)
        if trials[mid].usable:
            usable = mid
        else:
            broken = mid
    return Choice(
        option=option,
        value=values[max(usable, 0)],
        how="chosen",
        grid=tuple(values),
        rule=RULE,
        n_items=len(items),
        n_users=len({it.user for it in items}),
        base=summary(None, base),
        trials=tuple(trials[i] for i in sorted(trials)),
        fallback=usable < 0,
    )


def summary(value: float | None, found: Outputs) -> Trial:
    """A set of outputs' means, as a trial (base's: ``value`` None)."""
    return Trial(
        value=value,
        fluency=round(float(found.fluency.mean()), 6),
        not_answer=round(float(found.missed.mean()), 6),
        reward=round(float(found.reward.mean()), 6),
        broken=round(found.broken_share, 6),
    )


def judged(value: float, found: Outputs, base: Outputs) -> Trial:
    """The outputs at strength ``value`` against base's, by ``RULE``."""
    import scipy.stats as sps

    trial = summary(value, found)
    worse = int(np.sum((found.missed == 1) & (base.missed == 0)))  # base answered, it did not
    better = int(np.sum((found.missed == 0) & (base.missed == 1)))
    p = (
        float(sps.binomtest(worse, worse + better, 0.5, alternative="greater").pvalue)
        if worse
        else 1.0
    )
    more = trial.not_answer - float(base.missed.mean())
    return dataclasses.replace(
        trial,
        fluent=float(np.mean(found.fluency - base.fluency)) <= FLUENCY_MARGIN,
        answers=not (more > ANSWER_MARGIN and p < ANSWER_LEVEL),
        intact=found.broken_share - base.broken_share <= BROKEN_MARGIN + 1e-12,
        raises=trial.reward > float(base.reward.mean()),
        answer_p=round(p, 6),
    )


def measure(ctx: CaseContext, items: Sequence[Item], outputs: list[str]) -> Outputs:
    """Fluency, whether each output is an answer and whether it is text, and the method's
    own reward, per item."""
    nll, missed, broken = text_measures(ctx, items, outputs)
    return Outputs(nll, missed, own_rewards(ctx, items, outputs), broken)


def text_measures(
    ctx: CaseContext, items: Sequence[Item], outputs: list[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fluency, missed, broken)`` per item: what the outputs are as text, whatever reward
    judges them."""
    prompts = [it.prompt for it in items]
    pairs = list(zip(outputs, items, strict=True))
    missed = [not_an_answer(o, input=it.input, prompt=it.prompt) is not None for o, it in pairs]
    broken = [not_text(o, input=it.input, prompt=it.prompt) is not None for o, it in pairs]
    nll = fluency(ctx.lm, prompts, outputs, ctx.options.batch_size)
    return np.asarray(nll), np.asarray(missed, float), np.asarray(broken, float)


def own_rewards(ctx: CaseContext, items: Sequence[Item], outputs: list[str]) -> np.ndarray:
    """The case's reward method's (standardised) reward of each output."""
    assert ctx.reward is not None
    return np.asarray(ctx.reward.score(ctx.lm, Batch.of_items(items, outputs)), dtype=np.float64)


def base_outputs(run: RunContext, ctx: CaseContext, items: Sequence[Item]) -> Outputs:
    """Base's greedy outputs for the validation items, measured. The outputs, their fluency
    and their answers are computed once per (suite, size) and shared by every choice; only
    the reward, the case's own, is computed for each."""
    memo = ctx.shared[BASE]
    fingerprint = cache.records_fingerprint(items)
    if fingerprint not in memo:
        factory = run.registry.decoder("base").obj
        options = run.method_options.decoder_options("base", factory)
        base_ctx = dataclasses.replace(ctx, reward=None, options=options)
        with events.step(f"base on {len(items)} validation items"):
            outputs = list(factory().generate(base_ctx, items))
            memo[fingerprint] = (outputs, *text_measures(ctx, items, outputs))
    outputs, nll, missed, broken = memo[fingerprint]
    return Outputs(nll, missed, own_rewards(ctx, items, outputs), broken)


def validation_items(suite: Suite, data: SuiteData, seed: int) -> list[Item]:
    """Up to ``VALIDATION_ITEMS`` items of the training users, none of them a test item: each
    user's profile entries with the suite's instruction (where the suite has profiles and an
    instruction), else the prompts of the user's training pairs; a seeded order per user, the
    users taken in turn."""
    tests = {it.prompt for it in data.items} | {p.prompt for p in data.test_pairs}
    per_user: dict[str, list[Item]] = {}
    instruction = getattr(suite, "instruction", None)
    if data.profiles and callable(instruction):
        for user, entries in sorted(data.profiles.items()):
            per_user[user] = [
                Item(f"validation:{e.doc_id}", user, e.input, instruction(e.input), e.output)
                for e in entries
            ]
    else:
        for pair in data.train_pairs:
            found = per_user.setdefault(pair.user, [])
            if all(it.prompt != pair.prompt for it in found):
                found.append(
                    Item(f"validation:{pair.pair_id}", pair.user, pair.prompt, pair.prompt, None)
                )
    queues = []
    for user in sorted(per_user):
        kept = [it for it in per_user[user] if it.prompt not in tests]
        rng = np.random.default_rng([seed, zlib.crc32(user.encode())])
        queues.append([kept[int(i)] for i in rng.permutation(len(kept))])
    chosen: list[Item] = []
    depth = 0
    while len(chosen) < VALIDATION_ITEMS and any(depth < len(q) for q in queues):
        chosen += [q[depth] for q in queues if depth < len(q)][: VALIDATION_ITEMS - len(chosen)]
        depth += 1
    return chosen


def choice_key(
    run: RunContext,
    case: Case,
    ctx: CaseContext,
    factory: Any,
    plan: RewardPlan,
    option: str,
    grid: tuple[float, ...],
    items: Sequence[Item],
) -> cache.Key:
    """What a choice depends on: this code (the rule, the fluency and answer checks), the
    decoder's code and its other options, the grid, the seed, the model, the fitted reward
    method's key (its training pairs included), base's code and options, the suite's code
    and the validation items; not the test items."""
    base_factory = run.registry.decoder("base").obj
    others = {k: v for k, v in dataclasses.asdict(ctx.options).items() if k != option}
    return cache.make_key(
        "guidance",
        method=str(case.method),
        code=versions.code_version(sys.modules[__name__]),
        decoder=versions.code_version(factory),
        options=others,
        option=option,
        grid=sorted(grid),
        seed=ctx.seed,
        model=ctx.lm.fingerprint,
        reward=plan.key.digest,
        base=versions.code_version(base_factory),
        base_options=dataclasses.asdict(run.method_options.decoder_options("base", base_factory)),
        suite=f"{ctx.data.suite}@{versions.code_version(ctx.suite)}",
        validation=cache.records_fingerprint(items),
    )
