"""The Polis suite on the real conversations (a small subset, and once the whole count) and on
tiny CSV files written here in the same schema."""

from __future__ import annotations

import csv
import os
from collections import defaultdict
from pathlib import Path

import pytest

from prefalign_suites import polis
from pytest_prefalign.api import DataError, DataNotFound

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("PREFALIGN_DATA") or ROOT.parent / "shared" / "data")
SMALL = "15-per-hour-seattle,london.youth.policing"


def real_data() -> Path:
    if not (REAL / "polis").is_dir():
        pytest.skip(f"the shared Polis data is not at {REAL}")
    return REAL


def load(root: Path, limit: int | None = None, **options: str):
    return polis.Polis().load(root, limit=limit, options=options)


def last_votes(folder: Path) -> dict[tuple[int, int], tuple[int, int]]:
    """(voter, comment) -> (vote, time) by the data README's rules, computed independently."""
    with open(folder / "comments.csv", encoding="utf-8", newline="") as fh:
        kept = {int(r["comment-id"]) for r in csv.DictReader(fh) if r["moderated"] != "-1"}
    latest: dict[tuple[int, int], tuple[int, int]] = {}
    with open(folder / "votes.csv", encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            key, time = (int(row["voter-id"]), int(row["comment-id"])), int(row["timestamp"])
            if key[1] in kept and (key not in latest or time >= latest[key][1]):
                latest[key] = (int(row["vote"]), time)
    return latest


# -- the real data --------------------------------------------------------------------------------


def test_real_pairs_follow_the_votes_and_the_time_split():
    root = real_data()
    data = load(root, limit=6, conversations=SMALL)
    assert {u.split(":")[0] for u in data.users} == set(SMALL.split(","))  # spread over both
    votes = {name: last_votes(root / "polis" / name) for name in SMALL.split(",")}
    by_user = defaultdict(lambda: {"train": [], "test": []})
    for kind, pairs in (("train", data.train_pairs), ("test", data.test_pairs)):
        for pair in pairs:
            by_user[pair.user][kind].append(pair)
    for user in data.users:
        conv, voter = user.split(":")
        mine = {cid: vt for (v, cid), vt in votes[conv].items() if v == int(voter)}
        agrees = sum(vote == 1 for vote, _ in mine.values())
        assert agrees >= 3 and sum(vote == -1 for vote, _ in mine.values()) >= 3
        train, test = by_user[user]["train"], by_user[user]["test"]
        assert 0 < len(train) <= 24 and 0 < len(test) <= 12
        sides = {}
        for kind, pairs in (("train", train), ("test", test)):
            ids = [tuple(map(int, p.pair_id.split("/")[1].split(">"))) for p in pairs]
            assert all(mine[a][0] == 1 and mine[d][0] == -1 for a, d in ids)
            sides[kind] = ({a for a, _ in ids}, {d for _, d in ids})
        for side in (0, 1):  # agreed, disagreed: test statements voted after training ones
            assert not sides["train"][side] & sides["test"][side]
            latest_train = max(mine[c][1] for c in sides["train"][side])
            assert latest_train <= min(mine[c][1] for c in sides["test"][side])


def test_real_generation_items_are_kept_out_of_profile_and_pairs():
    data = load(real_data(), limit=6, conversations=SMALL)
    assert data.items, "the chosen users should include statement authors"
    for item in data.items:
        texts = {e.input for e in data.profiles[item.user]}
        texts |= {
            t
            for p in data.train_pairs + data.test_pairs
            if p.user == item.user
            for t in (p.chosen, p.rejected)
        }
        assert item.reference not in texts
        assert item.prompt == f"Write a statement you agree with about: {item.input}"
    assert {e.output for entries in data.profiles.values() for e in entries} == {
        "agree",
        "disagree",
    }


def test_real_load_is_deterministic():
    first = load(real_data(), limit=4, conversations=SMALL)
    again = load(real_data(), limit=4, conversations=SMALL)
    assert (first.train_pairs, first.test_pairs) == (again.train_pairs, again.test_pairs)
    other_seed = load(real_data(), limit=4, conversations=SMALL, seed="1")
    assert other_seed.train_pairs != first.train_pairs


def test_real_voter_count_matches_the_data_readme():
    data = load(real_data(), limit=12)
    # README: 2,503 voters with at least 3 agrees and 3 disagrees, over 12 conversations
    assert data.provenance["eligible_users"] == 2503
    assert len({u.split(":")[0] for u in data.users}) == 12  # one user from each
    assert data.dropped["record:moderated_out"] == 639


# -- tiny files -----------------------------------------------------------------------------------

COMMENTS = [
    "timestamp,datetime,comment-id,author-id,agrees,disagrees,moderated,comment-body",
    '1,d,0,0,0,0,1,"Statement zero"',
    "2,d,1,0,0,0,1,Statement one",
    "3,d,2,5,0,0,0,Statement two by voter five",
    "4,d,3,0,0,0,-1,Moderated out",
    "5,d,4,0,0,0,1,Statement four",
    '6,d,5,0,0,0,1,"Statement five, quoted"',
    "7,d,6,7,0,0,1,Statement six by voter seven",
    "8,d,7,x,0,0,1,Bad author",
]
VOTES = [
    "timestamp,datetime,comment-id,voter-id,vote",
    # voter 5 wrote statement 2; changes 4 from agree to disagree; votes on moderated 3
    "10,d,0,5,1",
    "11,d,1,5,1",
    "12,d,2,5,1",
    "13,d,3,5,1",
    "14,d,4,5,1",
    "15,d,5,5,-1",
    "16,d,6,5,-1",
    "30,d,4,5,-1",
    # voter 7: two disagrees only
    "10,d,0,7,1",
    "11,d,1,7,1",
    "12,d,2,7,1",
    "13,d,4,7,-1",
    "14,d,5,7,-1",
    "15,d,6,7,0",
    # voter 8: eligible, wrote nothing
    "20,d,0,8,1",
    "21,d,1,8,1",
    "22,d,2,8,1",
    "23,d,4,8,-1",
    "24,d,5,8,-1",
    "25,d,6,8,-1",
    # bad rows
    "26,d,6,9,2",
    "27,d,99,9,1",
    "28,d,7,9,1",
]


def conversation(
    root: Path, name: str, topic: str | None = "Parks in town", comments=COMMENTS, votes=VOTES
) -> None:
    folder = root / "polis" / name
    folder.mkdir(parents=True)
    summary = [f"topic,{topic}"] if topic is not None else []
    (folder / "summary.csv").write_text("\n".join([*summary, "url,x", ""]), encoding="utf-8")
    (folder / "comments.csv").write_text("\n".join([*comments, ""]), encoding="utf-8")
    (folder / "votes.csv").write_text("\n".join([*votes, ""]), encoding="utf-8")


def test_tiny_conversation_rules_pairs_profile_and_item(tmp_path):
    conversation(tmp_path, "town")
    data = load(tmp_path)
    assert data.users == ["town:5", "town:8"]  # voter 7 has two disagrees
    pairs = [p.pair_id for p in data.train_pairs if p.user == "town:5"]
    tests = [p.pair_id for p in data.test_pairs if p.user == "town:5"]
    # y* (statement 2) leaves the pairs; 4 ends as a disagree (the last vote). Agreed 0, 1 and
    # disagreed 5, 6, 4 in voting order: the latest of each (1; 4) are test statements, so the
    # training pairs combine 0 with 5 and 6 (ordered by the later vote: 15, 16)
    assert pairs == ["town:5/0>5", "town:5/0>6"]
    assert tests == ["town:5/1>4"]
    profile = [(e.doc_id, e.output) for e in data.profiles["town:5"]]
    assert profile == [("town:0", "agree"), ("town:5", "disagree"), ("town:6", "disagree")]
    (item,) = data.items
    assert (item.item_id, item.reference, item.input) == (
        "town:5/2",
        "Statement two by voter five",
        "Parks in town",
    )
    pair = data.test_pairs[0]
    assert (pair.chosen, pair.rejected) == ("Statement one", "Statement four")


def test_tiny_conversation_bad_records_are_named(tmp_path):
    conversation(tmp_path, "town")
    data = load(tmp_path)
    comments, votes = (tmp_path / "polis" / "town" / f for f in ("comments.csv", "votes.csv"))
    errors = data.provenance["data_errors"]
    assert f"{comments}: record 9: field 'author-id': expected an integer, got 'x'" in errors
    assert f"{votes}: record 22: field 'vote': expected one of [-1, 0, 1], got 2" in errors
    assert f"{votes}: record 23: field 'comment-id': 99 is not in comments.csv" in errors
    assert data.dropped == {
        "record:bad_comment": 1,
        "record:bad_vote": 2,
        "record:moderated_out": 1,
        "user:too_few_agrees_or_disagrees": 1,
    }
    # the vote on the broken comment 7 (line 24) is dropped with it, without an error of its own
    assert data.provenance["votes"] == {"votes_on_dropped_statements": 2, "votes_superseded": 1}


def test_a_broken_conversation_is_dropped_and_the_limit_spreads_over_the_rest(tmp_path):
    conversation(tmp_path, "town")
    conversation(tmp_path, "lake", topic="The lake")
    conversation(tmp_path, "river", topic=None)
    data = load(tmp_path, limit=2)
    # round robin over lake, town; in each, users with generation items first
    assert data.users == ["lake:5", "town:5"]
    assert data.dropped["conversation:unreadable"] == 1
    river = tmp_path / "polis" / "river" / "summary.csv"
    assert (
        f"{river}: record -: field 'topic': missing (no row 'topic,...')"
        in data.provenance["data_errors"]
    )
    only = load(tmp_path, conversations="lake")
    assert {u.split(":")[0] for u in only.users} == {"lake"}


def test_cap_and_share_options(tmp_path):
    conversation(tmp_path, "town")
    # voter 8: half of the agreed (0, 1, 2) and disagreed (4, 5, 6), rounded up, are test
    # statements: 2 x 2 test combinations, of which 3 are drawn; 1 x 1 training one
    data = load(tmp_path, max_test_pairs="3", test_share="0.5")
    assert sum(p.user == "town:8" for p in data.test_pairs) == 3
    assert [p.pair_id for p in data.train_pairs if p.user == "town:8"] == ["town:8/0>4"]
    data = load(tmp_path, max_train_pairs="1")  # one of the 2 x 2 training combinations
    (drawn,) = [p.pair_id for p in data.train_pairs if p.user == "town:8"]
    assert drawn in {f"town:8/{a}>{d}" for a in (0, 1) for d in (4, 5)}


def test_missing_data_and_bad_options(tmp_path):
    with pytest.raises(DataNotFound, match=r"polis holds no \*/votes.csv"):
        load(tmp_path)
    conversation(tmp_path, "town")
    with pytest.raises(DataError, match="field 'conversations': no conversation folder 'sea'"):
        load(tmp_path, conversations="sea")
    with pytest.raises(DataError, match="field 'min_votes': expected at least 1"):
        load(tmp_path, min_votes="0")


def test_registers_the_suite():
    from pytest_prefalign.registry import Registry, add_builtins

    registry = Registry()
    add_builtins(registry, "polis")
    suite = registry.suite("polis")
    assert isinstance(suite, polis.Polis)
    assert (suite.name, suite.source) == ("polis", "polis") and "CC BY 4.0" in suite.licence


def test_the_users_with_the_most_statements_of_their_own_come_first():
    from prefalign_suites.polis.voters import Voter, choose
    from pytest_prefalign.api import Item

    def voter(conv: str, voter_id: int, statements: int) -> Voter:
        user = f"{conv}:{voter_id}"
        items = [Item(f"{user}/{n}", user, "t", "p", "s") for n in range(statements)]
        return Voter(user, conv, [], items, [], [])

    found = [voter("lake", 1, 1), voter("lake", 2, 0), voter("lake", 3, 3), voter("town", 4, 2)]
    found += [voter("town", 5, 3), voter("town", 6, 1)]
    assert [v.user for v in choose(found, 4)] == ["lake:3", "town:5", "lake:1", "town:4"]
    # among equals, the order found (voter id)
    assert [v.user for v in choose(found, None)] == [v.user for v in found]
