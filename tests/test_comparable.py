"""Whether two runs can be compared (analysis/comparable.py), what a gate can detect
(stats.sign_test_floor, stats.smallest_detectable_drop) and the one judgement behind the pytest
gate and ``prefalign compare`` (compare.judge)."""

from __future__ import annotations

import argparse
import copy
import math
from dataclasses import replace

import pytest
from test_gate import KEY, flipped, make_run

from pytest_prefalign.analysis import comparable, compare
from pytest_prefalign.analysis.compare import (
    CaseOutcome,
    RunMismatch,
    Threshold,
    compare_runs,
    judge,
)
from pytest_prefalign.analysis.stats import (
    mcnemar_exact,
    sign_test_floor,
    smallest_detectable_drop,
)
from pytest_prefalign.runs.parts import Data
from pytest_prefalign.runs.records import RunFile

GATE = [Threshold("policy_acc", 2.0)]


# --------------------------------------------------------------------------------------------
# Power
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alpha", "k"),
    # 2 * 0.5**k < alpha: 0.05 -> 6 (2/64 = 0.031; 5 give 0.0625), 0.01 -> 8 (2/256 = 0.0078;
    # 7 give 0.0156), 0.5 -> 3 (2/8 = 0.25; 2 give 0.5, not below)
    [(0.05, 6), (0.01, 8), (0.5, 3), (0.0625, 6)],
)
def test_sign_test_floor_known_answers(alpha: float, k: int) -> None:
    assert sign_test_floor(alpha) == k


def test_the_floor_is_where_mcnemar_first_reaches_alpha() -> None:
    """k pairs lost, none won: McNemar's p is below alpha at the floor and not one below it."""
    for alpha in (0.05, 0.01, 0.2):
        k = sign_test_floor(alpha)
        assert mcnemar_exact([1.0] * k, [0.0] * k) < alpha
        assert mcnemar_exact([1.0] * (k - 1), [0.0] * (k - 1)) >= alpha


def test_smallest_detectable_drop_known_answers() -> None:
    # 12 pairs of 2 users (the README's default run): 6 must change, 6/12 = 50 pp; a collapse
    # of all 12 has p = 2 / 2**12 = 0.000488, one of 5 has p = 0.0625 (not significant)
    users = ["a", "b"] * 6
    assert smallest_detectable_drop(users, 0.05, "micro") == pytest.approx(0.5)
    assert smallest_detectable_drop(users, 0.05, "macro") == pytest.approx(0.5)
    assert mcnemar_exact([1.0] * 12, [0.0] * 12) == pytest.approx(2 / 2**12)
    assert mcnemar_exact([1.0] * 5 + [0.0] * 7, [0.0] * 12) == pytest.approx(0.0625)
    # fewer pairs than the floor: no drop can be significant
    assert math.isinf(smallest_detectable_drop(["a"] * 5, 0.05))
    # macro: a pair of user u weighs 1/(U n_u); the 6 lightest are user c's (10 pairs) ->
    # 6 * 1/(3 * 10) = 0.2, while micro gives 6/14
    users = ["a", "b", "c"] + ["c"] * 9 + ["a", "b"]
    assert smallest_detectable_drop(users, 0.05, "macro") == pytest.approx(0.2)
    assert smallest_detectable_drop(users, 0.05, "micro") == pytest.approx(6 / 14)


def test_underpowered_gate_is_stated() -> None:
    # 12 pairs of 2 users: a collapse 5/12 -> 0 is not significant, and the gate says it
    # could not have been
    policy = [1.0] * 5 + [0.0] * 7
    baseline, current = make_run(policy, 2), make_run([0.0] * 12, 2)
    gate = compare_runs(baseline, current, GATE)[0]
    assert gate.p_value == pytest.approx(0.0625) and not gate.regressed
    assert gate.detectable == pytest.approx(0.5) and gate.underpowered
    assert gate.status == "not significant, underpowered"
    assert gate.power_message() == (
        "underpowered gate: policy_acc of args[lore] on pref_lamp (135m): with 12 pairs of 2 "
        "users at alpha 0.05, a drop smaller than 50.00 pp cannot be significant (McNemar's "
        "exact test needs at least 6 pairs that changed, all one way); the tolerance is 2 pp, "
        "so a drop between the two passes (more users: --prefalign-limit)"
    )
    # 400 pairs: 6/400 = 1.5 pp < 2 pp, the gate can see what it guards
    many = compare_runs(make_run([1.0] * 400, 20), make_run([1.0] * 400, 20), GATE)[0]
    assert many.detectable == pytest.approx(0.015) and not many.underpowered


