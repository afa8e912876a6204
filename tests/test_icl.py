"""The in-context decoders' prompts: the examples as earlier exchanges of a conversation, then the
task prompt, and the policy score read on the same layout as the generation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from prefalign_methods.decoders.base import reductions
from prefalign_methods.decoders.icl import ICLDecoder, ICLOptions, RAGDecoder, icl_prompt
from prefalign_suites.polis.suite import Polis
from prefalign_suites.pref_lamp.suite import PrefLamp
from pytest_prefalign.api import Batch, CaseContext, Item, ProfileEntry, SuiteData
from pytest_prefalign.runtime.chat import Dialogue

SUITE = PrefLamp()
PROFILE = [
    ProfileEntry("ann/p0", "We train reward models on what users prefer.", "Personal Rewards"),
    ProfileEntry("ann/p1", "A corpus of dialogues between two speakers.", "Talking Data"),
    ProfileEntry("ann/p2", "Neural machine translation across many languages.", "Translating"),
    ProfileEntry("ann/p3", "Parsing speech transcripts with dependency trees.", "Speech Trees"),
]
INPUTS = ["Attention over tokens in transformer encoders.", "Speech parsing of transcripts."]
ITEMS = [
    Item(f"ann/t{k}", "ann", text, SUITE.instruction(text), None) for k, text in enumerate(INPUTS)
]


def context(lm: Any, k: int = 2, seed: int = 0) -> CaseContext:
    data = SuiteData("pref_lamp", "memory", {"ann": list(PROFILE), "new": []}, list(ITEMS))
    return CaseContext(
        lm=lm, suite=SUITE, data=data, reward=None, options=ICLOptions(k=k), seed=seed
    )


def test_icl_shows_its_examples_as_earlier_exchanges_then_the_task(tiny_lm) -> None:
    ctx = context(tiny_lm)
    decoder = ICLDecoder()
    shown = decoder.prompts(ctx, ["ann", "ann"], [it.prompt for it in ITEMS])
    examples = decoder.examples(ctx, "ann", ITEMS[0].prompt)
    assert len(examples) == 2
    # each example: the suite's task prompt for its input, answered by its output
    expected_turns = tuple((SUITE.instruction(e.input), e.output) for e in examples)
    assert shown == [Dialogue(expected_turns, it.prompt) for it in ITEMS]
    # no label of an example's layout ("Abstract:", "Title:") is left for the model to continue
    rendered = tiny_lm.render(shown[0])
    assert "Abstract:" not in rendered and "Title:" not in rendered
    assert rendered.endswith(f"user\n{ITEMS[0].prompt}<|im_end|>\n<|im_start|>assistant\n")
    # a user without a profile: the task prompt alone, read as the plain prompt
    (alone,) = decoder.prompts(ctx, ["new"], [ITEMS[0].prompt])
    assert alone == Dialogue((), ITEMS[0].prompt)
    assert tiny_lm.prompt_ids(alone) == tiny_lm.prompt_ids(ITEMS[0].prompt)


def test_icl_rag_shows_the_nearest_examples_the_same_way(tiny_lm) -> None:
    ctx = context(tiny_lm, k=1)
    (shown,) = RAGDecoder().prompts(ctx, ["ann"], [ITEMS[1].prompt])
    assert shown == Dialogue(
        ((SUITE.instruction(PROFILE[3].input), "Speech Trees"),), ITEMS[1].prompt
    )


@pytest.mark.parametrize("decoder", [ICLDecoder, RAGDecoder])
def test_the_policy_score_reads_the_dialogue_the_decoder_generates_from(tiny_lm, decoder) -> None:
    ctx = context(tiny_lm)
    users, prompts = ["ann", "ann"], [it.prompt for it in ITEMS]
    responses = ["Attention Everywhere", "Parsing Speech"]
    shown = decoder().prompts(ctx, users, prompts)
    expected = reductions(tiny_lm.response_logprobs(shown, responses))
    got = decoder().logliks(ctx, Batch(users, prompts, responses))
    for how, values in expected.items():
        np.testing.assert_allclose(got[how], values, rtol=0, atol=1e-9)
    # and not the task prompt's alone: the examples are read
    plain = reductions(tiny_lm.response_logprobs(prompts, responses))
    assert np.all(np.abs(got["sum"] - plain["sum"]) > 1e-3)


def test_icl_generates_from_the_dialogue(tiny_lm) -> None:
    ctx = context(tiny_lm)
    out = ICLDecoder().generate(ctx, ITEMS)
    shown = ICLDecoder().prompts(ctx, ["ann", "ann"], [it.prompt for it in ITEMS])
    assert out == [texts[0] for texts in tiny_lm.generate(shown, max_new_tokens=24)]


def test_a_suite_can_say_how_its_profile_entry_is_shown() -> None:
    # Polis's profile entries are votes: shown as the statement answering a request for one
    vote = ProfileEntry("c:1", "Bus  lanes on Main Street.", "disagree")
    prompt = Polis().instruction("transport")
    assert icl_prompt(Polis(), [vote], prompt) == Dialogue(
        (("Write a statement you disagree with.", "Bus lanes on Main Street."),), prompt
    )
    # a suite without one: its task prompt for the entry's input, answered by the output
    entry = PROFILE[0]
    assert icl_prompt(SUITE, [entry], prompt).turns == (
        (SUITE.instruction(entry.input), entry.output),
    )
