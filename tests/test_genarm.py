"""The ``genarm`` decoder on the tiny model, with a controlled ARM whose log-probabilities the
tests can compute by hand: ``log_softmax(h M + bonus_u)`` on the base model's hidden states."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch

from prefalign_methods.decoders import genarm_guided
from prefalign_methods.decoders.base import BaseDecoder
from prefalign_methods.decoders.genarm import GenARMDecoder, GenARMOptions
from pytest_prefalign.api import Batch, CaseContext, Item, RewardMethod, SuiteData

OPTIONS = {"max_new_tokens": 6, "batch_size": 3}
PROMPTS = [
    "Generate a title for: neural machine translation with attention",
    "Generate a title for: a dataset of dialogue",
    "Generate a title for: reward models",
    "Generate a title for: parsing and tagging",
    "Generate a title for: speech",
]
ITEMS = [Item(f"i{k}", user, p, p, None) for k, p in enumerate(PROMPTS) for user in ("ann", "bob")]


class TableARM(RewardMethod):
    """An ARM on the base hidden states: ``log_softmax(h M + bonus_u)``, ``M`` fixed random.
    ``next_token_logprobs`` runs its own unbatched forward pass, one sequence at a time."""

    name = "table"
    capabilities = frozenset({"next_token", "hidden_logprobs"})

    def __init__(self, lm, bonus: dict[str, dict[int, float]] | None = None) -> None:
        gen = torch.Generator().manual_seed(1)
        self.M = torch.randn(lm.model.config.hidden_size, lm.model.config.vocab_size, generator=gen)
        self.bonus = bonus or {}

    def fingerprint(self) -> str:
        return "table"

    def fit(self, lm, pairs, cache_dir) -> None:
        pass

    def logprobs_from_hidden(self, users: Sequence[str], hidden: torch.Tensor) -> torch.Tensor:
        return self.table(users, hidden)

    def table(self, users: Sequence[str], hidden: torch.Tensor) -> torch.Tensor:
        bias = torch.zeros(len(users), self.M.shape[1])
        for k, u in enumerate(users):
            for tok, value in self.bonus.get(u, {}).items():
                bias[k, tok] = value
        bias = bias.reshape(len(users), *([1] * (hidden.dim() - 2)), -1)
        return torch.log_softmax(hidden.float() @ self.M + bias, dim=-1)

    def next_token_logprobs(self, lm, batch) -> list[np.ndarray]:
        out = []
        for u, p, r in batch:
            h, _, n_prompt = plain_forward(lm, p, r)
            out.append(self.table([u], h[None, n_prompt - 1 : -1])[0].numpy())
        return out

    def score(self, lm, batch) -> np.ndarray:
        rows = self.next_token_logprobs(lm, batch)
        return np.array(
            [
                float(r[np.arange(len(r)), lm.response_ids(y)].sum())
                for r, y in zip(rows, batch.responses, strict=True)
            ]
        )


class TextOnlyARM(TableARM):
    """The same ARM seen as a third-party one: no access to the base hidden states."""

    capabilities = frozenset({"next_token"})

    def logprobs_from_hidden(self, users, hidden):
        raise AssertionError("the general path must not read the base hidden states")


@torch.inference_mode()
def plain_forward(lm, prompt: str, response: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Hidden states ``(L, H)`` and logits ``(L, V)`` of prompt + response, and the prompt's
    length: one unpadded sequence through the model, no cache."""
    prompt_ids = lm.prompt_ids(prompt)
    ids = torch.tensor([prompt_ids + lm.response_ids(response)])
    hidden = lm.model.base_model(input_ids=ids).last_hidden_state
    return hidden[0], lm.model(input_ids=ids).logits[0], len(prompt_ids)


def context(lm, reward, *, seed: int = 0, reduce: str = "sum", **options) -> CaseContext:
    data = SuiteData("toy", "test", profiles={}, items=list(ITEMS))
    return CaseContext(
        lm=lm,
        suite=None,
        data=data,
        reward=reward,  # type: ignore[arg-type]
        options=GenARMOptions(**{**OPTIONS, **options}),
        seed=seed,
        reduce=reduce,
    )


def test_alpha_zero_generates_what_base_generates(tiny_lm):
    ctx = context(tiny_lm, TableARM(tiny_lm, {"ann": {278: 50.0}}), alpha=0.0)
    expected = BaseDecoder().generate(ctx, ITEMS)
    assert any(expected)
    assert GenARMDecoder().generate(ctx, ITEMS) == expected


