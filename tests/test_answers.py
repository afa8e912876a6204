"""The not-an-answer rules (``analysis/answers.py``): each rule's known answers, worked out by
hand, the bad outputs of the main job (issue 37) caught by the right rule, and the real ACL
Anthology titles passing every rule against their own abstracts."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

from pytest_prefalign.analysis import answers
from pytest_prefalign.analysis.answers import RULES, not_an_answer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

ABSTRACT = (
    "We present a neural approach to headline generation for scientific papers. Our model "
    "reads the abstract with a transformer encoder, attends to salient terms with a copy "
    "mechanism, and is trained on forty thousand paper titles from the ACL Anthology. In "
    "experiments on three benchmarks, the generated headlines are preferred by annotators over "
    "those of strong summarisation baselines, and ROUGE improves by four points."
)
PROMPT = f"Generate a title for the following abstract of a paper: {ABSTRACT}"


def judge(output: str, input: str = ABSTRACT, prompt: str = PROMPT) -> str | None:
    return not_an_answer(output, input=input, prompt=prompt)


def test_the_rules_and_their_order_are_the_api() -> None:
    assert RULES == ("empty", "label", "copy", "language", "loop", "off_task", "unfinished")
    assert set(answers.DESCRIPTIONS) == set(RULES)


@pytest.mark.parametrize(
    "title",
    [
        "Copy-Augmented Transformers for Headline Generation of Scientific Papers",
        "Title: Neural Headline Generation for ACL Papers",  # a leading label is taken off
        "BERT-based Headlines: Attending to Salient Terms",
        "Headline Generation with Copy Mechanisms",
    ],
)
def test_titles_of_the_abstract_are_answers(title: str) -> None:
    assert judge(title) is None


@pytest.mark.parametrize("output", ["", "   \n", " ... ", "?!", "“ ”"])
def test_empty(output: str) -> None:
    assert judge(output) == "empty"


@pytest.mark.parametrize("output", ["Abstract:", "Title:", " title ", "Abstract: Title:", "TL;DR:"])
def test_label(output: str) -> None:
    assert judge(output) == "label"


def test_a_label_of_the_prompt_is_a_label() -> None:
    prompt = "Statement: the park\nVote: agree\nStatement: the bus lanes\nStance:"
    assert judge("Stance:", input="the bus lanes", prompt=prompt) == "label"
    # not a label of PROMPT: too short for ``language``, and it shares nothing with the abstract
    assert judge("Stance:") == "off_task"


def test_copy_of_the_opening() -> None:
    # the first six words, verbatim (case and punctuation aside)
    assert judge("We present a neural approach to headline generation") == "copy"
    assert judge("Abstract: we present a Neural approach, to") == "copy"
    # a short output that is the whole opening of four words or more
    assert judge("We present a neural") == "copy"
    # the prompt's instruction echoed, its first four words (Polis's base model does it)
    polis = "Write a statement you agree with about: $15/hour"
    echo = "Write a statement you disagree with about: $15/hour"
    assert judge(echo, input="$15/hour", prompt=polis) == "copy"
    assert judge("Generate a title for this paper") == "copy"
    assert judge("Write a statement about wages", input="$15/hour", prompt=polis) is None
    # five of the six, or three words only: not a copy
    assert judge("We present a neural method for headline generation") is None
    assert judge("We present a") != "copy"


@pytest.mark.parametrize(
    "output",
    [
        "Bundesgesmaktenfabryberechheit, das ist das Bundestjiegalit",
        "In-Vitr 1: Unearļenosty vypomostenstvru",
        "Diskstrelleamling seiner Lösung: Anfeldzukursiosigmawissenschaft",
    ],
)
def test_language(output: str) -> None:
    assert judge(output) == "language"


def test_language_is_a_cost_per_letter_worked_by_hand() -> None:
    # the model of the text "ab" alone: its events are ("  ", a), (" a", b), ("ab", " "), one
    # each (3 letters in all), so each cost is the interpolation 0.5 p3 + 0.3 p2 + 0.2 p1 by hand
    model = answers._TrigramModel(answers._Counts("ab"))
    p1 = (1 + 0.5) / (3 + 0.5 * 60)  # "a" seen once, add-0.5 over 60 letters
    assert model.bits("  ", "a") == pytest.approx(-math.log2(0.5 * 1 + 0.3 * 1 + 0.2 * p1))
    assert model.bits("ab", "z") == pytest.approx(-math.log2(0.2 * 0.5 / 33))  # unseen
    # "ba": (" ", b) was never seen as a bigram (" a" was), ("  ", b) never as a trigram
    p1_b = (1 + 0.5) / 33
    assert model.bits("  ", "b") == pytest.approx(-math.log2(0.2 * p1_b))
    # pooled with a second text, the counts add: "a" after "  " now 2 of 2 trigrams
    pooled = answers._TrigramModel(answers._Counts("ab"), answers._Counts("a"))
    p1_pooled = (2 + 0.5) / (5 + 30)
    assert pooled.bits("  ", "a") == pytest.approx(-math.log2(0.5 + 0.3 + 0.2 * p1_pooled))


def test_a_reference_is_counted_once_and_its_cost_stays_the_same() -> None:
    reference = "Generate a title for: a study of character trigram models of language"
    text = "Character Trigrams for Language Identification"
    answers._reference_counts.cache_clear()
    first = answers.letter_bits(text, reference)
    again = answers.letter_bits(text + " Revisited", reference)
    assert answers._reference_counts.cache_info().misses == 1  # the second call reused it
    uncached = answers._TrigramModel(answers._Counts(reference), answers._BACKGROUND_COUNTS)
    events = answers._events(text)
    assert first == sum(uncached.bits(c, ch) for c, ch in events) / len(events)
    assert again != first


@pytest.mark.parametrize(
    "output",
    [
        "This is a paper written by Aysha, Aysha, Aysha, Aysha, Ays",
        "Neural Neural Neural headlines",
        "headline generation, headline generation, headline generation",
        "copy mechanism for the abstract copy mechanism for the abstract",
        "Transformer lalalalalala headlines",
    ],
)
def test_loop(output: str) -> None:
    assert judge(output) == "loop"


def test_two_repeats_of_a_short_unit_are_not_a_loop() -> None:
    assert judge("Headlines, Headlines: Copy Mechanisms for the ACL Anthology") is None


@pytest.mark.parametrize(
    "output",
    [
        "This is not supported.",
        "Translate this abstract sentence.",
        "Sounds great, here is the full abstract of the original paper.",
        "This is a report written by:",
        "This is an interesting and insightful answer.",
        "Database browser version not available. Please check the original version.",
    ],
)
def test_off_task(output: str) -> None:
    assert judge(output) == "off_task"


def test_a_meta_opening_with_the_inputs_content_is_an_answer() -> None:
    # two content words of the input (headline, generation) outweigh the opening
    assert judge("Here's a Headline Generation Model") is None
    # one is not enough after a meta opening; without one, no content word at all is needed
    assert judge("Here's a Headline") == "off_task"
    assert judge("Salient Headlines") is None


def test_off_task_does_not_judge_a_one_line_topic() -> None:
    # polis: the input is the conversation's topic; a statement need not repeat it
    prompt = "Write a statement you agree with about: $15/hour"
    assert judge("This is a bad idea for small shops.", input="$15/hour", prompt=prompt) is None


@pytest.mark.parametrize(
    "output",
    [
        "Headline Generation for Scientific Papers:",  # the main job's "Preliminaries:" kind
        "Copy Mechanisms and Transformer Headlines:  ",  # trailing space is no answer
        "Title: Salient Headlines\uff1a",  # a full-width colon; the leading label taken off
    ],
)
def test_unfinished(output: str) -> None:
    assert judge(output) == "unfinished"


def test_unfinished_is_checked_last_and_only_at_the_end() -> None:
    # a colon inside a title is the ordinary subtitle, no lead-in
    assert judge("Headline Generation: A Copy Mechanism for Scientific Papers") is None
    # an output that breaks an earlier rule is named by it ("Abstract:" is a label)
    assert judge("Abstract:") == "label"
    assert judge("This is a report written by:") == "off_task"
    # judged where off_task is not: a one-line topic (polis)
    prompt = "Write a statement you agree with about: $15/hour"
    assert judge("Small shops would:", input="$15/hour", prompt=prompt) == "unfinished"


def test_the_main_jobs_bad_outputs_by_rule() -> None:
    # issue 37's quoted outputs, each caught, and by the rule that names what is wrong
    expected = {
        "Bundesgesmaktenfabryberechheit, das ist das Bundestjiegalit": "language",
        "This is not supported.": "off_task",
        "Translate this abstract sentence.": "off_task",
        "Sounds great, here is the full abstract of the original paper.": "off_task",
        "This is a report written by:": "off_task",
        "This is a paper written by Aysha, Aysha, Aysha, Aysha, Ays": "loop",
        "Abstract:": "label",
    }
    assert {o: judge(o) for o in expected} == expected


@pytest.mark.skipif(not (DATA / "acl-anthology").is_dir(), reason=f"no data at {DATA}")
def test_real_titles_pass_against_their_own_abstracts() -> None:
    from prefalign_suites.pref_lamp import anthology
    from prefalign_suites.pref_lamp.suite import PrefLamp
    from prefalign_suites.raw_records import Problems

    papers = anthology.read_papers(DATA / "acl-anthology", Problems())
    suite = PrefLamp()
    flagged = Counter(
        not_an_answer(p.title, input=p.abstract, prompt=suite.instruction(p.abstract))
        for p in papers.values()
    )
    n = sum(flagged.values())
    assert n > 3000
    flagged.pop(None)
    # measured: 7 of 3,099 (off_task 4: two Chinese titles of Chinese abstracts, two titles
    # sharing no word with their abstracts; copy 3: abstracts that open with the title)
    assert sum(flagged.values()) / n < 0.005, flagged
    assert set(flagged) <= {"copy", "off_task"}, flagged
