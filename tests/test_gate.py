"""The regression gate: thresholds, paired comparisons of run files, baselines, the command."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_prefalign.analysis.compare import (
    Comparison,
    RunMismatch,
    Threshold,
    compare_runs,
    parse_threshold,
    parse_thresholds,
)
from pytest_prefalign.analysis.metrics import accuracy
from pytest_prefalign.cli import compare_main
from pytest_prefalign.runs.baselines import BaselineNotFound, is_path
from pytest_prefalign.runs.baselines import load as load_baseline
from pytest_prefalign.runs.baselines import path_of as baseline_path
from pytest_prefalign.runs.baselines import save as save_baseline
from pytest_prefalign.runs.records import RunFile, RunFileError

KEY = ("pref_lamp", "args[lore]", "135m")


def make_run(
    policy: Sequence[float],
    n_users: int,
    *,
    rm: Sequence[float] | None = None,
    rouge1: Sequence[float] | None = None,
    pair_ids: Sequence[str] | None = None,
    version: int = 2,
) -> RunFile:
    """A run file for KEY whose metrics are computed from the given outcomes.

    Pair (and item) ``i`` belongs to user ``i % n_users``, so users have equal counts when the
    length is a multiple of ``n_users``. Version 2 records the same data, model and environment
    as ``provenance()`` (and a digest per record); version 1 records none of them.
    """
    suite, method, size = KEY
    users = [f"u{i % n_users:03d}" for i in range(len(policy))]
    ids = list(pair_ids) if pair_ids is not None else [f"p{i:04d}" for i in range(len(policy))]
    pol = accuracy(policy, users)
    metrics: dict[str, float | None] = {
        "policy_acc": pol.macro, "policy_acc_micro": pol.micro, "rm_acc": None,
        "rm_acc_micro": None,
    }  # fmt: skip
    if rm is not None:
        acc = accuracy(rm, users)
        metrics.update(rm_acc=acc.macro, rm_acc_micro=acc.micro)
    pairs = [
        {"suite": suite, "method": method, "size": size, "pair_id": pid, "user": user,
         "rm_correct": None if rm is None else rm[i], "policy_correct": policy[i]}
        for i, (pid, user) in enumerate(zip(ids, users, strict=True))
    ]  # fmt: skip
    items = []
    if rouge1 is not None:
        metrics["rouge1"] = sum(rouge1) / len(rouge1)
        items = [
            {"suite": suite, "method": method, "size": size, "item_id": f"i{i:04d}",
             "user": f"u{i % n_users:03d}", "output": "o", "reference": "r",
             "rouge1": value, "rougeL": value}
            for i, value in enumerate(rouge1)
        ]  # fmt: skip
    result = {
        "suite": suite, "method": method, "decoder": "args", "reward": "lore", "size": size,
        "n_users": n_users, "n_items": len(items), "n_pairs": len(pairs), "metrics": metrics,
        "ci": {}, "per_user": {}, "timings": {},
    }  # fmt: skip
    if version >= 2:
        result.update(provenance())
        for record in pairs + items:
            record["digest"] = "d-" + str(record.get("pair_id", record.get("item_id")))
    else:  # what version 1 recorded of the model
        result["model"] = {"name": "SmolLM2", "fingerprint": "lm-1"}
    return RunFile.from_json({
        "version": version, "created": "2025-01-01T00:00:00", "commit": None, "config": {},
        "models": {}, "results": [result], "pairs": pairs, "items": items, "tau": [],
    })  # fmt: skip


def provenance() -> dict[str, Any]:
    """What a version 2 row records of its data, model and environment."""
    return {
        "model": {"name": "SmolLM2", "fingerprint": "lm-1", "weights": "w-1"},
        "data": {"fingerprint": {"all": "all-1", "test_pairs": "tp-1", "items": "it-1",
                                 "train_pairs": "tr-1", "profiles": "pr-1"}},
        "environment": {"pytest-prefalign": "0.1.0", "torch": "2.13.0",
                        "transformers": "5.24.0", "python": "3.11.9", "device": "cpu",
                        "dtype": "float32"},
        "settings": {"reduce": "mean", "seed": 0},
    }  # fmt: skip


def flipped(n: int, flips: int) -> list[float]:
    """``n`` outcomes, all 1 but the first ``flips``, which are 0."""
    return [0.0] * flips + [1.0] * (n - flips)


def only(comparisons: list[Any], metric: str) -> Any:
    [found] = [c for c in comparisons if c.metric == metric]
    return found


# --------------------------------------------------------------------------------------------
# Thresholds
# --------------------------------------------------------------------------------------------


def test_parse_threshold_forms() -> None:
    assert parse_threshold("policy_acc:2pp") == Threshold("policy_acc", 2.0)
    assert parse_threshold(" rougeL : 0.5pp ").tolerance == pytest.approx(0.005)
    assert str(parse_threshold("rouge1:1pp")) == "rouge1:1pp"
    assert parse_thresholds("policy_acc:2pp,rm_acc:0pp") == [
        Threshold("policy_acc", 2.0), Threshold("rm_acc", 0.0)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("policy_acc:2", "no unit"),  # bare numbers are ambiguous: 2 pp or 0.02?
        ("policy_acc:2%", "unit '%'"),
        ("accuracy:2pp", "unknown metric 'accuracy'"),
        ("policy_acc", "expected METRIC:Npp"),
        ("policy_acc:-1pp", "expected METRIC:Npp"),
    ],
)
def test_parse_threshold_errors_show_the_accepted_form(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse_threshold(text)


def test_parse_thresholds_refuses_duplicates_and_empty_parts() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="policy_acc is given two thresholds"):
        parse_thresholds("policy_acc:2pp,policy_acc:1pp")
    with pytest.raises(argparse.ArgumentTypeError, match="empty threshold"):
        parse_thresholds("policy_acc:2pp,")


# --------------------------------------------------------------------------------------------
# compare_runs
# --------------------------------------------------------------------------------------------

GATE = [Threshold("policy_acc", 2.0)]


def test_identical_runs_pass() -> None:
    outcomes = [float((i * 7) % 3 == 0) for i in range(200)]
    run = make_run(outcomes, 20, rm=outcomes[::-1])
    comparisons = compare_runs(run, run, GATE)
    # every metric with a value in both runs is shown, gated or not; rm None -> rm rows absent
    assert [c.metric for c in comparisons] == [
        "policy_acc", "policy_acc_micro", "rm_acc", "rm_acc_micro"
    ]  # fmt: skip
    assert [c.gated for c in comparisons] == [True, False, False, False]
    for c in comparisons:
        assert (c.diff, c.p_value, c.regressed) == (0.0, 1.0, False)
        assert c.ci == (0.0, 0.0) and (c.n, c.n_users) == (200, 20)
    # 6 pairs lost, none won, is the least McNemar can call significant at 0.05: 6/200 = 3pp
    assert comparisons[0].detectable == pytest.approx(0.03)
    assert comparisons[0].status == "ok, underpowered"  # the 2pp tolerance is below 3pp


def test_a_large_significant_drop_fails_with_its_message() -> None:
    # 200 pairs of 20 users. Baseline: all right. Current: 50 pairs wrong (p0000..p0049, 2-3
    # per user): policy accuracy 1.00 -> 0.75. McNemar: b = 50, c = 0, p = 2 / 2^50.
    baseline = make_run([1.0] * 200, 20)
    current = make_run(flipped(200, 50), 20)
    gate = only(compare_runs(baseline, current, GATE), "policy_acc")
    assert gate.old == 1.0 and gate.new == pytest.approx(0.75)
    assert gate.p_value == pytest.approx(2 / 2**50)
    assert gate.regressed and gate.status == "REGRESSED"
    lo, hi = gate.ci
    assert lo <= -0.25 <= hi < 0
    message = gate.message()
    for part in ("policy_acc of args[lore] on pref_lamp (135m) regressed", "1.000 -> 0.750",
                 "(-0.250, 95% CI [", "McNemar exact p = 1.78e-15", "over 200 pairs of 20 users",
                 "tolerance 0.02 (2pp), alpha 0.05"):  # fmt: skip
        assert part in message


def test_a_comparison_survives_json_as_plain_data() -> None:
    # what a pytest-xdist worker sends to the controller on the test report
    gate = only(compare_runs(make_run([1.0] * 20, 4), make_run(flipped(20, 8), 4), GATE),
                "policy_acc")  # fmt: skip
    data = json.loads(json.dumps(gate.as_dict()))
    assert data["ci"] == list(gate.ci) and data["regressed"] is True
    assert Comparison.from_dict(data) == gate


def test_a_small_drop_that_is_not_significant_passes() -> None:
    # 3 of 200 pairs flip 1 -> 0: a drop of 1.5 pp, beyond a 1 pp tolerance, but
    # McNemar p = 2 * (1/2)^3 = 0.25 > 0.05: not a regression.
    baseline, current = make_run([1.0] * 200, 20), make_run(flipped(200, 3), 20)
    gate = only(compare_runs(baseline, current, [Threshold("policy_acc", 1.0)]), "policy_acc")
    assert gate.old - gate.new == pytest.approx(0.015)
    assert gate.p_value == pytest.approx(0.25)
    assert not gate.regressed and gate.status == "not significant, underpowered"


def test_a_significant_drop_within_tolerance_passes() -> None:
    # 2000 pairs of 100 users, 30 flip 1 -> 0 (30 users at 19/20): macro drop = 30 * 0.05 / 100
    # = 1.5 pp; McNemar p = 2 / 2^30, significant. Within 2 pp: passes; beyond 1 pp: fails.
    baseline, current = make_run([1.0] * 2000, 100), make_run(flipped(2000, 30), 100)
    within = only(compare_runs(baseline, current, GATE), "policy_acc")
    assert within.old - within.new == pytest.approx(0.015)
    assert within.p_value < 1e-8 and not within.regressed and within.status == "ok"
    beyond = only(compare_runs(baseline, current, [Threshold("policy_acc", 1.0)]), "policy_acc")
    assert beyond.regressed


def test_a_drop_equal_to_the_tolerance_passes() -> None:
    # 40 of 100 users lose one of 20 pairs: macro 1.0 -> 0.98, a drop of exactly 2 pp (which
    # float subtraction makes 0.020000000000000018): not *larger* than the tolerance.
    baseline, current = make_run([1.0] * 2000, 100), make_run(flipped(2000, 40), 100)
    gate = only(compare_runs(baseline, current, GATE), "policy_acc")
    assert gate.p_value < 1e-10 and not gate.regressed


def test_a_marker_override_loosens_one_key() -> None:
    baseline, current = make_run([1.0] * 200, 20), make_run(flipped(200, 50), 20)
    loose = {KEY: [Threshold("policy_acc", 30.0)]}
    gate = only(compare_runs(baseline, current, GATE, overrides=loose), "policy_acc")
    assert gate.tolerance == pytest.approx(0.30) and not gate.regressed


def test_rouge_is_gated_with_a_sign_flip_test_over_users() -> None:
    # 60 items of 30 users; the current run loses 0.1 ROUGE-1 on every item: every user moved
    # down, so no sign pattern is as far from 0 but the observed one and its mirror; 2^30
    # patterns are too many to list, 50,000 are drawn: p = 1 / 50001 (the observed counted),
    # and the 10 pp drop beyond 1 pp fails.
    scores = [0.3 + 0.01 * (i % 7) for i in range(60)]
    baseline = make_run([1.0] * 60, 30, rouge1=scores)
    current = make_run([1.0] * 60, 30, rouge1=[s - 0.1 for s in scores])
    gate = only(compare_runs(baseline, current, [Threshold("rouge1", 1.0)]), "rouge1")
    assert gate.test == "signflip" and gate.n == 60 and gate.n_users == 30
    assert gate.diff == pytest.approx(-0.1) and gate.ci == pytest.approx((-0.1, -0.1))
    assert gate.p_value == pytest.approx(1 / 50_001) and gate.regressed
    assert "exact sign flip over users p = " in gate.message()


def test_mismatched_pair_ids_raise() -> None:
    baseline = make_run([1.0] * 10, 5)
    other_ids = [f"p{i:04d}" for i in range(8)] + ["q1", "q2"]
    current = make_run([1.0] * 10, 5, pair_ids=other_ids)
    with pytest.raises(RunMismatch) as info:
        compare_runs(baseline, current, GATE)
    text = str(info.value)
    assert "args[lore] on pref_lamp (135m): the runs were made on different pairs" in text
    assert "2 of the baseline's 10 pair ids are not in the current run" in text
    assert "(e.g. 'p0008', 'p0009')" in text
    assert "2 of the current run's 10 are not in the baseline (e.g. 'q1', 'q2')" in text


def test_a_gate_that_cannot_be_tested_is_an_error() -> None:
    baseline, current = make_run([1.0] * 10, 5), make_run([1.0] * 10, 5)
    for run in (baseline, current):
        run.results[0] = replace(run.results[0], pairs=())
    with pytest.raises(RunMismatch, match="no per-pair 'policy_correct' records"):
        compare_runs(baseline, current, GATE)
    # ungated, the same comparison is only shown, without a test
    shown = only(compare_runs(baseline, current, []), "policy_acc")
    assert shown.note == "no records" and not shown.regressed
    with pytest.raises(RunMismatch, match="the current run has no rm_acc to gate on"):
        compare_runs(make_run([1.0] * 10, 5, rm=[1.0] * 10), make_run([1.0] * 10, 5),
                     [Threshold("rm_acc", 1.0)])  # fmt: skip


def test_runs_without_a_shared_key_or_of_another_version_are_refused() -> None:
    baseline, current = make_run([1.0] * 10, 5), make_run([1.0] * 10, 5)
    current.results[0] = replace(current.results[0], size="270m")
    with pytest.raises(RunMismatch, match="share no \\(suite, method, size\\)"):
        compare_runs(baseline, current, GATE)
    with pytest.raises(RunFileError, match="not a run file of version 1, 2, 3"):
        RunFile.from_json({"version": 4})


# --------------------------------------------------------------------------------------------
# Baselines on disk
# --------------------------------------------------------------------------------------------


def test_save_and_load_baselines(tmp_path: Path) -> None:
    old, new = make_run([1.0] * 10, 5), make_run([0.0] * 10, 5)
    path = save_baseline(old, "main", tmp_path)
    assert path == tmp_path / ".prefalign" / "baselines" / "main.json"
    newer = save_baseline(new, "v1.2", tmp_path)
    os.utime(path, (1_000, 1_000))  # make "main" clearly the older one
    assert load_baseline("main", tmp_path) == old
    assert load_baseline(None, tmp_path) == new  # the latest by modification time
    assert load_baseline(str(newer), tmp_path) == new  # a path works too
    assert not list(path.parent.glob("*.tmp"))  # the atomic write left nothing behind


def test_baseline_path_is_where_load_baseline_reads(tmp_path: Path) -> None:
    path = save_baseline(make_run([1.0] * 4, 2), "main", tmp_path)
    assert baseline_path(None, tmp_path) == path
    assert baseline_path("main", tmp_path) == path
    assert baseline_path(str(path), tmp_path) == path
    assert is_path("runs/a.json") and is_path("a.json") and not is_path("v1.2")


def test_baseline_errors_name_where_they_looked(tmp_path: Path) -> None:
    folder = tmp_path / ".prefalign" / "baselines"
    with pytest.raises(BaselineNotFound, match=f"no baseline saved in {folder}"):
        load_baseline(None, tmp_path)
    save_baseline(make_run([1.0] * 4, 2), "main", tmp_path)
    missing = r"no baseline named 'dev' at .*dev\.json \(saved: main\)"
    with pytest.raises(BaselineNotFound, match=missing):
        load_baseline("dev", tmp_path)
    with pytest.raises(BaselineNotFound, match="no run file at"):
        load_baseline(str(tmp_path / "missing.json"), tmp_path)
    for bad in ("../up", ".hidden", "a b", "main.json", ""):
        with pytest.raises(ValueError, match="invalid baseline name"):
            save_baseline(make_run([1.0] * 4, 2), bad, tmp_path)


# --------------------------------------------------------------------------------------------
# The standalone command
# --------------------------------------------------------------------------------------------


def write(path: Path, run: RunFile) -> str:
    path.write_text(json.dumps(run.to_json()))
    return str(path)


def test_compare_main_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    good = write(tmp_path / "a.json", make_run([1.0] * 200, 20))
    worse = write(tmp_path / "b.json", make_run(flipped(200, 50), 20))
    renamed = make_run([1.0] * 200, 20, pair_ids=[f"x{i}" for i in range(200)])
    other = write(tmp_path / "c.json", renamed)

    assert compare_main([good, good, "--fail", "policy_acc:2pp"]) == 0
    out = capsys.readouterr().out
    assert "policy_acc_micro" in out and "0 regression(s); gates: policy_acc:2pp" in out

    assert compare_main([good, worse, "--fail", "policy_acc:2pp", "--alpha", "0.01"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSED" in out and "FAILED policy_acc of args[lore]" in out

    assert compare_main([good, worse]) == 0  # no gate: the drop is only shown
    capsys.readouterr()

    assert compare_main([good, other, "--fail", "policy_acc:2pp"]) == 2
    assert "different pairs" in capsys.readouterr().err
    assert compare_main([good, worse, "--fail", "policy_acc:2"]) == 2
    assert "percentage points" in capsys.readouterr().err
    assert compare_main([good, worse, "--alpha", "5"]) == 2
    assert compare_main([good, str(tmp_path / "none.json")]) == 2
    assert "no run file at" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{")
    assert compare_main([good, str(tmp_path / "broken.json")]) == 2
    assert "not a readable JSON file" in capsys.readouterr().err


def test_compare_main_takes_saved_baseline_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    save_baseline(make_run([1.0] * 200, 20, rouge1=[0.5] * 200), "main", tmp_path)
    worse = write(tmp_path / "b.json", make_run(flipped(200, 50), 20, rouge1=[0.5] * 200))
    assert compare_main(["main", worse, "--fail", "policy_acc:2pp,rouge1:1pp"]) == 1
    assert "gates: policy_acc:2pp, rouge1:1pp" in capsys.readouterr().out


def test_compare_finds_saved_baselines_from_a_subfolder_of_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # pytest --prefalign-save keeps baselines at the rootdir (the ini file's folder), whatever
    # folder it ran from: prefalign compare looks there too
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    save_baseline(make_run([1.0] * 200, 20), "main", tmp_path)
    sub = tmp_path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    same = write(sub / "b.json", make_run([1.0] * 200, 20))
    assert compare_main(["main", same]) == 0
    assert "0 regression(s)" in capsys.readouterr().out
