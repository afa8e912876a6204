"""The ``bon`` decoder on the tiny model, with rewards the tests control."""

from __future__ import annotations

import numpy as np
import pytest

from prefalign_methods.decoders.bon import BestOfNDecoder, BoNOptions
from pytest_prefalign.api import Batch, CaseContext, Item, RewardMethod, SuiteData

SEED = 3
OPTIONS = {"max_new_tokens": 5, "batch_size": 8}
PROMPTS = [
    "Generate a title for: neural machine translation",
    "Generate a title for: a dataset of dialogue",
    "Generate a title for: reward models",
]
ITEMS = [Item(f"i{k}", user, p, p, None) for k, p in enumerate(PROMPTS) for user in ("ann", "bob")]


class LengthReward(RewardMethod):
    """ann likes long responses, bob short ones; ``calls`` records what was scored."""

    name = "length"
    capabilities = frozenset()

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def score(self, lm, batch) -> np.ndarray:
        self.calls += list(batch)
        sign = {"ann": 1.0, "bob": -1.0}
        return np.array([sign[u] * len(r) for u, _, r in batch])


class ConstantReward(LengthReward):
    def score(self, lm, batch) -> np.ndarray:
        return np.zeros(len(batch))


def context(lm, reward, *, seed: int = SEED, reduce: str = "sum", **options) -> CaseContext:
    data = SuiteData("toy", "test", profiles={}, items=list(ITEMS))
    return CaseContext(
        lm=lm,
        suite=None,
        data=data,
        reward=reward,  # type: ignore[arg-type]
        options=BoNOptions(**{**OPTIONS, **options}),
        seed=seed,
        reduce=reduce,
    )


def samples(lm, n: int, seed: int = SEED) -> list[list[str]]:
    """The base LM's samples at best-of-N's default temperature and nucleus."""
    return lm.generate(
        [it.prompt for it in ITEMS],
        max_new_tokens=OPTIONS["max_new_tokens"],
        sample=True,
        temperature=BoNOptions().temperature,
        top_p=BoNOptions().top_p,
        num_samples=n,
        seed=seed,
    )


def test_one_sample_is_kept_as_is(tiny_lm):
    out = BestOfNDecoder().generate(context(tiny_lm, LengthReward(), n=1), ITEMS)
    assert out == [s[0] for s in samples(tiny_lm, 1)]


def test_keeps_the_sample_with_the_highest_reward_per_user(tiny_lm):
    reward = LengthReward()
    out = BestOfNDecoder().generate(context(tiny_lm, reward, n=6), ITEMS)
    drawn = samples(tiny_lm, 6)
    assert all(len({len(s) for s in per_item}) > 1 for per_item in drawn)  # a real choice
    # max and min return the first of equal candidates, as bon must
    assert out == [
        max(s, key=len) if it.user == "ann" else min(s, key=len)
        for it, s in zip(ITEMS, drawn, strict=True)
    ]
    assert out != [s[0] for s in drawn]
    # every sample was scored for its own user and task prompt
    assert len(reward.calls) == 6 * len(ITEMS)
    assert {(u, p) for u, p, _ in reward.calls} == {(it.user, it.prompt) for it in ITEMS}


def test_ties_keep_the_first_sample(tiny_lm):
    out = BestOfNDecoder().generate(context(tiny_lm, ConstantReward(), n=4), ITEMS)
    assert out == [s[0] for s in samples(tiny_lm, 4)]


def test_samples_follow_the_seed(tiny_lm):
    decoder = BestOfNDecoder()
    first = decoder.generate(context(tiny_lm, LengthReward()), ITEMS)
    assert decoder.generate(context(tiny_lm, LengthReward()), ITEMS) == first
    assert decoder.generate(context(tiny_lm, LengthReward(), seed=4), ITEMS) != first


