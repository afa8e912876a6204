"""Pref-LaMP on the original LaMP-5 files (``source = lamp5``), written here in their schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefalign_suites.pref_lamp import PrefLamp
from pytest_prefalign.api import DataError, DataNotFound

PREFIX = "Generate a title for the following abstract of a paper: "


class FakeReference:
    name, fingerprint = "fake-reference", "fake-1"

    def generate(self, prompts, *, max_new_tokens=32, batch_size=16):
        return [[f"Zero-shot title {n}"] for n, _ in enumerate(prompts)]


def entry(pid: str, words: str) -> dict:
    return {"id": pid, "title": f"Title {pid}", "abstract": f"Abstract about {words}."}


QUESTIONS = [
    {
        "id": "100",
        "input": PREFIX + "We parse  trees.",
        "profile": [
            entry("1", "grammars"),
            entry("2", "parsers"),
            entry("3", "treebanks"),
            {"id": "4", "title": "Shared", "abstract": "We tag words."},
        ],
    },
    {
        "id": "101",
        "input": PREFIX + "We tag words.",
        "profile": [entry("5", "speech"), entry("6", "noise"), entry("7", "signals")],
    },
    {
        "id": "102",
        "input": PREFIX + "We translate.",
        "profile": [entry("8", "alignment"), entry("9", "decoding"), entry("10", "beams")],
    },
]
GOLDS = {
    "task": "LaMP_5",
    "golds": [
        {"id": "100", "output": "Parsing Trees"},
        {"id": "101", "output": "Tagging Words"},
        {"id": "102", "output": "Translating"},
    ],
}


def write(folder: Path, questions=QUESTIONS, golds=GOLDS, split: str = "dev") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}_questions.json").write_text(json.dumps(questions), encoding="utf-8")
    (folder / f"{split}_outputs.json").write_text(json.dumps(golds), encoding="utf-8")
    return folder


def load(folder: Path, limit: int | None = None, **options: str):
    opts = {
        "source": "lamp5",
        "lamp5_dir": str(folder),
        "min_profile": "1",
        "negatives": "generated",
        **options,
    }
    return PrefLamp().load(None, limit=limit, options=opts)


def test_each_question_is_a_user_with_its_profile_and_one_test_item(tmp_path):
    data = load(write(tmp_path / "lamp5"))
    assert data.users == ["lamp5:100", "lamp5:101", "lamp5:102"]
    first = [i for i in data.items if i.user == "lamp5:100"]
    assert [(i.item_id, i.input, i.reference) for i in first] == [
        ("lamp5:100/100", "We parse trees.", "Parsing Trees")
    ]
    assert first[0].prompt == PREFIX + "We parse trees."
    assert [e.doc_id for e in data.profiles["lamp5:101"]] == ["5", "6", "7"]
    assert data.source == str(tmp_path / "lamp5" / "dev_questions.json")


def test_leak_rule_removes_a_test_abstract_from_other_profiles(tmp_path):
    data = load(write(tmp_path / "lamp5"))
    # profile entry 4 of user 100 is user 101's question ("We tag words.")
    assert [e.doc_id for e in data.profiles["lamp5:100"]] == ["1", "2", "3"]
    assert data.provenance["leak_rule_removed_profile_papers"] == 1
    # with user 101 not in the run, entry 4 stays
    alone = load(write(tmp_path / "lamp5"), limit=1)
    assert [e.doc_id for e in alone.profiles["lamp5:100"]] == ["1", "2", "3", "4"]


def test_training_pairs_come_from_profiles_and_test_pairs_from_questions(tmp_path):
    data = load(write(tmp_path / "lamp5"), limit=2)
    PrefLamp().build_pairs(data, FakeReference(), tmp_path / "cache")
    assert [p.pair_id for p in data.test_pairs] == ["lamp5:100/100", "lamp5:101/101"]
    assert [p.pair_id for p in data.train_pairs] == [
        "lamp5:100/1",
        "lamp5:100/2",
        "lamp5:100/3",
        "lamp5:101/5",
        "lamp5:101/6",
        "lamp5:101/7",
    ]
    pair = data.train_pairs[0]
    assert (pair.chosen, pair.prompt) == ("Title 1", PREFIX + "Abstract about grammars.")
    assert pair.rejected.startswith("Zero-shot title")


def test_other_author_negatives_come_from_users_without_the_paper(tmp_path):
    data = load(write(tmp_path / "lamp5"), negatives="other_author")
    own_titles = {u: {e.output for e in data.profiles[u]} for u in data.users}
    for pair in data.train_pairs + data.test_pairs:
        assert pair.rejected not in own_titles[pair.user]
        assert pair.rejected not in {"Parsing Trees", "Tagging Words", "Translating"}
    assert len(data.test_pairs) == 3


def test_bad_records_are_dropped_and_named(tmp_path):
    questions = [
        QUESTIONS[0],
        {"id": "200", "input": "Summarize this: nothing", "profile": []},
        {"id": "201", "input": PREFIX + "No gold here.", "profile": [entry("11", "x")]},
        {"id": "102", "input": PREFIX + "Again.", "profile": [entry("12", "y")]},
        {**QUESTIONS[2], "profile": [*QUESTIONS[2]["profile"], {"id": "13", "title": 5}]},
        {"id": True, "input": PREFIX + "x", "profile": []},
    ]
    golds = {"task": "LaMP_5", "golds": [*GOLDS["golds"], {"id": "200", "output": ""}]}
    folder = write(tmp_path / "lamp5", questions, golds)
    data = load(folder)
    qfile, ofile = folder / "dev_questions.json", folder / "dev_outputs.json"
    errors = data.provenance["data_errors"]
    assert (
        f"{qfile}: record 1: field 'input': expected it to start with {PREFIX.strip()!r}" in errors
    )
    assert f"{qfile}: record 2: field 'id': no gold output for '201' in the outputs file" in errors
    assert f"{qfile}: record 4: field 'profile[3].title': expected a string, got int" in errors
    assert f"{qfile}: record 5: field 'id': expected a non-empty string or an integer" in errors
    assert f"{ofile}: record 3: field 'output': empty" in errors
    assert any(
        e.startswith(f"{qfile}: record 4: field 'id': '102' also at record 3") for e in errors
    )
    assert data.dropped == {
        "record:bad_question": 2,
        "record:question_without_gold": 1,
        "record:bad_profile_entry": 1,
        "record:duplicate_question_id": 2,
        "record:bad_gold": 1,
    }
    assert data.users == ["lamp5:100"]


def test_wrong_task_is_fatal(tmp_path):
    folder = write(tmp_path / "lamp5", golds={"task": "LaMP_4", "golds": []})
    with pytest.raises(
        DataError,
        match=r"dev_outputs.json: record 1: field 'task': expected "
        r"LaMP_5, got 'LaMP_4'",
    ):
        load(folder)


def test_split_choice_and_relative_folder(tmp_path, monkeypatch):
    write(tmp_path / "data" / "lamp5", split="train")
    monkeypatch.chdir(tmp_path / "data")
    data = load(Path("lamp5"))  # relative to the current directory
    assert data.source.endswith("train_questions.json")
    write(tmp_path / "data" / "lamp5", questions=QUESTIONS[:1], split="dev")
    assert len(load(tmp_path / "data" / "lamp5").users) == 1  # dev is preferred
    assert len(load(tmp_path / "data" / "lamp5", lamp5_split="train").users) == 3
    write(tmp_path / "only_dev", split="dev")
    with pytest.raises(DataNotFound, match="holds no train_questions.json"):
        load(tmp_path / "only_dev", lamp5_split="train")
    with pytest.raises(DataError, match="field 'lamp5_split': expected one of '', 'dev', 'train'"):
        load(tmp_path / "only_dev", lamp5_split="test")


def test_missing_folder_and_missing_option(tmp_path):
    with pytest.raises(DataNotFound, match="does not exist"):
        load(tmp_path / "nowhere")
    with pytest.raises(DataError, match="field 'lamp5_dir': needed with source = lamp5"):
        PrefLamp().load(None, limit=None, options={"source": "lamp5"})
