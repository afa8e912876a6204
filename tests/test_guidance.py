"""Working points: rewards on one scale (``evaluation/scale.py``) and the guidance strength
chosen on validation items of the training users, never the test items
(``evaluation/guidance.py``), each part against hand-worked answers."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_prefalign.api import Batch, Item, Pair, ProfileEntry, SuiteData
from pytest_prefalign.evaluation import guidance
from pytest_prefalign.evaluation.guidance import Choice, Outputs, Trial, judged, validation_items
from pytest_prefalign.evaluation.scale import RewardScale, StandardisedReward, fit_scale


class Raw:
    """A reward method whose raw reward is the response's length in characters."""

    name = "raw"
    capabilities = frozenset({"prefix"})

    def score(self, lm, batch):
        return np.array([float(len(r)) for r in batch.responses])

    def prefix_rewards(self, lm, batch):
        return [np.arange(1.0, len(r) + 1.0) for r in batch.responses]

    def reward_from_hidden(self, users, hidden):
        return hidden.sum(-1)


def test_the_scale_is_the_mean_and_population_spread_of_the_training_rewards():
    scale = fit_scale(np.array([1.0, 2.0, 3.0, 4.0]))
    assert scale.mean == 2.5 and scale.std == pytest.approx(math.sqrt(1.25)) and scale.n == 4
    assert not scale.degenerate
    flat = fit_scale(np.array([3.0, 3.0, 3.0]))
    assert (flat.mean, flat.std, flat.degenerate) == (3.0, 1.0, True)
    # no training pairs (a method that needs none): the rewards as they are
    assert fit_scale(np.array([])) == RewardScale(0.0, 1.0, 0, degenerate=True)


def test_a_standardised_reward_answers_every_call_on_its_scale_and_keeps_the_order():
    reward = StandardisedReward(Raw(), RewardScale(mean=4.0, std=2.0, n=10))
    got = reward.score(None, Batch(["u"] * 3, ["p"] * 3, ["ab", "abcd", "abcdefgh"]))
    assert got.tolist() == [-1.0, 0.0, 2.0]  # (2 - 4) / 2, (4 - 4) / 2, (8 - 4) / 2
    assert [v.tolist() for v in reward.prefix_rewards(None, Batch(["u"], ["p"], ["abc"]))] == [
        [-1.5, -1.0, -0.5]
    ]
    assert reward.reward_from_hidden(["u"], np.array([[1.0, 1.0]])).tolist() == [-1.0]
    # everything else is the method's own
    assert reward.name == "raw" and reward.capabilities == frozenset({"prefix"})
    # standardised on its own training responses: mean 0, unit spread there
    responses = ["a", "abc", "abcdef", "ab"]
    raw = Raw().score(None, Batch(["u"] * 4, ["p"] * 4, responses))
    own = StandardisedReward(Raw(), fit_scale(raw)).score(
        None, Batch(["u"] * 4, ["p"] * 4, responses)
    )
    assert own.mean() == pytest.approx(0.0, abs=1e-12) and own.std() == pytest.approx(1.0)


def test_a_scale_read_back_from_the_cache_must_be_usable():
    scale = RewardScale(1.5, 0.25, 8)
    assert RewardScale.from_json(scale.to_json()) == scale
    with pytest.raises(ValueError, match="not a usable reward scale"):
        RewardScale.from_json({"mean": 0.0, "std": 0.0, "n": 3, "degenerate": False})


class TitleSuite:
    def instruction(self, input: str) -> str:
        return f"Title for: {input}"


def suite_data(reference: str = "Cats") -> SuiteData:
    profiles = {
        user: [ProfileEntry(f"{user}/p{i}", f"{user} paper {i}", f"T{i}") for i in range(20)]
        for user in ("ann", "bob", "cy")
    }
    items = [Item("ann/t0", "ann", "ann paper 0", "Title for: ann paper 0", reference)]
    train = [Pair("ann/r0", "ann", "Title for: ann paper 3", "A", "B")]
    return SuiteData("toy", "here", profiles, items, train_pairs=train)


def test_validation_items_are_the_users_profiles_in_turn_and_never_a_test_item():
    data = suite_data()
    items = validation_items(TitleSuite(), data, seed=0)
    assert len(items) == guidance.VALIDATION_ITEMS
    # the users in turn: 8 each of the three
    assert [it.user for it in items[:6]] == ["ann", "bob", "cy", "ann", "bob", "cy"]
    assert {u: [it.user for it in items].count(u) for u in ("ann", "bob", "cy")} == {
        "ann": 8,
        "bob": 8,
        "cy": 8,
    }
    # the test item's input is ann's profile paper 0 too: it is never a validation item
    assert "Title for: ann paper 0" not in {it.prompt for it in items}
    assert all(it.prompt == f"Title for: {it.input}" for it in items)
    # seeded: the same items for the same seed, others for another
    assert validation_items(TitleSuite(), data, seed=0) == items
    assert validation_items(TitleSuite(), data, seed=1) != items


