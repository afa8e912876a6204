"""Bad data named to the record, long texts held to the model's window: a pytester run of the
pref_lamp suite with the tiny model on a tiny data folder holding one of each fault (a huge
abstract, an unknown paper id, a broken line, bytes that are not UTF-8, a user listed twice, an
empty title) and an abstract and a title longer than the model reads. Each fault is named with
its file and line (or record) in one warning and in the run file, the other items are
evaluated, and the run file reads back; ``prefalign data --data DIR`` lists the same faults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_suite_pref_lamp import paper

from pytest_prefalign.datadir import data_main
from pytest_prefalign.runs import records
from pytest_prefalign.runs.parts import Data

SUITE_TOML = '[suite]\nname = "pref_lamp"\n\n[options]\nnegatives = "other_author"\n'
HUGE = 1_000_000  # characters: over the data's limit, the record is dropped
LONG = 30_000  # characters: under it, but more tokens than the tiny model reads


def faulty_folder(root: Path) -> Path:
    """Three authors of five papers each (one test item each), and one of each fault."""
    lines: list[str | bytes] = []
    authors = []
    for name in ("Ann", "Bob", "Cy"):
        ids = [f"{name}{i}" for i in range(5)]
        for i, aid in enumerate(ids):
            abstract = f"We study {name} topic {i} with models and data."
            title = f"{name} title number {i}"
            if aid == "Cy4":  # Cy's test item: longer than the tiny model's window
                abstract = ("word " * (LONG // 5)).strip()
                title = ("long " * 2000).strip()
            lines.append(json.dumps(paper(aid, title, abstract, [name], 2015 + i)))
        authors.append({"user_id": f"acl:{name}", "author": name, "paper_ids": ids})
    lines += [
        json.dumps(paper("huge", "Huge", "x " * (HUGE // 2), ["Ann"])),  # line 16
        "{broken json",  # line 17
        b'{"anthology_id": "\xff\xfe", "title": "T"}',  # line 18
        json.dumps(paper("empty", "", "An abstract", ["Bob"])),  # line 19
    ]
    authors[0]["paper_ids"] = ["huge", "nope", *authors[0]["paper_ids"]]
    authors.append({"user_id": "acl:Dee", "author": "Dee", "paper_ids": ["Bob0"]})
    authors.append({"user_id": "acl:Dee", "author": "Dee", "paper_ids": ["Bob1"]})
    folder = root / "acl-anthology"
    folder.mkdir(parents=True)
    (folder / "authors.json").write_text(json.dumps(authors))
    blob = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
    (folder / "papers-00.jsonl").write_bytes(blob)
    return folder


def expected_faults(folder: Path) -> list[tuple[str, object, object, str, str]]:
    """(file, line, id, field, start of the reason) of every fault of ``faulty_folder``."""
    papers, people = str(folder / "papers-00.jsonl"), str(folder / "authors.json")
    return [
        (papers, 16, "huge", "abstract", "1,000,000 characters"),
        (papers, 17, None, "(whole record)", "not valid JSON"),
        (papers, 18, None, "(whole record)", "not valid UTF-8"),
        (papers, 19, "empty", "title", "empty"),
        (people, 0, "acl:Ann", "paper_ids[0]", "unknown paper id 'huge'"),
        (people, 0, "acl:Ann", "paper_ids[1]", "unknown paper id 'nope'"),
        (people, 3, "acl:Dee", "user_id", "'acl:Dee' repeats later"),
        (people, 4, "acl:Dee", "user_id", "'acl:Dee' also at record 3"),
    ]


def assert_named(faults: list[dict], folder: Path) -> None:
    got = [(f["file"], f["line"], f["id"], f["field"], f["reason"]) for f in faults]
    for file, line, ident, field, reason in expected_faults(folder):
        assert any(g[:4] == (file, line, ident, field) and g[4].startswith(reason) for g in got), (
            file,
            line,
            ident,
            field,
            reason,
            got,
        )


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    data = pytester.mkdir("data")
    faulty_folder(data)
    pytester.makeini(
        "[pytest]\nprefalign_models = tiny = tiny\nprefalign_sizes = tiny\n"
        f"prefalign_data = {data}\n"
    )
    pytester.mkdir("suites").joinpath("pref_lamp").mkdir()
    (pytester.path / "suites" / "pref_lamp" / "suite.toml").write_text(SUITE_TOML)
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return pytester


def test_every_fault_is_named_and_the_rest_is_evaluated(project: pytest.Pytester) -> None:
    folder = project.path / "data" / "acl-anthology"
    result = project.runpytest_subprocess(
        "--prefalign",
        "suites/pref_lamp",
        "-p",
        "no:cacheprovider",
        "--prefalign-methods",
        "base",
        "--prefalign-json",
        "run.json",
    )
    out = result.stdout.str()
    # one warning of the data's; the memory check's warns besides it where the machine has less
    # memory available now than the run is estimated to need (another job holding it, say)
    memory = out.count("the run is likely to exceed its memory")
    result.assert_outcomes(passed=1, warnings=1 + memory)
    assert "Traceback" not in out
    # the data's warning: the first faults, named, and the count of the rest
    result.stdout.fnmatch_lines(
        [
            "*PrefalignWarning: suite pref_lamp (tiny): 12 record(s) of the data dropped or "
            "altered*",
            f"*{folder / 'papers-00.jsonl'}:16: id 'huge': field 'abstract': 1,000,000 characters*",
            f"*{folder / 'papers-00.jsonl'}:17: field '(whole record)': not valid JSON*",
            "*... and 7 more",
        ]
    )
    run = records.read(project.path / "run.json")  # complete and readable
    (row,) = run.results
    assert row.n_users == 3 and row.n_items == 6 and row.n_pairs == 6
    faults = [fault.to_json() for fault in row.data.faults]
    # named from the data's root in the run file, as the terminal names them in full above
    assert_named(faults, Path("{data}") / "acl-anthology")
    cut = {(f["id"], f["field"]): f for f in faults if f["rule"].startswith("context:")}
    assert {("acl:Cy/Cy4", "prompt"), ("acl:Cy/Cy4", "reference")} <= set(cut), cut
    prompt = cut[("acl:Cy/Cy4", "prompt")]
    assert "more than the 3,072 a prompt of model tiny may have" in prompt["reason"]
    assert "its middle is cut" in prompt["reason"]
    assert row.data.dropped["record:bad_paper"] == 4


def test_the_data_command_lists_the_faults(tmp_path, monkeypatch, capsys) -> None:
    folder = faulty_folder(tmp_path)
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    data_main(["--data", str(tmp_path)])
    out = capsys.readouterr().out
    assert "  faults: 8 record(s) dropped or altered:" in out
    for file, line, ident, field, reason in expected_faults(folder):
        named = f"{file}:{line}:" + (f" id {ident!r}:" if ident else "") + f" field {field!r}: "
        assert f"    {named}{reason}" in out, (named, out)


def test_the_run_file_checks_its_faults_and_reads_older_files() -> None:
    row = {"suite": "s", "method": "base", "size": "tiny", "data": {"source": "d"}}
    assert records.CaseResult.from_json(row).data == Data(source="d")  # written before faults
    good = {"file": "f", "line": 3, "id": None, "field": "title", "reason": "empty"}
    records.CaseResult.from_json({**row, "data": {"faults": [good, {**good, "line": None}]}})
    for bad, message in (
        ({**good, "file": None}, "field 'file': None is not a string"),
        ({**good, "line": 1.5}, "field 'line'"),
        ({**good, "id": 7}, "field 'id'"),
    ):
        with pytest.raises(records.RunFileError, match=message):
            records.CaseResult.from_json({**row, "data": {"faults": [bad]}})
    with pytest.raises(records.RunFileError, match="faults"):
        records.CaseResult.from_json({**row, "data": {"faults": "none"}})
