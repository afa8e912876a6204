"""Pref-LaMP's rivals (suite option ``writer_rivals``): a test paper's chosen side against the
titles written after several other people's examples, one pair per person. A fake writer
(``test_pair_writer.FakeWriter``) on constructed authors: which prompts are written, whose
papers each shows, and which pairs come of them."""

from __future__ import annotations

import re

import pytest

from prefalign_suites import pref_lamp
from prefalign_suites.pref_lamp import briefs, release, writer
from pytest_prefalign.api import DataError
from tests.test_pair_writer import STRANGERS, FakeWriter, authors
from tests.test_suite_pref_lamp import paper

EXAMPLE = re.compile(r"Title:\n(.+)\n")
# more people with enough papers: Tim and Ula on their own, Vic only with Sue (Sue's papers)
TIM = [paper(f"t{i}", f"Tim title t{i}", f"abstract t{i} about Ann topics", ["Tim"])
       for i in range(1, 5)]  # fmt: skip
ULA = [paper(f"u{i}", f"Ula title u{i}", f"abstract u{i} about Ann topics", ["Ula"])
       for i in range(1, 5)]  # fmt: skip
SUE_AND_VIC = [{**p, "authors": [{"name": "Sue", "id": None}, {"name": "Vic", "id": None}]}
               for p in STRANGERS]  # fmt: skip


def build(tmp_path, fake: FakeWriter, strangers=(*SUE_AND_VIC, *TIM, *ULA), **options: str):
    root = authors(tmp_path / "data", list(strangers))
    suite = pref_lamp.PrefLamp()
    data = suite.load(root, limit=None, options={"negatives": "style", **options})
    suite.build_pairs(data, fake, tmp_path / "pairs")
    return data


def whose(prompt: str) -> frozenset[str]:
    """The ids of the example papers a prompt shows (its titles end in the id)."""
    return frozenset(t.split()[-1] for t in EXAMPLE.findall(prompt))


def test_each_test_paper_is_paired_against_the_titles_after_each_rival_s_papers(tmp_path):
    fake = FakeWriter()
    data = build(tmp_path, fake, writer_rivals="3")
    tests = {p.pair_id: p for p in data.test_pairs}
    assert sorted(tests) == sorted(f"acl:{u}/{i}{r}" for u, i in (("Ann", "a4"), ("Bob", "b4"))
                                   for r in ("", "~1", "~2"))  # fmt: skip
    asked = dict.fromkeys(p for p in fake.prompts if "abstract a4 about" in p)
    own, *others = asked
    assert whose(own) == {"a1", "a2", "a3"}
    shown = [whose(p) for p in others]
    assert len(shown) == 3 and all(len(s) == 3 for s in shown)
    # three people, each once, none of Ann's papers; Vic would show Sue's papers again
    people = [{i[0] for i in s} for s in shown]
    assert all(len(p) == 1 for p in people) and len(set.union(*people)) == 3
    assert not set.union(*people) & {"a"}
    for r, prompt in enumerate(others):
        pair = tests["acl:Ann/a4" + (f"~{r}" if r else "")]
        assert pair.chosen.startswith("From a")  # the author's own examples' title
        assert pair.rejected.startswith(f"From {EXAMPLE.findall(prompt)[0].split()[-1]} ")
        assert pair.prompt == tests["acl:Ann/a4"].prompt
    assert len({tests[f"acl:Ann/a4{r}"].rejected for r in ("", "~1", "~2")}) == 3
    # training pairs stay one a paper, and their rivals are never written
    assert len(data.train_pairs) == 6
    assert len(fake.prompts) == 6 * 2 + 2 * 4
    assert data.provenance["rivals"] == 3


def test_the_first_rival_is_the_one_pair_design_s_pair(tmp_path):
    one = build(tmp_path / "one", FakeWriter())
    three = build(tmp_path / "three", FakeWriter(), writer_rivals="3")
    first = [p for p in three.test_pairs if "~" not in p.pair_id]
    assert first == one.test_pairs and three.train_pairs == one.train_pairs
    assert "rivals" not in one.provenance


def test_fewer_people_give_fewer_rivals(tmp_path):
    """Only Sue (with Vic, the same papers) and Bob qualify for Ann's a4: two rivals."""
    data = build(tmp_path, FakeWriter(), strangers=SUE_AND_VIC, writer_rivals="4")
    ann = sorted(p.pair_id for p in data.test_pairs if p.user == "acl:Ann")
    assert ann == ["acl:Ann/a4", "acl:Ann/a4~1"]