def test_validation_items_do_not_depend_on_the_test_items_references():
    before = validation_items(TitleSuite(), suite_data("Cats"), seed=0)
    after = validation_items(TitleSuite(), suite_data("An edited reference"), seed=0)
    assert before == after


def test_without_profiles_the_training_pairs_prompts_are_the_validation_items():
    data = dataclasses.replace(suite_data(), profiles={})
    items = validation_items(TitleSuite(), data, seed=0)
    assert [(it.user, it.prompt, it.input, it.reference) for it in items] == [
        ("ann", "Title for: ann paper 3", "Title for: ann paper 3", None)
    ]


def outputs(fluency, missed, reward) -> Outputs:
    return Outputs(np.asarray(fluency, float), np.asarray(missed, float), np.asarray(reward, float))


# base's outputs for 10 validation items: NLL 1.0 each, 2 not an answer, reward 0
BASE = outputs([1.0] * 10, [1, 1, 0, 0, 0, 0, 0, 0, 0, 0], [0.0] * 10)


def test_fluent_means_at_most_the_margin_above_base_on_average_over_the_items():
    edge = outputs([1.0 + guidance.FLUENCY_MARGIN] * 10, BASE.missed, [0.1] * 10)
    found = judged(0.5, edge, BASE)
    assert found.fluent and found.usable and found.raises and found.value == 0.5
    assert found.fluency == pytest.approx(1.0 + guidance.FLUENCY_MARGIN)
    over = outputs([1.0] * 9 + [1.0 + 10 * guidance.FLUENCY_MARGIN + 0.1], BASE.missed, [0.1] * 10)
    assert not judged(0.5, over, BASE).fluent  # one gibberish output in ten is enough


def test_answering_fails_only_on_a_significant_rise_in_not_an_answer():
    # 2 more items not answered than base (4 vs 2): 0.2 above, but by a sign test on the
    # discordant items, P(Binomial(2, 1/2) >= 2) = 0.25: chance
    two = outputs(BASE.fluency, [1, 1, 1, 1, 0, 0, 0, 0, 0, 0], BASE.reward)
    found = judged(1.0, two, BASE)
    assert found.answers and found.answer_p == pytest.approx(0.25)
    # 5 more (7 vs 2): P(Binomial(5, 1/2) >= 5) = 1/32 < ANSWER_LEVEL
    five = outputs(BASE.fluency, [1, 1, 1, 1, 1, 1, 1, 0, 0, 0], BASE.reward)
    found = judged(1.0, five, BASE)
    assert not found.answers and not found.usable
    assert found.answer_p == pytest.approx(1 / 32)
    # items swapped, as many answered as base: no rise
    swapped = outputs(BASE.fluency, [0, 0, 1, 1, 0, 0, 0, 0, 0, 0], BASE.reward)
    assert judged(1.0, swapped, BASE).answers


def test_intact_allows_one_more_output_that_is_not_text_than_base_in_24():
    """Loops that take the place of base's copies: the not-an-answer share stays as base's, the
    sign test sees nothing, and fluency holds; the outputs that are not text decide."""
    base = Outputs(np.ones(24), np.r_[np.ones(12), np.zeros(12)], np.zeros(24), np.zeros(24))
    missed = base.missed.copy()  # the same 12 items not answered ...
    one = Outputs(base.fluency, missed, np.ones(24), np.r_[1.0, np.zeros(23)])  # ... one a loop
    found = judged(0.5, one, base)
    assert found.intact and found.usable and found.broken == round(1 / 24, 6)
    two = Outputs(base.fluency, missed, np.ones(24), np.r_[1.0, 1.0, np.zeros(22)])
    found = judged(0.5, two, base)
    assert found.fluent and found.answers and found.answer_p == 1.0
    assert not found.intact and not found.usable and found.broken == round(2 / 24, 6)
    # measured against base's own: two of 24 are fine where base writes one
    base_one = dataclasses.replace(base, broken=np.r_[0.0, 0.0, 1.0, np.zeros(21)])
    assert judged(0.5, two, base_one).intact


def test_loops_labels_other_languages_and_empty_outputs_are_not_text_copies_are(monkeypatch):
    monkeypatch.setattr(guidance, "fluency", lambda lm, prompts, found, batch: [1.0] * len(found))
    abstract = (
        "We study how neural networks learn inflectional morphology and whether they "
        "generalize to new words as human speakers do, with German plurals as the case."
    )
    item = Item("v", "ann", abstract, f"Write a title for: {abstract}", None)
    written = {
        "Pre-Linguistic Pre-Linguistic Pre-Linguistic Pre-Linguistic": (1, 1),  # loop
        "Abstract:": (1, 1),  # label
        "": (1, 1),  # empty
        "Нейронные сети и немецкое множественное число": (1, 1),  # language
        "We study how neural networks learn inflectional morphology": (1, 0),  # copy
        # a copy of the opening that then loops: not text, whichever rule comes first
        "We study how neural networks learn inflectional morphology morphology morphology "
        "morphology": (1, 1),
        "This is a summary of the abstract.": (1, 0),  # off task, but text
        "Neural networks and German plurals": (0, 0),
    }
    ctx = SimpleNamespace(lm=None, options=SimpleNamespace(batch_size=4))
    nll, missed, broken = guidance.text_measures(ctx, [item] * len(written), list(written))
    assert list(zip(missed, broken, strict=True)) == list(written.values())
    assert list(nll) == [1.0] * len(written)


