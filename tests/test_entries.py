"""The typed records of a run's analysis (``runs/entries.py``): the kept run files (version 2,
and 3 for those made since) read with every value they hold, upgraded to the current version,
which writes and reads back byte for byte; an older file's forms read as the readers took them;
the analysis computed now writes every field; an unusable entry is refused naming the key."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_prefalign.runs import entries, records
from pytest_prefalign.runs.entries import (
    Crisis,
    EntryError,
    InversionEntry,
    RegretEntry,
    TauEntry,
)
from pytest_prefalign.runs.records import RunFile, RunFileError

ROOT = Path(__file__).resolve().parents[1]
KEPT = sorted((ROOT / "benchmarks" / "findings-runs").glob("*.json.gz"))
FIGURES = ROOT / "tests" / "data" / "figures_main_job_tiny.json"  # a run's tau and crisis
# the tau and crisis of a findings run written before the format's later additions (no tau
# lower_95, no degenerate section): Polis 135m of 2026-12-01, kept when that run was made again
OLDER = ROOT / "tests" / "data" / "older_analysis.json"


def stored(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def text(value: Any) -> str:
    """The JSON text the run file's writer makes of ``value`` (key order included)."""
    return json.dumps(value, indent=2, sort_keys=False)


def analyses() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, stored(p)) for p in [*KEPT, FIGURES, OLDER]]


def test_the_kept_files_are_there() -> None:
    # the five runs of docs/findings.md, and the main job's figures (with degenerate entries)
    assert len(KEPT) == 5
    assert "degenerate" in stored(FIGURES)["crisis"]


def upgraded(data: dict[str, Any]) -> tuple[tuple[TauEntry, ...], Crisis]:
    """The analysis of a kept (older) run file's JSON, as the reader makes it."""
    run = records.upgrade(data)
    return entries.tau_from_json(run["tau"]), entries.crisis_from_json(run["crisis"])


DROPPED = {"significant", "flag", "p", "warning"}  # an older file's copies of other fields


@pytest.mark.parametrize(("name", "data"), analyses(), ids=[n for n, _ in analyses()])
def test_a_kept_analysis_reads_every_value_it_holds(name: str, data: dict[str, Any]) -> None:
    tau, crisis = upgraded(data)
    assert tau and all(isinstance(e, TauEntry) for e in tau)
    assert crisis.inversions and crisis.family is not None
    # every value the file holds is the record's, but the copies version 3 dropped
    pairs = [(data["tau"], tau)] + [
        (data["crisis"].get(s, []), crisis.section(s)) for s in entries.SECTIONS
    ]
    for kept, read in pairs:
        assert len(kept) == len(read)
        for before, entry in zip(kept, read, strict=True):
            now = entry.to_json()
            assert {k: v for k, v in before.items() if k not in DROPPED} == {
                k: now[k] for k in before if k not in DROPPED
            }
    # the dropped copies were the same verdict: fires (a file of version 3 has none)
    if data.get("version", 2) < 3:
        for kept, entry in zip(data["crisis"]["inversions"], crisis.inversions, strict=True):
            assert entry.fires is kept["significant"] is kept["fires"]
        for kept, entry in zip(data["crisis"]["circular"], crisis.circular, strict=True):
            assert entry.fires is kept["flag"]
    else:
        assert not any(DROPPED & set(e) for s in entries.SECTIONS for e in data["crisis"][s])
    # the current form round-trips: from_json(to_json(x)) == x
    assert entries.tau_from_json([e.to_json() for e in tau]) == tau
    assert entries.crisis_from_json(crisis.to_json()) == crisis


