"""The typed records of a run's analysis (``runs/entries.py``): the kept run files read and
write back byte for byte, the analysis computed now writes the keys they have in their order,
an older file's missing keys and a later version's (or a plugin's) unknown keys round-trip as
they were, and an unusable entry is refused naming the key."""

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
    Family,
    InversionEntry,
    RegretEntry,
    SpreadEntry,
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


@pytest.mark.parametrize(("name", "data"), analyses(), ids=[n for n, _ in analyses()])
def test_a_kept_analysis_round_trips_byte_for_byte(name: str, data: dict[str, Any]) -> None:
    tau = entries.tau_from_json(data["tau"], f"{name}: tau")
    crisis = entries.crisis_from_json(data["crisis"], f"{name}: crisis")
    assert tau and all(isinstance(e, TauEntry) for e in tau)
    assert crisis.inversions and crisis.family is not None
    # to_json(from_json(d)) == d, the keys in the same order
    assert text([e.to_json() for e in tau]) == text(data["tau"])
    assert text(crisis.to_json()) == text(data["crisis"])
    # from_json(to_json(x)) == x
    assert entries.tau_from_json([e.to_json() for e in tau]) == tau
    assert entries.crisis_from_json(crisis.to_json()) == crisis
    # nothing unknown was met on the way: every key is a field
    assert all(
        not e.extra for e in [*tau, *(e for s in entries.SECTIONS for e in crisis.section(s))]
    )


@pytest.mark.parametrize("path", KEPT, ids=[p.name for p in KEPT])
def test_a_kept_run_file_written_again_has_the_same_analysis(path: Path, tmp_path: Path) -> None:
    data = stored(path)
    records.write(records.RunFile.from_json(data, path.name), tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    assert list(again) == list(data)
    for key in ("tau", "crisis"):
        assert text(again[key]) == text(data[key])


def test_the_findings_runs_lack_degenerate_entries_and_write_none_back() -> None:
    # written before the degenerate rows were checked: the section is absent, not empty
    data = stored(OLDER)["crisis"]
    assert "degenerate" not in data
    crisis = Crisis.from_json(data)
    assert crisis.degenerate == () and crisis.absent == {"degenerate"}
    assert "degenerate" not in crisis.to_json()
    # an analysis computed now has the section, empty or not
    assert "degenerate" in dataclasses.replace(crisis, absent=frozenset()).to_json()


def test_records_are_frozen_and_hold_tuples() -> None:
    entry = entries.tau_from_json(stored(OLDER)["tau"])[0]
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
    assert Crisis.none().to_json() == {}
    assert entries.crisis_from_json(None) == entries.crisis_from_json({}) == Crisis.none()
    run = RunFile([])
    assert run.to_json()["tau"] == [] and run.to_json()["crisis"] == {}
    assert RunFile.from_json({**run.to_json(), "crisis": None}).crisis == Crisis.none()


# --------------------------------------------------------------------------------------------
# Optional and plugin-defined keys
# --------------------------------------------------------------------------------------------


def inversion() -> dict[str, Any]:
    """An inversion as a run file stores it today."""
    return dict(stored(OLDER)["crisis"]["inversions"][0])


def test_an_older_entry_reads_its_missing_keys_as_the_readers_did_and_writes_them_out() -> None:
    # written before the run's looks were one family (no p_holm, fires) and before inversions
    # were tested (no significant): every inversion was stated then
    older = {k: v for k, v in inversion().items() if k not in ("significant", "p_holm", "fires")}
    entry = InversionEntry.from_json(older)
    assert entry.significant is True and entry.p_holm is None and entry.fires is False
    assert entry.absent == {"significant", "p_holm", "fires"}
    assert text(entry.to_json()) == text(older)
    # a spread flag of that time was stated too
    flag = {k: v for k, v in stored(OLDER)["crisis"]["spread"][0].items() if k != "fires"}
    assert SpreadEntry.from_json(flag).fires is True


def test_a_computed_inversion_is_not_significant_until_the_family_says_so() -> None:
    fresh = InversionEntry(
        "s", "135m", "args", "rm_acc", "policy_acc", "a", "b", 0.9, 0.7, 0.4, 0.6
    )
    assert fresh.significant is False and fresh.absent == frozenset()


def test_unknown_keys_are_kept_as_read_and_written_after_the_known_ones() -> None:
    # a key a later version (or a plugin) wrote: kept in ``extra``, as it was, at the end
    later = {**inversion(), "effect_size": {"kind": "cliff", "value": 0.4}}
    entry = InversionEntry.from_json(later)
    assert entry.extra == {"effect_size": {"kind": "cliff", "value": 0.4}}
    assert text(entry.to_json()) == text(later)
    assert InversionEntry.from_json(entry.to_json()) == entry
    # the same in the crisis itself, and in the family
    crisis = {**stored(OLDER)["crisis"], "plugin_section": [1, 2]}
    assert text(Crisis.from_json(crisis).to_json()) == text(crisis)
    family = {**stored(OLDER)["crisis"]["family"], "note": "x"}
    assert Family.from_json(family).extra == {"note": "x"}


def test_a_tau_without_users_shows_a_dash() -> None:
    # the summary read an absent n_users as "-": it still does
    from pytest_prefalign.analysis import summary

    older = {k: v for k, v in stored(OLDER)["tau"][0].items() if k != "n_users"}
    entry = TauEntry.from_json(older)
    row = summary.tau_table([entry]).splitlines()[2]
    assert " - " in row and entry.n_users == 0 and "n_users" in entry.absent


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
        ({"significant": 1}, "inv: field 'significant': 1 is not true or false"),
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
    # a kept file written before tau's one-sided lower bound was kept (issue 38) gains it, and
    # one written before the projection interval (issue 64) its method and resolved pairs
    with_lower = set()
    for keys in orders(data["tau"]):
        at = keys.index("upper_95") + 1
        keys = keys if "lower_95" in keys else (*keys[:at], "lower_95", *keys[at:])
        with_lower.add(keys if "interval" in keys else (*keys, "interval", "resolved_pairs"))
    assert orders(again["tau"]) == with_lower
    # one written before the degenerate rows were checked gains their section
    sections = list(data["crisis"])
    if "degenerate" not in sections:
        sections = [*sections[:5], "degenerate", *sections[5:]]
    assert list(again["crisis"]) == sections
    for section in entries.SECTIONS:
        if data["crisis"].get(section):  # a kind the kept run has entries of
            assert orders(again["crisis"][section]) == orders(data["crisis"][section]), section
    for kept in ("silent_looks", "family"):
        assert list(again["crisis"][kept]) == list(data["crisis"][kept])
