"""Fluency (``evaluation/fluency.py``) against a hand computation from the tiny model's logits:
one plain forward pass over the prompt's and the output's tokens, no cache, no prefill store."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_prefalign.evaluation.fluency import fluency

PROMPTS = [
    "Generate a title for the following abstract of a paper: We propose a new method.",
    "Generate a title for the following abstract of a paper: We introduce a dataset.",
    "Generate a title for the following abstract of a paper: We propose a new method.",
]
OUTPUTS = ["Neural machine translation", "A dataset of annotated sentences for parsing", ""]


def by_hand(lm, prompt: str, output: str) -> tuple[float, float]:
    """The mean NLL of the output's own tokens, and of its stop token alone, from one forward
    pass over ``prompt_ids + output tokens + eos``: position ``t``'s logits predict ``t + 1``."""
    prompt_ids = lm.prompt_ids(prompt)
    own = lm.tokenizer(output, add_special_tokens=False)["input_ids"]
    ids = prompt_ids + own + [lm.eos_id]
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    start = len(prompt_ids)
    per_token = [float(logp[start - 1 + t, ids[start + t]]) for t in range(len(own) + 1)]
    text, stop = per_token[:-1], per_token[-1]
    return (-float(np.mean(text)) if text else -stop), -stop


def test_fluency_is_the_mean_nll_of_the_outputs_own_tokens(tiny_lm) -> None:
    got = fluency(tiny_lm, PROMPTS, OUTPUTS, batch_size=2)
    expected = [by_hand(tiny_lm, p, o)[0] for p, o in zip(PROMPTS, OUTPUTS, strict=True)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert got.dtype == np.float64 and (got > 0).all()


def test_the_stop_token_is_left_out_and_an_empty_output_costs_it(tiny_lm) -> None:
    got = fluency(tiny_lm, PROMPTS, OUTPUTS, batch_size=3)
    with_stop = [float(-lp.mean()) for lp in tiny_lm.response_logprobs(PROMPTS[:2], OUTPUTS[:2])]
    # the figure is not the mean with the stop token (the random model gives it its own cost)
    assert not np.allclose(got[:2], with_stop, rtol=0, atol=1e-4)
    # the empty output: the cost of stopping at once
    assert got[2] == pytest.approx(by_hand(tiny_lm, PROMPTS[2], "")[1], abs=1e-5)


def test_the_batch_size_does_not_change_the_figures(tiny_lm) -> None:
    one = fluency(tiny_lm, PROMPTS, OUTPUTS, batch_size=1)
    np.testing.assert_allclose(fluency(tiny_lm, PROMPTS, OUTPUTS, batch_size=3), one, atol=1e-5)


def test_fluency_refuses_mismatched_lengths(tiny_lm) -> None:
    with pytest.raises(ValueError, match="2 prompts but 1 outputs"):
        fluency(tiny_lm, PROMPTS[:2], OUTPUTS[:1], batch_size=2)
    assert fluency(tiny_lm, [], [], batch_size=2).shape == (0,)


@pytest.mark.parametrize(
    "module",
    [
        "pytest_prefalign.evaluation.generation",
        "pytest_prefalign.evaluation.fluency",
        "pytest_prefalign.analysis.answers",
    ],
)
def test_the_results_key_follows_the_code_of_the_item_records(module, monkeypatch) -> None:
    """The results cache is keyed by the evaluation's code version (``case.results_key``):
    an edit of the module that writes an item's fluency and not-an-answer fields, or of the
    rules and scorer it calls, must make a warm run compute its records again."""
    from pytest_prefalign import versions
    from pytest_prefalign.evaluation import case

    before = versions.code_version(case)
    real = versions._tree

    def edited(path, name):
        digest, imported, third_party = real(path, name)
        return (digest + "-edited" if name == module else digest), imported, third_party

    monkeypatch.setattr(versions, "_tree", edited)
    assert versions.code_version(case) != before


def test_the_results_key_ignores_code_the_evaluation_does_not_import(monkeypatch) -> None:
    from pytest_prefalign import versions
    from pytest_prefalign.evaluation import case

    before = versions.code_version(case)
    real = versions._tree

    def edited(path, name):
        digest, imported, third_party = real(path, name)
        return (digest + "-edited" if name.endswith(".report") else digest), imported, third_party

    monkeypatch.setattr(versions, "_tree", edited)
    assert versions.code_version(case) == before  # the HTML report: not in the key
