"""The model's window (runtime/window.py): a prompt longer than the model reads loses its middle,
a response its end, generation stops at the response limit, and passes are planned from the
token counts within ``PASS_TOKENS`` positions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_prefalign.runtime import window
from pytest_prefalign.runtime.prefill import snug
from pytest_prefalign.runtime.tiny import build_tiny_lm
from pytest_prefalign.runtime.window import Window, cut_middle, model_window, rows_for


@pytest.fixture(scope="module")
def lm():
    return build_tiny_lm()


def test_the_window_comes_from_the_models_real_positions():
    config = SimpleNamespace(max_position_embeddings=4096)
    assert model_window(config, SimpleNamespace(model_max_length=10**30)) == Window(4096)
    assert model_window(config, SimpleNamespace(model_max_length=2048)) == Window(2048)
    assert Window(4096).response == 1024 and Window(4096).prompt == 3072
    assert Window(65536).response == 1024  # at most RESPONSE_MOST
    with pytest.raises(ValueError, match="no context length"):
        model_window(SimpleNamespace(), SimpleNamespace())


def test_cut_middle_keeps_both_ends():
    assert cut_middle(list(range(10)), 4) == [0, 1, 8, 9]
    assert cut_middle(list(range(10)), 5) == [0, 1, 2, 8, 9]
    assert cut_middle([1, 2], 4) == [1, 2]


def test_a_huge_prompt_is_cut_to_the_window_from_the_middle(lm):
    whole = lm.prompt_ids("short")
    ids = lm.prompt_ids("word " * 200_000 + "the end")  # a million characters
    assert len(ids) == lm.window.prompt
    assert ids[:5] == whole[:5]  # the template's start and the instruction
    assert ids[-5:] == whole[-5:]  # the turn's end and the assistant header
    assert len(lm.cuts.seen) == 1


def test_a_long_response_is_cut_from_its_end_and_keeps_eos(lm):
    ids = lm.response_ids("long " * 5000)
    assert len(ids) == lm.window.response and ids[-1] == lm.eos_id
    assert ids[:2] == lm.response_ids("long long")[:2]  # its start is kept


def test_long_prompts_are_generated_and_scored(lm):
    prompts = ["word " * 20_000, "a short prompt"]
    texts = lm.generate(prompts, max_new_tokens=5000, batch_size=4)
    assert len(texts) == 2
    scores = lm.response_logprobs(prompts, ["long " * 5000, "yes"], batch_size=4)
    assert len(scores[0]) == lm.window.response and len(scores[1]) == len(lm.response_ids("yes"))


def test_passes_hold_at_most_the_bound_of_positions():
    lengths = [3000] * 40 + [10] * 40
    for a, b in snug(lengths, 64, 0.5):
        assert (b - a) * lengths[a] <= window.PASS_TOKENS or b - a == 1
    assert rows_for(window.PASS_TOKENS * 2, 16) == 1  # a single row always runs
    assert rows_for(100, 16) == 16
    assert window.read_rows(100, window.LOGIT_POSITIONS, 16) == 1