def test_the_test_over_too_few_users_is_refused() -> None:
    # both users drop: a bootstrap would say p = 2/2001 = 0.001; the sign-flip test over 2
    # users cannot go below 0.5, so a gated ROUGE is refused with the reason
    baseline = make_run([1.0] * 4, 2, rouge1=[0.5, 0.5, 0.5, 0.5])
    current = make_run([1.0] * 4, 2, rouge1=[0.2, 0.2, 0.2, 0.2])
    with pytest.raises(RunMismatch) as refused:
        compare_runs(baseline, current, [Threshold("rouge1", 1.0)])
    assert str(refused.value) == (
        "args[lore] on pref_lamp (135m): rouge1 cannot be tested: the sign-flip test over "
        "users needs at least 6 users at alpha 0.05 (with fewer, even every user dropping is "
        "not significant), and the runs share 2 (more users: --prefalign-limit)"
    )
    # not gated: shown without a p-value, with the reason
    shown = [c for c in compare_runs(baseline, current, []) if c.metric == "rouge1"][0]
    assert math.isnan(shown.p_value) and shown.status == "too few users to test (2 < 6)"
    # 6 users all dropping: tested
    six = make_run([1.0] * 6, 6, rouge1=[0.5] * 6), make_run([1.0] * 6, 6, rouge1=[0.2] * 6)
    tested = [c for c in compare_runs(*six, [Threshold("rouge1", 1.0)]) if c.metric == "rouge1"]
    assert tested[0].regressed


# --------------------------------------------------------------------------------------------
# What the runs share
# --------------------------------------------------------------------------------------------


def test_nothing_shared_names_what_differs() -> None:
    old = [("toy", "base", "135m"), ("toy", "icl", "135m")]
    new = [("toy", "base", "tiny"), ("toy", "icl", "tiny")]
    problems, notes = comparable.coverage(old, new)
    assert problems == [
        "nothing was compared: the baseline and this run share no (suite, method, size); the "
        "baseline has base on toy (135m), icl on toy (135m), this run base on toy (tiny), icl "
        "on toy (tiny) (another model size: 135m in the baseline, tiny in this run)"
    ]
    assert notes == []
    # a rename of every method
    problems, _ = comparable.coverage([("toy", "bon[a]", "m")], [("toy", "bon[b]", "m")])
    assert problems[0].endswith("(another method: bon[a] in the baseline, bon[b] in this run)")
    # nothing shared is refused even when allowed or ungated
    assert comparable.coverage(old, new, {"missing"}, gated=False)[0]


def test_missing_baseline_tests_fail_a_gated_comparison_only() -> None:
    old = [("s", "a", "m"), ("s", "b", "m")]
    new = [("s", "a", "m"), ("s", "c", "m")]
    problems, notes = comparable.coverage(old, new, gated=True)
    assert problems == [
        "in the baseline, not compared in this run: b on s (m) (not run, deselected, renamed, "
        "or failed before a result)"
    ]
    assert notes == ["new, not in the baseline: c on s (m)"]
    assert comparable.coverage(old, new, {"missing"})[0] == []
    assert comparable.coverage(old, new, gated=False) == (
        [],
        [
            "in the baseline, not compared in this run: b on s (m)",
            "new, not in the baseline: c on s (m)",
        ],
    )


def test_parse_allow() -> None:
    assert comparable.parse_allow("data, environment") == {"data", "environment"}
    with pytest.raises(argparse.ArgumentTypeError, match="cannot allow 'weights'"):
        comparable.parse_allow("data,weights")


# --------------------------------------------------------------------------------------------
# One test's two results
# --------------------------------------------------------------------------------------------


def edited(run: RunFile, change) -> RunFile:
    other = copy.deepcopy(run)
    other.results[0] = change(other.results[0])
    return other


