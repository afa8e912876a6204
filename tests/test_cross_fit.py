"""Pref-LaMP's cross-fitting design (suite options ``folds`` and ``fold``): every paper of an
author is a test item in exactly one fold, co-authors put a paper in the same fold, and no
fold's training pairs were written after a title of that fold's test papers. A fake writer
(``test_pair_writer.FakeWriter``) on constructed authors, and the real data's briefs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prefalign_suites import pref_lamp
from prefalign_suites.pref_lamp import release, writer
from prefalign_suites.pref_lamp.corpus import Paper, fold_of
from pytest_prefalign.api import DataError
from tests.test_pair_writer import STRANGERS, FakeWriter
from tests.test_suite_pref_lamp import corpus, own, real_data

TITLE = re.compile(r"Title:\n(.+)\n")
FOLDS = 2


def ids(prefix: str) -> list[str]:
    """Seven paper ids, in order, with at least three in each fold (so each of an author's
    papers has another of its fold to show the writer)."""
    found: list[str] = []
    for i in range(1, 100):
        candidate = f"{prefix}{i}"
        fold = fold_of(Paper(candidate, "", "", candidate, frozenset()), FOLDS)
        if sum(fold_of(Paper(f, "", "", f, frozenset()), FOLDS) == fold for f in found) < 4:
            found.append(candidate)
        if len(found) == 7:
            return found
    raise AssertionError("no seven ids")


ANN, BOB = ids("a"), ids("b")


def authors(root: Path) -> Path:
    """Two authors with eight papers each, one written together, and a stranger's papers."""
    shared = ("ab", "abstract ab about Ann and Bob topics", ["Ann", "Bob"])
    ann, bob = own("Ann", *ANN), own("Bob", *BOB)
    # in the middle of both histories: the time split tests neither's
    return corpus(root, {"Ann": [*ann[:3], shared, *ann[3:]], "Bob": [*bob[:3], shared, *bob[3:]]},
                  STRANGERS)  # fmt: skip


def load(root: Path, fold: int, **options: str):
    suite = pref_lamp.PrefLamp()
    every = {"negatives": "style", "folds": str(FOLDS), "fold": str(fold), "min_profile": "1",
             **options}  # fmt: skip
    return suite, suite.load(root, limit=None, options=every)


def built(root: Path, folder: Path, fold: int):
    suite, data = load(root, fold)
    fake = FakeWriter()
    suite.build_pairs(data, fake, folder)
    return data, fake


def test_every_paper_is_a_test_item_in_exactly_one_fold(tmp_path):
    root = authors(tmp_path / "data")
    papers = {"acl:Ann": {*ANN, "ab"}, "acl:Bob": {*BOB, "ab"}}
    tested: dict[str, list[str]] = {user: [] for user in papers}
    for fold in range(FOLDS):
        data, _ = built(root, tmp_path / "cache", fold)
        for user in papers:
            mine = {i.item_id.split("/")[1] for i in data.items if i.user == user}
            tested[user] += mine
            assert {e.doc_id for e in data.profiles[user]} == papers[user] - mine
        assert {p.pair_id for p in data.test_pairs} == {i.item_id for i in data.items}
        for pair in data.train_pairs:  # the profile's papers, none of this fold's
            assert pair.pair_id.split("/")[1] in {e.doc_id for e in data.profiles[pair.user]}
    for user, ids in tested.items():
        assert sorted(ids) == sorted(papers[user])  # each once, over the folds
    # the paper both wrote is tested in the same fold for both
    folds_of_ab = {
        fold
        for fold in range(FOLDS)
        for item in load(root, fold)[1].items
        if item.item_id.endswith("/ab")
    }
    assert len(folds_of_ab) == 1


def test_no_training_pair_was_written_after_a_test_paper_s_title(tmp_path):
    """Every prompt the writer answered for a paper of a fold's training pairs shows no title
    of the fold's test papers, and no such training pair was left out for it."""
    root = authors(tmp_path / "data")
    for fold in range(FOLDS):
        data, fake = built(root, tmp_path / f"cache-{fold}", fold)  # each fold writes anew
        test_titles = {i.reference for i in data.items}
        trained = {p.pair_id.split("/")[1] for p in data.train_pairs}
        assert trained and fake.prompts
        for prompt in fake.prompts:
            answered = prompt.rsplit("Abstract:\n", 1)[1].split()[1]  # "abstract <id> about"
            shown = set(TITLE.findall(prompt))
            assert len({fold_of_title(t) for t in shown}) <= 1, prompt  # one fold's papers
            if answered in trained:
                assert not shown & test_titles, prompt
        crossed = data.provenance["cross_fit"]
        assert crossed["training_briefs_showing_a_test_paper"] == 0
        assert crossed["training_briefs"] == len(data.train_pairs)


def fold_of_title(title: str) -> int:
    """The fold of the constructed paper with this title (``Title of <id>`` or a stranger's)."""
    from prefalign_suites.pref_lamp.corpus import Paper

    paper_id = title.split()[-1]
    return fold_of(Paper(paper_id, title, "", paper_id, frozenset()), FOLDS)


