"""The main job's figures stay what they were: every default method on the real Pref-LaMP data
(two users) with the tiny model as the 135m size, in a fresh process and a fresh cache, against
figures recorded in ``tests/data/figures_main_job_tiny.json``. A refactoring must leave them as
they are; a change meant to move them regenerates the file and says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pytest_prefalign.runs import records

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RECORDED = Path(__file__).parent / "data" / "figures_main_job_tiny.json"

# How far fp32 arithmetic done in another order moves a score. A reward is a dot product over
# the hidden size on hidden states that went through every layer; a policy score sums a
# response's token log-probabilities, each a log-softmax of such dot products. Another CPU's
# kernels (AVX-512 against AVX2, another BLAS) or another library version sums the same terms
# in another order, and each sum's rounding moves by a few units of fp32's last place
# (eps = 2**-23) per term: over a few hundred terms, a few hundred layers of them, about 2**10
# units of eps in all. The tolerance is that, relative to the score's magnitude (a score of a
# few units sums terms of about its own size), with a floor of one unit: 2**-13 ~ 1.2e-4.
# (Measured: between an Intel and an AMD EPYC machine, 7 of 408 scores moved, by at most 2.0e-5,
# 9.3e-5 of the value.) What decides a token or a count is pinned exactly: the outputs, the
# ids, the counts, and the accuracies, whose comparisons are checked to be decided on any CPU.
FP32_RELATIVE = 2.0**-13


# figures that are means of model scores rather than of decided outcomes (fluency: NLL per
# token) move as the scores do; every other figure is pinned to its 12 recorded decimals
SCORED_METRICS = ("fluency",)


def close(metric: str, got: float, want: float) -> bool:
    """``got`` is ``want``: within fp32's tolerance for a mean of scores, else to 1e-9."""
    tolerance = fp32_tolerance(want) if metric in SCORED_METRICS else 1e-9
    return abs(got - want) <= tolerance


def fp32_tolerance(value: float) -> float:
    """How far ``value``, a reward or a policy score, may move with the order of its fp32 sums."""
    return FP32_RELATIVE * max(1.0, abs(value))


@pytest.mark.skipif(not (DATA / "acl-anthology").is_dir(), reason=f"no data at {DATA}")
def test_main_job_figures_are_unchanged(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini(f"[pytest]\nprefalign_models = 135m = tiny\nprefalign_data = {DATA}\n")
    pytester.mkdir("suites")
    shutil.copytree(
        ROOT / "suites" / "pref_lamp",
        pytester.path / "suites" / "pref_lamp",
        ignore=shutil.ignore_patterns("*.py", "__pycache__"),
    )
    # the pairs recorded: other_author's (the default then), which need no writer model
    (pytester.path / "suites" / "pref_lamp" / "suite.toml").write_text(
        '[suite]\nname = "pref_lamp"\n[options]\nnegatives = "other_author"\n'
    )
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    recorded = json.loads(RECORDED.read_text())
    # the methods recorded (the default list then): methods added to the defaults later, such
    # as the baselines lead and profile_copy, do not change these figures
    result = pytester.runpytest_subprocess(
        "--prefalign",
        "suites/pref_lamp",
        "-p",
        "no:cacheprovider",
        "--prefalign-json",
        "run.json",
        "--prefalign-methods",
        ",".join(recorded["results"]),
        "--prefalign-limit",
        "2",  # the users recorded (the default then)
    )
    result.assert_outcomes(passed=10)
    run = json.loads((pytester.path / "run.json").read_text())

    rows = {r["method"]: r for r in run["results"]}
    assert set(rows) == set(recorded["results"])
    for method, want in recorded["results"].items():
        row = rows[method]
        assert [row["n_users"], row["n_items"], row["n_pairs"]] == want["n"], method
        assert set(row["metrics"]) == set(want["metrics"]), method
        for metric, value in want["metrics"].items():
            assert close(metric, row["metrics"][metric], value), (method, metric)
        for field in ("ci", "per_user"):  # metric -> interval, metric -> user -> value
            assert set(row[field]) == set(want[field]), (method, field)
            for metric, values in want[field].items():
                got = row[field][metric]
                if isinstance(values, dict):
                    assert set(got) == set(values), (method, metric)
                    got, values = (
                        [got[u] for u in sorted(values)],
                        [values[u] for u in sorted(values)],
                    )
                assert all(close(metric, g, w) for g, w in zip(got, values, strict=True)), (
                    method,
                    field,
                    metric,
                )
    outputs = sorted([r["method"], r["item_id"], r["output"]] for r in run["items"])
    assert outputs == recorded["outputs"]
    pairs = sorted(
        [
            r["method"],
            r["pair_id"],
            r["rm_chosen"],
            r["rm_rejected"],
            r["policy_chosen"],
            r["policy_rejected"],
        ]
        for r in run["pairs"]
    )
    assert [p[:2] for p in pairs] == [p[:2] for p in recorded["pairs"]]
    for found, wanted in zip(pairs, recorded["pairs"], strict=True):
        for got, want in zip(found[2:], wanted[2:], strict=True):
            assert (got is None) == (want is None), found[:2]
            if want is not None:
                assert abs(got - want) <= fp32_tolerance(want), (found[:2], got, want)
    # the accuracies are pinned exactly: every recorded comparison is decided on any CPU (its
    # two scores tie exactly, or lie further apart than both tolerances together)
    for wanted in recorded["pairs"]:
        for chosen, rejected in (wanted[2:4], wanted[4:6]):
            if chosen is not None and rejected is not None and chosen != rejected:
                gap = abs(chosen - rejected)
                assert gap > fp32_tolerance(chosen) + fp32_tolerance(rejected), wanted[:2]
    # the recorded analysis (run file version 2) as the reader upgrades it: the same values,
    # without version 2's copies of each verdict
    analysis = records.upgrade(recorded)
    assert run["tau"] == analysis["tau"]
    # the degenerate entries' fluency figures are means of scores too; the rest is exact
    fluency_fields = ("fluency", "fluency_base", "fluency_gap", "fluency_gap_ci")
    assert {k: v for k, v in run["crisis"].items() if k != "degenerate"} == {
        k: v for k, v in analysis["crisis"].items() if k != "degenerate"
    }
    for got, want in zip(
        run["crisis"]["degenerate"], analysis["crisis"]["degenerate"], strict=True
    ):
        assert {k: v for k, v in got.items() if k not in fluency_fields} == {
            k: v for k, v in want.items() if k not in fluency_fields
        }
        for field in fluency_fields:
            pairs = zip(list(np.ravel(got[field])), list(np.ravel(want[field])), strict=True)
            assert all(abs(g - w) <= fp32_tolerance(w) for g, w in pairs), (want["method"], field)