def test_the_reward_rise_is_recorded_not_required():
    flat = judged(0.25, outputs(BASE.fluency, BASE.missed, [0.0] * 10), BASE)
    assert flat.usable and not flat.raises


def test_a_choice_reads_back_as_written():
    trials = (
        Trial(0.5, 1.2, 0.1, 0.4, answer_p=0.5, broken=0.04),
        Trial(1.0, 3.0, 0.5, 0.9, fluent=False, broken=0.2, intact=False),
    )
    base = Trial(None, 1.0, 0.1, 0.0)
    choice = Choice("w", 0.5, "chosen", (0.5, 1.0), guidance.RULE, 24, 8, base, trials)
    assert Choice.from_json(choice.to_json()) == choice
    assert choice.apply(Opts(w=2.0, k=3)) == Opts(w=0.5, k=3)


@dataclasses.dataclass(frozen=True)
class Opts:
    w: float = 1.0
    k: int = 10


@dataclasses.dataclass(frozen=True)
class Ctx:
    """The part of a CaseContext that the search reads and replaces."""

    options: Opts


class Strength:
    """A decoder whose outputs only say the strength they were written at."""

    def generate(self, ctx, items):
        return [f"w={ctx.options.w}"] * len(items)


@pytest.mark.parametrize(
    ("breaks_above", "tried", "chosen", "fallback"),
    [
        (0.3, [0.5, 0.125, 0.25], 0.25, False),  # bisected: 3 of 7 tried
        (10.0, [0.5, 2.0, 4.0], 4.0, False),
        (0.0, [0.5, 0.125, 0.0625], 0.0625, True),  # even the weakest breaks: kept, flagged
        (0.07, [0.5, 0.125, 0.0625], 0.0625, False),
    ],
)
def test_the_strongest_usable_strength_is_found_by_bisection(
    monkeypatch, breaks_above, tried, chosen, fallback
):
    """Fluency breaks above a strength: the rule's choice is the last strength below it."""
    seen = []

    def measure(ctx, items, found):
        w = float(found[0].removeprefix("w="))
        seen.append(w)
        return outputs(
            [3.0 if w > breaks_above else 1.0] * len(items), [0] * len(items), [w] * len(items)
        )

    monkeypatch.setattr(guidance, "measure", measure)
    monkeypatch.setattr(
        guidance,
        "base_outputs",
        lambda run, ctx, items: outputs([1.0] * len(items), [0] * len(items), [0.0] * len(items)),
    )
    ctx = Ctx(options=Opts(w=1.0))
    items = validation_items(TitleSuite(), suite_data(), seed=0)[:4]
    grid = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0)
    choice = guidance.search(
        None, SimpleNamespace(method="args[x]"), ctx, Strength, "w", grid, items
    )
    assert seen == tried
    assert (choice.value, choice.fallback) == (chosen, fallback)
    assert [t.value for t in choice.trials] == sorted(tried)
    assert choice.grid == grid and choice.n_items == 4 and choice.how == "chosen"


def test_a_method_whose_rewards_are_in_nats_keeps_them(tmp_path):
    from pytest_prefalign.cache import Disk, make_key
    from pytest_prefalign.evaluation.scale import cached_scale

    class InNats(Raw):
        rewards_in_nats = True

    pairs = [Pair("p", "ann", "x", "a long title", "b")]
    key = make_key("rewards", method="raw")
    native = cached_scale(Disk(tmp_path / "a"), key, InNats(), None, pairs)
    assert native == RewardScale(0.0, 1.0, 0, native=True)
    # the same method without the declaration: standardised on both sides of its pair
    scaled = cached_scale(Disk(tmp_path / "b"), key, Raw(), None, pairs)
    assert (scaled.mean, scaled.std, scaled.n) == (6.5, 5.5, 2)  # lengths 12 and 1


def test_a_cached_value_is_valid_when_its_record_reads_it():
    from pytest_prefalign.cache import readable_by

    valid = readable_by(RewardScale.from_json)
    assert valid(RewardScale(1.0, 2.0, 3).to_json())
    assert not valid({"mean": 1.0})  # a field missing
    assert not valid([1, 2])  # not an object
    assert not valid({"mean": 0.0, "std": 0.0, "n": 3, "degenerate": False})  # unusable
