"""Prompts with earlier turns (``runtime/chat.Dialogue``) on the tiny model: their layout with and
without a chat template, their shared prefix in the prefill store, and generation and scoring on
exactly the tokens the layout gives."""

from __future__ import annotations

import pytest
import torch

from pytest_prefalign.runtime import chat
from pytest_prefalign.runtime.chat import Dialogue
from pytest_prefalign.runtime.lm import LM
from pytest_prefalign.runtime.prefill import PrefillStore
from pytest_prefalign.runtime.text import clean_text
from pytest_prefalign.runtime.tiny import build_tokenizer

TURNS = (
    ("Generate a title for: reward models for users", "Personal Rewards"),
    ("Generate a title for: neural machine translation", "Translating Neurally"),
)
TASKS = [
    "Generate a title for: a dataset of dialogue",
    "Generate a title for: attention over tokens in transformer encoders and decoders",
    "Generate a title for: speech",
]


@pytest.fixture
def plain_lm(tiny_lm: LM) -> LM:
    """The tiny model with a tokenizer that has no chat template (a base model's case)."""
    tok = build_tokenizer()
    tok.chat_template = None
    return LM(tiny_lm.model, tok, label="t", name="t", source="tiny", fingerprint="x")


def test_a_dialogue_is_earlier_turns_of_the_chat_template(tiny_lm: LM) -> None:
    rendered = tiny_lm.render(Dialogue(TURNS, TASKS[0]))
    assert rendered == (
        "<|im_start|>system\nYou are a tiny random test model.<|im_end|>\n"
        "<|im_start|>user\nGenerate a title for: reward models for users<|im_end|>\n"
        "<|im_start|>assistant\nPersonal Rewards<|im_end|>\n"
        "<|im_start|>user\nGenerate a title for: neural machine translation<|im_end|>\n"
        "<|im_start|>assistant\nTranslating Neurally<|im_end|>\n"
        "<|im_start|>user\nGenerate a title for: a dataset of dialogue<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # every turn, each example's answer included, ends with the token that ends the model's
    # own answer: the system's, two per example and the task's
    ids = tiny_lm.prompt_ids(Dialogue(TURNS, TASKS[0]))
    assert ids.count(tiny_lm.eos_id) == 1 + 2 * len(TURNS) + 1
    assert tiny_lm.tokenizer.decode(ids) == rendered


def test_without_a_chat_template_the_answer_comes_on_the_next_line(plain_lm: LM) -> None:
    assert plain_lm.render(Dialogue(TURNS, TASKS[0])) == (
        "Generate a title for: reward models for users\nPersonal Rewards\n\n"
        "Generate a title for: neural machine translation\nTranslating Neurally\n\n"
        "Generate a title for: a dataset of dialogue\n"
    )
    assert chat.text(Dialogue(TURNS, TASKS[0])) == plain_lm.render(Dialogue(TURNS, TASKS[0]))


@pytest.mark.parametrize("template", [True, False])
def test_a_dialogue_without_turns_reads_as_its_task_prompt(
    tiny_lm: LM, plain_lm: LM, template: bool
) -> None:
    lm = tiny_lm if template else plain_lm
    assert lm.render(Dialogue((), TASKS[1])) == lm.render(TASKS[1])
    assert lm.prompt_ids(Dialogue((), TASKS[1])) == lm.prompt_ids(TASKS[1])


def test_dialogues_are_keys_by_value_and_tell_themselves_from_strings() -> None:
    a, b = Dialogue(TURNS, TASKS[0]), Dialogue(tuple(list(t) for t in TURNS), TASKS[0])  # type: ignore[arg-type]
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != Dialogue(TURNS[:1], TASKS[0]) and a != Dialogue(TURNS, TASKS[1])
    assert chat.key(TASKS[0]) == TASKS[0]  # a plain prompt's seeds and keys stay as they were
    assert chat.key(Dialogue((), TASKS[0])) != chat.key(TASKS[0])


def test_a_users_dialogues_share_their_turns_prefix_in_the_prefill_store(tiny_lm: LM) -> None:
    shown = [Dialogue(TURNS, t) for t in TASKS]
    seqs = [tiny_lm.prompt_ids(d) for d in shown]
    turns_only = tiny_lm.tokenizer(
        tiny_lm.tokenizer.apply_chat_template(chat.messages(shown[0])[:-1], tokenize=False),
        add_special_tokens=False,
    )["input_ids"]
    common = next(
        (n for n in range(min(map(len, seqs))) if len({s[n] for s in seqs}) > 1),
        min(map(len, seqs)),
    )
    # every token of the turns, and the opening of the task's user turn, is common
    assert common > len(turns_only) and all(s[: len(turns_only)] == turns_only for s in seqs)
    store = PrefillStore(tiny_lm.model, tiny_lm.pad_id, tiny_lm.device)
    state = store.prefill(seqs)
    assert store.stats["tokens_run"] == common + sum(len(s) - common for s in seqs)
    assert store.stats["computed"] == len(seqs) + 1  # the prompts and their common prefix
    plain = store._plain(seqs)
    torch.testing.assert_close(state.last, plain.last, rtol=0, atol=1e-5)


@pytest.mark.parametrize("template", [True, False])
def test_scoring_a_dialogue_teacher_forces_its_own_tokens(
    tiny_lm: LM, plain_lm: LM, template: bool
) -> None:
    lm = tiny_lm if template else plain_lm
    prompt, response = Dialogue(TURNS, TASKS[0]), "Dialogue Data"
    p, r = lm.prompt_ids(prompt), lm.response_ids(response)
    with torch.no_grad():
        logits = lm.model(torch.tensor([p + r])).logits[0, len(p) - 1 : -1]
    expected = torch.log_softmax(logits.double(), -1).gather(-1, torch.tensor(r)[:, None])[:, 0]
    (got,) = lm.response_logprobs([prompt], [response])
    torch.testing.assert_close(torch.from_numpy(got), expected, rtol=0, atol=1e-4)
    # the turns are read: the same response after the task prompt alone scores otherwise
    (alone,) = lm.response_logprobs([TASKS[0]], [response])
    assert abs(float(got.sum()) - float(alone.sum())) > 1e-3


def test_generation_from_dialogues_is_greedy_on_their_tokens(tiny_lm: LM) -> None:
    shown = [Dialogue(TURNS, t) for t in TASKS] + [TASKS[0]]
    batched = tiny_lm.generate(shown, max_new_tokens=6, batch_size=2)
    single = [tiny_lm.generate([p], max_new_tokens=6, batch_size=1)[0] for p in shown]
    assert batched == single
    # by hand: greedy steps over the dialogue's own prompt ids
    ids = tiny_lm.prompt_ids(shown[0])
    new: list[int] = []
    with torch.no_grad():
        for _ in range(6):
            token = int(tiny_lm.model(torch.tensor([ids + new])).logits[0, -1].argmax())
            new.append(token)
            if tiny_lm.finished(new):
                break
    assert batched[0] == [clean_text(tiny_lm.decode_response(new))]


def test_a_prompt_is_rendered_and_tokenised_once(plain_lm: LM) -> None:
    calls: list[str] = []
    tokenize = plain_lm.tokenizer

    def counting(text: str, **kwargs: object) -> object:
        calls.append(text)
        return tokenize(text, **kwargs)

    plain_lm.tokenizer = counting  # type: ignore[assignment]
    prompts = [Dialogue(TURNS, TASKS[0]), TASKS[1], Dialogue(TURNS, TASKS[0]), TASKS[1]]
    first = [plain_lm.prompt_ids(p) for p in prompts]
    assert len(calls) == 2  # each distinct prompt once
    assert first[0] == first[2] and first[1] == first[3]
    first[0].append(-1)  # a caller's list is its own: the kept ids do not change
    assert plain_lm.prompt_ids(prompts[0]) == first[2]
    # the kept ids are the ones a fresh tokenisation gives
    fresh = tokenize(plain_lm.render(TASKS[1]), add_special_tokens=True)["input_ids"]
    assert plain_lm.prompt_ids(TASKS[1]) == fresh
