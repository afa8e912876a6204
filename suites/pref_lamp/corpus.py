"""Papers and users of Pref-LaMP, whatever file format they came from, and the rules that turn
them into a suite's records: the leak rule and the minimum profile size."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_prefalign.api import Item, ProfileEntry, SuiteData

if TYPE_CHECKING:  # pragma: no cover
    from prefalign_suites.raw_records import Problems
    from pytest_prefalign.api import Suite


@dataclass(frozen=True)
class Paper:
    """One paper; ``title`` and ``abstract`` are whitespace-normalised.

    ``key`` identifies the paper across users (co-authors share papers): the anthology id, or
    the abstract where a format has no paper id. ``people``: who wrote it (author names, or the
    users holding it), for the rule that a negative title comes from somebody else.
    """

    paper_id: str
    title: str
    abstract: str
    key: str
    people: frozenset[str]

    @property
    def title_key(self) -> str:
        """The title case-folded, every run of other characters than letters and digits one
        space: a paper published twice under two ids (a workshop and a Findings version, say)
        has two keys and one ``title_key``."""
        return " ".join(_WORDS.findall(self.title.casefold()))


_WORDS = re.compile(r"[^\W_]+")


@dataclass
class UserPapers:
    """One user's papers: the profile (and training source), oldest first, and the test items."""

    profile: list[Paper]
    tests: list[Paper]


def apply_rules(
    users: dict[str, UserPapers], *, min_profile: int, problems: Problems
) -> tuple[dict[str, UserPapers], int]:
    """The leak rule and the minimum profile size; returns the kept users (their profiles
    cleaned) and the number of profile papers the leak rule removed.

    Leak rule: a paper that is a test item of any user in the run leaves every profile, so that
    no co-author's history holds it, and so does its twin: a paper of another key with the same
    title (``Paper.title_key``), which would otherwise hand retrieval the reference. Users with
    fewer than ``min_profile`` profile papers are dropped: first those that are short even
    before the leak rule, then, if none is, those the rule made short. A dropped user's test
    papers no longer count, which can give others their papers back, so the two steps repeat
    until nobody is dropped.
    """
    current = {u: p for u, p in users.items() if p.tests}
    problems.drop("user:no_papers", len(users) - len(current))
    while True:
        cleaned = _without_tests(current)
        short = [u for u in current if len(cleaned[u].profile) < min_profile]
        if not short:
            break
        short = [u for u in short if len(current[u].profile) < min_profile] or short
        problems.drop("user:too_few_profile_papers", len(short))
        current = {u: p for u, p in current.items() if u not in short}
    removed = sum(len(current[u].profile) - len(p.profile) for u, p in cleaned.items())
    return cleaned, removed


def test_keys(users: dict[str, UserPapers]) -> frozenset[str]:
    """The keys of every user's test papers."""
    return frozenset(paper.key for papers in users.values() for paper in papers.tests)


def fold_of(paper: Paper, folds: int) -> int:
    """The cross-fitting fold of a paper: a hash of its key, so co-authors holding the paper
    put it in the same fold, on every machine, whatever the run's users. One fold: 0, no
    hash (the time split reads every paper of the pool through here)."""
    if folds == 1:
        return 0
    return int(hashlib.sha256(paper.key.encode("utf-8")).hexdigest(), 16) % folds


def fold_test_keys(users: dict[str, UserPapers], folds: int, fold: int) -> frozenset[str]:
    """The keys of every user's papers in fold ``fold`` (``cross_fit``'s test items)."""
    return frozenset(
        paper.key
        for papers in users.values()
        for paper in (*papers.profile, *papers.tests)
        if fold_of(paper, folds) == fold
    )


def cross_fit(
    users: dict[str, UserPapers], folds: int, fold: int, *, min_profile: int
) -> dict[str, UserPapers]:
    """Every user's papers (profile and test items, oldest first) split by ``fold_of``: the
    papers of fold ``fold`` are the test items, the others the profile, less the twins of any
    user's test items (the leak rule's: the same title under another key). Over the folds every
    paper is a test item once. A user with no paper in the fold, or fewer than ``min_profile``
    outside it, is left out of this fold."""
    tested = {
        paper.title_key
        for papers in users.values()
        for paper in (*papers.profile, *papers.tests)
        if fold_of(paper, folds) == fold
    }
    found = {}
    for user, papers in users.items():
        history = [*papers.profile, *papers.tests]
        tests = [p for p in history if fold_of(p, folds) == fold]
        profile = [p for p in history if fold_of(p, folds) != fold and p.title_key not in tested]
        if tests and len(profile) >= max(min_profile, 1):
            found[user] = UserPapers(profile, tests)
    return found


def _without_tests(users: dict[str, UserPapers]) -> dict[str, UserPapers]:
    tests = [paper for papers in users.values() for paper in papers.tests]
    keys = {paper.key for paper in tests}
    titles = {paper.title_key for paper in tests}
    return {
        u: UserPapers(
            [p for p in papers.profile if p.key not in keys and p.title_key not in titles],
            papers.tests,
        )
        for u, papers in users.items()
    }


def suite_data(
    suite: Suite, users: dict[str, UserPapers], *, source: str, provenance: dict[str, Any]
) -> SuiteData:
    """Profiles and generation items (pairs come later: they may need a model)."""
    profiles = {
        user: [ProfileEntry(p.paper_id, p.abstract, p.title) for p in papers.profile]
        for user, papers in users.items()
    }
    items = [
        Item(f"{user}/{p.paper_id}", user, p.abstract, suite.instruction(p.abstract), p.title)
        for user, papers in users.items()
        for p in papers.tests
    ]
    return SuiteData(suite.name, source, profiles, items, provenance=provenance)