@pytest.mark.parametrize("path", KEPT, ids=[p.name for p in KEPT])
def test_a_kept_run_file_written_again_is_the_current_version(path: Path, tmp_path: Path) -> None:
    data = stored(path)
    run = records.RunFile.from_json(data, path.name)
    assert data["version"] in (2, 3) and run.version == records.VERSION == 3  # made before, after
    records.write(run, tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    assert list(again) == list(data) and again["version"] == 3
    # read and written again: byte for byte, and the same records
    read = records.read(tmp_path / "again.json")
    assert (read.tau, read.crisis) == (run.tau, run.crisis)
    records.write(read, tmp_path / "third.json")
    assert (tmp_path / "third.json").read_bytes() == (tmp_path / "again.json").read_bytes()


def test_the_findings_runs_lack_degenerate_entries_and_read_them_as_none() -> None:
    # written before the degenerate rows were checked: the section is absent; read, empty;
    # written now, an empty section
    data = stored(OLDER)
    assert "degenerate" not in data["crisis"]
    _, crisis = upgraded(data)
    assert crisis.degenerate == () and crisis.to_json()["degenerate"] == []


def test_records_are_frozen_and_hold_tuples() -> None:
    entry = upgraded(stored(OLDER))[0][0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.verdict = "changed"  # type: ignore[misc]
    assert isinstance(entry.methods, tuple) and isinstance(entry.ci, tuple)
    changed = dataclasses.replace(entry, p_holm=0.5, fires=True)
    assert (changed.p_holm, changed.fires) == (0.5, True) and entry.p_holm != 0.5
    # built from lists, a record holds tuples and writes lists again
    built = TauEntry("s", "135m", "args", "rm_acc", "policy_acc", ci=[0.1, 0.2], methods=["a"])
    assert built.ci == (0.1, 0.2) and built.methods == ("a",)
    assert built.to_json()["ci"] == [0.1, 0.2] and built.to_json()["methods"] == ["a"]


def test_an_empty_analysis_is_no_analysis() -> None:
    assert Crisis.none().family is None and not any(map(Crisis.none().section, entries.SECTIONS))
    assert entries.crisis_from_json(None) == entries.crisis_from_json({}) == Crisis.none()
    run = RunFile([])
    assert run.to_json()["tau"] == [] and run.to_json()["crisis"] == Crisis.none().to_json()
    assert RunFile.from_json({**run.to_json(), "crisis": None}).crisis == Crisis.none()
    # a version 2 file wrote no analysis as {}
    assert RunFile.from_json({**run.to_json(), "version": 2, "crisis": {}}).crisis == Crisis.none()


# --------------------------------------------------------------------------------------------
# Optional and plugin-defined keys
# --------------------------------------------------------------------------------------------


def inversion() -> dict[str, Any]:
    """An inversion as version 3 stores it."""
    (entry,) = records.upgrade(older_run(inversions=[stored(OLDER)["crisis"]["inversions"][0]]))[
        "crisis"]["inversions"]  # fmt: skip
    return entry


def older_run(**crisis: list[dict[str, Any]]) -> dict[str, Any]:
    """A version 2 run file's JSON with these crisis sections."""
    return {"version": 2, "results": [], "tau": [], "crisis": crisis}


def test_an_older_entry_reads_its_missing_keys_as_the_readers_did() -> None:
    # written before the run's looks were one family (no p_holm, fires) and before inversions
    # were tested (no significant): every inversion was stated then
    older = {k: v for k, v in inversion().items() if k not in ("significant", "p_holm", "fires")}
    (entry,) = RunFile.from_json(older_run(inversions=[older])).crisis.inversions
    assert entry.fires is True and entry.p_holm is None
    # written back, in the current form: every key, no copy of fires
    assert set(entry.to_json()) == {f.name for f in dataclasses.fields(InversionEntry)}
    assert "significant" not in entry.to_json()
    # a spread flag of that time was stated too
    flag = {k: v for k, v in stored(OLDER)["crisis"]["spread"][0].items() if k != "fires"}
    assert RunFile.from_json(older_run(spread=[flag])).crisis.spread[0].fires is True


def test_an_older_tau_reads_its_warning_as_the_verdict_and_its_interval_as_the_bound() -> None:
    kept = {k: v for k, v in stored(OLDER)["tau"][0].items() if k not in ("verdict", "n_users")}
    assert "lower_95" not in kept and kept["ci"]
    data = {"version": 1, "results": [], "tau": [{**kept, "warning": "too few users"}]}
    (entry,) = RunFile.from_json(data).tau
    assert entry.verdict == "too few users" and entry.lower_95 == kept["ci"][0]
    assert entry.n_users is None and "warning" not in entry.to_json()


def test_an_older_degenerate_entry_reads_its_p_as_the_p_value() -> None:
    kept = {**stored(FIGURES)["crisis"]["degenerate"][0], "p": 0.25, "p_value": 0.25}
    first = {k: v for k, v in kept.items() if k != "p_value"}  # written as ``p`` only
    for older in (kept, first):
        (entry,) = RunFile.from_json(older_run(degenerate=[older])).crisis.degenerate
        assert entry.p_value == kept["p"] and "p" not in entry.to_json()


def test_a_current_file_with_an_unknown_key_is_refused_naming_it() -> None:
    current = InversionEntry.from_json(records.upgrade(older_run(inversions=[inversion()]))[
        "crisis"]["inversions"][0]).to_json()  # fmt: skip
    with pytest.raises(EntryError, match=r"^inv: unknown field\(s\) 'effect_size'$"):
        InversionEntry.from_json({**current, "effect_size": 0.4}, "inv")
    with pytest.raises(EntryError, match=r"^inv: unknown field\(s\) 'significant'$"):
        InversionEntry.from_json({**current, "significant": True}, "inv")


def test_a_plugin_metric_is_a_name_like_any_other() -> None:
    # a y a plugin registered (tests/test_metric_plugin.py's "brevity") is a string field
    regret = RegretEntry("s", "135m", "bon", "rm_acc", "brevity", picked=("bon[longer]",))
    assert RegretEntry.from_json(json.loads(json.dumps(regret.to_json()))) == regret


# --------------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"a": None}, "inv: field 'a': None is not a string"),
        ({"x_a": "high"}, "inv: field 'x_a': 'high' is not a number"),
        (
            {"x_diff_ci": [0.1]},
            "inv: field 'x_diff_ci': [0.1] is not an interval [low, high] or null",
        ),
        ({"fires": 1}, "inv: field 'fires': 1 is not true or false"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_the_key(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(EntryError) as caught:
        InversionEntry.from_json({**inversion(), **change}, "inv")
    assert str(caught.value) == message


def test_a_missing_required_key_is_refused() -> None:
    without = {k: v for k, v in inversion().items() if k != "suite"}
    with pytest.raises(EntryError, match=r"^inv: field 'suite' is missing$"):
        InversionEntry.from_json(without, "inv")


def test_the_run_file_reader_names_the_file_and_the_entry(tmp_path: Path) -> None:
    data = stored(KEPT[0])
    data["crisis"]["regret"][1]["picked"] = "args[lore]"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RunFileError) as caught:
        records.read(path)
    assert str(caught.value) == (
        f"{path}: crisis: field 'regret'[1]: field 'picked': 'args[lore]' is not a list of names"
    )


def orders(entries: list[dict[str, Any]]) -> set[tuple[str, ...]]:
    """The key orders a list of entries has (one per kind of entry)."""
    return {tuple(e) for e in entries}


@pytest.mark.parametrize("name", ["synthetic-135m", "pref_lamp-270m", "polis-135m"])
def test_the_analysis_computed_now_writes_the_keys_the_kept_files_have(name: str) -> None:
    # a kept run's results analysed again: each kind of entry with the same keys in the same
    # order (the figures, and how many entries, may move when the statistics change; the
    # format may not)
    from pytest_prefalign.analysis import crisis

    data = stored(ROOT / "benchmarks" / "findings-runs" / f"{name}.json.gz")
    run = RunFile.from_json(data)
    tau, found = crisis.analyse(run.results)
    again = RunFile(run.results, tau=tau, crisis=found).to_json()
    assert (
        orders(again["tau"])
        == orders([e.to_json() for e in run.tau])
        == {tuple(f.name for f in dataclasses.fields(TauEntry))}
    )
    assert list(again["crisis"]) == [f.name for f in dataclasses.fields(Crisis)]
    for section in entries.SECTIONS:
        if data["crisis"].get(section):  # a kind the kept run has entries of
            assert orders(again["crisis"][section]) == orders(
                [e.to_json() for e in run.crisis.section(section)]
            ), section
    for kept in ("silent_looks", "family"):
        assert list(again["crisis"][kept]) == list(data["crisis"][kept])