def test_the_arm_term_steers_generation_per_user(tiny_lm):
    # ann's ARM puts all its mass on " and": guided greedy writes nothing else
    ctx = context(tiny_lm, TableARM(tiny_lm, {"ann": {278: 60.0}}), alpha=1.0)
    out = GenARMDecoder().generate(ctx, ITEMS)
    ann = [o for o, it in zip(out, ITEMS, strict=True) if it.user == "ann"]
    bob = [o for o, it in zip(out, ITEMS, strict=True) if it.user == "bob"]
    assert ann == [" ".join(["and"] * OPTIONS["max_new_tokens"])] * len(PROMPTS)
    assert all(b != a for a, b in zip(ann, bob, strict=True))


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_alpha_zero_loglik_is_the_base_loglik(tiny_lm, reduce):
    ctx = context(tiny_lm, TableARM(tiny_lm, {"ann": {278: 5.0}}), alpha=0.0, reduce=reduce)
    users, prompts = ["ann", "bob", "ann"], PROMPTS[:3]
    responses = ["Attention for translation", "A dialogue dataset", ""]
    got = GenARMDecoder().loglik(ctx, Batch(users, prompts, responses))
    np.testing.assert_allclose(
        got, BaseDecoder().loglik(ctx, Batch(users, prompts, responses)), rtol=0, atol=1e-4
    )


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_loglik_matches_a_hand_computation(tiny_lm, reduce):
    arm = TableARM(tiny_lm, {"ann": {278: 3.0, 302: -2.0}})
    alpha, prompt, response = 0.7, PROMPTS[1], " and for"
    target = tiny_lm.response_ids(response)
    assert len(target) == 3  # " and", " for", eos
    hidden, logits, n_prompt = plain_forward(tiny_lm, prompt, response)
    total = []
    for t, y in enumerate(target):
        pos = n_prompt - 1 + t  # the position whose output predicts y_t
        arm_lp = torch.log_softmax(
            hidden[pos] @ arm.M + torch.eye(512)[278] * 3.0 - torch.eye(512)[302] * 2.0, dim=-1
        )
        guided = logits[pos] + alpha * arm_lp
        total.append(float(torch.log_softmax(guided, dim=-1)[y]))
    expected = np.sum(total) if reduce == "sum" else np.mean(total)
    ctx = context(tiny_lm, arm, alpha=alpha, reduce=reduce)
    got = GenARMDecoder().loglik(ctx, Batch(["ann"], [prompt], [response]))
    np.testing.assert_allclose(got, [expected], rtol=0, atol=1e-4)


def test_general_path_matches_fast_path(tiny_lm):
    bonus = {"ann": {278: 2.0, 302: 1.5}, "bob": {307: 2.5}}
    fast = context(tiny_lm, TableARM(tiny_lm, bonus), alpha=1.5)
    general = context(tiny_lm, TextOnlyARM(tiny_lm, bonus), alpha=1.5)
    decoder = GenARMDecoder()
    users, prompts = ["ann", "bob", "ann"], PROMPTS[2:5]
    responses = ["Reward models for parsing", "speech and the model", "x"]
    np.testing.assert_allclose(
        decoder.loglik(general, Batch(users, prompts, responses)),
        decoder.loglik(fast, Batch(users, prompts, responses)),
        rtol=0,
        atol=1e-4,
    )
    # generation: the general path reads the text so far, so the test keeps to tokens whose
    # text re-tokenizes to them (whole words); which of them wins varies by step and user
    words = {tok: 30.0 for tok in (278, 302, 307, 324, 372)}
    bonus = {"ann": words, "bob": {**words, 307: 31.0}}
    fast = context(tiny_lm, TableARM(tiny_lm, bonus), alpha=1.0)
    general = context(tiny_lm, TextOnlyARM(tiny_lm, bonus), alpha=1.0)
    out = decoder.generate(fast, ITEMS)
    assert len(set(out)) > 3 and all(len(o.split()) > 1 for o in out)
    assert decoder.generate(general, ITEMS) == out


