"""The leaderboard's header says what the data is and when its pairs were written by the model
under evaluation."""

from __future__ import annotations

from pytest_prefalign.analysis import table
from pytest_prefalign.runs.records import CaseResult


def result(negatives: str, reference: str | None, model: str) -> CaseResult:
    provenance = {"negatives": negatives}
    if reference is not None:
        provenance["reference_fingerprint"] = reference
    return CaseResult(
        "pref_lamp",
        "base",
        "135m",
        decoder="base",
        n_users=2,
        n_items=5,
        n_pairs=5,
        model={"name": "SmolLM2", "fingerprint": model},
        data={"source": "acl-anthology", "provenance": provenance},
    )


def test_header_notes_when_the_rejected_side_is_the_evaluated_models_own_output() -> None:
    own = table.header("pref_lamp", "135m", [result("generated", "fp1", "fp1")])
    assert len(own) == 3 and "written by this very model" in own[2]
    other_size = table.header("pref_lamp", "270m", [result("generated", "fp1", "fp2")])
    assert len(other_size) == 2
    fair = table.header("pref_lamp", "135m", [result("other_author", None, "fp1")])
    assert fair == [
        "pref_lamp · 135m · SmolLM2",
        "  data: acl-anthology · 2 users · 5 items · 5 pairs",
    ]


def test_header_says_which_policy_score_policy_accuracy_compares() -> None:
    row = result("other_author", None, "fp1")
    row.metrics = {"policy_acc": 0.5}
    row.settings = {"reduce": "sum", "seed": 0}
    assert table.header("pref_lamp", "135m", [row])[1] == (
        "  data: acl-anthology · 2 users · 5 items · 5 pairs · policy score: sum over tokens"
    )