def test_a_release_of_rivals_gives_a_training_brief_its_one_pair(tmp_path):
    """A cross-fitting release holds every brief's rival pairs (each is a test brief in its
    fold): a brief that trains takes only its own pair."""
    fake = FakeWriter()
    data = build(tmp_path, fake, writer_rivals="2")
    suite = pref_lamp.PrefLamp()
    root = tmp_path / "data"
    again = suite.load(root, limit=None, options={"negatives": "style", "writer_rivals": "2"})
    train, test = suite._briefs[id(again)][1]
    made, who = writer.sides([*train, *test], fake, tmp_path / "pairs", writer.Options(rivals=2),
                             tests={b.source for b in (*train, *test)})  # fmt: skip
    assert all(len(made[b.source.pair_id].pairs) == 2 for b in train)
    writer.fill(suite, again, train, test, made, writer.Options(rivals=2), who)
    assert again.train_pairs == data.train_pairs and again.test_pairs == data.test_pairs


def test_rivals_have_a_release_file_and_options_of_their_own():
    one, three = writer.Options(folds=2), writer.Options(folds=2, rivals=3)
    assert release.decisive(three) == {**release.decisive(one), "rivals": 3}
    assert "rivals" not in release.decisive(one)  # the shipped releases' options stand
    assert release.packaged("nearest", 2, 3).name == "pairs-nearest-folds2-rivals3.json.gz"
    assert release.packaged("nearest", 1, 3).name == "pairs-nearest-rivals3.json.gz"
    assert release.matching(writer.Options(rivals=3)) is None  # none is built


@pytest.mark.parametrize(
    "options, problem",
    [
        ({"negatives": "style", "writer_rivals": "0"}, "at least 1"),
        ({"negatives": "style", "writer_rivals": "2", "writer_pairs": "matched"}, "nearest"),
        ({"negatives": "other_author", "writer_rivals": "2"}, "style or written"),
    ],
)
def test_bad_rival_options_name_the_option(tmp_path, options, problem):
    root = authors(tmp_path / "data", STRANGERS)
    with pytest.raises(DataError) as info:
        pref_lamp.PrefLamp().load(root, limit=None, options=options)
    assert info.value.field == "writer_rivals" and problem in str(info.value)


def test_rivals_pass_over_repeated_papers_and_an_author_without_examples():
    import numpy as np

    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 5.0])
    allowed = np.ones(7, dtype=bool)
    mine = [2, 3]  # the author's own examples: a total score of 5.0
    people = {  # by name
        "Fa": np.array([5, 6]),  # 5.5: 0.5 off
        "Gu": np.array([0, 3]),  # 7.0: 2.0 off, and paper 3 is one of the author's own
        "Ha": np.array([1, 4]),  # 5.0: the nearest
        "Ib": np.array([1, 4]),  # Ha's papers again (co-authors), as near
    }
    assert briefs._rivals(scores, people, allowed, mine, 1) == [[4, 1]]  # Ha, before Ib
    # Ib repeats Ha's papers; Gu would show the author's own paper 3 (another spelling)
    assert briefs._rivals(scores, people, allowed, mine, 4) == [[4, 1], [5, 6]]
    assert briefs._rivals(scores, people, allowed, [], 3) == [[]]  # no example: one rival


@pytest.mark.parametrize("fold", ["0", "1"])
def test_the_shipped_authors_fold_runs_read_the_released_rivals_and_write_nothing(fold):
    """The release of two folds with 3 rivals (``pairs-nearest-folds2-rivals3.json.gz``) serves
    either fold's run of the shipped authors whole: no writer to load, no brief written."""
    from pathlib import Path

    data_dir = Path(__file__).resolve().parents[2] / "shared" / "data"
    if not (data_dir / "acl-anthology").is_dir():
        pytest.skip(f"no data at {data_dir}")
    assert release.packaged("nearest", 2, 3).is_file()
    suite = pref_lamp.PrefLamp()
    options = {"negatives": "style", "folds": "2", "fold": fold, "writer_rivals": "3"}
    data = suite.load(data_dir, limit=8, options=options)
    assert suite.writer(data) is None
    made = data.provenance["pairs_release"]
    assert made["briefs_written"] == 0 and made["briefs_released"] > 0
    assert any(p.pair_id.endswith("~2") for p in data.test_pairs)  # the third rival's pairs