def test_sampling_is_seeded_and_uses_the_guided_distribution(tiny_lm):
    reward = TableARM(tiny_lm, {"ann": {278: 60.0}})
    decoder = GenARMDecoder()
    first = decoder.generate(context(tiny_lm, reward, sample=True), ITEMS)
    assert decoder.generate(context(tiny_lm, reward, sample=True), ITEMS) == first
    other = decoder.generate(context(tiny_lm, reward, sample=True, seed=1), ITEMS)
    bob = [k for k, it in enumerate(ITEMS) if it.user == "bob"]
    assert [first[k] for k in bob] != [other[k] for k in bob]
    # ann's guided distribution is (almost) all on " and", whatever the draw
    ann = {first[k] for k, it in enumerate(ITEMS) if it.user == "ann"}
    assert ann == {" ".join(["and"] * OPTIONS["max_new_tokens"])}


def test_sampling_temperature_applies_to_the_guided_logits(tiny_lm, monkeypatch):
    # softmax(guided / T): the paper's T / (1 + alpha) on the mixture normalised by 1 + alpha;
    # T / (1 + alpha) on guided itself sampled from softmax((1 + alpha) * guided / T)
    seen = []
    real = genarm_guided.guided_generate
    monkeypatch.setattr(genarm_guided, "guided_generate", lambda *a: seen.append(a[6]) or real(*a))
    reward = TableARM(tiny_lm, {"ann": {278: 5.0}})
    GenARMDecoder().generate(
        context(tiny_lm, reward, sample=True, temperature=1.5, alpha=2.0), ITEMS[:1]
    )
    GenARMDecoder().generate(context(tiny_lm, reward, alpha=2.0), ITEMS[:1])
    assert seen == [pytest.approx(1.5), None]  # T; greedy by default


def test_refuses_what_it_cannot_use(tiny_lm):
    class Plain(RewardMethod):
        name = "plain"
        capabilities = frozenset({"prefix"})

    with pytest.raises(ValueError, match="next_token"):
        GenARMDecoder().loglik(context(tiny_lm, Plain()), Batch(["ann"], ["p"], ["r"]))
    with pytest.raises(ValueError, match="alpha must be"):
        GenARMOptions(alpha=-1)
    with pytest.raises(ValueError, match="temperature must be"):
        GenARMOptions(temperature=0.0)


@pytest.mark.slow
def test_real_model_with_a_trained_arm(tmp_path):
    """SmolLM2-135M with the ``arm`` reward method: GenARM at alpha = 0 writes what greedy
    decoding writes, and at alpha = 1 its two ARM paths agree on a pair's log-likelihoods."""
    from prefalign_methods.rewards.arm import ARM, ARMConfig
    from pytest_prefalign.api import Pair
    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    task = "Generate a title for the following abstract of a paper: "
    abstracts = [
        "We present a neural model that translates speech into text in many languages.",
        "We release a corpus of annotated dialogues and baselines for dialogue act tagging.",
    ]
    pairs = [
        Pair(f"p{k}{u}", u, task + a, chosen, rejected)
        for k, a in enumerate(abstracts)
        for u, chosen, rejected in (
            ("ann", "Speech Translation at Scale", "A Study"),
            ("bob", "A Study", "Speech Translation at Scale"),
        )
    ]
    arm = ARM(ARMConfig(epochs=3))
    arm.fit(lm, pairs, tmp_path)
    items = [Item(p.pair_id, p.user, p.prompt, p.prompt, None) for p in pairs[:2]]
    ctx = context(lm, arm, alpha=0.0, max_new_tokens=8)
    assert GenARMDecoder().generate(ctx, items) == BaseDecoder().generate(ctx, items)
    general = TextOnly(arm)
    users, prompts, responses = ["ann", "bob"], [pairs[0].prompt] * 2, ["Speech", "A Study"]
    np.testing.assert_allclose(
        GenARMDecoder().loglik(context(lm, general, alpha=1.0), Batch(users, prompts, responses)),
        GenARMDecoder().loglik(context(lm, arm, alpha=1.0), Batch(users, prompts, responses)),
        rtol=0,
        atol=1e-3,
    )


class TextOnly(RewardMethod):
    """Any ARM seen through ``next_token_logprobs`` only."""

    name = "text_only"
    capabilities = frozenset({"next_token"})

    def __init__(self, inner) -> None:
        self.inner = inner

    def next_token_logprobs(self, lm, batch):
        return self.inner.next_token_logprobs(lm, batch)
