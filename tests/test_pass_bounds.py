"""Each model's passes sized from the memory its process may use (``memory.pass_bounds``,
``window.Bounds``): the bytes a position holds worked out from the config by hand, the bounds
following the run's total and its workers, and the passes an LM runs staying within them with
the same numbers as under the fixed bounds."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from pytest_prefalign.runtime import memory, window
from pytest_prefalign.runtime.prefill import snug
from pytest_prefalign.runtime.tiny import build_tiny_lm
from pytest_prefalign.runtime.window import Bounds

GB = 10**9

# SmolLM2-135M's shape (the main job's model): 30 layers of width 576, MLP 1536, 9 query heads
# and 3 key-value heads of 64, 49,152 tokens
SMOLLM2 = LlamaConfig(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49152,
)


@pytest.fixture
def unset(monkeypatch):
    """No run total, worker count or prefill budget set by hand."""
    for name in (memory.TOTAL_ENV, memory.WORKERS_ENV, memory.PREFILL_ENV):
        monkeypatch.delenv(name, raising=False)


def test_a_position_of_smollm2_by_hand():
    shape = memory.Shape.of(SMOLLM2, 4)
    assert shape.kv_width == 3 * 64
    assert shape.kv_bytes == 30 * 2 * 192 * 4 == 46_080  # the prefill store's 46 KB a token
    # activations (6 x 576 + 4 x 1536) x 4 = 38,400; the cache and half a copy: 69,120
    assert shape.position_bytes == 38_400 + 69_120
    assert shape.logit_bytes == 2 * 49152 * 4
    half = memory.Shape.of(SMOLLM2, 2)  # bfloat16 weights: half of each, the logits float32
    assert half.position_bytes == shape.position_bytes // 2
    assert half.logit_bytes == shape.logit_bytes


def test_the_bounds_are_shares_of_the_process_share():
    bounds = memory.pass_bounds(SMOLLM2, 4, "cpu", share=10 * GB)
    assert bounds.positions == (10 * GB // 4) // 107_520 == 23_251
    assert bounds.logits == (10 * GB // 8) // 393_216 == 3_178
    assert bounds.computed == window.CPU_COMPUTED == 8_192  # what runs fastest on the CPU
    # never above the fixed bounds, never below one position
    roomy = memory.pass_bounds(SMOLLM2, 4, "cpu", share=10**15)
    assert roomy == Bounds(window.PASS_TOKENS, window.LOGIT_POSITIONS, window.CPU_COMPUTED)
    assert memory.pass_bounds(SMOLLM2, 4, "cpu", share=1) == Bounds(1, 1, 1)


def test_another_device_keeps_the_fixed_bounds_and_unknown_memory_the_fixed_sizes(
    unset, monkeypatch
):
    assert memory.pass_bounds(SMOLLM2, 4, "cuda", share=10 * GB) == window.DEFAULT_BOUNDS
    fixed = Bounds(window.PASS_TOKENS, window.LOGIT_POSITIONS, window.CPU_COMPUTED)
    # a config that does not name its shape as transformers does: the fixed sizes, no error
    assert memory.pass_bounds(object(), 4, "cpu", share=10 * GB) == fixed
    monkeypatch.setattr(memory, "available_bytes", lambda: None)
    assert memory.pass_bounds(SMOLLM2, 4, "cpu") == fixed


def test_the_positions_run_at_once_cut_prefills_and_reads_by_hand():
    bounds = Bounds(positions=10_000, logits=1_000, computed=300)
    # 100 new positions a row: 3 rows a pass, though 100 would be held
    assert window.run_rows(100, 16, bounds) == 3
    assert window.rows_for(100, 16, bounds) == 16
    assert window.fixed_passes([100] * 7, 16, bounds) == [(0, 3), (3, 6), (6, 7)]
    assert snug([100] * 7, 16, 0.5, bounds) == [(0, 1), (1, 4), (4, 7)]
    # a read of 50-token responses after 400-token prompts: the responses are what it runs
    assert window.read_rows(400, 50, 16, bounds) == 6
    assert window.read_rows(400, 50, 16, Bounds(10_000, 120, 300)) == 2  # the logits bound


def test_the_run_total_and_its_workers_size_each_process_s_passes(unset, monkeypatch):
    monkeypatch.setenv(memory.TOTAL_ENV, "4")
    one = memory.pass_bounds(SMOLLM2, 4, "cpu")
    monkeypatch.setenv(memory.WORKERS_ENV, "2")
    two = memory.pass_bounds(SMOLLM2, 4, "cpu")
    assert one.positions == (4 * GB // 4) // 107_520
    assert two.positions == (2 * GB // 4) // 107_520
    lm = build_tiny_lm(0)  # an LM sizes its own when it loads, and its store's passes with them
    assert lm.bounds == memory.pass_bounds(lm.model.config, 4, "cpu")
    assert lm.prefills.bounds is lm.bounds


def passes_seen(lm):
    """A hook on the model's body recording ``(rows, columns)`` of each pass: its rows by the
    width of its attention mask (the prompt, what the cache holds and the new positions)."""
    seen: list[tuple[int, int]] = []

    def hook(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]
        shape = tuple(mask.shape) if mask is not None and mask.dim() == 2 else tuple(ids.shape)
        seen.append((int(shape[0]), int(shape[1])))

    handle = lm.model.base_model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen, handle


def test_an_lm_s_passes_stay_within_its_bounds_with_the_same_numbers(unset, monkeypatch):
    lm = build_tiny_lm(0)
    lm.prefills.budget = 0  # nothing kept: every pass runs what it reads
    prompts = [f"abstract {n}: " + "we propose a method for translation " * (3 + 4 * n)
               for n in range(8)]  # fmt: skip
    responses = [f"A title {n} for the paper" for n in range(8)]
    wide_scores = lm.response_logprobs(prompts, responses, batch_size=8)
    wide_texts = lm.generate(prompts, max_new_tokens=6, batch_size=8)
    width = max(map(len, map(lm.prompt_ids, prompts))) + 16
    narrow = Bounds(positions=2 * width, logits=12)
    monkeypatch.setattr(lm, "bounds", narrow)
    monkeypatch.setattr(lm.prefills, "bounds", narrow)
    seen, handle = passes_seen(lm)
    try:
        scores = lm.response_logprobs(prompts, responses, batch_size=8)
        texts = lm.generate(prompts, max_new_tokens=6, batch_size=8)
    finally:
        handle.remove()
    assert seen and all(rows * columns <= narrow.positions or rows == 1 for rows, columns in seen)
    assert max(rows for rows, _ in seen) == 2  # the bound, not the batch size of 8, cut them
    assert texts == wide_texts
    for got, want in zip(scores, wide_scores, strict=True):
        torch.testing.assert_close(torch.as_tensor(got), torch.as_tensor(want), atol=1e-5, rtol=0)


def test_prompts_sharing_a_long_prefix_are_run_within_the_positions_held(monkeypatch):
    """Sixteen prompts sharing a long opening: the store runs the opening once, then the
    tails on it, each pass within the positions it holds (opening and tail), not only within
    the tails' count; the rows are those of the fixed bounds."""
    lm = build_tiny_lm(0)
    opening = lm.prompt_ids("examples: " + "we propose a method for translation " * 12)[:-4]
    prompts = [opening + [5 + n, 6 + n, 7, 8 + n % 3] for n in range(16)]
    wide = lm.prefills.prefill(prompts, batch_size=16)
    narrow = Bounds(positions=3 * len(prompts[0]), logits=64, computed=64)
    lm.prefills.clear()
    monkeypatch.setattr(lm.prefills, "bounds", narrow)
    seen, handle = passes_seen(lm)
    try:
        got = lm.prefills.prefill(prompts, batch_size=16)
    finally:
        handle.remove()
    assert len(seen) > 2  # the opening, then the tails in passes of three rows at most
    assert all(rows * columns <= narrow.positions or rows == 1 for rows, columns in seen)
    assert max(rows for rows, _ in seen) == 3
    torch.testing.assert_close(got.last, wide.last, atol=1e-5, rtol=0)


def test_args_decodes_within_the_bounds_with_the_same_tokens(monkeypatch):
    from test_args import PROMPTS, USERS, HeadReward

    from prefalign_methods.decoders.args_decode import args_generate

    lm = build_tiny_lm(0)
    head = HeadReward(lm.model.config.hidden_size)
    kwargs = {"k": 5, "w": 1.0, "max_new_tokens": 6, "batch_size": 8}
    wide = args_generate(lm, head, USERS, PROMPTS, **kwargs)
    width = max(len(lm.prompt_ids(p)) for p in PROMPTS) + 6 + 5
    narrow = Bounds(positions=width, logits=64, computed=64)  # one row a pass
    monkeypatch.setattr(lm, "bounds", narrow)
    monkeypatch.setattr(lm.prefills, "bounds", narrow)
    seen, handle = passes_seen(lm)
    try:
        assert args_generate(lm, head, USERS, PROMPTS, **kwargs) == wide
    finally:
        handle.remove()
    assert seen and max(rows for rows, _ in seen) == 1