@pytest.mark.parametrize(("reduce", "beta"), [("sum", 1.0), ("sum", 2.0), ("mean", 4.0)])
def test_loglik_is_base_loglik_plus_reward_over_beta(tiny_lm, reduce, beta):
    users, prompts = ["ann", "bob"], PROMPTS[:2]
    responses = ["Neural translation", "Dialogue data"]
    per_token = tiny_lm.response_logprobs(prompts, responses)
    base = [lp.sum() if reduce == "sum" else lp.mean() for lp in per_token]
    rewards = [len(responses[0]), -len(responses[1])]
    expected = [b + r / beta for b, r in zip(base, rewards, strict=True)]
    ctx = context(tiny_lm, LengthReward(), reduce=reduce, beta=beta)
    got = BestOfNDecoder().loglik(ctx, Batch(users, prompts, responses))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)


def test_samples_at_the_working_point_with_the_papers_constants_as_options(tiny_lm, monkeypatch):
    # the defaults: the sampling best-of-N is run with on small models (bon.py's docstring)
    assert (BoNOptions().n, BoNOptions().temperature, BoNOptions().top_p) == (16, 0.7, 0.9)
    asked = []
    real = type(tiny_lm).generate
    monkeypatch.setattr(
        type(tiny_lm), "generate", lambda self, *a, **k: asked.append(k) or real(self, *a, **k)
    )
    BestOfNDecoder().generate(context(tiny_lm, ConstantReward(), n=2), ITEMS)
    papers = context(tiny_lm, ConstantReward(), n=2, temperature=1.0, top_p=1.0)
    BestOfNDecoder().generate(papers, ITEMS)
    assert [(k["temperature"], k["top_p"], k["num_samples"]) for k in asked] == [
        (0.7, 0.9, 2),
        (1.0, 1.0, 2),
    ]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("n", 0),
        ("beta", 0.0),
        ("temperature", -1.0),
        ("beta", float("inf")),
        ("top_p", 0.0),
        ("top_p", 1.5),
    ],
)
def test_bad_options_are_refused(option, value):
    with pytest.raises(ValueError, match=f"{option} must be"):
        BoNOptions(**{option: value})


def test_a_second_bon_row_reuses_the_samples(tiny_lm, monkeypatch):
    alone = BestOfNDecoder().generate(context(tiny_lm, ConstantReward(), n=4), ITEMS)
    first = context(tiny_lm, LengthReward(), n=4)
    BestOfNDecoder().generate(first, ITEMS)
    calls = []
    real = type(tiny_lm).generate
    monkeypatch.setattr(
        type(tiny_lm), "generate", lambda self, *a, **k: calls.append(a) or real(self, *a, **k)
    )
    second = context(tiny_lm, ConstantReward(), n=4)
    second.shared = first.shared  # the same (suite, size)
    assert BestOfNDecoder().generate(second, ITEMS) == alone
    assert calls == []  # scored the kept samples, drew none
    other_seed = context(tiny_lm, ConstantReward(), n=4, seed=SEED + 1)
    other_seed.shared = first.shared
    BestOfNDecoder().generate(other_seed, ITEMS)
    assert len(calls) == 1  # other settings, other samples
    for name, value in (("top_p", 0.5), ("temperature", 1.0)):
        other = context(tiny_lm, ConstantReward(), n=4, **{name: value})
        other.shared = first.shared
        BestOfNDecoder().generate(other, ITEMS)
    assert len(calls) == 3  # another nucleus or temperature: samples of their own


def test_the_generation_cache_key_holds_the_sampling_options(tiny_lm):
    from prefalign_suites.synthetic.suite import Synthetic
    from pytest_prefalign.evaluation.generation import generation_key
    from pytest_prefalign.registry import MethodName

    def key(**options):
        ctx = context(tiny_lm, ConstantReward(), **options)
        ctx.suite = Synthetic()
        return generation_key(ctx, MethodName("bon", "length"), BestOfNDecoder, None).digest

    assert key() == key()
    assert len({key(), key(top_p=0.5), key(temperature=1.0), key(n=8)}) == 4
