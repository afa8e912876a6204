"""The run-end analysis and the summary's power curves kept in the results cache
(``analysis/memo.py``): read back equal to what computing them gives, reused where only how the
rows were computed differs (timings, cache uses), computed again where a figure, a record or
the analysis's code changes, and computed every time with the cache off."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_prefalign import cache
from pytest_prefalign.analysis import crisis, memo, power
from pytest_prefalign.runs.parts import CacheUse
from pytest_prefalign.runs.records import CaseResult, RunFile

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "run_pref_lamp_8_users.json"  # the main job, really run


@pytest.fixture(scope="module")
def results() -> list[CaseResult]:
    data = json.loads(REAL.read_text())
    return [CaseResult.from_json(row) for row in data["results"]]


def counted(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """Calls of ``module.name``, counted (the real function still runs)."""
    calls: list[int] = []
    real = getattr(module, name)

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def analysed_once(
    results: list[CaseResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[cache.Disk, list[int]]:
    """A cache holding the analysis of ``results``, and the calls of ``crisis.analyse`` from
    then on."""
    disk = cache.Disk(tmp_path)
    memo.analysed(results, disk)
    return disk, counted(monkeypatch, crisis, "analyse")


def test_the_analysis_read_back_is_the_analysis_computed(
    results: list[CaseResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = cache.Disk(tmp_path)
    want = crisis.analyse(results)
    calls = counted(monkeypatch, crisis, "analyse")
    with cache.recording() as uses:
        first = memo.analysed(results, disk)
        again = memo.analysed(results, disk)
    assert first == again == want
    assert len(calls) == 1 and [u.hit for u in uses] == [False, True]


def test_only_how_a_row_was_computed_may_differ_for_the_analysis_to_be_reused(
    results: list[CaseResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk, calls = analysed_once(results, tmp_path, monkeypatch)
    # a warm rerun: other timings, every value read from the cache
    warm = [
        dataclasses.replace(
            r,
            timings={"total_s": 0.1},
            cache=(CacheUse(artifact="results", key="k", hit=True, inputs={}),),
        )
        for r in results
    ]
    memo.analysed(warm, disk)
    assert calls == []
    # one figure of one row changed: computed again
    first = results[0]
    moved = dataclasses.replace(first, metrics={**first.metrics, "rm_acc": 0.123})
    memo.analysed([moved, *results[1:]], disk)
    assert len(calls) == 1
    # one record changed (an item's output): computed again
    item = first.items[0]
    rewritten = dataclasses.replace(first, items=(dataclasses.replace(item, output="x"),))
    memo.analysed([rewritten, *results[1:]], disk)
    assert len(calls) == 2


def test_the_analysis_code_is_in_the_key(
    results: list[CaseResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk, calls = analysed_once(results, tmp_path, monkeypatch)
    monkeypatch.setattr(memo.versions, "module_version", lambda name: f"edited {name}")
    memo.analysed(results, disk)
    assert len(calls) == 1


def test_with_the_cache_off_the_analysis_is_computed_every_time(
    results: list[CaseResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = cache.Disk(tmp_path, enabled=False)
    calls = counted(monkeypatch, crisis, "analyse")
    memo.analysed(results, disk)
    memo.analysed(results, disk)
    assert len(calls) == 2 and not any(tmp_path.iterdir())


def test_the_power_curves_read_back_are_the_curves_computed(
    results: list[CaseResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tau, found = crisis.analyse(results)
    run = RunFile(results, tau=tau, crisis=found)
    want = power.summary_curves(run)
    assert want  # the real run has claims to simulate
    disk = cache.Disk(tmp_path)
    calls = counted(monkeypatch, power, "summary_curves")
    assert memo.summary_curves(run, disk) == want
    assert memo.summary_curves(run, disk) == want
    assert len(calls) == 1