@pytest.mark.parametrize(
    "options, field, problem",
    [
        ({"folds": "2", "fold": "2"}, "fold", "expected 0 to 1"),
        ({"folds": "0"}, "folds", "at least 1"),
        ({"folds": "2", "writer_pairs": "matched"}, "folds", "writer_pairs = nearest"),
        ({"folds": "2", "negatives": "other_author"}, "folds", "style or written"),
        ({"folds": "2", "source": "lamp5", "lamp5_dir": "x"}, "folds", "source = anthology"),
    ],
)
def test_bad_fold_options_name_the_option(tmp_path, options, field, problem):
    root = authors(tmp_path / "data")
    with pytest.raises(DataError) as info:
        pref_lamp.PrefLamp().load(root, limit=None, options={"negatives": "style", **options})
    assert info.value.field == field and problem in str(info.value)


def test_the_cross_fitting_release_is_a_file_of_its_own():
    """Its briefs differ, so its release is another file and its options say so; the time
    split's options are those its packaged releases were made with."""
    plain, folded = writer.Options(), writer.Options(folds=2)
    assert release.packaged("nearest", 2).name == "pairs-nearest-folds2.json.gz"
    assert release.packaged("nearest") != release.packaged("nearest", 2)
    assert "folds" not in release.decisive(plain)
    assert release.decisive(folded)["folds"] == 2
    shipped = release.read(release.packaged("nearest"))
    if shipped is not None:
        assert shipped.options == release.decisive(plain)


def test_on_real_data_each_brief_shows_papers_of_its_own_fold_only():
    """The main job's authors: every paper of theirs has a brief, every example of a brief is
    of its paper's fold, and each fold's training pairs are every other paper's."""
    root = real_data()
    suite = pref_lamp.PrefLamp()
    counted = 0
    for fold in range(FOLDS):
        data = suite.load(root, limit=8, options={"folds": str(FOLDS), "fold": str(fold)})
        crossed = data.provenance["cross_fit"]
        assert crossed["training_briefs_showing_a_test_paper"] == 0
        assert crossed["training_briefs"] == crossed["training_briefs_possible"] > 0
        counted += crossed["test_briefs"]
        # the briefs wait for the writer (the release holds the time split's)
        _, (train, test), _ = suite._briefs[id(data)]
        for brief in [*train, *test]:
            assert brief.examples
            paper_fold = fold_of_key(brief.key)
            assert all(fold_of_key(key) == paper_fold for key in brief.examples)
        assert all(fold_of_key(b.key) == fold for b in test)
        assert all(fold_of_key(b.key) != fold for b in train)
    assert counted > 3 * 42  # every paper once, against 42 test papers in the time split


def fold_of_key(key: str) -> int:
    from prefalign_suites.pref_lamp.corpus import Paper

    return fold_of(Paper(key, "", "", key, frozenset()), FOLDS)


def test_a_user_short_of_profile_papers_in_a_fold_sits_it_out():
    """``min_profile`` holds in each fold: a user with fewer papers outside the fold, or none
    in it, is left out of it."""
    from prefalign_suites.pref_lamp.corpus import Paper, UserPapers, cross_fit

    def papers(prefix: str, n: int) -> list[Paper]:
        return [
            Paper(f"{prefix}{i}", f"title {prefix}{i}", "a", f"{prefix}{i}", frozenset())
            for i in range(n)
        ]

    users = {"many": UserPapers(papers("m", 30), []), "few": UserPapers(papers("f", 4), [])}
    for fold in range(FOLDS):
        outside = {
            user: sum(fold_of(p, FOLDS) != fold for p in found.profile)
            for user, found in users.items()
        }
        inside = {
            user: sum(fold_of(p, FOLDS) == fold for p in found.profile)
            for user, found in users.items()
        }
        for least in (1, 3):
            kept = cross_fit(users, FOLDS, fold, min_profile=least)
            assert set(kept) == {u for u in users if outside[u] >= least and inside[u]}
            for user, split in kept.items():
                assert len(split.tests) == inside[user] and len(split.profile) == outside[user]


def test_on_real_data_no_brief_is_without_examples():
    """A paper alone in its fold among its author's has nothing to show the writer (the two
    prompts would be the same): it makes no pair, and is counted."""
    suite = pref_lamp.PrefLamp()
    data = suite.load(real_data(), limit=None, options={"folds": "2", "fold": "0"})
    _, (train, test), _ = suite._briefs[id(data)]
    assert train and test and all(b.examples for b in [*train, *test])
    crossed = data.provenance["cross_fit"]
    assert crossed["test_briefs"] + crossed["training_briefs"] == len(train) + len(test)


def test_a_test_papers_twin_in_the_other_fold_leaves_the_profile():
    """The same paper under two ids (one title up to case and punctuation) may hash to two
    folds: in the fold that tests one, the other leaves the profile (the leak rule's twin)."""
    from prefalign_suites.pref_lamp.corpus import Paper, UserPapers, cross_fit

    keys = [f"k{i}" for i in range(40)]
    first = next(k for k in keys if fold_of_key(k) == 0)
    second = next(k for k in keys if fold_of_key(k) == 1)
    mine = [Paper(k, f"title {k}", "a", k, frozenset()) for k in keys if k not in (first, second)]
    twins = [
        Paper(first, "Do Embeddings capture Scales?", "a", first, frozenset()),
        Paper(second, "Do embeddings capture scales", "b", second, frozenset()),
    ]
    users = {"ann": UserPapers([*mine, *twins], [])}
    for fold, tested, twin in ((0, first, second), (1, second, first)):
        (kept,) = cross_fit(users, FOLDS, fold, min_profile=1).values()
        assert tested in {p.key for p in kept.tests}
        assert twin not in {p.key for p in kept.profile}
        assert [p.key for p in kept.profile] == [p.key for p in mine if fold_of_key(p.key) != fold]
