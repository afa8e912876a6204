"""The suites whose data is a Hugging Face dataset: TL;DR (OpenAI summarize-from-feedback
comparisons) and PRISM, on tiny files written here in the published schemas, through the
``datasets`` library's types, and the fast error when the data is nowhere offline."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from prefalign_suites import prism, tldr
from prefalign_suites.hf_source import cache_paths
from pytest_prefalign.api import DataError, DataNotFound

INSTRUCTION = "Summarize the following Reddit post in one sentence.\n\n"


@pytest.fixture(autouse=True)
def offline(tmp_path_factory, monkeypatch):
    """No hub, an empty Hugging Face home, no data directory from the environment."""
    home = tmp_path_factory.mktemp("hf_home")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE", "PREFALIGN_DATA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path_factory.mktemp("prefalign_cache")))
    return home


def jsonl(path: Path, records: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records),
        encoding="utf-8",
    )
    return path


# -- TL;DR ----------------------------------------------------------------------------------------


def comparison(worker: str, split: str, post: int, choice: int = 0, **over) -> dict:
    """One comparison as OpenAI publishes it (and as the datasets features name it)."""
    record = {
        "info": {
            "id": f"t3_{post}",
            "post": f"Post number {post}  text.",
            "title": f"Title {post}",
            "subreddit": "relationships",
        },
        "summaries": [
            {"text": f"Summary A of {post} by {worker}", "policy": "ref", "note": None},
            {"text": f"Summary B of {post} by {worker}", "policy": "sup", "note": None},
        ],
        "choice": choice,
        "worker": worker,
        "batch": "batch3",
        "split": split,
        "extra": {"confidence": 7},
    }
    record.update(over)
    return record


def tldr_records() -> list:
    records = []
    for w, worker in enumerate(["w1", "w2", "w3", "w4"]):  # in both splits
        records += [comparison(worker, "train", 10 * w + n, choice=n % 2) for n in range(5)]
        records += [comparison(worker, "valid1", 100 + 10 * w + n) for n in range(3)]
    records += [comparison("w5", "train", 900)]  # train only: not a LoRe user
    return records


def load_tldr(path: Path, limit: int | None = None, **options: str):
    return tldr.Tldr().load(None, limit=limit, options={"path": str(path), **options})


def test_tldr_users_are_workers_in_both_splits_halved_seen_and_unseen(tmp_path):
    path = jsonl(tmp_path / "batch3.json", tldr_records())
    seen = load_tldr(path)
    unseen = load_tldr(path, users="unseen")
    both = load_tldr(path, users="all")
    assert len(seen.users) == len(unseen.users) == 2
    assert set(seen.users) | set(unseen.users) == {"tldr:w1", "tldr:w2", "tldr:w3", "tldr:w4"}
    assert set(both.users) == set(seen.users) | set(unseen.users)
    assert seen.dropped == {"user:not_in_both_splits": 1}
    assert (seen.provenance["seen_users"], seen.provenance["unseen_users"]) == (2, 2)


def test_tldr_pairs_follow_the_choice_and_the_splits(tmp_path):
    data = load_tldr(jsonl(tmp_path / "batch3.json", tldr_records()), users="all")
    w1 = [p for p in data.train_pairs if p.user == "tldr:w1"]
    assert [p.pair_id for p in w1] == [f"tldr:w1/batch3.json:{n}" for n in range(1, 6)]
    assert [p.chosen for p in w1][:2] == ["Summary A of 0 by w1", "Summary B of 1 by w1"]
    assert [p.rejected for p in w1][:2] == ["Summary B of 0 by w1", "Summary A of 1 by w1"]
    assert w1[0].prompt == (
        f"{INSTRUCTION}SUBREDDIT: r/relationships\nTITLE: Title 0\n"
        "POST: Post number 0 text.\n\nTL;DR:"
    )
    assert sum(p.user == "tldr:w1" for p in data.test_pairs) == 3  # all validation pairs
    assert [e.output for e in data.profiles["tldr:w1"]] == [p.chosen for p in w1]
    items = [i for i in data.items if i.user == "tldr:w1"]
    assert [i.item_id for i in items] == ["tldr:w1/t3_100", "tldr:w1/t3_101", "tldr:w1/t3_102"]
    assert all(i.reference is None for i in items)


def test_tldr_caps_and_limit(tmp_path):
    path = jsonl(tmp_path / "batch3.json", tldr_records())
    data = load_tldr(
        path,
        users="all",
        max_train_pairs="3",
        max_train_pairs_unseen="2",
        max_test_pairs="1",
        items_per_user="1",
    )
    counts = {u: sum(p.user == u for p in data.train_pairs) for u in data.users}
    seen = set(load_tldr(path).users)
    assert counts == {u: 3 if u in seen else 2 for u in data.users}
    assert len(data.test_pairs) == len(data.items) == 4
    again = load_tldr(path, users="all", max_train_pairs="3", max_train_pairs_unseen="2")
    assert [p.pair_id for p in again.train_pairs] == [p.pair_id for p in data.train_pairs]
    assert len(load_tldr(path, limit=1).users) == 1


def test_tldr_bad_records_are_dropped_and_named(tmp_path):
    info = tldr_records()[0]["info"]
    bad = [
        comparison("w1", "train", 1, choice=2),
        comparison("w1", "train", 2, summaries=[{"text": "only one"}]),
        comparison("", "train", 3),
        comparison("w1", "test", 4),
        comparison("w1", "train", 5, info={"id": "cnn1", "article": "News.", "post": None}),
        comparison("w1", "train", 6, info={**info, "post": 7}),
        comparison("w1", "train", 8, summaries=[{"text": "same"}, {"text": " same "}]),
        "{broken",
    ]
    path = jsonl(tmp_path / "batch3.json", tldr_records() + bad)
    data = load_tldr(path)
    errors, n = data.provenance["data_errors"], len(tldr_records())
    assert f"{path}: record {n + 1}: field 'choice': expected one of [0, 1], got 2" in errors
    assert f"{path}: record {n + 2}: field 'summaries': expected 2 summaries, got 1" in errors
    assert f"{path}: record {n + 3}: field 'worker': empty" in errors
    assert (
        f"{path}: record {n + 4}: field 'split': expected one of train, valid1, valid2, "
        "validation, got 'test'" in errors
    )
    assert f"{path}: record {n + 6}: field 'info.post': expected a string, got int" in errors
    assert any(
        e.startswith(f"{path}: record {n + 8}: field '(whole record)': not valid JSON")
        for e in errors
    )
    assert data.dropped == {
        "record:bad_comparison": 5,
        "record:not_a_reddit_post": 1,
        "pair:identical_summaries": 1,
        "record:unreadable": 1,
        "user:not_in_both_splits": 1,
    }


def test_tldr_from_a_local_copy_in_the_data_directory(tmp_path):
    jsonl(
        tmp_path / "openai" / "summarize_from_feedback" / "comparisons" / "batch3.json",
        tldr_records(),
    )
    data = tldr.Tldr().load(tmp_path, limit=None, options={})
    assert len(data.users) == 2
    assert data.source == str(tmp_path / "openai" / "summarize_from_feedback")
    # the plugin may pass the dataset's own folder
    own = tldr.Tldr().load(tmp_path / "openai" / "summarize_from_feedback", limit=None, options={})
    assert own.train_pairs == data.train_pairs


def test_tldr_through_the_datasets_library(tmp_path, offline, monkeypatch):
    datasets = pytest.importorskip("datasets")
    records = tldr_records()
    loaded = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list([r for r in records if r["split"] == "train"]),
            "validation": datasets.Dataset.from_list([r for r in records if r["split"] != "train"]),
        }
    )
    asked = []

    def load_dataset(name, config):
        asked.append((name, config))
        return loaded

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    cache_paths(tldr.suite.DATASET)[0].mkdir(parents=True)  # something is cached
    data = tldr.Tldr().load(None, limit=None, options={"users": "all"})
    assert asked == [("openai/summarize_from_feedback", "comparisons")]
    assert len(data.users) == 4 and len(data.test_pairs) == 12
    assert data.source == "hf:openai/summarize_from_feedback (comparisons)"
    # ids name the dataset split and the row within it
    assert all(re.fullmatch(r"tldr:w\d/train:\d+", p.pair_id) for p in data.train_pairs)
    assert all(re.fullmatch(r"tldr:w\d/validation:\d+", p.pair_id) for p in data.test_pairs)
    assert "tldr:w1/train:0" in {p.pair_id for p in data.train_pairs}


def test_offline_without_data_fails_fast_and_names_every_place(offline):
    started = time.perf_counter()
    with pytest.raises(DataNotFound) as err:
        tldr.Tldr().load(None, limit=2, options={})
    assert time.perf_counter() - started < 5
    message = str(err.value)
    hub, built = cache_paths(tldr.suite.DATASET)
    assert "dataset openai/summarize_from_feedback (config comparisons) not found" in message
    assert f"Hugging Face cache: {hub} (absent)" in message
    assert f"Hugging Face cache: {built} (absent)" in message
    assert str(offline / "hub" / "datasets--openai--summarize_from_feedback") == str(hub)
    assert "Hugging Face hub: offline (HF_HUB_OFFLINE=1)" in message
    assert "$PREFALIGN_DATA: not set" in message and "user cache:" in message
    assert "--prefalign-data" in message and "option path" in message


def test_offline_with_a_data_directory_names_the_folder_looked_for(tmp_path):
    with pytest.raises(DataNotFound) as err:
        prism.Prism().load(tmp_path, limit=2, options={})
    assert (
        f"data directory: {tmp_path / 'HannahRoseKirk' / 'prism-alignment'} (no such "
        "directory)" in str(err.value)
    )
    assert "dataset HannahRoseKirk/prism-alignment (config conversations)" in str(err.value)


def test_a_missing_path_option_is_named(tmp_path):
    with pytest.raises(DataNotFound, match="nowhere: no such file"):
        load_tldr(tmp_path / "nowhere")


# -- PRISM ----------------------------------------------------------------------------------------


def conversation(cid: str, user: str, turns: list) -> dict:
    """A conversation as PRISM publishes it: ``turns`` = [(message, [(score, text, chosen)])]."""
    history = []
    for t, (message, responses) in enumerate(turns):
        history.append(
            {
                "turn": t,
                "role": "user",
                "content": message,
                "within_turn_id": None,
                "model_name": None,
                "model_provider": None,
                "score": None,
                "if_chosen": None,
            }
        )
        history += [
            {
                "turn": t,
                "role": "model",
                "content": text,
                "within_turn_id": k,
                "model_name": "m",
                "model_provider": "p",
                "score": score,
                "if_chosen": chosen,
            }
            for k, (score, text, chosen) in enumerate(responses)
        ]
    return {
        "conversation_id": cid,
        "user_id": user,
        "conversation_type": "unguided",
        "conversation_turns": len(turns),
        "opening_prompt": turns[0][0],
        "conversation_history": history,
        "open_feedback": "",
    }


def prism_records() -> list:
    records = []
    for n in range(6):
        records.append(
            conversation(
                f"c{n}",
                "user1",
                [
                    (
                        f"Question {n}?",
                        [
                            (90, f"Best {n}", True),
                            (40, f"Weak {n}", False),
                            (40, f"Weak too {n}", False),
                            (70, f"Good {n}", False),
                        ],
                    ),
                    (f"Follow-up {n}?", [(60, f"Tie A {n}", True), (60, f"Tie B {n}", False)]),
                    (f"Third {n}?", [(20, f"Low {n}", False), (80, f"High {n}", True)]),
                ],
            )
        )
    records.append(conversation("d0", "user2", [("Hi?", [(50, "a", True), (10, "b", False)])]))
    return records


def load_prism(path: Path, limit: int | None = None, **options: str):
    return prism.Prism().load(None, limit=limit, options={"path": str(path), **options})


def test_prism_chosen_is_the_highest_rated_response_and_the_others_rejected(tmp_path):
    data = load_prism(jsonl(tmp_path / "conversations.jsonl", prism_records()))
    assert data.users == ["prism:user1"]
    # every follow-up turn of user1 is a tie (user2, dropped, has no tie)
    assert data.dropped == {"user:too_few_conversations": 1, "turn:all_ratings_equal": 6}
    pairs = [p for p in data.train_pairs + data.test_pairs if "/c0/" in p.pair_id]
    assert [(p.pair_id, p.chosen, p.rejected) for p in pairs] == [
        ("prism:user1/c0/t0/m1", "Best 0", "Weak 0"),
        ("prism:user1/c0/t0/m2", "Best 0", "Weak too 0"),
        ("prism:user1/c0/t0/m3", "Best 0", "Good 0"),
        ("prism:user1/c0/t2/m0", "High 0", "Low 0"),
    ]
    assert pairs[0].prompt == "Question 0?"
    # the dialogue so far, continuing with the response the participant chose
    assert pairs[3].prompt == (
        "User: Question 0?\n\nAssistant: Best 0\n\nUser: Follow-up 0?\n\n"
        "Assistant: Tie A 0\n\nUser: Third 0?"
    )
    turn_only = load_prism(tmp_path / "conversations.jsonl", context="turn")
    assert {p.prompt for p in turn_only.test_pairs} <= {
        f"{w} {n}?" for n in range(6) for w in ("Question", "Third")
    }


def test_prism_splits_conversations_half_and_half(tmp_path):
    data = load_prism(jsonl(tmp_path / "conversations.jsonl", prism_records()))
    conv = {
        kind: {p.pair_id.split("/")[1] for p in pairs}
        for kind, pairs in (("train", data.train_pairs), ("test", data.test_pairs))
    }
    assert len(conv["train"]) == len(conv["test"]) == 3
    assert conv["train"] | conv["test"] == {f"c{n}" for n in range(6)}
    # the profile: the rated turns (t0 and t2) of the training conversations, in file order
    assert [e.doc_id for e in data.profiles["prism:user1"]] == [
        f"{c}/t{t}" for c in sorted(conv["train"], key=lambda c: int(c[1:])) for t in (0, 2)
    ]
    assert {i.item_id.split("/")[1] for i in data.items} <= conv["test"]
    assert len(data.items) == 5 and all(i.reference is None for i in data.items)
    profile = data.profiles["prism:user1"][0]
    assert prism.Prism().example(profile) == f"User: {profile.input}\nAssistant: {profile.output}"


def test_prism_bad_records_and_turns_are_dropped_and_named(tmp_path):
    broken = conversation(
        "c9",
        "user1",
        [("Q?", [(90, "A", True), (40, "B", False)]), ("Q2?", [(90, "C", True), (40, "D", False)])],
    )
    broken["conversation_history"][4]["score"] = None  # turn 1, first response
    records = [
        *prism_records(),
        broken,
        {**prism_records()[0]},
        {"conversation_id": "c8", "user_id": "user1", "conversation_history": "none"},
    ]
    path = jsonl(tmp_path / "conversations.jsonl", records)
    data = load_prism(path)
    errors = data.provenance["data_errors"]
    assert f"{path}: record 8: field 'conversation_history[4].score': missing" in errors
    assert (
        f"{path}: record 9: field 'conversation_id': 'c0' also at record 1; every copy is "
        "dropped" in errors
    )
    assert "/c0/" not in " ".join(p.pair_id for p in data.train_pairs + data.test_pairs)
    assert f"{path}: record 10: field 'conversation_history': expected a list, got str" in errors
    assert data.dropped["record:bad_turn"] == 1
    # c9 keeps its first turn (turns after a broken one lose their context and are not used)
    assert [p.pair_id for p in data.train_pairs + data.test_pairs if "/c9/" in p.pair_id] == [
        "prism:user1/c9/t0/m1"
    ]


def test_prism_through_the_datasets_library(monkeypatch):
    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_list(prism_records())  # nulls and mixed rows, as on the hub
    monkeypatch.setattr(
        datasets, "load_dataset", lambda name, config: datasets.DatasetDict({"train": table})
    )
    cache_paths(prism.suite.DATASET)[1].mkdir(parents=True)
    data = prism.Prism().load(None, limit=None, options={})
    assert data.users == ["prism:user1"] and len(data.train_pairs + data.test_pairs) == 24
    assert data.source == "hf:HannahRoseKirk/prism-alignment (conversations)"


def test_hf_suites_register_without_needing_a_data_directory():
    from pytest_prefalign.registry import Registry, add_builtins

    registry = Registry()
    add_builtins(registry, "tldr", "prism")
    suites = [registry.suite(name) for name in ("tldr", "prism")]
    assert isinstance(suites[0], tldr.Tldr) and isinstance(suites[1], prism.Prism)
    assert [(s.name, s.source, s.requires_data_dir) for s in suites] == [
        ("tldr", "openai/summarize_from_feedback", False),
        ("prism", "HannahRoseKirk/prism-alignment", False),
    ]


def test_unknown_option_is_named(tmp_path):
    with pytest.raises(DataError, match="field 'context': expected one of 'history', 'turn'"):
        load_prism(jsonl(tmp_path / "c.jsonl", prism_records()), context="all")
