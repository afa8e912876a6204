"""The ``arm`` reward method on the tiny model, trained on synthetic pairs it can learn: ann
prefers "Graph learning for X" to "Speech text for X", bob the reverse. Only the personal
parameters can tell the two users apart, so held-out accuracy needs them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import prefalign_methods.rewards.arm_training as arm_training
from prefalign_methods.rewards.arm import ARM, ARMConfig
from pytest_prefalign.api import Batch, Pair
from pytest_prefalign.runtime.hidden import predicting_hidden
from pytest_prefalign.runtime.lm import LM

TOPICS = [
    "machine translation",
    "question answering",
    "summarization",
    "dialogue systems",
    "parsing",
    "information extraction",
    "word embeddings",
    "sentiment analysis",
    "knowledge graphs",
    "speech recognition",
    "tagging",
    "reasoning",
]
CONFIG = ARMConfig(rank=4, epochs=30, lr=1e-2)  # the tiny model needs larger steps


def pairs_for(topics: list[str], tag: str) -> list[Pair]:
    out = []
    for i, topic in enumerate(topics):
        prompt = f"Generate a title for the following abstract of a paper: We study {topic}."
        liked, other = f"Graph learning for {topic}", f"Speech text for {topic}"
        out.append(Pair(f"{tag}a{i}", "ann", prompt, liked, other))
        out.append(Pair(f"{tag}b{i}", "bob", prompt, other, liked))
    return out


TRAIN, TEST = pairs_for(TOPICS[:8], "train"), pairs_for(TOPICS[8:], "test")


def accuracy(arm: ARM, lm, pairs: list[Pair]) -> float:
    users, prompts = [p.user for p in pairs], [p.prompt for p in pairs]
    chosen = arm.score(lm, Batch(users, prompts, [p.chosen for p in pairs]))
    rejected = arm.score(lm, Batch(users, prompts, [p.rejected for p in pairs]))
    return float(np.mean(chosen > rejected))


@pytest.fixture(scope="module")
def fitted(tiny_lm, tmp_path_factory) -> ARM:
    arm = ARM(CONFIG)
    arm.fit(tiny_lm, TRAIN, tmp_path_factory.mktemp("arm"))
    return arm


def test_training_lowers_the_loss_and_generalises(fitted, tiny_lm):
    assert fitted.trained
    history = fitted.history
    assert len(history) == CONFIG.epochs
    assert history[0]["accuracy"] == 0.5  # the first epoch cannot separate the users yet...
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]
    assert history[-1]["accuracy"] == 1.0
    assert accuracy(fitted, tiny_lm, TEST) >= 0.75  # ...held-out prompts are ranked per user


def test_untrained_arm_is_the_base_model(fitted, tiny_lm):
    # B = 0 (its value at the start): log p_arm = log pi_base, so the reward is
    # beta * log pi_base(y|x), the LM's own teacher-forced log-likelihood
    arm = ARM(ARMConfig(rank=4, beta=2.0))
    arm._adapter, arm._users = fitted._adapter, fitted._users
    arm._head, arm._lm_fingerprint = fitted._head, fitted._lm_fingerprint
    saved = fitted._adapter.B.detach().clone()
    try:
        fitted._adapter.B.data.zero_()
        prompts, responses = [p.prompt for p in TEST], [p.chosen for p in TEST]
        expected = [2.0 * lp.sum() for lp in tiny_lm.response_logprobs(prompts, responses)]
        got = arm.score(tiny_lm, Batch([p.user for p in TEST], prompts, responses))
    finally:
        fitted._adapter.B.data.copy_(saved)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_the_views_of_the_reward_agree(fitted, tiny_lm):
    users, prompts = ["ann", "bob", "carol"], [p.prompt for p in TEST[:3]]
    responses = ["Graph learning for tagging", "a", ""]
    score = fitted.score(tiny_lm, Batch(users, prompts, responses))
    prefix = fitted.prefix_rewards(tiny_lm, Batch(users, prompts, responses))
    rows = fitted.next_token_logprobs(tiny_lm, Batch(users, prompts, responses))
    hidden = predicting_hidden(tiny_lm, prompts, responses)
    for k, response in enumerate(responses):
        target = tiny_lm.response_ids(response)
        assert prefix[k].shape == (len(target),) and rows[k].shape == (len(target), 512)
        assert prefix[k][-1] == pytest.approx(score[k], abs=1e-6)
        np.testing.assert_allclose(np.exp(rows[k]).sum(-1), 1.0, atol=1e-4)
        per_token = CONFIG.beta * rows[k][np.arange(len(target)), target]
        np.testing.assert_allclose(np.cumsum(per_token), prefix[k], atol=1e-4)
        batched = fitted.logprobs_from_hidden([users[k]], hidden[k][None])[0]
        np.testing.assert_allclose(batched.numpy(), rows[k], atol=1e-5)


def test_unknown_users_get_the_shared_adapter(fitted, tiny_lm):
    prompts, responses = [TEST[0].prompt] * 4, [TEST[0].chosen] * 4
    got = fitted.score(tiny_lm, Batch(["carol", "dave", "ann", "bob"], prompts, responses))
    assert np.all(np.isfinite(got))
    assert got[0] == got[1]  # both unknown: the same, user-free reward
    assert got[2] > got[0] > got[3]  # ann likes "Graph learning ...", bob does not


def test_training_is_deterministic_and_cached(tiny_lm, tmp_path, monkeypatch):
    config = ARMConfig(rank=4, epochs=3)
    first, second = ARM(config), ARM(config)
    first.fit(tiny_lm, TRAIN, tmp_path / "a")
    second.fit(tiny_lm, TRAIN, tmp_path / "b")
    assert second.trained and first.history == second.history
    for name, tensor in first._tensors().items():
        assert torch.equal(tensor, second._tensors()[name]), name
    assert sorted(p.suffix for p in (tmp_path / "a").glob("arm-*") if p.suffix != ".lock") == [
        ".json",
        ".safetensors",
    ]

    def no_training(*args, **kwargs):
        raise AssertionError("trained again instead of loading the cache")

    monkeypatch.setattr(arm_training, "train", no_training)  # imported where it trains
    loaded = ARM(config)
    loaded.fit(tiny_lm, TRAIN, tmp_path / "a")
    assert not loaded.trained and loaded.history == first.history
    prompts, responses = [p.prompt for p in TEST], [p.chosen for p in TEST]
    users = [p.user for p in TEST]
    np.testing.assert_array_equal(
        loaded.score(tiny_lm, Batch(users, prompts, responses)),
        first.score(tiny_lm, Batch(users, prompts, responses)),
    )
    # another configuration or other pairs are another cache entry
    with pytest.raises(AssertionError, match="trained again"):
        ARM(ARMConfig(rank=4, epochs=3, beta=0.5)).fit(tiny_lm, TRAIN, tmp_path / "a")
    with pytest.raises(AssertionError, match="trained again"):
        ARM(config).fit(tiny_lm, TRAIN[:-1], tmp_path / "a")


def test_training_without_the_logit_cache_gives_the_same_model(tiny_lm, tmp_path):
    cached, streamed = (
        ARM(ARMConfig(rank=4, epochs=2)),
        ARM(ARMConfig(rank=4, epochs=2, logit_cache_mb=0)),
    )
    cached.fit(tiny_lm, TRAIN, tmp_path / "a")
    streamed.fit(tiny_lm, TRAIN, tmp_path / "b")
    for name, tensor in cached._tensors().items():
        torch.testing.assert_close(tensor, streamed._tensors()[name])


def test_refusals(tiny_lm, tmp_path):
    with pytest.raises(ValueError, match="rank"):
        ARM(ARMConfig(rank=0))
    with pytest.raises(ValueError, match="no training pairs"):
        ARM().fit(tiny_lm, [], tmp_path)
    with pytest.raises(RuntimeError, match="fit"):
        ARM().score(tiny_lm, Batch(["ann"], ["p"], ["r"]))


class TextOnlyARM(ARM):
    """The fitted ARM seen as a third-party one: genarm must take its general path."""

    capabilities = frozenset({"next_token"})


def test_genarm_with_the_arm(fitted, tiny_lm):

    from prefalign_methods.decoders.genarm import GenARMDecoder, GenARMOptions
    from pytest_prefalign.api import CaseContext, SuiteData

    general = TextOnlyARM(CONFIG)
    general.__dict__.update(fitted.__dict__)
    options = GenARMOptions(max_new_tokens=4, batch_size=8, alpha=1.0)
    data = SuiteData("toy", "test", profiles={}, items=[])
    decoder = GenARMDecoder()
    users, prompts = [p.user for p in TEST], [p.prompt for p in TEST]
    scores = {}
    for label, reward in (("fast", fitted), ("general", general)):
        ctx = CaseContext(tiny_lm, None, data, reward, options)  # type: ignore[arg-type]
        scores[label] = (
            decoder.loglik(ctx, Batch(users, prompts, [p.chosen for p in TEST])),
            decoder.loglik(ctx, Batch(users, prompts, [p.rejected for p in TEST])),
        )
    np.testing.assert_allclose(scores["general"], scores["fast"], rtol=0, atol=1e-4)
    chosen, rejected = scores["fast"]
    assert np.mean(chosen > rejected) >= 0.75  # the guided policy prefers each user's choice


def test_hidden_states_are_memoised_within_a_budget(tiny_lm, monkeypatch):
    from pytest_prefalign import cache
    from pytest_prefalign.runtime import hidden as lm_module
    from pytest_prefalign.runtime.hidden import HIDDEN

    prompts, responses = [p.prompt for p in TEST[:2]], ["Graph learning", "Speech"]
    first = predicting_hidden(tiny_lm, prompts, responses)

    def no_forward(*args, **kwargs):
        raise AssertionError("ran the model for texts it had seen")

    monkeypatch.setattr(LM, "response_hidden", no_forward)
    again = predicting_hidden(tiny_lm, prompts[::-1], responses[::-1])
    assert all(torch.equal(a, b) for a, b in zip(first[::-1], again, strict=True))
    memo = cache.PROCESS[HIDDEN]
    assert 0 < memo.used <= memo.budget
    small = cache.Lru(3 * 4 * 10, lm_module.tensor_bytes)  # three (1, 10) float32 tensors
    for n in range(4):
        small.put(("lm", str(n), ""), torch.zeros(1, 10))
    assert small.get(("lm", "0", "")) is None and small.get(("lm", "3", "")) is not None
    assert small.used == 3 * 40
    small.put(("lm", "big", ""), torch.zeros(1, 100))  # larger than the budget: not kept
    assert len(small) == 3 and ("lm", "big", "") not in small


def test_the_kl_term_is_kl_from_the_base_and_holds_the_arm_near_it(tiny_lm, tmp_path):
    arm = ARM(ARMConfig(rank=4, epochs=6, lr=1e-2, kl=0.0))
    arm.fit(tiny_lm, TRAIN, tmp_path / "free")
    anchored = ARM(ARMConfig(rank=4, epochs=6, lr=1e-2, kl=10.0))
    anchored.fit(tiny_lm, TRAIN, tmp_path / "anchored")
    assert anchored.history[-1]["kl"] < 0.5 * arm.history[-1]["kl"]
    # margins() reports sum_t KL(p_arm || p_base) per response: check it against torch's
    head = arm_training.output_head(tiny_lm)
    data = arm_training.token_data(tiny_lm, TRAIN[:2], arm._users, head, arm.config)
    with torch.no_grad():
        _, kl = arm_training.margins(arm._adapter, data, head, torch.arange(2), 1.0)
    groups = data.chosen_rows[:2] + data.rejected_rows[:2]
    owners = [TRAIN[0].user, TRAIN[1].user] * 2
    per_row = [u for u, g in zip(owners, groups, strict=True) for _ in range(len(g))]
    rows = torch.cat(groups)
    log_arm = arm.logprobs_from_hidden(per_row, data.hidden[rows])
    log_base = torch.log_softmax(data.hidden[rows] @ head[0].T, dim=-1)
    direct = (log_arm.exp() * (log_arm - log_base)).sum() / len(groups)
    assert float(kl) == pytest.approx(float(direct), rel=1e-3, abs=1e-5)
    assert float(kl) > 1e-3  # the trained ARM has moved away from the base


def test_default_method_is_genarm_and_args_can_use_the_prefix_rewards(fitted, tiny_lm):

    from prefalign_methods.decoders import args
    from pytest_prefalign.api import CaseContext, SuiteData
    from pytest_prefalign.registry import MethodName, Registry, add_builtins

    registry = Registry()
    add_builtins(registry, "arm", "args", "bon", "genarm")
    assert MethodName("genarm", "arm") in registry.default_methods()
    registry.check_method(MethodName("args", "arm"))
    options = args.ArgsOptions(max_new_tokens=4, batch_size=8)
    ctx = CaseContext(
        tiny_lm,
        None,
        SuiteData("toy", "test", profiles={}, items=[]),  # type: ignore[arg-type]
        fitted,
        options,
    )
    got = args.ArgsDecoder().loglik(
        ctx,
        Batch(
            [p.user for p in TEST[:2]], [p.prompt for p in TEST[:2]], [p.chosen for p in TEST[:2]]
        ),
    )
    assert got.shape == (2,) and np.all(np.isfinite(got)) and np.all(got <= 0)


@pytest.mark.parametrize("cached_logits", [True, False])
def test_margins_and_their_gradients_are_the_plain_autograd_formula(cached_logits):
    # margins() makes the (rows, V) logits a few rows at a time and writes its gradient out by
    # hand; the plain expression, differentiated by autograd in float64, must give the same
    # margins, KL and gradients (40 token rows: blocks of 16, 16 and 8)
    gen = torch.Generator().manual_seed(3)
    n_rows, hidden_size, vocab = 40, 6, 50
    weight = torch.randn((vocab, hidden_size), generator=gen, dtype=torch.float64)
    bias = torch.randn(vocab, generator=gen, dtype=torch.float64)
    hidden = torch.randn((n_rows, hidden_size), generator=gen, dtype=torch.float64)
    base = hidden @ weight.T + bias
    lengths = [3, 7, 5, 6, 4, 8, 2, 5]  # chosen, rejected of 4 pairs
    bounds = np.cumsum([0, *lengths])
    rows = [torch.arange(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    data = arm_training.TokenData(
        hidden,
        torch.randint(0, vocab, (n_rows,), generator=gen),
        rows[0::2],
        rows[1::2],
        torch.tensor([0, 1, 0, 1]),
        base if cached_logits else None,
        torch.logsumexp(base, dim=-1),
    )
    adapter = arm_training.Adapter(hidden_size, 3, 2, gen).double()
    with torch.no_grad():  # B and the users' parameters start at zero: move them
        for p in (adapter.B, adapter.user_scale, adapter.user_shift):
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.5)
    batch = torch.tensor([2, 0, 3])
    weights = torch.tensor([0.3, -1.1, 0.7], dtype=torch.float64)

    def plain() -> tuple[torch.Tensor, torch.Tensor]:
        index = batch.tolist()
        groups = [data.chosen_rows[p] for p in index] + [data.rejected_rows[p] for p in index]
        at = torch.cat(groups)
        owner = torch.repeat_interleave(torch.arange(6), torch.tensor([len(g) for g in groups]))
        codes = adapter.codes(data.user[batch].repeat(2)[owner], hidden[at][:, None])[:, 0]
        shift = codes @ (weight @ adapter.B).T
        logits = base[at] + shift
        lse = torch.logsumexp(logits, dim=-1)
        token = logits.gather(-1, data.target[at][:, None])[:, 0] - lse
        sums = torch.zeros(6, dtype=torch.float64).index_add(0, owner, token)
        kl = (torch.softmax(logits, dim=-1) * shift).sum(-1) - lse + data.base_lse[at]
        return 2.0 * (sums[:3] - sums[3:]), kl.sum() / 6

    got, want = [], []
    for run, out in (
        (lambda: arm_training.margins(adapter, data, (weight, bias), batch, 2.0), got),
        (plain, want),
    ):
        adapter.zero_grad()
        margin, kl = run()
        ((margin * weights).sum() + 0.4 * kl).backward()
        out += [margin.detach(), kl.detach()]
        out += [p.grad.clone() for p in adapter.parameters()]
    assert float(want[1]) > 1e-3 and float(want[0].abs().min()) > 1e-3
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
