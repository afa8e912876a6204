"""Models with sliding-window layers (Gemma 3): kept prefills and ARGS's candidate queries apply
while every row stays within the narrowest window, where a sliding layer sees the whole
sequence; past it, a plain pass on the model's own sliding cache. Either way the numbers are
those of a pass over the whole sequence without any cache (the reference)."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from reference.args_reference import full_recompute_generate  # noqa: E402
from test_args import PROMPTS, USERS, HeadReward, hand_loglik  # noqa: E402

from prefalign_methods.decoders.args_decode import args_generate  # noqa: E402
from prefalign_methods.decoders.args_score import args_token_logprobs  # noqa: E402
from pytest_prefalign.api import Batch  # noqa: E402
from pytest_prefalign.runtime.lm import LM  # noqa: E402
from pytest_prefalign.runtime.prefill import PrefillStore, attention_reach  # noqa: E402
from pytest_prefalign.runtime.roomy import RoomyLayer  # noqa: E402
from pytest_prefalign.runtime.tiny import PAD, SPECIALS, build_tokenizer  # noqa: E402

WINDOW = 96  # the tiny Gemma's sliding window, in tokens


def tiny_gemma(window: int = WINDOW, seed: int = 0) -> LM:
    """A random two-layer Gemma 3 (one sliding-window layer, one full) with the tiny tokenizer."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tokenizer = build_tokenizer()
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=window,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=4096,
        initializer_range=0.2,  # larger than usual so that greedy choices are not near-ties
        pad_token_id=SPECIALS.index(PAD),
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Gemma3ForCausalLM(config).float().eval()
    return LM(model, tokenizer, label="tiny-gemma", name="tiny-gemma", source="tiny",
              fingerprint=f"tiny-gemma-{window}-{seed}", device="cpu")  # fmt: skip


@pytest.fixture(scope="module")
def gemma() -> LM:
    return tiny_gemma()


def plain(lm: LM) -> PrefillStore:
    """A store that keeps nothing and never uses kept rows: every prefill a plain pass."""
    store = PrefillStore(lm.model, lm.pad_id, lm.device)
    store.enabled = False
    return store


def test_the_reach_of_a_model_is_its_narrowest_window(gemma: LM, tiny_lm: LM) -> None:
    assert attention_reach(gemma.model.config) == WINDOW
    assert attention_reach(tiny_lm.model.config) == math.inf
    other = type("Config", (), {"layer_types": ["sliding_attention", "linear_attention"],
                                "sliding_window": 8})()  # fmt: skip
    assert attention_reach(other) == 0  # a kind of layer it does not know: nothing kept
    assert gemma.attends_whole(WINDOW) and not gemma.attends_whole(WINDOW + 1)
    assert tiny_lm.attends_whole(10**6)


def test_kept_prefills_within_the_window_give_the_plain_numbers(gemma: LM) -> None:
    g = torch.Generator().manual_seed(0)
    common = torch.randint(5, 300, (20,), generator=g).tolist()
    prompts = [common + torch.randint(5, 300, (n,), generator=g).tolist() for n in (3, 9, 14)]
    store = PrefillStore(gemma.model, gemma.pad_id, gemma.device, min_shared=8)
    kept = store.prefill(prompts, then=10)
    assert store.rows and store.stats["tokens_run"] == 20 + 3 + 9 + 14  # the prefix once
    reference = plain(gemma).prefill(prompts)
    torch.testing.assert_close(kept.last, reference.last, rtol=0, atol=1e-5)
    # past the window with what will follow: a plain pass, nothing kept or run from the store
    store = PrefillStore(gemma.model, gemma.pad_id, gemma.device)
    past = store.prefill(prompts, then=WINDOW)
    assert not store.rows and store.stats["tokens_run"] == 0
    torch.testing.assert_close(past.last, reference.last, rtol=0, atol=1e-6)


