"""The trivial baselines ``lead`` and ``profile_copy``: their known answers on toy cases, and
their rows on the leaderboard (ROUGE, no policy accuracy), end to end in a small project."""

from __future__ import annotations

import json
import textwrap
from typing import Any, cast

import pytest

from prefalign_methods.decoders.lead import LeadDecoder, lead_length
from prefalign_methods.decoders.profile_copy import ProfileCopyDecoder
from pytest_prefalign.api import CaseContext, Item, ProfileEntry, SuiteData


def context(profiles: dict[str, list[ProfileEntry]]) -> CaseContext:
    data = SuiteData("toy", "memory", profiles, [])
    lm: Any = None  # neither baseline runs a model
    suite: Any = None
    return CaseContext(lm=lm, suite=suite, data=data, reward=None)


def entries(user: str, *pairs: tuple[str, str]) -> list[ProfileEntry]:
    return [ProfileEntry(f"{user}/{i}", text, out) for i, (text, out) in enumerate(pairs)]


def item(user: str, text: str) -> Item:
    return Item(f"{user}/t", user, text, f"Title: {text}", None)


INPUT = "one two three four five six seven eight"


def test_lead_takes_as_many_words_as_the_users_median_output() -> None:
    ctx = context(
        {
            "odd": entries("odd", ("a", "w w"), ("b", "w w w w w"), ("c", "w w w")),  # 2 5 3
            "even": entries("even", ("a", "w w"), ("b", "w w w")),  # 2 3: 2.5, half up
            "one": entries("one", ("a", "w"), ("b", "w"), ("c", "w w w w w w")),  # 1 1 6
        }
    )
    out = LeadDecoder().generate(ctx, [item(u, INPUT) for u in ("odd", "even", "one")])
    assert out == ["one two three", "one two three", "one"]


def test_lead_without_a_profile_takes_the_median_over_every_user() -> None:
    ctx = context(
        {
            "ann": entries("ann", ("a", "w w"), ("b", "w w w w")),
            "bob": entries("bob", ("a", "w w w w"), ("b", "w w w w w w")),
            "new": [],
        }
    )
    # all outputs: 2 4 4 6, median 4
    assert LeadDecoder().generate(ctx, [item("new", INPUT)]) == ["one two three four"]
    assert lead_length([]) is None
    # a short input gives what it has
    assert LeadDecoder().generate(ctx, [item("bob", "just two")]) == ["just two"]


def test_profile_copy_copies_the_nearest_profile_entrys_output() -> None:
    ann = entries(
        "ann",
        ("cats sleep in the warm sun", "Sleepy Cats"),
        ("dogs bark at the mailman", "Loud Dogs"),
        ("parrots repeat words they hear", "Talking Birds"),
    )
    ctx = context({"ann": ann, "nobody": []})
    texts = ["a dog barks at a mailman", "parrots hear words", "the sun and the cats"]
    out = ProfileCopyDecoder().generate(ctx, [item("ann", t) for t in texts])
    assert out == ["Loud Dogs", "Talking Birds", "Sleepy Cats"]
    # no word in common: every score is 0, the first entry wins; no profile: nothing to copy
    assert ProfileCopyDecoder().generate(ctx, [item("ann", "zebra"), item("nobody", "cats")]) == [
        "Sleepy Cats",
        "",
    ]


def test_profile_copy_and_icl_rag_over_a_profile_of_stop_words() -> None:
    # a profile whose inputs have no word BM25 counts: every entry ties at 0, profile order wins
    from prefalign_methods.decoders.icl import ICLOptions, RAGDecoder

    ann = entries("ann", ("the of", "First"), ("and it is", "Second"), ("", "Third"))
    ctx = context({"ann": ann})
    assert ProfileCopyDecoder().generate(ctx, [item("ann", "cats sleep")]) == ["First"]
    ctx.options = ICLOptions(k=2)
    examples = RAGDecoder().examples(ctx, "ann", "cats sleep")
    assert [e.output for e in examples] == ["First", "Second"]


def test_icl_rag_retrieves_by_the_items_input_not_its_instruction() -> None:
    # the suite's instruction shares words with one profile input; the input, with another
    from prefalign_methods.decoders.icl import ICLOptions, RAGDecoder

    ann = entries(
        "ann",
        ("Dependency parsing of speech transcripts.", "Parsing Speech"),
        ("This paper shows how to generate a title for the following abstract.", "Titles"),
    )
    text = "We improve dependency parsing."
    prompt = f"Generate a title for the following abstract of a paper: {text}"
    data = SuiteData("toy", "memory", {"ann": ann}, [Item("ann/t", "ann", text, prompt, None)])
    ctx = CaseContext(lm=cast(Any, None), suite=cast(Any, None), data=data, reward=None)
    ctx.options = ICLOptions(k=1)
    assert [e.output for e in RAGDecoder().examples(ctx, "ann", prompt)] == ["Parsing Speech"]
    # a prompt no item has (a pair's): retrieved by the prompt itself
    assert [e.output for e in RAGDecoder().examples(ctx, "ann", "the following paper")] == [
        "Titles"
    ]