def test_same_ids_other_contents_are_refused_with_the_ids() -> None:
    run = make_run(flipped(20, 2), 4)

    def retitle(result):
        pairs = [replace(p, digest="edited") for p in result.pairs[:3]] + list(result.pairs[3:])
        fingerprint = replace(result.data.fingerprint, test_pairs="tp-2")
        return replace(result, pairs=pairs, data=replace(result.data, fingerprint=fingerprint))

    other = edited(run, retitle)
    with pytest.raises(RunMismatch) as refused:
        compare_runs(run, other, GATE)
    assert str(refused.value) == (
        "args[lore] on pref_lamp (135m): other data: 3 of 20 pairs have other contents under the "
        "same ids (e.g. 'p0000', 'p0001', 'p0002') (refresh the baseline, or allow the "
        "difference if it is intended: data)"
    )
    # allowed: compared on the shared ids, the difference returned for the caller to state
    verdict = judge(run, other, GATE, allow={"data"})
    assert verdict.errors == [] and verdict.comparisons
    assert verdict.notes == [
        "args[lore] on pref_lamp (135m): allowed: other data: 3 of 20 pairs have other "
        "contents under the same ids (e.g. 'p0000', 'p0001', 'p0002')"
    ]


def test_a_baseline_on_other_released_pairs_is_refused_naming_both_checksums() -> None:
    run = make_run(flipped(20, 2), 4)

    def released(sha: str):
        def change(result):
            note = {"version": "2026.12.02", "sha256": sha, "briefs_released": 8}
            return replace(
                result, data={**result.data.to_json(), "provenance": {"pairs_release": note}}
            )

        return change

    one, two = edited(run, released("aa11")), edited(run, released("bb22"))
    differences = comparable.case_differences(one.results[0], two.results[0])
    assert [(d.kind, d.text) for d in differences] == [
        (
            "data",
            "other data: the baseline's released pairs 2026.12.02 (sha256 aa11), the current "
            "run's released pairs 2026.12.02 (sha256 bb22)",
        )
    ]
    with pytest.raises(RunMismatch, match="sha256 aa11.*sha256 bb22"):
        compare_runs(one, two, GATE)
    assert comparable.case_differences(one.results[0], one.results[0]) == []
    written = comparable.case_differences(run.results[0], two.results[0])
    assert "the baseline's pairs were written by the run, not released" in written[0].text


def test_other_training_pairs_model_and_environment_are_named() -> None:
    run = make_run(flipped(20, 2), 4)

    def change(result):
        fingerprint = replace(result.data.fingerprint, train_pairs="tr-2")
        return replace(
            result,
            data=replace(result.data, fingerprint=fingerprint),
            model=replace(result.model, weights="w-2"),
            environment=replace(result.environment, torch="2.14.0", dtype="bfloat16"),
        )

    differences = comparable.case_differences(run.results[0], edited(run, change).results[0])
    assert [(d.kind, d.text) for d in differences] == [
        ("data", "other data: the training pairs differ"),
        ("model", "another model: 'SmolLM2' with other weights or tokenizer (w-1 in the "
                  "baseline, w-2 now)"),
        ("environment", "another environment: torch 2.13.0 -> 2.14.0, dtype float32 -> bfloat16"),
    ]  # fmt: skip
    renamed = edited(run, lambda r: replace(r, model=replace(r.model, name="Qwen")))
    assert comparable.case_differences(run.results[0], renamed.results[0]) == [
        comparable.Difference("model", "another model: 'SmolLM2' in the baseline, 'Qwen' now")
    ]
    # python and the code's own fingerprint are recorded, not checked
    same = edited(run, lambda r: replace(r, environment=replace(r.environment, python="3.12.0")))
    assert comparable.case_differences(run.results[0], same.results[0]) == []


def test_a_version_1_baseline_says_what_it_lacks() -> None:
    old, new = make_run(flipped(20, 2), 4, version=1), make_run(flipped(20, 2), 4)
    # read and upgraded: the version it was written as is gone, what it lacks is not
    assert old.version == 3 and old.results[0].data == Data()
    with pytest.raises(RunMismatch) as refused:
        compare_runs(old, new, GATE)
    assert str(refused.value) == (
        "args[lore] on pref_lamp (135m): the baseline records no data fingerprint, so the data "
        "cannot be checked; the baseline records no model weights, so only the model's name "
        "was checked; the baseline records no environment, so it cannot be checked (run files "
        "before version 2 do not record it: save the baseline again with this version "
        "(--prefalign-save); or allow what cannot be checked: data,model,environment)"
    )
    assert compare_runs(old, new, GATE, allow={"data", "model", "environment"})


