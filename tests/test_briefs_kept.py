"""Pref-LaMP's writer's briefs kept in the run's cache (``briefs_kept``): the same briefs as
computed, read back on a rerun, and computed again when any input changes alone."""

from __future__ import annotations

import dataclasses
import json

import pytest

from prefalign_suites.pref_lamp import briefs, briefs_kept
from prefalign_suites.pref_lamp.corpus import Paper, UserPapers
from pytest_prefalign import cache

OPTIONS = {"max_train": 0, "shots": 2, "folds": 1, "rivals": 2}
RANKED = briefs.briefs  # the ranking itself, before a test counts its calls


def paper(key: str, who: str, topic: str) -> Paper:
    return Paper(key, f"{who} title {key}", f"abstract {key} about {topic} and more", key,
                 frozenset({who}))  # fmt: skip


def corpus() -> tuple[dict[str, UserPapers], list[Paper]]:
    people = {who: [paper(f"{who[0]}{i}", who, f"topic{i % 3}") for i in range(5)]
              for who in ("Ann", "Bob", "Cat", "Dan")}  # fmt: skip
    users = {
        f"acl:{who}": UserPapers(profile=found[:4], tests=found[4:])
        for who, found in people.items()
        if who in ("Ann", "Bob")
    }
    return users, [p for found in people.values() for p in found]


@pytest.fixture
def disk(tmp_path):
    with cache.using(cache.Disk(tmp_path / "cache")) as found:
        yield found


@pytest.fixture
def counted(monkeypatch):
    """How many times the ranking itself ran."""
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return RANKED(*args, **kwargs)

    monkeypatch.setattr(briefs_kept.ranking, "briefs", counting)
    return calls


def test_kept_briefs_are_the_computed_ones_field_by_field(disk, counted):
    users, pool = corpus()
    held_out = frozenset({"A4", "B4"})
    computed = RANKED(users, pool, held_out, **OPTIONS)
    first = briefs_kept.briefs(users, pool, held_out, **OPTIONS)
    again = briefs_kept.briefs(users, pool, held_out, **OPTIONS)
    assert first == computed and again == computed
    assert len(counted) == 1  # the rerun read them back
    rivalled = [b for b in computed[1] if b.rivals]
    assert rivalled and all(b.rival_shown for b in rivalled)  # the rivals' fields round-trip
    assert all(isinstance(b.shown, tuple) and isinstance(b.examples, tuple) for b in again[0])
    assert len(list((disk.root / briefs_kept.KIND).glob("*.json"))) == 1


def _retitled(p: Paper) -> Paper:
    return dataclasses.replace(p, title=p.title + " again")


@pytest.mark.parametrize(
    "change",
    [
        "a pool paper's abstract",
        "a user's paper's title",
        "a paper's people",
        "the held-out keys",
        *(f"option {name}" for name in OPTIONS),
    ],
)
def test_each_input_changed_alone_ranks_again(disk, counted, change):
    users, pool = corpus()
    # cross-fitting holds no paper out: its run leaves the held-out keys empty both times
    held_out = frozenset() if change == "option folds" else frozenset({"A4"})
    options = dict(OPTIONS)
    briefs_kept.briefs(users, pool, held_out, **options)
    if change == "a pool paper's abstract":
        pool = [*pool[:-1], dataclasses.replace(pool[-1], abstract="another abstract")]
    elif change == "a user's paper's title":
        ann = users["acl:Ann"]
        users = {**users, "acl:Ann": UserPapers([_retitled(ann.profile[0]), *ann.profile[1:]],
                                                ann.tests)}  # fmt: skip
    elif change == "a paper's people":
        pool = [*pool[:-1], dataclasses.replace(pool[-1], people=frozenset({"Dan", "Eve"}))]
    elif change == "the held-out keys":
        held_out = frozenset({"A4", "B4"})
    else:
        name = change.removeprefix("option ")
        options[name] = {"max_train": 2, "shots": 1, "folds": 2, "rivals": 1}[name]
    briefs_kept.briefs(users, pool, held_out, **options)
    assert len(counted) == 2


def test_a_cached_value_that_is_not_briefs_is_computed_again(disk, counted):
    users, pool = corpus()
    expected = briefs_kept.briefs(users, pool, frozenset(), **OPTIONS)
    (path,) = (disk.root / briefs_kept.KIND).glob("*.json")
    path.write_text(json.dumps({"train": [{"own": "no source"}], "test": []}))
    with pytest.warns(cache.CacheWarning):
        assert briefs_kept.briefs(users, pool, frozenset(), **OPTIONS) == expected
    assert len(counted) == 2


def test_without_the_cache_every_run_ranks(tmp_path, counted):
    users, pool = corpus()
    with cache.using(cache.Disk(tmp_path, enabled=False)):
        briefs_kept.briefs(users, pool, frozenset(), **OPTIONS)
        briefs_kept.briefs(users, pool, frozenset(), **OPTIONS)
    assert len(counted) == 2 and not any(tmp_path.iterdir())