def test_baselines_are_no_policy_and_need_no_reward() -> None:
    for decoder in (LeadDecoder, ProfileCopyDecoder):
        assert decoder.policy is False and decoder.needs == frozenset()


def test_default_methods_put_the_baselines_after_base() -> None:
    from pytest_prefalign.registry import Registry, add_builtins

    registry = Registry()
    decoders = ("base", "icl", "icl_rag", "lead", "profile_copy", "args", "bon")
    add_builtins(registry, *decoders, "global_bt")
    names = [str(m) for m in registry.default_methods()]
    assert names == [
        "base",
        "icl",
        "icl_rag",
        "lead",
        "profile_copy",
        "args[global_bt]",
        "bon[global_bt]",
    ]


TOY_SUITE = """
from pytest_prefalign.api import Item, Pair, ProfileEntry, SuiteData


class Toy:
    name = "toy"
    description = "one user who writes about animals"
    licence = "CC0"
    source = "toy"
    requires_data_dir = False

    def instruction(self, input):
        return f"Write a title for: {input}"

    def example(self, entry):
        return f"Text: {entry.input}\\nTitle: {entry.output}"

    def load(self, data_dir, *, limit, options):
        profile = [
            ProfileEntry("ann/p0", "cats sleep in the warm sun", "Sleepy Cats"),
            ProfileEntry("ann/p1", "dogs bark at the mailman all day", "Loud Dogs Bark"),
        ]
        text = "dogs bark at night in the park"
        prompt = self.instruction(text)
        return SuiteData(
            "toy",
            "memory",
            {"ann": profile},
            [Item("ann/t0", "ann", text, prompt, "Dogs Bark at Night")],
            test_pairs=[Pair("ann/t0", "ann", prompt, "Dogs Bark at Night", "Cats")],
        )

    def build_pairs(self, data, reference, cache_dir):
        pass


def pytest_prefalign_register(registry):
    registry.add_suite(Toy())
"""


@pytest.fixture(scope="module", autouse=True)
def heavy_modules_imported_once():
    """pytester restores sys.modules after an in-process run; torch cannot be imported twice in
    one process, so everything heavy is imported here, before the first snapshot."""
    import bm25s  # noqa: F401
    import rouge_score.rouge_scorer  # noqa: F401

    import prefalign_methods.decoders.icl  # noqa: F401
    import pytest_prefalign.evaluation.case  # noqa: F401
    from pytest_prefalign.runtime.tiny import build_tiny_lm

    build_tiny_lm(0)


def test_baselines_on_the_leaderboard_with_rouge_and_no_policy_accuracy(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(TOY_SUITE)
    pytester.makeini(
        textwrap.dedent("""
        [pytest]
        prefalign_models = tiny = tiny
        prefalign_sizes = tiny
        prefalign_methods = base,lead,profile_copy
    """)
    )
    pytester.mkdir("toy").joinpath("suite.toml").write_text('[suite]\nname = "toy"\n')
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    result = pytester.runpytest_inprocess(
        "--prefalign", "toy", "-p", "no:cacheprovider", "--prefalign-json", "out.json"
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*method*ROUGE-1*ROUGE-L*policy acc*",
            "1 * lead * 0.857 * 0.857 * -  *",
            "2 * profile_copy * 0.571 * 0.571 * -  *",
            "3 * base *",
        ]
    )
    run = json.loads((pytester.path / "out.json").read_text())
    rows = {r["method"]: r for r in run["results"]}
    outputs = {r["method"]: r["output"] for r in run["items"]}
    # median of 2 and 3 words is 2.5: three words of the input
    assert outputs["lead"] == "dogs bark at"
    assert outputs["profile_copy"] == "Loud Dogs Bark"
    # ROUGE-1 F1: lead 3 of its 3 words in the 4 of the title, profile_copy 2 of 3
    assert rows["lead"]["metrics"]["rouge1"] == pytest.approx(6 / 7)
    assert rows["profile_copy"]["metrics"]["rouge1"] == pytest.approx(4 / 7)
    for name in ("lead", "profile_copy"):
        assert "rouge1" in rows[name]["metrics"] and "policy_acc" not in rows[name]["metrics"]
        assert rows[name]["n_pairs"] == 0 and rows[name]["reward"] is None
    assert "policy_acc" in rows["base"]["metrics"]
