"""The strength sweep (``--prefalign-guidance sweep``): every reward method of a decoder that
declares a strength, run at the sweep's common strengths of the standardised reward beside its
working point; tau, the inversions, the regret and the claims per strength; the leaderboard a
table per strength; each swept row cached under its strength. The analysis on hand-made rows,
then the plugin end to end in the small project of ``tests/test_cache_plugin.py``."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest
import test_cache_plugin as cache_project
import test_findings
from test_cache_plugin import misses, uses
from test_crisis import five, row, run_of, spread_users

from pytest_prefalign.analysis import claims, crisis, selection, table
from pytest_prefalign.analysis.merge import result_order
from pytest_prefalign.plumbing import options
from pytest_prefalign.runs.header import RunConfig
from pytest_prefalign.runs.records import CaseResult

# the small project's fixtures (tests/test_cache_plugin.py), the findings page's module
heavy_modules_imported_once = cache_project.heavy_modules_imported_once
project = cache_project.project
findings = test_findings.findings


def swept(rows: list[CaseResult], value: float, option: str = "w") -> list[CaseResult]:
    """The rows as tests of the sweep at ``value``, as the evaluation names and records them."""
    return [
        replace(
            r,
            method=f"{r.method}@{option}={value:g}",
            guidance={"strength": {"option": option, "value": value, "how": "sweep"}},
        )
        for r in rows
    ]


def chosen(rows: list[CaseResult], value: float = 0.5) -> list[CaseResult]:
    """The rows at a working point chosen on validation items."""
    strength = {"option": "w", "value": value, "how": "chosen"}
    return [replace(r, guidance={"strength": strength}) for r in rows]


# --------------------------------------------------------------------------------------------
# The analysis: grouped per strength
# --------------------------------------------------------------------------------------------


def test_a_swept_rows_panel_is_its_decoder_at_its_strength() -> None:
    (working,) = chosen([row("args[a]", rm_acc=0.6)])
    (at,) = swept([working], 0.25)
    (genarm,) = swept([row("genarm[arm]", rm_acc=0.6)], 4.0, option="alpha")
    assert (working.panel, working.sweep) == ("args", None)
    assert (at.panel, at.method, at.sweep.value) == ("args@w=0.25", "args[a]@w=0.25", 0.25)
    assert genarm.panel == "genarm@alpha=4"
    assert row("base").panel == "base"  # no guidance at all


def test_tau_comes_per_strength_and_never_mixes_a_strength_with_the_working_points() -> None:
    ranked = chosen(five())  # RM accuracy orders the five methods as policy accuracy does
    reversed_policy = five(policy=(0.70, 0.65, 0.60, 0.55, 0.50))
    rows = ranked + swept(five(), 0.25) + swept(reversed_policy, 4.0)
    entries = {e.decoder: e for e in crisis.tau_entries(rows)}
    assert sorted(entries) == ["args", "args@w=0.25", "args@w=4"]
    assert entries["args"].methods == tuple(f"args[m{i}]" for i in range(5))
    assert entries["args@w=4"].methods == tuple(f"args[m{i}]@w=4" for i in range(5))
    assert entries["args"].tau == pytest.approx(1.0) and entries["args@w=0.25"].tau == 1.0
    assert entries["args@w=4"].tau == pytest.approx(-1.0)
    assert all(e.n_methods == 5 for e in entries.values())


def test_claims_one_and_two_come_per_strength() -> None:
    rows = chosen(five(rouge1=0.3)) + swept(five(rouge1=0.3), 1.0)
    found = claims.run_claims(run_of(rows))
    assert {(where[2], claim) for where, claim in found} == {
        ("args", "tau"),
        ("args@w=1", "tau"),
        ("args", "spread"),
        ("args@w=1", "spread"),
    }


def test_the_icl_comparison_and_the_spread_see_the_working_points_only() -> None:
    # at w = 4 the guided row writes best; the comparison is with the rows at their working
    # points, where ICL is ahead
    working = chosen(
        [
            row("args[a]", rm_acc=0.8, per_user={"rouge1": spread_users([0.30] * 10)}),
            row("args[b]", rm_acc=0.6, per_user={"rouge1": spread_users([0.25] * 10)}),
        ]
    )
    strong = swept([row("args[a]", rm_acc=0.8, per_user={"rouge1": spread_users([0.5] * 10)})], 4)
    icl = row("icl", per_user={"rouge1": spread_users([0.35] * 10)})
    run = run_of([icl, *working, *strong])
    (entry,) = run.crisis.icl_vs_rgd
    assert (entry.icl, entry.rgd) == ("icl", "args[a]")
    assert entry.diff == pytest.approx(0.05)  # ICL's 0.35 against args[a]'s 0.30
    # the same rows with the swept one among the working points: it would be the best
    assert selection.icl_entries([icl, *working, *strong])[0].rgd == "args[a]@w=4"
    assert all("@" not in m for e in run.crisis.spread for m in (e.a, e.b))


def test_the_leaderboard_has_a_table_per_strength_after_the_working_points() -> None:
    figures = {"policy_acc": 0.6, "rouge1": 0.3, "fluency": 1.2, "not_answer": 0.25}
    base = row("base", **figures)
    working = chosen([row("args[a]", rm_acc=0.7, **figures)])
    rows = [base, *working, *swept(working, 4.0), *swept(working, 0.25)]
    rows += swept([row("genarm[arm]", rm_acc=0.6, **figures)], 0.25, option="alpha")
    boards = table.boards(rows)
    assert [[r.method for r in board] for _, board in boards] == [
        ["base", "args[a]"],
        ["args[a]@w=0.25", "genarm[arm]@alpha=0.25"],
        ["args[a]@w=4"],
    ]
    assert boards[0][0] is None  # the suite's own heading
    assert boards[1][0] is not None and "args.w, genarm.alpha = 0.25" in boards[1][0]
    lines = table.leaderboards(rows)
    # the working points line names the working points only
    (points,) = [line for line in lines if "working points:" in line]
    assert points.strip() == "working points: args[a] w=0.5 (chosen)"
    text = "\n".join(lines)
    assert text.count("strength sweep:") == 2 and "args.w = 4 of the standardised" in text
    # each strength's table shows the figures the sweep is for
    for title in ("policy acc", "ROUGE-1", "NLL/tok", "not ans"):
        assert title in text.split("strength sweep:")[1], title


def test_the_report_has_a_leaderboard_and_tau_per_strength() -> None:
    from pytest_prefalign.analysis import report

    rows = [row("base", policy_acc=0.5, rouge1=0.3, fluency=1.0, not_answer=0.2)]
    rows += chosen(five(rouge1=0.3, fluency=1.1, not_answer=0.3))
    rows += swept(five(rouge1=0.3, fluency=3.0, not_answer=0.6), 4.0)
    page = report.render_page(run_of(rows), "")
    boards = page.split("<h2>Leaderboards</h2>")[1].split("<h2>Outputs</h2>")[0]
    assert boards.count("<h3>") == 2 and "strength sweep: args.w = 4" in boards
    swept_board = boards.split("strength sweep")[1]
    assert "args[m0]@w=4" in swept_board and "args[m0]</td>" not in swept_board
    assert "NLL/tok" in swept_board and "3.00" in swept_board
    tau = page.split("Does RM accuracy pick")[1].split("<h2>")[0]
    assert re.search(r"<td>args@w=4 *</td>", tau) and re.search(r"<td>args *</td>", tau)


def test_the_findings_page_states_claims_one_and_two_per_strength(findings, tmp_path) -> None:
    rows = test_findings.results()  # six ARGS rows: tau +1, ROUGE-1 within half a point
    rows += swept([r for r in rows if r.decoder == "args"], 4.0)
    test_findings.write_run(rows, tmp_path / "pref_lamp-135m.json")
    run = findings.Run("pref_lamp", "135m", command="pytest ...", path="pref_lamp-135m.json")
    page = findings.render([run], tmp_path, test_findings.POWER)
    claim_one = page.split("## 1.")[1].split("## 2.")[0]
    for panel in ("args", "args@w=4"):
        line = test_findings.line_with(claim_one, f"| pref_lamp · 135m | {panel} | policy_acc |")
        assert "| 6 | 10 | +1.000 |" in line and "| does not hold |" in line
    claim_two = page.split("## 2.")[1].split("## 3.")[0]
    line = test_findings.line_with(claim_two, "| args@w=4 | args[a]@w=4 0.899 | args[f]@w=4")
    assert line.endswith("| holds | - |")


def test_a_swept_row_follows_its_methods_own_in_a_runs_order() -> None:
    working = chosen([row("args[a]"), row("args[b]")])
    rows = [*swept(working, 4.0), *swept(working, 0.25), row("base"), *working]
    order = result_order(RunConfig(methods=("base", "args[b]", "args[a]"), sizes=("135m",)))
    assert [r.method for r in sorted(rows, key=order)] == [
        "base",
        "args[b]",
        "args[b]@w=0.25",
        "args[b]@w=4",
        "args[a]",
        "args[a]@w=0.25",
        "args[a]@w=4",
    ]


def test_a_bad_value_of_the_option_is_refused_naming_the_values() -> None:
    assert options.guidance_kind("sweep") == "sweep"
    with pytest.raises(Exception, match=r"'often': expected chosen, fixed or sweep"):
        options.guidance_kind("often")


# --------------------------------------------------------------------------------------------
# End to end
# --------------------------------------------------------------------------------------------

METHODS = "base,args[global_bt],args[my_rm]"


def run(project: pytest.Pytester, *args: str, out: str = "run.json") -> tuple[Any, dict]:
    return cache_project.run_with_output(
        project, METHODS, "--prefalign-guidance", "sweep", *args, out=out
    )


def test_sweep_collects_one_test_per_strength_beside_each_guided_methods_own(project):
    result = project.runpytest_inprocess(
        "--prefalign", "toy", "-p", "no:cacheprovider", "-p", "my_rm", "--collect-only", "-q",
        "--prefalign-methods", "base,args[global_bt],genarm[arm],bon[global_bt]",
        "--prefalign-guidance", "sweep",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    ids = [line.split("::")[1] for line in result.stdout.lines if "::" in line]
    assert ids == [
        "toy[base-tiny]",
        "toy[args[global_bt]-tiny]",
        "toy[args[global_bt]@w=0.25-tiny]",
        "toy[args[global_bt]@w=1-tiny]",
        "toy[args[global_bt]@w=4-tiny]",
        "toy[genarm[arm]-tiny]",
        "toy[genarm[arm]@alpha=0.25-tiny]",
        "toy[genarm[arm]@alpha=1-tiny]",
        "toy[genarm[arm]@alpha=4-tiny]",
        "toy[bon[global_bt]-tiny]",  # best-of-N declares no strength: no sweep
    ]


def test_a_bad_value_is_refused_in_one_line_before_any_test(project):
    result = project.runpytest_inprocess(
        "--prefalign", "toy", "-p", "no:cacheprovider", "--prefalign-guidance", "often"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [x for x in result.stderr.lines if "often" in x]
    assert "expected chosen, fixed or sweep" in line
    project.makeini("[pytest]\nprefalign_guidance = often\n")
    result = project.runpytest_inprocess("--prefalign", "toy", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini value prefalign_guidance: 'often': expected chosen" in result.stderr.str()


def strengths(run_file: dict[str, Any]) -> dict[str, tuple[str, float, str, Any]]:
    """Each row's (option, value, how) of its guidance strength, and its options' value."""
    out = {}
    for r in run_file["results"]:
        s = (r.get("guidance") or {}).get("strength")
        if s:
            out[r["method"]] = (s["option"], s["value"], s["how"], r["options"][s["option"]])
    return out


def test_each_reward_method_runs_at_the_sweeps_strengths_with_tau_per_strength(
    project, monkeypatch
):
    result, first = run(project, out="first.json")
    found = strengths(first)
    for reward in ("global_bt", "my_rm"):
        assert found[f"args[{reward}]"][2] == "chosen"
        for value in options.SWEEP:
            name = f"args[{reward}]@w={value:g}"
            assert found[name] == ("w", value, "sweep", value)  # the decoder ran at it
    assert first["config"]["guidance"] == "sweep"
    # tau (RM accuracy against policy accuracy and ROUGE-1) per strength, over both methods
    panels = {e["decoder"]: e["methods"] for e in first["tau"] if e["y"] == "policy_acc"}
    assert panels == {
        "args": ["args[global_bt]", "args[my_rm]"],
        **{
            f"args@w={v:g}": [f"args[global_bt]@w={v:g}", f"args[my_rm]@w={v:g}"]
            for v in options.SWEEP
        },
    }
    # the records name their test: a swept row's are its own
    pairs = [json.loads(x) for x in (project.path / "first.pairs.jsonl").read_text().splitlines()]
    assert {p["method"] for p in pairs} >= {f"args[my_rm]@w={v:g}" for v in options.SWEEP}
    text = result.stdout.str()
    assert text.count("strength sweep: args.w = ") == len(options.SWEEP)

    # one strength changed alone: its rows are computed, the others' come from the cache
    monkeypatch.setattr(options, "SWEEP", (0.25, 2.0, 4.0))
    _, second = run(project, out="second.json")
    assert {m for m, artifact, _ in misses(second) if artifact == "results"} == {
        "args[global_bt]@w=2",
        "args[my_rm]@w=2",
    }
    hits = {m for (m, artifact, _), hit in uses(second).items() if artifact == "results" and hit}
    assert {"args[global_bt]@w=0.25", "args[my_rm]@w=4", "base"} <= hits
    assert strengths(second)["args[my_rm]@w=2"] == ("w", 2.0, "sweep", 2.0)
    again = {r["method"]: r["metrics"] for r in second["results"]}
    assert all(
        again[r["method"]] == r["metrics"] for r in first["results"] if "@w=1" not in r["method"]
    )
