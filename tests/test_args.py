"""The ``args`` decoder: the fast path gives the references' tokens, ``w = 0`` gives the base
model, and the policy-accuracy log-likelihood matches a hand computation from plain passes."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from reference.args_reference import full_recompute_generate, per_candidate_cache_generate

from prefalign_methods.decoders.args import ArgsDecoder, ArgsOptions
from prefalign_methods.decoders.args_decode import args_generate
from prefalign_methods.decoders.args_rule import pick, top_candidates
from prefalign_methods.decoders.args_score import args_token_logprobs
from pytest_prefalign.api import Batch, CaseContext, Item, RewardMethod
from pytest_prefalign.runtime.lm import LM
from pytest_prefalign.runtime.tiny import build_tiny_lm

PROMPTS = [
    "Generate a title for the following abstract of a paper: We propose a new method for "
    "neural machine translation and evaluate it on benchmark datasets.",
    "hello",
    "Generate a title: attention over tokens",
    "We study how users write titles.",
]
USERS = ["ann", "bob", "cy", "ann"]


class HeadReward(RewardMethod):
    """A fixed random linear head on the base model's final hidden states, plus a per-user
    part (so that mixing up rows of a batch changes the rewards)."""

    name = "test_head"
    capabilities = frozenset({"prefix", "hidden"})

    def __init__(self, hidden_size: int, scale: float = 3.0) -> None:
        gen = torch.Generator().manual_seed(1234)
        self.w = torch.randn(hidden_size, generator=gen) * scale
        self.scale = scale

    def user_vector(self, user: str) -> torch.Tensor:
        gen = torch.Generator().manual_seed(zlib.crc32(user.encode()))
        return torch.randn(self.w.shape[0], generator=gen) * self.scale

    def reward_from_hidden(self, users: Sequence[str], hidden: torch.Tensor) -> torch.Tensor:
        heads = torch.stack([self.w + self.user_vector(u) for u in users])  # (N, H)
        heads = heads.reshape(len(users), *([1] * (hidden.dim() - 2)), -1)
        return (hidden * heads).sum(-1)

    def prefix_rewards(self, lm: LM, batch: Batch) -> list[np.ndarray]:
        hidden = lm.response_hidden(batch.prompts, batch.responses)
        return [
            self.reward_from_hidden([u], h[None])[0].double().numpy()
            for u, h in zip(batch.users, hidden, strict=True)
        ]

    def score(self, lm: LM, batch: Batch) -> np.ndarray:
        return np.array([v[-1] for v in self.prefix_rewards(lm, batch)])


class PrefixOnly(RewardMethod):
    """The same reward, offering only ``prefix_rewards`` (the general path)."""

    name = "test_prefix_only"
    capabilities = frozenset({"prefix"})

    def __init__(self, inner: HeadReward) -> None:
        self.inner = inner

    def prefix_rewards(self, *args: Any) -> list[np.ndarray]:
        return self.inner.prefix_rewards(*args)

    def score(self, *args: Any) -> np.ndarray:
        return self.inner.score(*args)


class ScoreOnly(RewardMethod):
    name = "score_only"
    capabilities = frozenset()


@pytest.fixture(scope="module")
def head(tiny_lm: LM) -> HeadReward:
    return HeadReward(tiny_lm.model.config.hidden_size)


def context(
    lm: LM, reward: RewardMethod | None, tmp_path: Path, *, reduce: str = "sum", **options: Any
) -> CaseContext:
    opts = ArgsOptions(**{"max_new_tokens": 10, "batch_size": 16, **options})
    return CaseContext(
        lm=lm,
        suite=None,
        data=None,
        reward=reward,  # type: ignore[arg-type]
        options=opts,
        reduce=reduce,
    )


def items(users: Sequence[str], prompts: Sequence[str]) -> list[Item]:
    return [
        Item(f"i{n}", u, p, p, None) for n, (u, p) in enumerate(zip(users, prompts, strict=True))
    ]


# --- the shared rule --------------------------------------------------------------------------


def test_top_candidates_breaks_ties_by_lowest_id() -> None:
    logits = torch.tensor([[0.0, 5.0, 1.0, 5.0, 1.0, 1.0, -2.0]])
    assert top_candidates(logits, 2).tolist() == [[1, 3]]
    # three tokens tie for the last two places: the lower ids win, listed ascending
    assert top_candidates(logits, 4).tolist() == [[1, 2, 3, 4]]
    assert top_candidates(logits, 99).tolist() == [[0, 1, 2, 3, 4, 5, 6]]
    assert pick(torch.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]])).tolist() == [1, 0]


# --- generation -------------------------------------------------------------------------------


def test_fast_path_gives_the_references_tokens(tiny_lm: LM, head: HeadReward) -> None:
    kwargs = {"k": 10, "w": 1.0, "max_new_tokens": 8}
    fast = args_generate(tiny_lm, head, USERS, PROMPTS, batch_size=4, **kwargs)
    assert fast == full_recompute_generate(tiny_lm, head, USERS, PROMPTS, **kwargs)
    assert fast == per_candidate_cache_generate(tiny_lm, head, USERS, PROMPTS, **kwargs)
    # batches of other sizes (other padding) give the same tokens
    assert fast == args_generate(tiny_lm, head, USERS, PROMPTS, batch_size=3, **kwargs)
    assert fast == args_generate(tiny_lm, head, USERS, PROMPTS, batch_size=1, **kwargs)
    # the reward matters: guided tokens differ from greedy ones
    greedy = args_generate(
        tiny_lm, head, USERS, PROMPTS, batch_size=4, k=10, w=0.0, max_new_tokens=8
    )
    assert fast != greedy
    # and so does the user: the same prompt for another user
    other = args_generate(tiny_lm, head, ["zed"], PROMPTS[:1], **kwargs)
    assert other[0] != fast[0]


def test_rows_that_finish_early_leave_the_batch(tiny_lm: LM, head: HeadReward) -> None:
    lengths = {}
    for n in range(1, 6):
        tokens = args_generate(
            tiny_lm,
            head,
            USERS,
            PROMPTS,
            k=5,
            w=1.0,
            max_new_tokens=6,
            finished=lambda t, n=n: len(t) >= n or t[-1] in tiny_lm.stop_ids,
        )
        lengths[n] = [len(t) for t in tokens]
    assert lengths[3] == [min(3, n) for n in lengths[5]]
    one_by_one = [
        args_generate(tiny_lm, head, [u], [p], k=5, w=1.0, max_new_tokens=6)[0]
        for u, p in zip(USERS, PROMPTS, strict=True)
    ]
    assert args_generate(tiny_lm, head, USERS, PROMPTS, k=5, w=1.0, max_new_tokens=6) == one_by_one


def test_w0_generates_what_the_base_model_does(
    tiny_lm: LM, head: HeadReward, tmp_path: Path
) -> None:
    ctx = context(tiny_lm, head, tmp_path, w=0.0, max_new_tokens=12)
    texts = ArgsDecoder().generate(ctx, items(USERS, PROMPTS))
    assert texts == [t[0] for t in tiny_lm.generate(PROMPTS, max_new_tokens=12)]
    guided = ArgsDecoder().generate(
        context(tiny_lm, head, tmp_path, max_new_tokens=12), items(USERS, PROMPTS)
    )
    assert guided != texts


# --- policy accuracy --------------------------------------------------------------------------


def test_loglik_with_w0_over_the_whole_vocabulary_is_the_base_loglik(
    tiny_lm: LM, head: HeadReward
) -> None:
    responses = ["neural machine translation", "a", "We study the model of the paper"]
    prompts = PROMPTS[:3]
    guided = args_token_logprobs(
        tiny_lm,
        head,
        Batch(USERS[:3], prompts, responses),
        k=tiny_lm.model.config.vocab_size,
        w=0.0,
    )
    base = tiny_lm.response_logprobs(prompts, responses)
    for g, b in zip(guided, base, strict=True):
        assert g.shape == b.shape
        np.testing.assert_allclose(g, b, atol=1e-4)


def hand_loglik(
    lm: LM, reward: HeadReward, user: str, prompt: str, response: str, k: int, w: float
) -> float:
    """S_u(y|x) from plain forward passes: one per step for the base logits, one per candidate
    for its reward, then a log-softmax over C_t."""
    seq, y = lm.prompt_ids(prompt), lm.response_ids(response)
    total = 0.0
    with torch.no_grad():
        for t in range(len(y)):
            logits = lm.model(input_ids=torch.tensor([seq + y[:t]])).logits[0, -1]
            cands = set(logits.topk(k).indices.tolist()) | {y[t]}
            score = {}
            for c in cands:
                hidden = lm.model.model(input_ids=torch.tensor([seq + y[:t] + [c]]))
                rew = reward.reward_from_hidden([user], hidden.last_hidden_state[:, -1])[0]
                score[c] = float(logits[c]) + w * float(rew)
            values = np.array(list(score.values()))
            total += score[y[t]] - (values.max() + np.log(np.exp(values - values.max()).sum()))
    return total


def test_loglik_matches_a_hand_computation(tiny_lm: LM, head: HeadReward, tmp_path: Path) -> None:
    responses = ["the model", "an", "a"]
    assert all(len(tiny_lm.response_ids(r)) <= 4 for r in responses)
    users, prompts = USERS[:3], [PROMPTS[0], PROMPTS[0], PROMPTS[2]]
    ctx = context(tiny_lm, head, tmp_path, k=3, w=1.5)
    got = ArgsDecoder().loglik(ctx, Batch(users, prompts, responses))
    want = [
        hand_loglik(tiny_lm, head, u, p, r, k=3, w=1.5)
        for u, p, r in zip(users, prompts, responses, strict=True)
    ]
    np.testing.assert_allclose(got, want, atol=1e-4)
    # the reward moves the score away from the base log-likelihood
    base = [float(np.sum(lp)) for lp in tiny_lm.response_logprobs(prompts, responses)]
    assert np.abs(np.array(got) - base).max() > 0.1
    mean = ArgsDecoder().loglik(
        context(tiny_lm, head, tmp_path, k=3, w=1.5, reduce="mean"),
        Batch(users, prompts, responses),
    )
    lengths = [len(tiny_lm.response_ids(r)) for r in responses]
    np.testing.assert_allclose(mean, np.array(got) / lengths, atol=1e-5)


def test_loglik_does_not_depend_on_the_batch(tiny_lm: LM, head: HeadReward) -> None:
    users = ["ann", "bob", "ann", "dee", "bob"]
    prompts = [PROMPTS[0], PROMPTS[0], PROMPTS[1], PROMPTS[3], PROMPTS[1]]
    responses = ["neural machine translation", "a title", "We propose", "x", "hello world"]
    whole = args_token_logprobs(tiny_lm, head, Batch(users, prompts, responses), k=10, w=1.0)
    single = [
        args_token_logprobs(tiny_lm, head, Batch([u], [p], [r]), k=10, w=1.0, batch_size=1)[0]
        for u, p, r in zip(users, prompts, responses, strict=True)
    ]
    for a, b in zip(whole, single, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)
        assert np.all(a <= 0)


# --- the general path (prefix rewards only) ----------------------------------------------------


@pytest.fixture(scope="module")
def word_lm() -> LM:
    """A tiny model that only ever ranks whole-word tokens (" the", " model", ...) or the end
    of turn high: sequences of them are the tokenizer's own split of their text, so rewards
    read from texts (the general path) see the same tokens as the fast path."""
    lm = build_tiny_lm(seed=3)
    words = [i for i in range(lm.tokenizer.vocab_size) if _whole_word(lm, i)]
    assert len(words) > 20
    bias = torch.full((lm.model.config.vocab_size,), -1e4)
    bias[words + [lm.eos_id]] = 0.0
    old = lm.model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.copy_(bias)
    lm.model.lm_head = head
    return lm


def _whole_word(lm: LM, token: int) -> bool:
    piece = lm.tokenizer.convert_ids_to_tokens(token)
    text = lm.tokenizer.decode([token])
    return (
        piece.startswith("\u0120")
        and piece[1:].isalpha()
        and lm.tokenizer(text, add_special_tokens=False)["input_ids"] == [token]
    )


def test_prefix_only_path_equals_the_fast_path(word_lm: LM) -> None:
    fast_rm = HeadReward(word_lm.model.config.hidden_size, scale=2.0)
    general_rm = PrefixOnly(fast_rm)
    fast = args_generate(word_lm, fast_rm, USERS, PROMPTS, k=6, w=1.0, max_new_tokens=6)
    assert fast == args_generate(word_lm, general_rm, USERS, PROMPTS, k=6, w=1.0, max_new_tokens=6)
    assert fast == full_recompute_generate(
        word_lm, general_rm, USERS, PROMPTS, k=6, w=1.0, max_new_tokens=6
    )
    assert fast != args_generate(word_lm, fast_rm, USERS, PROMPTS, k=6, w=0.0, max_new_tokens=6)
    responses = [" the model", " and the paper", " model"]
    a = args_token_logprobs(word_lm, fast_rm, Batch(USERS[:3], PROMPTS[:3], responses), k=6, w=1.0)
    b = args_token_logprobs(
        word_lm, general_rm, Batch(USERS[:3], PROMPTS[:3], responses), k=6, w=1.0
    )
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-4)


# --- validation and registration ----------------------------------------------------------------


def test_clear_errors(tiny_lm: LM, head: HeadReward, tmp_path: Path) -> None:
    its = items(USERS[:1], PROMPTS[:1])
    with pytest.raises(ValueError, match="needs a reward method"):
        ArgsDecoder().generate(context(tiny_lm, None, tmp_path), its)
    with pytest.raises(ValueError, match="declares neither"):
        ArgsDecoder().loglik(context(tiny_lm, ScoreOnly(), tmp_path), Batch(["u"], ["p"], ["r"]))
    with pytest.raises(ValueError, match="k must be >= 1"):
        ArgsDecoder().generate(context(tiny_lm, head, tmp_path, k=0), its)
    with pytest.raises(ValueError, match="w must be a finite number"):
        ArgsDecoder().generate(context(tiny_lm, head, tmp_path, w=float("nan")), its)
    with pytest.raises(ValueError, match="needs a reward method with 'hidden'"):
        per_candidate_cache_generate(tiny_lm, PrefixOnly(head), ["u"], ["p"])


def test_registers_the_decoder() -> None:
    from pytest_prefalign.registry import Registry, add_builtins

    registry = Registry()
    add_builtins(registry, "args")
    assert list(registry.decoders) == ["args"] and registry.decoder("args").obj is ArgsDecoder
    assert ArgsDecoder.needs == frozenset({"score", "prefix"}) and ArgsDecoder.order == 10


# --- the real model ---------------------------------------------------------------------------


@pytest.mark.slow
def test_real_model_fast_path_gives_the_original_strategy_tokens() -> None:
    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    rm = HeadReward(lm.model.config.hidden_size, scale=0.05)
    prompts = [
        "Generate a title for the following abstract of a paper: We propose a method "
        "that learns personal preferences from user feedback.",
        "Write a haiku.",
    ]
    fast = args_generate(lm, rm, ["ann", "bob"], prompts, k=10, w=1.0, max_new_tokens=8)
    assert fast == per_candidate_cache_generate(
        lm, rm, ["ann", "bob"], prompts, k=10, w=1.0, max_new_tokens=8
    )
    # the reward changes what is generated
    assert fast != args_generate(lm, rm, ["ann", "bob"], prompts, k=10, w=0.0, max_new_tokens=8)


@pytest.mark.slow
def test_real_model_w0_on_a_standardised_reward_is_base_greedy_token_for_token(
    tmp_path: Path,
) -> None:
    """The working point's anchor (docs/metrics.md): whatever the reward's scale, ``w = 0``
    writes exactly what base's greedy decoding writes, on the real model."""
    from pytest_prefalign.evaluation.scale import RewardScale, StandardisedReward
    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    standard = StandardisedReward(
        HeadReward(lm.model.config.hidden_size, scale=0.05), RewardScale(-3.0, 7.0, 10)
    )
    prompts = [
        "Generate a title for the following abstract of a paper: We propose a method "
        "that learns personal preferences from user feedback.",
        "Generate a title for the following abstract of a paper: Reward models rank "
        "responses well, yet the text they steer is often no closer to what users write.",
    ]
    asked = items(["ann", "bob"], prompts)
    greedy = [t[0] for t in lm.generate(prompts, max_new_tokens=16)]
    at_zero = ArgsDecoder().generate(
        context(lm, standard, tmp_path, w=0.0, max_new_tokens=16), asked
    )
    assert at_zero == greedy
    guided = ArgsDecoder().generate(
        context(lm, standard, tmp_path, w=4.0, max_new_tokens=16), asked
    )
    assert guided != greedy  # the reward, at strength, changes what is written
