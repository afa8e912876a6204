"""The leaderboard's header says what the data is and when its pairs were written by the model
under evaluation."""

from __future__ import annotations

from pytest_prefalign.analysis import catalogue, table
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


def test_a_win_rate_shows_its_ties_beside_it() -> None:
    """Win rates count strict wins, so the ties are printed beside them (``judge["counts"]``):
    5 wins, 2 ties and 5 losses of 12 items give 5/12 = 0.417."""
    row = result("other_author", None, "fp1")
    row.metrics = {"win_independent": 5 / 12, "win_self": 0.5, "policy_acc": 0.5}
    row.ci = {"win_independent": [0.2, 0.63]}
    row.judge = {
        "counts": {
            "win_independent": {"wins": 5, "ties": 2, "losses": 5},
            "win_self": {"wins": 6, "ties": 1, "losses": 5},
        }
    }
    column = catalogue.find("win_independent")
    assert column is not None and column.title == "win vs base"
    assert table.fmt(row, column) == "0.417 [0.20,0.63] (2 ties)"
    assert table.fmt(row, catalogue.find("win_self")) == "0.500 (1 tie)"
    # another metric, or a row from before ties were counted: the figure alone
    assert table.fmt(row, catalogue.find("policy_acc")) == "0.500"
    row.judge = {}
    assert table.fmt(row, column) == "0.417 [0.20,0.63]"
    lines = table.table([row]).splitlines()
    assert "win vs base" in lines[0]
