"""The writer's briefs kept in the run's cache (``cache.active()``), so that a rerun does not
rank every paper's abstract again.

``briefs.briefs`` runs BM25 over every paper of the anthology folder for each of a run's
papers: about a second of each run, more than the rest of loading the suite, and a warm
rerun's largest cost after start-up. Its value is a function of its inputs and its code
alone, so it is kept under a key of exactly those: every field of every paper it reads (the
pool's and each user's, in order), the held-out keys, its options, and the code of
``briefs.py`` with every first-party module it imports (and of this module, which writes the
value). Any changed paper, option or line of that code is a new key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prefalign_suites.pref_lamp import briefs as ranking
from prefalign_suites.pref_lamp.briefs import Brief
from prefalign_suites.pref_lamp.negatives import Source
from pytest_prefalign import cache, storage, versions

if TYPE_CHECKING:  # pragma: no cover
    from prefalign_suites.pref_lamp.corpus import Paper, UserPapers

KIND = "briefs"


def briefs(
    users: dict[str, UserPapers],
    pool: Sequence[Paper],
    held_out: frozenset[str],
    *,
    max_train: int,
    shots: int,
    folds: int = 1,
    rivals: int = 1,
) -> tuple[list[Brief], list[Brief]]:
    """``briefs.briefs`` with the same arguments, read from the run's cache where the same
    inputs were ranked before."""
    options = {"max_train": max_train, "shots": shots, "folds": folds, "rivals": rivals}
    key = cache.make_key(
        KIND,
        papers=papers_key(users, pool),
        held_out=sorted(held_out),
        options=options,
        code=versions.module_version(__name__),
    )

    def compute() -> dict[str, Any]:
        train, test = ranking.briefs(users, pool, held_out, **options)
        return {"train": [to_json(b) for b in train], "test": [to_json(b) for b in test]}

    value = cache.active().json(key, compute, valid=cache.readable_by(from_value))
    return from_value(value)


def papers_key(users: dict[str, UserPapers], pool: Sequence[Paper]) -> str:
    """A hash of every field of every paper the ranking reads, in order: the pool's, then each
    user's profile and test papers (names in order; ``people`` sorted, since a set's order is
    not the same from one process to the next)."""
    return storage.content_key(
        [_paper(p) for p in pool],
        [
            (user, [_paper(p) for p in found.profile], [_paper(p) for p in found.tests])
            for user, found in users.items()
        ],
    )


def _paper(paper: Paper) -> list[Any]:
    return [paper.paper_id, paper.title, paper.abstract, paper.key, sorted(paper.people)]


def to_json(brief: Brief) -> dict[str, Any]:
    source = brief.source
    return {
        "source": [source.pair_id, source.user, source.paper_id, source.abstract, source.title],
        "own": brief.own,
        "others": brief.others,
        "shown": list(brief.shown),
        "key": brief.key,
        "examples": list(brief.examples),
        "rivals": list(brief.rivals),
        "rival_shown": [list(titles) for titles in brief.rival_shown],
    }


def from_json(value: dict[str, Any]) -> Brief:
    return Brief(
        Source(*value["source"]),
        value["own"],
        value["others"],
        tuple(value["shown"]),
        key=value["key"],
        examples=tuple(value["examples"]),
        rivals=tuple(value["rivals"]),
        rival_shown=tuple(tuple(titles) for titles in value["rival_shown"]),
    )


def from_value(value: dict[str, Any]) -> tuple[list[Brief], list[Brief]]:
    """The training and test briefs of a kept value (``KeyError``, ``TypeError`` where it is
    not one: the cache computes it again)."""
    return [from_json(b) for b in value["train"]], [from_json(b) for b in value["test"]]