def test_judge_collects_every_problem_instead_of_stopping() -> None:
    run = make_run(flipped(20, 2), 4)
    other = edited(run, lambda r: replace(r, environment=replace(r.environment, device="cuda")))
    other.results.append(edited(run, lambda r: replace(r, method="bon[x]")).results[0])
    verdict = judge(run, other, GATE)
    assert verdict.comparisons == []
    assert verdict.errors == [
        "args[lore] on pref_lamp (135m): another environment: device cpu -> cuda (refresh the "
        "baseline, or allow the difference if it is intended: environment)"
    ]
    assert verdict.notes == ["new, not in the baseline: bon[x] on pref_lamp (135m)"]
    assert KEY == run.results[0].key


def test_a_gate_on_a_metric_no_shared_test_has_is_an_error() -> None:
    # the runs have policy accuracy only: a gate on ROUGE-1 would pass on no figure at all
    run = make_run(flipped(20, 2), 4)
    gates = [*GATE, Threshold("rouge1", 1.0)]
    verdict = judge(run, run, gates)
    assert {c.metric for c in verdict.comparisons} >= {"policy_acc"}
    assert verdict.errors == [
        "the gate rouge1:1pp compared nothing: no test shared with the baseline has rouge1 in "
        "both runs"
    ]
    with_rouge = make_run(flipped(24, 2), 6, rouge1=[0.5] * 24)
    assert judge(with_rouge, with_rouge, gates).errors == []
    # the pytest gate's judgement of the whole run, from its tests' outcomes, says the same
    gated = tuple(c for c in verdict.comparisons if c.metric == "policy_acc" and c.gated)
    # as the tests' reports carry them to the controller
    outcomes = [CaseOutcome.from_dict(CaseOutcome(KEY, comparisons=gated).as_dict())]
    assert outcomes[0].comparisons == gated and gated
    problems, _ = compare.gate_coverage([KEY], outcomes, gates, ())
    assert problems == verdict.errors
    # a test that could not be compared already fails the run, saying why
    failed = [CaseOutcome(KEY, "error", problems=("cannot compare",))]
    assert compare.gate_coverage([KEY], failed, gates, ())[0] == []


def test_another_reduction_or_seed_is_refused_and_other_options_are_stated() -> None:
    run = make_run(flipped(20, 2), 4)
    run.results[0] = replace(run.results[0], options={"k": 10, "w": 1.0, "batch_size": 48})
    summed = edited(run, lambda r: replace(r, settings=replace(r.settings, reduce="sum", seed=7)))
    # policy accuracy by the sum of token log-likelihoods is another metric than by their mean
    with pytest.raises(RunMismatch, match=r"other settings: reduce mean -> sum, seed 0 -> 7 \("):
        comparable.check_case(run.results[0], summed.results[0])
    verdict = judge(run, summed, GATE, allow={"settings"})
    assert verdict.errors == []
    assert verdict.notes == [
        "args[lore] on pref_lamp (135m): allowed: other settings: reduce mean -> sum, seed 0 -> 7"
    ]

    # the change a gate is there to judge may be an option: compared, and stated; a batch size
    # changes no figure and is not mentioned
    def retune(result):
        options = {**result.options, "k": 5, "batch_size": 16}
        return replace(result, options=options, reward_fingerprint="lore-v2")

    verdict = judge(run, edited(run, retune), GATE)
    assert verdict.errors == [] and verdict.comparisons
    assert verdict.notes == [
        "args[lore] on pref_lamp (135m): other options: k 10 -> 5, reward method None -> lore-v2"
    ]
    # a run file from before the settings were recorded: stated, not refused
    unrecorded = edited(run, lambda r: replace(r, settings={}))
    assert judge(unrecorded, run, GATE).notes == [
        "args[lore] on pref_lamp (135m): the baseline records no policy reduction or seed: "
        "unchecked"
    ]