def test_scoring_equals_the_plain_pass_within_and_past_the_window(gemma: LM) -> None:
    # prompts of 53 to 65 tokens: responses of a few tokens stay within the window of 96, the
    # long one crosses it (its batch goes plain)
    prompts = ["graph " * n for n in (6, 9, 12)]
    responses = ["neural nets", "speech models for the web " * 8, "graph"]
    kept = gemma.response_logprobs(prompts, responses)
    hidden = gemma.response_hidden(prompts, responses)
    assert gemma.prefills.rows  # the prompts whose responses stay within the window were kept
    saved = gemma.prefills
    gemma.prefills = plain(gemma)
    try:
        want = gemma.response_logprobs(prompts, responses)
        want_hidden = gemma.response_hidden(prompts, responses)
    finally:
        gemma.prefills = saved
    for a, b, h, wh in zip(kept, want, hidden, want_hidden, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
        torch.testing.assert_close(h, wh, rtol=0, atol=1e-5)
    assert any(len(gemma.prompt_ids(p)) + len(gemma.response_ids(r)) > WINDOW
               for p, r in zip(prompts, responses, strict=True))  # fmt: skip


def test_a_layer_held_to_a_window_refuses_to_reach_past_it() -> None:
    layer = RoomyLayer(limit=4)
    states = torch.zeros(1, 1, 3, 2)
    layer.update(states, states)
    with pytest.raises(RuntimeError, match="beyond its limit of 4"):
        layer.update(states, states)


def test_args_gives_the_references_tokens_on_a_sliding_window_model() -> None:
    # every row within the window: kept prefills and candidate queries, against the reference
    # that runs whole sequences through the model's own attention, no cache
    lm = tiny_gemma(4096)
    head = HeadReward(lm.model.config.hidden_size)
    kwargs = {"k": 6, "w": 1.0, "max_new_tokens": 6}
    fast = args_generate(lm, head, USERS, PROMPTS, batch_size=4, **kwargs)
    assert fast == full_recompute_generate(lm, head, USERS, PROMPTS, **kwargs)
    assert lm.attends_whole(200) and lm.prefills.rows


def test_past_the_window_args_takes_the_plain_path() -> None:
    # the prompts alone (44 to 88 tokens) reach past a window of 24: no kept prefill, no
    # candidate query, the same tokens as with the store switched off (the path before)
    lm = tiny_gemma(24)
    head = HeadReward(lm.model.config.hidden_size)
    kwargs = {"k": 6, "w": 1.0, "max_new_tokens": 6}
    got = args_generate(lm, head, USERS, PROMPTS, batch_size=4, **kwargs)
    assert not lm.prefills.rows and not lm.attends_whole(44)
    lm.prefills = plain(lm)
    assert got == args_generate(lm, head, USERS, PROMPTS, batch_size=4, **kwargs)


def test_args_policy_scores_match_a_hand_computation_on_a_sliding_window_model() -> None:
    lm = tiny_gemma(4096)  # every row within the window: kept prefills, candidate queries
    head = HeadReward(lm.model.config.hidden_size)
    users, prompts, responses = USERS[:3], PROMPTS[:3], ["the model", "an", "a"]
    got = args_token_logprobs(lm, head, Batch(users, prompts, responses), k=3, w=1.5)
    want = [
        hand_loglik(lm, head, u, p, r, k=3, w=1.5)
        for u, p, r in zip(users, prompts, responses, strict=True)
    ]
    np.testing.assert_allclose([float(np.sum(g)) for g in got], want, atol=1e-4)


def test_args_policy_scores_take_the_fast_path_in_a_window_narrower_than_a_query_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # prompts of 44 and 53 tokens, responses of at most 4 and k = 3: a window of 80 holds the
    # prompt, the response and a few steps' candidates at a time (not QUERY_BLOCK's 512)
    from prefalign_methods.decoders import args_score

    lm = tiny_gemma(80)
    head = HeadReward(lm.model.config.hidden_size)
    users, prompts, responses = USERS[1:3], PROMPTS[1:3], ["the model", "an"]
    assert args_score.steps_per_pass(lm, 53 + 4, 3) == 7
    monkeypatch.setattr(args_score, "candidate_rewards_text", None)  # the slow path would fail
    got = args_token_logprobs(lm, head, Batch(users, prompts, responses), k=3, w=1.5)
    want = [
        hand_loglik(lm, head, u, p, r, k=3, w=1.5)
        for u, p, r in zip(users, prompts, responses, strict=True)
    ]
    np.testing.assert_allclose([float(np.sum(g)) for g in got], want, atol=1e-4)
