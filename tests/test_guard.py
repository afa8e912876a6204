"""The checks a reward method's answers pass before a decoder or a metric uses them
(``evaluation/guard.py``): each capability's values must have the shape its contract states,
and be numbers a decoder can use, or the test fails with the method, the call and the record
named, instead of arrays silently cut, broadcast or summed into a figure."""

from __future__ import annotations

import re
import types

import numpy as np
import pytest
import torch

from pytest_prefalign.api import Batch, Decoder, Pair, SuiteData
from pytest_prefalign.errors import PrefalignError
from pytest_prefalign.evaluation.guard import GuardedReward, old_style
from pytest_prefalign.evaluation.pairs import policy_fields

VOCAB = 7
PAIR = Pair("ann/t0", "ann", "Title for: cats", "Cats Nap", "Dogs Run")
DATA = SuiteData("toy", "memory", {}, [], test_pairs=[PAIR])


class WordLM:
    """A stand-in LM: a response's tokens are its words, then an eos."""

    def response_ids(self, response: str) -> list[int]:
        return [1] * len(response.split()) + [0]


class Answers:
    """A reward method answering whatever the test sets."""

    def __init__(self, answer):
        self.answer = answer

    def prefix_rewards(self, lm, batch):
        return [self.answer(r) for r in batch.responses]

    next_token_logprobs = prefix_rewards

    def logprobs_from_hidden(self, users, hidden):
        return self.answer(hidden)


def guarded(answer) -> GuardedReward:
    return GuardedReward(Answers(answer), "mine", DATA, vocab=VOCAB)


def call(reward: GuardedReward, capability: str):
    side = Batch.of_pairs([PAIR], "chosen")  # two words and the eos: three tokens
    return getattr(reward, capability)(WordLM(), side)


def test_prefix_rewards_of_the_right_length_pass_as_floats():
    out = call(guarded(lambda r: [0.5, 1, 2]), "prefix_rewards")
    assert [a.tolist() for a in out] == [[0.5, 1.0, 2.0]]


@pytest.mark.parametrize("values", [[1.0, 2.0, 3.0, 4.0], [1.0], [1.0, 2.0]])
def test_prefix_rewards_of_another_length_name_the_method_and_the_pair(values):
    # a longer array was cut to the response, a single value broadcast to every token
    with pytest.raises(PrefalignError) as info:
        call(guarded(lambda r: values), "prefix_rewards")
    assert str(info.value).startswith(
        f"reward method 'mine' prefix_rewards returned {len(values)} values for the chosen side "
        f"of pair 'ann/t0', expected 3: one per token of lm.response_ids(response)"
    )


def test_next_token_logprobs_of_the_right_shape_pass_and_minus_inf_is_allowed():
    table = np.log(np.full((3, VOCAB), 1 / VOCAB))
    table[:, 0] = -np.inf  # a token of probability 0
    assert call(guarded(lambda r: table), "next_token_logprobs")[0] is table


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (np.zeros((3, VOCAB + 1)), "returned shape (3, 8) for the chosen side of pair 'ann/t0', "),
        (np.zeros((2, VOCAB)), "returned shape (2, 7) for the chosen side of pair 'ann/t0', "),
        (np.zeros(3), "returned shape (3,) "),
        (np.where(np.eye(3, VOCAB) == 1, np.inf, 0.0), "returned NaN or +inf for the chosen "),
        (np.where(np.eye(3, VOCAB, 1) == 1, np.nan, 0.0), "returned NaN or +inf for the chosen "),
    ],
    ids=["wide", "short", "flat", "+inf", "nan"],
)
def test_next_token_logprobs_of_another_shape_or_with_nan_or_inf_fail(table, message):
    with pytest.raises(PrefalignError) as info:
        call(guarded(lambda r: table), "next_token_logprobs")
    assert str(info.value).startswith(f"reward method 'mine' next_token_logprobs {message}")


