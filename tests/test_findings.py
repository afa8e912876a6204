"""benchmarks/findings.py's rendering, on a small run file made by hand whose answers are known:
a verdict per claim of the paper from the run file alone, with the figures, intervals and the
command; a size that could not run is named with the reason."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from types import ModuleType

import benchmark_scripts
import numpy as np
import pytest

from pytest_prefalign.analysis import crisis
from pytest_prefalign.analysis.claims import Gap
from pytest_prefalign.analysis.selection import Paired
from pytest_prefalign.plumbing.collect import read_suite_toml
from pytest_prefalign.runs import records
from pytest_prefalign.runs.entries import TauEntry
from pytest_prefalign.runs.records import CaseResult, RunFile

USERS = [f"u{i:02d}" for i in range(10)]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def findings() -> Iterator[ModuleType]:
    yield benchmark_scripts.load("findings")
    del sys.modules["findings"]


def row(method: str, suite: str = "pref_lamp", **figures: float) -> CaseResult:
    """Every user near the figure (-0.01, 0, +0.01 in turn: the mean over ten users is 0.001
    below it); every method the same pattern, so paired differences are the same for all."""
    decoder, _, reward = method.partition("[")
    per_user = {
        name: {u: value + 0.01 * ((i % 3) - 1) for i, u in enumerate(USERS)}
        for name, value in figures.items()
    }
    return CaseResult(
        suite=suite,
        size="135m",
        method=method,
        decoder=decoder,
        reward=reward.rstrip("]") or None,
        n_users=len(USERS),
        metrics={k: float(np.mean(list(v.values()))) for k, v in per_user.items()},
        per_user=per_user,
    )


def results() -> list[CaseResult]:
    """Six ARGS rows whose RM accuracy orders policy accuracy perfectly (tau +1) while their
    ROUGE-1 is within half a point; ICL five points above the best of them; lead above all."""
    rows = [
        row(f"args[{name}]", rm_acc=rm, policy_acc=policy, rouge1=rouge)
        for name, rm, policy, rouge in [
            ("a", 0.90, 0.80, 0.300),
            ("b", 0.80, 0.70, 0.302),
            ("c", 0.75, 0.65, 0.299),
            ("d", 0.70, 0.60, 0.301),
            ("e", 0.60, 0.50, 0.303),
            ("f", 0.55, 0.45, 0.300),
        ]
    ]
    rows += [row("base", policy_acc=0.55, rouge1=0.28), row("icl", policy_acc=0.5, rouge1=0.353)]
    rows += [row("bon[a]", rm_acc=0.90, policy_acc=0.7, rouge1=0.2)]  # one method: no tau
    return rows + [row("lead", rouge1=0.40)]


def ladder() -> list[CaseResult]:
    """The positive control's shape: six best-of-N rows whose RM accuracy orders policy
    accuracy perfectly (the synthetic suite's oracle ladder)."""
    rungs = [("oracle", 1.0, 0.9), ("noise1", 0.9, 0.8), ("noise2", 0.8, 0.7),
             ("noise4", 0.6, 0.6), ("noise8", 0.5, 0.5), ("negated", 0.0, 0.2)]  # fmt: skip
    rows = [
        row(f"bon[{n}]", "synthetic", rm_acc=rm, policy_acc=pa, rouge1=0.2) for n, rm, pa in rungs
    ]
    return rows + [row("base", "synthetic", policy_acc=0.5, rouge1=0.2)]


def curve(claim: str, decoder: str, grid: list, power: list, se: list, needed: int | None) -> dict:
    where = {"suite": "pref_lamp", "size": "135m", "decoder": decoder}
    figures = {"grid": grid, "power": power, "se": se, "sims": 50, "needed": needed}
    return {**where, "claim": claim, **figures, "effect": "the paper's"}


# the claims' power from the run's own noise, as findings.claims_power keeps it
POWER = {
    "sims": 50,
    "target": 0.8,
    "runs": {
        "pref_lamp-135m.json": {
            "sha256": "-",
            "curves": [
                curve("tau", "args", [10, 20], [0.0, 0.1], [0.0, 0.04], None),
                curve("spread", "args", [10, 20], [0.3, 0.86], [0.06, 0.05], 20),
                curve("icl", "icl", [10], [0.9], [0.04], 10),
            ],
        }
    },
}


ERRORS = {
    "command": "python benchmarks/claim_power.py --errors --sims 100",
    "sims": 100,
    "claims": {"tau": "1. tau weak", "spread": "2. spread", "icl": "3. ICL ahead"},
    "errors": [
        {
            "claim": "spread",
            "world": "ROUGE-1 2 points apart",
            "verdict": "holds",
            "rates": {"pref_lamp": {"40": [0.06, 0.024], "160": [0.2, 0.04]}},
        }
    ],
}


def write_run(rows: list[CaseResult], path: Path) -> None:
    tau, found = crisis.analyse(rows)
    records.write(RunFile(rows, tau=tau, crisis=found, commit="abc1234"), path)


@pytest.fixture
def runs(findings: ModuleType, tmp_path: Path) -> list:
    write_run(results(), tmp_path / "pref_lamp-135m.json")
    write_run(ladder(), tmp_path / "synthetic-135m.json")
    command = "pytest --prefalign suites/pref_lamp --prefalign-sizes 135m --prefalign-limit 10"
    return [
        findings.Run(
            "pref_lamp",
            "135m",
            command=command,
            path="pref_lamp-135m.json",
            seconds=600.0,
            returncode=0,
            invocation="python benchmarks/findings.py --limit 10",
            machine="a CPU, 2 cores",
            cache="0 of 39 values reused, 39 computed",
            peak_gb=3.21,
        ),
        findings.Run("pref_lamp", "270m", note="skipped: SmolLM2-360M is not installed"),
        findings.Run("synthetic", "135m", command="pytest ...", path="synthetic-135m.json"),
    ]


@pytest.fixture
def rendered(findings: ModuleType, runs: list, tmp_path: Path) -> str:
    return findings.render(runs, tmp_path, POWER)


def line_with(text: str, *parts: str) -> str:
    (found,) = [line for line in text.splitlines() if all(p in line for p in parts)]
    return found


def test_claim_one_does_not_hold_where_rm_accuracy_orders_policy_accuracy(rendered: str) -> None:
    line = line_with(rendered, "| pref_lamp · 135m | args | policy_acc |")
    # six methods ranked perfectly: exact p 2/6! = 0.00278, still significant once adjusted
    # with the run's other looks, and the interval above the paper's 0.31: every one of the 15
    # pairs ordered alike by both figures' simultaneous intervals (no user varies them)
    assert "| 6 | 10 | +1.000 | 0.00278 |" in line and "| [+1.00, +1.00] | 15 of 15 |" in line
    assert line.endswith("| finding: RM accuracy orders the methods the same way as policy_acc "
                         "| does not hold | - |")  # fmt: skip
    # a decoder with one reward method has no tau: left out of the claim's table
    claim = rendered.split("## 1.")[1].split("## 2.")[0]
    assert "| bon |" not in claim and "fewer than 3 reward methods" in claim


def test_claim_two_holds_where_rouge_is_nearly_the_same(rendered: str) -> None:
    line = line_with(rendered, "| pref_lamp · 135m | args | args[a] 0.899 | args[f] 0.549 |")
    # the extremes of six, tested by the within-user permutation of all six: every user
    # orders them alike, so no shuffle reaches the observed range: p = 1 / 10001; the pair's
    # own exact sign flip over 10 users, every one the same way: p = 2 / 2**10; no difference
    # varies over users, so the bound that holds for every pair is the difference itself
    assert "+0.350 [+0.350, +0.350] >= +0.350, p 0.00195, 0.0001" in line
    assert line.endswith("| 10 | holds | - |")


def test_claim_three_and_the_baselines(rendered: str) -> None:
    line = line_with(rendered, "| pref_lamp · 135m | icl | args[e] | rouge1 |")
    # ICL ahead of every guided row for every user: of the 2^10 sign patterns of each pair only
    # the observed one reaches it, p = 2 x 1/1024 (two-sided)
    assert (
        "| +0.050 | [+0.050, +0.050] | 0.00195 | 0.00879 | 10 | icl better | holds at this size |"
        " - |" in line
    )
    line = line_with(rendered, "| pref_lamp · 135m | icl | lead |")
    assert "| -0.047 |" in line and line.endswith("| lead better |")


def test_runs_commands_and_tables(rendered: str) -> None:
    assert "Made by `python benchmarks/findings.py --limit 10`." in rendered
    assert (
        "| pref_lamp | 270m | - | - | - | - | - | - | - | skipped: SmolLM2-360M is not installed |"
        in (rendered)
    )
    assert line_with(rendered, "| pref_lamp | 135m |").endswith(
        "| abc1234 | - | 10 min | 3.2 GB | a CPU, 2 cores | 0 of 39 values reused, 39 computed "
        "| exit status 0 |"
    )
    # the tables as the run printed them, under the command that produced them
    section = rendered.split("### pref_lamp · 135m")[1]
    assert "`pytest --prefalign suites/pref_lamp --prefalign-sizes 135m --prefalign-limit 10`" in (
        section
    )
    assert "args[a]" in section and "Kendall's tau-b" in section


def tau(lower: float | None, upper: float | None, verdict: str = "no evidence") -> dict:
    """A tau entry with its one-sided 95% bounds (users resampled)."""
    return {"enough": True, "verdict": verdict, "tau": 0.0, "lower_95": lower, "upper_95": upper}


# a tau entry of a run file written before lower_95 was kept
OLD = {"enough": True, "verdict": "-", "tau": 0.1, "upper_95": 0.25}


@pytest.mark.parametrize(
    ("entry", "claim"),
    [
        ({"enough": False, "verdict": "not enough evidence: 4 methods"}, "not enough evidence"),
        (tau(None, None), "not enough evidence"),
        # no significant order is no evidence of a weak tau: an equivalence statement is needed
        (tau(-0.2, 0.9), "not enough evidence"),
        (tau(-0.2, 0.25), "holds"),
        # both bounds must be inside (-0.31, 0.31): a tau of -1 is no weak tau
        (tau(-0.4, 0.25), "not enough evidence"),
        (tau(-1.0, -0.5, "finding: ..."), "does not hold (the opposite order)"),
        (tau(0.2, 1.0, "finding: ..."), "not enough evidence"),
        (tau(0.4, 1.0, "finding: ..."), "does not hold"),
        # decided from the users' bounds, the analysis's own finding not needed: with five
        # methods its permutation p cannot go below 2/120 (docs/metrics.md)
        (tau(0.4, 1.0), "does not hold"),
        # a run file written before lower_95 was kept: the interval's 2.5th percentile instead
        ({**OLD, "ci": (-0.2, 0.3)}, "holds"),
        ({**OLD, "ci": (-0.35, 0.3)}, "not enough evidence"),
    ],
)
def test_tau_verdicts(findings: ModuleType, entry: dict, claim: str) -> None:
    group = {"suite": "s", "size": "135m", "decoder": "args", "x": "rm_acc", "y": "policy_acc"}
    # read as the run file's reader reads it (an older entry upgraded)
    (read,) = records.upgrade({"version": 2, "tau": [{**group, **entry}]})["tau"]
    assert findings.tau_verdict(TauEntry(**read)) == claim


def paired(diff: float, ci: list[float], p: float, verdict: str = "") -> Paired:
    return Paired(diff=diff, ci=ci, n_users=20, test="sign flip", p_value=p, verdict=verdict)


# the pair's own interval and its selection-aware lower bound (``lower``) above 0.10
LARGE = Gap(**asdict(paired(0.2, [0.15, 0.25], 0.001)), p_range=0.001, lower=0.12)


@pytest.mark.parametrize(
    ("rm", "rouge", "claim"),
    [
        (LARGE, paired(0.001, [-0.01, 0.012], 0.7), "holds"),
        # the range test not significant: no large difference shown
        (replace(LARGE, p_range=0.2), paired(0.0, [-0.01, 0.01], 0.9), "not enough evidence"),
        # significant, but not shown to be 10 points or more apart
        (
            replace(LARGE, ci=[0.04, 0.2], lower=0.02),
            paired(0.0, [-0.01, 0.01], 0.9),
            "not enough evidence",
        ),  # fmt: skip
        # the pair's own interval above 0.10, but not the bound that holds for whichever pair
        # the data chose (the extremes of several are apart by more than their truths)
        (replace(LARGE, lower=0.08), paired(0.0, [-0.01, 0.01], 0.9), "not enough evidence"),
        # a comparison written before the bound was kept shows no gap
        (
            replace(LARGE, lower=None),
            paired(0.0, [-0.01, 0.01], 0.9),
            "not enough evidence",
        ),
        # significant and shown to be less than 10 points apart: the claim is not about them
        (
            replace(LARGE, diff=0.05, ci=[0.02, 0.08]),
            paired(0.0, [-0.01, 0.01], 0.9),
            "no large RM-accuracy gap (below 0.10)",
        ),  # fmt: skip
        # ROUGE-1's interval wholly outside the margin: not "nearly the same", either way
        (LARGE, paired(0.045, [0.025, 0.07], 0.003), "does not hold (ROUGE-1 follows RM accuracy)"),
        (LARGE, paired(-0.054, [-0.08, -0.03], 0.001), "does not hold (ROUGE-1 the other way)"),
        # the direction is read from the numbers, never from the verdict strings: a ROUGE-1
        # verdict naming a method is not "the other way"
        (
            replace(LARGE, verdict=""),
            paired(0.04, [0.021, 0.06], 0.01, "args[a] better"),
            "does not hold (ROUGE-1 follows RM accuracy)",
        ),
        # the crafted case of issue 64: a 20-point RM gap, ROUGE-1 +0.008 [+0.002, +0.014] p 0.01
        # is a real difference inside the margin, the claim true: it holds, never "does not hold"
        (LARGE, paired(0.008, [0.002, 0.014], 0.01), "holds"),
        # significant, across the margin's edge (touching it is not outside): not enough evidence
        (LARGE, paired(0.03, [0.01, 0.05], 0.01), "not enough evidence"),
        (LARGE, paired(0.045, [0.02, 0.07], 0.003), "not enough evidence"),
        # the range test finds the methods apart but the two extremes' own paired test does
        # not: no large gap shown for this pair, so ROUGE-1 decides nothing, either way
        (replace(LARGE, p_value=0.08), paired(0.03, [0.01, 0.05], 0.01), "not enough evidence"),
        (replace(LARGE, p_value=0.08), paired(0.0, [-0.01, 0.01], 0.9), "not enough evidence"),
        # a paired test written before it was kept (no p_value): no gap shown either
        (
            replace(LARGE, p_value=None),
            paired(0.0, [-0.01, 0.01], 0.9),
            "not enough evidence",
        ),
        # equivalence not shown: a wide ROUGE-1 interval
        (LARGE, paired(0.0, [-0.04, 0.04], 0.9), "not enough evidence"),
    ],
)
def test_spread_verdicts(findings: ModuleType, rm: Gap, rouge: Paired, claim: str) -> None:
    assert findings.spread_verdict(rm, rouge) == claim


def spread_rows(rm: dict[str, list[float]], rouge: dict[str, list[float]]) -> list[CaseResult]:
    users = [f"u{i}" for i in range(len(next(iter(rm.values()))))]
    rows = []
    for method in rm:
        per_user = {"rm_acc": dict(zip(users, rm[method], strict=True)),
                    "rouge1": dict(zip(users, rouge[method], strict=True))}  # fmt: skip
        metrics = {k: sum(v.values()) / len(users) for k, v in per_user.items()}
        rows.append(CaseResult(suite="s", size="135m", method=method, decoder="args",
                               reward=method[5:-1], n_users=len(users), metrics=metrics,
                               per_user=per_user))  # fmt: skip
    return rows


def test_a_range_apart_without_the_pair_apart_is_not_a_large_gap(findings: ModuleType) -> None:
    # six users; args[pal] is 0.6 above args[global_bt] on five and 0.2 below on the sixth:
    # the range over five methods is far outside its permutation null, the interval of the
    # pair above 0.10, but the pair's exact sign-flip p is 4/64 (the all-positive pattern and
    # the one other as extreme, both ways), so the gap of these two is not shown
    rm = {"args[global_bt]": [0.4, 0.4, 0.4, 0.4, 0.4, 0.6],
          "args[per_user_bt]": [0.6, 0.8, 0.6, 0.8, 0.6, 0.6],
          "args[lore]": [0.6, 0.6, 0.8, 0.6, 0.8, 0.6],
          "args[vpl]": [0.6] * 6,
          "args[pal]": [1.0, 1.0, 1.0, 1.0, 1.0, 0.4]}  # fmt: skip
    base = [0.20, 0.15, 0.25, 0.10, 0.30, 0.18]
    rouge = {m: base for m in rm}
    rouge["args[pal]"] = [b + 0.01 for b in base[:5]] + [base[5] - 0.005]
    (entry,) = findings.spread_entries(spread_rows(rm, rouge))
    assert (entry.high.method, entry.low.method) == ("args[pal]", "args[global_bt]")
    assert entry.rm.p_range is not None and entry.rm.p_range < 0.01
    assert entry.rm.ci is not None and entry.rm.ci[0] > 0.10
    assert entry.rm.p_value == pytest.approx(4 / 64)
    assert entry.claim == "not enough evidence"
    # the sixth user moves with the others: the pair's p is 2/64, the gap large, and ROUGE-1
    # (within 1 point on every user, its sign-flip p 4/64) nearly the same
    rm["args[pal]"] = [1.0] * 6
    (entry,) = findings.spread_entries(spread_rows(rm, rouge))
    assert entry.rm.p_value == pytest.approx(2 / 64)
    assert entry.rouge.p_value == pytest.approx(4 / 64)
    assert entry.claim == "holds"


def test_the_positive_control_passes_where_rm_accuracy_orders_policy_accuracy(
    rendered: str,
) -> None:
    section = rendered.split("## Positive control")[1].split("## 1.")[0]
    line = line_with(section, "| synthetic · 135m | bon |")
    # six rungs ranked perfectly: exact p 2/6!, a finding with its interval above 0.31
    assert "| 6 | 10 | +1.000 | 0.00278 |" in line and line.endswith("| passes |")
    # the control is not one of the paper's claims: it is not in their tables
    assert "synthetic" not in rendered.split("## 1.")[1].split("## The runs' tables")[0]


def test_users_needed_read_from_the_power_table(findings: ModuleType) -> None:
    args = ("pref_lamp", "135m", "args")
    # with the Monte Carlo error of the powers behind the figure
    assert findings.users_needed(POWER, args, "spread", "not enough evidence") == (
        "20 (power 0.86 ± 0.05; 10: 0.30 ± 0.06, 50 runs each)"
    )
    assert findings.users_needed(POWER, args, "tau", "not enough evidence") == (
        "more than 20 (power 0.10 ± 0.04 at 20, 50 runs each)"
    )
    # a claim the run decided needs no more users; a run or decoder without a curve has none
    assert findings.users_needed(POWER, args, "spread", "holds") == "-"
    polis = ("polis", "135m", "args")
    assert findings.users_needed(POWER, polis, "spread", "not enough evidence") == "-"
    assert findings.users_needed(None, args, "spread", "not enough evidence") == "-"


def test_the_power_table_is_on_the_page(rendered: str) -> None:
    section = rendered.split("## How many users each claim needs")[1]
    assert "50 simulated runs per number of users" in section
    line = line_with(section, "| pref_lamp · 135m | args | 2. spread |")
    assert line.endswith("| 10: 0.30 ± 0.06, 20: 0.86 ± 0.05 | 20 |")
    assert line_with(section, "| 1. tau weak |").endswith("| more than 20 |")


def test_power_is_computed_from_each_runs_own_users_and_kept(
    findings: ModuleType, runs: list, tmp_path: Path
) -> None:
    table = findings.claims_power(runs, tmp_path, sims=4)
    (kept,) = table["runs"].values()
    # the pref_lamp run's six reward methods under args: claims 1 and 2; the control has none
    claims = {(c["decoder"], c["claim"]) for c in kept["curves"]}
    assert {("args", "tau"), ("args", "spread")} <= claims
    assert all(c["sims"] == 4 for c in kept["curves"])
    assert json.loads((tmp_path / "power.json").read_text()) == table
    # kept: asked again with nothing changed, nothing is simulated again
    stale = json.loads((tmp_path / "power.json").read_text())
    stale["runs"]["pref_lamp-135m.json"]["curves"] = []
    (tmp_path / "power.json").write_text(json.dumps(stale))
    assert findings.claims_power(runs, tmp_path, sims=4)["runs"]["pref_lamp-135m.json"] == {
        **kept, "curves": []
    }  # fmt: skip
    # another number of simulations, or another run file, computes them again
    assert findings.claims_power(runs, tmp_path, sims=5)["runs"]["pref_lamp-135m.json"]["curves"]


def test_the_error_table_marks_a_rate_above_its_level(
    findings: ModuleType, runs: list, tmp_path: Path
) -> None:
    page = findings.render(runs, tmp_path, POWER, ERRORS)
    section = page.split("## How often a verdict is wrong")[1].split("\n## ")[0]
    assert "| holds | false | pref_lamp |" in section
    assert "`python benchmarks/claim_power.py --errors --sims 100`, 100 runs" in section
    line = line_with(section, "| ROUGE-1 2 points apart | holds | false | pref_lamp |")
    assert line.startswith("| 2. Large RM-accuracy differences, nearly the same ROUGE-1 |")
    # 0.06 ± 0.024 may be 0.05 (its interval reaches below); 0.2 ± 0.04 is above it
    assert "40: 0.060 ± 0.024 |" not in line and "40: 0.060 ± 0.024, " in line
    assert line.endswith("160: 0.200 ± 0.040 **above 0.05** |")
    assert "How often a verdict is wrong" not in findings.render(runs, tmp_path, POWER)


def test_the_kept_run_files_render_the_same_page(
    findings: ModuleType, runs: list, rendered: str, tmp_path: Path
) -> None:
    kept = tmp_path / "kept"
    findings.keep(runs, tmp_path, kept)
    assert sorted(p.name for p in kept.iterdir()) == [
        "pref_lamp-135m.json.gz", "runs.json", "synthetic-135m.json.gz"
    ]  # fmt: skip
    again = findings.read_index(kept / "runs.json")
    assert findings.render(again, kept, POWER) == rendered
    # keeping again drops the file of a run no longer in the index
    findings.keep(runs[:2], kept, kept)
    assert not (kept / "synthetic-135m.json.gz").exists()


def test_a_run_replaces_the_earlier_run_of_its_suite_and_size(findings: ModuleType) -> None:
    old = [findings.Run("polis", "135m", note="old"), findings.Run("pref_lamp", "270m")]
    new = findings.merged(old, findings.Run("polis", "135m", note="new"))
    assert [(r.suite, r.size, r.note) for r in new] == [
        ("pref_lamp", "270m", ""), ("polis", "135m", "new")
    ]  # fmt: skip
    more = findings.merged(new, findings.Run("pref_lamp", "135m"))
    assert [(r.suite, r.size) for r in more] == [
        ("pref_lamp", "135m"), ("pref_lamp", "270m"), ("polis", "135m")
    ]  # fmt: skip


def test_a_run_whose_file_is_gone_is_named_and_the_others_rendered(
    findings: ModuleType, runs: list, tmp_path: Path
) -> None:
    killed = findings.Run("polis", "270m", command="pytest ...", returncode=-9,
                          note="no run file (pytest exit status -9)")  # fmt: skip
    page = findings.render([*runs, killed], tmp_path, POWER)
    assert line_with(page, "| polis | 270m |").endswith(
        "| no run file (pytest exit status -9) (killed by SIGKILL) |"
    )
    gone = findings.Run("polis", "135m", command="pytest ...", path="polis-135m.json")
    page = findings.render([*runs, gone], tmp_path, POWER)
    assert line_with(page, "| polis | 135m |").endswith(
        f"| its run file polis-135m.json is not in {tmp_path} |"
    )
    assert "### pref_lamp · 135m" in page and "### polis · 135m" not in page


def test_the_page_is_written_again_from_the_kept_runs_unchanged(findings: ModuleType) -> None:
    # docs/findings.md comes from benchmarks/findings-runs alone (its README: render and
    # compare); the run files' analysis read through its typed records renders the same page
    kept = ROOT / findings.KEPT
    runs = findings.read_index(kept / "runs.json")
    power = json.loads((kept / findings.POWER).read_text())
    errors = json.loads(findings.ERRORS.read_text())
    page = findings.render(runs, kept, power, errors)
    assert page == (ROOT / "docs" / "findings.md").read_text()


def fold_file(fold: int, pairs: list, path: Path) -> None:
    """A fold's run file as a fold's pytest writes it (test_folds's rows, whose pair records
    name their test as a run's do: a record given without it takes its result's)."""
    from tests.test_folds import fold_run

    run = fold_run(fold, pairs)
    assert all(record.suite == row.suite for row in run.results for record in row.pairs)
    records.write(run, path)


def test_the_folds_side_by_side_are_given_less_than_the_memory_available(
    findings: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each fold's --prefalign-memory leaves room: a fold grows to its share and past it, and
    two given all the memory there was were more than the machine held."""
    from pytest_prefalign.runtime import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 20 * 10**9)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert findings.fold_share(2) == ("1", "8.0")
    assert findings.fold_share(1) == ("2", "16.0")
    monkeypatch.setattr(memory, "available_bytes", lambda: None)
    assert findings.fold_share(2) == ("1", None)


def test_a_cross_fitted_suite_runs_its_folds_side_by_side_and_pools_them(
    findings: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_folds import FOLD0, FOLD1

    folds = {"0": FOLD0, "1": FOLD1}
    seen: list[tuple[list[str], str]] = []

    def fake_pytest(args: list[str], out, env) -> tuple[int, str, float]:
        # what a fold's pytest would write: its run file, its cache line to its log
        fold = args[args.index("--prefalign") + 1][-1]
        seen.append((args, env["OMP_NUM_THREADS"]))
        out.write(f"fold {fold} ran\n")
        fold_file(int(fold), folds[fold], Path(args[args.index("--prefalign-json") + 1]))
        return 0, "0 of 2 values reused, 2 computed", 2.5

    monkeypatch.setattr(findings, "pytest_in_subprocess", fake_pytest)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # for the whole: 2 threads a fold
    run = findings.run_one("pref_lamp", "135m", 40, tmp_path)
    # the folds run side by side: they start in either order
    assert sorted(args[args.index("--prefalign") + 1] for args, _ in seen) == sorted(
        findings.FOLDED["pref_lamp"]
    )
    assert all(threads == "2" and "--prefalign-memory" in args for args, threads in seen)
    assert (run.note, run.path, run.returncode) == ("", "pref_lamp-135m.json", 0)
    assert all("--prefalign-guidance" not in args for args, _ in seen)  # the suites' own
    pooled = records.read(tmp_path / run.path)
    assert [r.n_pairs for r in pooled.results] == [7, 7]  # every pair of both folds
    assert [f.file for f in pooled.config.pooled_folds] == [
        "pref_lamp-135m-fold0.json", "pref_lamp-135m-fold1.json"
    ]  # fmt: skip
    assert (tmp_path / "pref_lamp-135m-fold1.log").read_text() == "fold 1 ran\n"
    assert run.peak_gb == 5.0  # the two folds held memory at the same time
    assert (
        run.cache
        == "fold 0: 0 of 2 values reused, 2 computed; fold 1: 0 of 2 values reused, 2 computed"
    )
    assert run.command.endswith(
        "& wait; prefalign pool pref_lamp-135m-fold0.json pref_lamp-135m-fold1.json "
        "--out pref_lamp-135m.json"
    )
    assert run.command.count("OMP_NUM_THREADS=2 pytest --prefalign benchmarks/findings-folds/") == 2
    # the folds' suite folders hold what the page says they run
    for k, folder in enumerate(findings.FOLDED["pref_lamp"]):
        name, options = read_suite_toml(ROOT / folder / "suite.toml")
        assert (name, options) == (
            "pref_lamp",
            {"negatives": "style", "folds": "2", "fold": str(k), "writer_rivals": "3"},
        )


def test_a_run_at_a_guidance_passes_it_to_every_pytest(
    findings: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_folds import FOLD0, FOLD1

    folds = {"0": FOLD0, "1": FOLD1}
    seen: list[list[str]] = []

    def fake_pytest(args: list[str], out, env) -> tuple[int, str, float]:
        fold = args[args.index("--prefalign") + 1][-1]
        seen.append(args)
        fold_file(int(fold), folds[fold], Path(args[args.index("--prefalign-json") + 1]))
        return 0, "", 1.0

    monkeypatch.setattr(findings, "pytest_in_subprocess", fake_pytest)
    run = findings.run_one("pref_lamp", "135m", 40, tmp_path, "sweep")
    assert len(seen) == 2
    assert all(args[args.index("--prefalign-guidance") + 1] == "sweep" for args in seen)
    assert run.command.count("--prefalign-guidance sweep") == 2  # the page's command says so


def test_a_fold_without_its_run_file_leaves_the_suite_without_one(
    findings: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_folds import FOLD0

    def fake_pytest(args: list[str], out, env) -> tuple[int, str, float]:
        if args[args.index("--prefalign") + 1].endswith("fold0"):
            fold_file(0, FOLD0, Path(args[args.index("--prefalign-json") + 1]))
            return 0, "", 1.0
        return -9, "", 1.0  # fold 1 killed

    monkeypatch.setattr(findings, "pytest_in_subprocess", fake_pytest)
    run = findings.run_one("pref_lamp", "135m", 40, tmp_path)
    assert run.path is None and run.returncode == -9
    assert run.note == "no run file of pref_lamp-135m-fold1.json (pytest exit status [0, -9])"
    assert not (tmp_path / "pref_lamp-135m.json").exists()


def test_a_kept_run_names_the_files_of_its_runs_folder_by_name(
    findings: ModuleType, tmp_path: Path
) -> None:
    # a runs folder outside the repository has no root: the kept copy names its files by name,
    # as the runs table's commands do, and the invocation names the folder DIR
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    own = str(runs_dir / "pref_lamp-135m.json")
    write_run(results(), runs_dir / "pref_lamp-135m.json")
    doc = json.loads((runs_dir / "pref_lamp-135m.json").read_text())
    doc["config"]["args"] = ["--prefalign-json", own]
    (runs_dir / "pref_lamp-135m.json").write_text(json.dumps(doc))
    run = findings.Run("pref_lamp", "135m", path="pref_lamp-135m.json",
                       invocation=f"python benchmarks/findings.py --runs {runs_dir}")  # fmt: skip
    findings.keep([run], runs_dir, tmp_path / "kept")
    kept = stored_gz(tmp_path / "kept" / "pref_lamp-135m.json.gz")
    assert kept["config"]["args"] == ["--prefalign-json", "pref_lamp-135m.json"]
    (again,) = findings.read_index(tmp_path / "kept" / "runs.json")
    assert again.invocation == "python benchmarks/findings.py --runs DIR"


def stored_gz(path: Path) -> dict:
    import gzip

    return json.loads(gzip.decompress(path.read_bytes()))
