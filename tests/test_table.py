"""The leaderboard's header says what the data is, how its pairs were made (the design the suite
describes in its provenance) and when they were written by the model under evaluation."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_prefalign.analysis import catalogue, table
from pytest_prefalign.runs.records import CaseResult


def result(design: dict[str, Any] | None, model: str) -> CaseResult:
    provenance = {} if design is None else {"design": design}
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


def design(label: str, writer: str | None, note: str = "") -> dict[str, Any]:
    return {"label": label, "note": note, "writer_fingerprint": writer}


def test_header_names_the_pairs_design_and_notes_when_the_evaluated_model_wrote_them() -> None:
    own = table.header("pref_lamp", "135m", [result(design("generated titles", "fp1"), "fp1")])
    assert own == [
        "pref_lamp · 135m · SmolLM2",
        "  data: acl-anthology · 2 users · 5 items · 5 pairs (2.5 per user) · pairs: generated "
        "titles",
        "  note: the pairs were written by this very model (generated titles): its policy "
        "accuracy measures distance from its own writing, not only the users' preference",
    ]
    # another size, written by the reference model: no note on the model's own writing
    other_size = table.header("pref_lamp", "270m", [result(design("generated", "fp1"), "fp2")])
    assert len(other_size) == 2
    fair = table.header("pref_lamp", "135m", [result(design("other authors", None), "fp1")])
    assert fair == [
        "pref_lamp · 135m · SmolLM2",
        "  data: acl-anthology · 2 users · 5 items · 5 pairs (2.5 per user) · pairs: other authors",
    ]


def test_the_designs_own_note_is_printed_when_it_has_one() -> None:
    noted = design("style", None, note="the rejected titles imitate another author's style")
    lines = table.header("pref_lamp", "135m", [result(noted, "fp1")])
    assert lines[2:] == ["  note: the rejected titles imitate another author's style"]
    both = design("written", "fp1", note="rewritten by the model")
    lines = table.header("pref_lamp", "135m", [result(both, "fp1")])
    assert [line.split(":")[0] for line in lines[2:]] == ["  note", "  note"]
    assert "this very model (written)" in lines[2] and lines[3] == "  note: rewritten by the model"


def test_data_without_a_design_has_no_pairs_line() -> None:
    """Data from before suites described their design (or a suite that does not): the
    counts alone, and no guess from suite-specific keys."""
    old = result(None, "fp1")
    provenance = {"negatives": "generated", "reference_fingerprint": "fp1"}
    old = replace(old, data={**old.data.to_json(), "provenance": provenance})
    assert table.header("pref_lamp", "135m", [old]) == [
        "pref_lamp · 135m · SmolLM2",
        "  data: acl-anthology · 2 users · 5 items · 5 pairs (2.5 per user)",
    ]


def test_header_says_which_policy_score_policy_accuracy_compares() -> None:
    row = result(None, "fp1")
    row = replace(row, metrics={"policy_acc": 0.5}, settings={"reduce": "sum", "seed": 0})
    assert table.header("pref_lamp", "135m", [row])[1] == (
        "  data: acl-anthology · 2 users · 5 items · 5 pairs (2.5 per user) · policy score: sum "
        "over tokens"
    )


def test_header_names_the_dtype_the_passes_ran_in() -> None:
    bf16 = replace(result(None, "fp1"), environment={"dtype": "bfloat16", "device": "cpu"})
    rows = [bf16, bf16]
    assert table.header("pref_lamp", "135m", rows)[0] == "pref_lamp · 135m · SmolLM2 · bfloat16"
    # a merged run's rows that differ: both named
    rows[1] = replace(bf16, environment={"dtype": "float32"})
    assert table.header("pref_lamp", "135m", rows)[0].endswith(" · bfloat16/float32")


def test_a_win_rate_shows_its_ties_beside_it() -> None:
    """Win rates count strict wins, so the ties are printed beside them (``judge["counts"]``):
    5 wins, 2 ties and 5 losses of 12 items give 5/12 = 0.417."""
    row = result(None, "fp1")
    row = replace(
        row,
        metrics={"win_independent": 5 / 12, "win_self": 0.5, "policy_acc": 0.5},
        ci={"win_independent": [0.2, 0.63]},
        judge={
            "counts": {
                "win_independent": {"wins": 5, "ties": 2, "losses": 5},
                "win_self": {"wins": 6, "ties": 1, "losses": 5},
            }
        },
    )
    column = catalogue.find("win_independent")
    assert column is not None and column.title == "win vs base"
    assert table.fmt(row, column) == "0.417 [0.20,0.63] (2 ties)"
    assert table.fmt(row, catalogue.find("win_self")) == "0.500 (1 tie)"
    # another metric, or a row from before ties were counted: the figure alone
    assert table.fmt(row, catalogue.find("policy_acc")) == "0.500"
    row = replace(row, judge=None)
    assert table.fmt(row, column) == "0.417 [0.20,0.63]"
    lines = table.table([row]).splitlines()
    assert "win vs base" in lines[0]


def test_fluency_and_not_answer_sit_beside_rouge() -> None:
    """The two figures of docs/metrics.md, "Fluency and answers", are columns right after
    ROUGE-L, each with its interval: NLL per token to two decimals, the share to three."""
    row = result(None, "fp1")
    row = replace(
        row,
        metrics={"rouge1": 0.25, "rougeL": 0.2, "fluency": 1.234, "not_answer": 0.125},
        ci={"fluency": [1.1, 1.4], "not_answer": [0.05, 0.2]},
    )
    headers = table.table([row]).splitlines()[0].split()
    assert headers == ["#", "method", "ROUGE-1", "ROUGE-L", "NLL/tok", "not", "ans", "time"]
    assert table.fmt(row, catalogue.find("fluency")) == "1.23 [1.10,1.40]"
    assert table.fmt(row, catalogue.find("not_answer")) == "0.125 [0.05,0.20]"
    fluency, not_answer = catalogue.find("fluency"), catalogue.find("not_answer")
    assert fluency is not None and not fluency.higher_is_better and fluency.high == 100.0
    assert not_answer is not None and not not_answer.higher_is_better
    assert (fluency.level, fluency.pooling, not_answer.level, not_answer.pooling) == (
        "item",
        "micro",
        "item",
        "micro",
    )


def test_the_data_line_names_the_released_pairs_version_and_checksum() -> None:
    row = result(design("style", None), "fp1")
    data = row.data.to_json()
    data["provenance"]["pairs_release"] = {"version": "2026.12.02", "sha256": "ab" * 32}
    row = replace(row, data=data)
    line = table.header("pref_lamp", "135m", [row])[1]
    assert line.endswith("pairs: style (released 2026.12.02, sha256 abababababab)")


def test_released_pairs_written_by_the_evaluated_models_weights_are_noted() -> None:
    """Released pairs carry the writer's fingerprint from the code that wrote them; the
    weights' own fingerprint still tells that the evaluated model wrote them."""
    released = design("style", "fp-of-old-code")
    released["writer_weights"] = "w1"
    row = result(released, "fp-now")
    row = replace(row, model=replace(row.model, weights="w1"))
    assert "this very model" in table.header("pref_lamp", "270m", [row])[2]
    row = replace(row, model=replace(row.model, weights="w2"))
    assert len(table.header("pref_lamp", "270m", [row])) == 2


def test_rows_are_ranked_by_the_sort_key_and_a_row_without_it_comes_last() -> None:
    def ranked(name: str, value: float | None) -> CaseResult:
        return replace(result(None, "f"), method=name, metrics={"rouge1": value})

    rows = [ranked("none", None), ranked("low", 0.2), replace(ranked("absent", 0), metrics={}),
            ranked("high", 0.4)]  # fmt: skip
    assert table.sort_key(rows) == "rouge1"
    assert [r.method for r in table.ordered(rows)] == ["high", "low", "none", "absent"]