def test_logprobs_from_hidden_must_keep_the_leading_shape_and_give_the_vocabulary():
    hidden = torch.zeros(2, 4, 5)
    good = torch.zeros(2, 4, VOCAB)
    assert guarded(lambda h: good).logprobs_from_hidden(["a", "b"], hidden) is good
    for bad, expected in [
        (torch.zeros(2, 4, 3), "returned shape (2, 4, 3), expected (2, 4, 7)"),
        (torch.zeros(2, VOCAB), "returned shape (2, 7), expected (2, 4, 7)"),
        (torch.full((2, 4, VOCAB), float("inf")), "returned NaN or +inf"),
    ]:
        with pytest.raises(PrefalignError, match=re.escape(expected)):
            guarded(lambda h, bad=bad: bad).logprobs_from_hidden(["a", "b"], hidden)
    # without a known vocabulary, only the leading shape is checked
    loose = GuardedReward(Answers(lambda h: torch.zeros(2, 4, 3)), "mine", DATA)
    assert loose.logprobs_from_hidden(["a", "b"], hidden).shape == (2, 4, 3)


class OldStyle:
    """A reward method written before ``Batch``: ``score(lm, users, prompts, responses)``."""

    def __init__(self):
        self.calls = []

    def score(self, lm, users, prompts, responses):
        self.calls.append((list(users), list(prompts), list(responses)))
        return [float(len(r)) for r in responses]

    def prefix_rewards(self, lm, users, prompts, responses, extra=None):
        return [np.arange(1.0, len(lm.response_ids(r)) + 1) for r in responses]


def test_a_method_written_before_batch_is_called_its_way_with_a_warning():
    inner = OldStyle()
    reward = GuardedReward(inner, "old", DATA)
    batch = Batch(["ann", "bob"], ["p", "q"], ["one two", "three"])
    with pytest.warns(DeprecationWarning, match=r"reward method 'old': score\(lm, users"):
        got = reward.score(WordLM(), batch)
    assert got.tolist() == [7.0, 5.0]
    assert inner.calls == [(["ann", "bob"], ["p", "q"], ["one two", "three"])]
    with pytest.warns(DeprecationWarning, match="define prefix_rewards\\(lm, batch\\)"):
        prefix = reward.prefix_rewards(WordLM(), batch)
    assert [p.tolist() for p in prefix] == [[1.0, 2.0, 3.0], [1.0, 2.0]]


def test_old_style_is_told_by_the_positional_parameters():
    assert old_style(OldStyle().score) and old_style(OldStyle().prefix_rewards)
    assert not old_style(Answers(None).prefix_rewards)  # (lm, batch)
    assert not old_style(lambda *args: args)  # passes everything through: the current way
    assert not old_style(len)  # a builtin: no signature to read


class _Scores(Decoder):
    """A decoder whose policy scores are given: one per distinct side, chosen sides first."""

    name = "given"

    def __init__(self, scores: list[float]) -> None:
        self.scores = scores

    def logliks(self, ctx, batch):
        return {how: np.asarray(self.scores[: len(batch)]) for how in ("sum", "mean")}


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        (
            [0.0, 1.0, 2.0, float("nan")],
            "decoder 'given' loglik (rejected) returned nan for pair 'b/1'",
        ),
        ([0.0, 1.0, 2.0], "decoder 'given' loglik returned 3 values, expected 4"),
        (["x"] * 4, "decoder 'given' loglik returned ndarray, not numbers"),
    ],
    ids=["nan", "short", "text"],
)
def test_a_decoders_bad_policy_score_is_refused_naming_the_pair(scores, message):
    pairs = [Pair("a/0", "a", "p", "yes", "no"), Pair("b/1", "b", "q", "sure", "nope")]
    ctx = types.SimpleNamespace(reduce="sum")
    with pytest.raises(PrefalignError, match=re.escape(message)):
        policy_fields(ctx, _Scores(scores), "given", pairs)
