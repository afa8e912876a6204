"""The selection-crisis analysis on hand-made result rows: tau-b worked out by hand (ties
included), inversions found and not found, circular flags, the per-user spread rule and the
terminal text."""

from __future__ import annotations

import math
from typing import Any

import pytest
from scipy import stats as sps

from pytest_prefalign.analysis import crisis, table
from pytest_prefalign.runs.records import CaseResult, RunFile

USERS = [f"u{i}" for i in range(10)]


def row(
    method: str,
    *,
    rm: float | None = None,
    policy: float | None = None,
    rouge1: float | None = None,
    suite: str = "s",
    size: str = "135m",
    per_user: dict[str, dict[str, float]] | None = None,
    **extra: Any,
) -> CaseResult:
    """A result; every user's figure equals the method's figure unless ``per_user`` says."""
    decoder, _, reward = method.partition("[")
    values = {
        k: v
        for k, v in (("rm_acc", rm), ("policy_acc", policy), ("rouge1", rouge1))
        if v is not None
    }
    users = per_user or {k: dict.fromkeys(USERS, v) for k, v in values.items()}
    return CaseResult(
        suite=suite,
        size=size,
        method=method,
        decoder=decoder,
        reward=reward.rstrip("]") or None,
        n_users=len(USERS),
        n_items=10,
        n_pairs=20,
        metrics={**values, **extra.pop("metrics", {})},
        per_user=users,
        timings={"total_s": 1.0},
        **extra,
    )


def summary_lines(results: list[CaseResult]) -> list[str]:
    """The terminal text of a run of these results, its analysis computed once."""
    tau, found = crisis.analyse(results)
    return table.summary_lines(RunFile(results, tau=tau, crisis=found))


# --------------------------------------------------------------------------------------------
# tau
# --------------------------------------------------------------------------------------------

# rm_acc     a .6  b .7  c .7  d .8
# policy_acc a .5  b .6  c .4  d .6
# pairs: ab C, ac D, ad C, bc tie in x, bd tie in y, cd C  ->  C = 3, D = 1
# tau-b = (C - D) / sqrt((n0 - n1)(n0 - n2)) = 2 / sqrt((6 - 1)(6 - 1)) = 0.4
TIED = [
    row("args[a]", rm=0.6, policy=0.5),
    row("args[b]", rm=0.7, policy=0.6),
    row("args[c]", rm=0.7, policy=0.4),
    row("args[d]", rm=0.8, policy=0.6),
]


def test_tau_b_with_ties_by_hand() -> None:
    (entry,) = crisis.tau_entries(TIED)
    assert (entry["suite"], entry["size"], entry["decoder"]) == ("s", "135m", "args")
    assert (entry["x"], entry["y"]) == ("rm_acc", "policy_acc")
    assert entry["tau"] == pytest.approx(0.4)
    expected_p = sps.kendalltau([0.6, 0.7, 0.7, 0.8], [0.5, 0.6, 0.4, 0.6], variant="b").pvalue
    assert entry["p_value"] == pytest.approx(expected_p)
    assert entry["n_methods"] == 4
    assert entry["methods"] == ["args[a]", "args[b]", "args[c]", "args[d]"]
    # every user has the method's figure, so every resample of users gives the same tau
    assert entry["ci"] == pytest.approx([0.4, 0.4])


def test_four_methods_warn_that_tau_cannot_be_significant() -> None:
    (entry,) = crisis.tau_entries(TIED)
    # 2 / 4! = 0.083 > 0.05
    assert entry["warning"] == "4 methods: p >= 0.083 even for a perfect ranking"


def test_five_methods_no_warning_and_perfect_ranking() -> None:
    rows = [row(f"args[r{i}]", rm=0.5 + i / 20, policy=0.4 + i / 20) for i in range(5)]
    (entry,) = crisis.tau_entries(rows)
    assert entry["tau"] == pytest.approx(1.0)
    assert entry["p_value"] == pytest.approx(2 / math.factorial(5))  # exact test
    assert entry["warning"] is None


def test_too_few_methods_give_no_tau_and_say_why() -> None:
    (entry,) = crisis.tau_entries(
        [row("args[a]", rm=0.6, policy=0.5), row("args[b]", rm=0.7, policy=0.6)]
    )
    assert entry["tau"] is None and entry["p_value"] is None and entry["ci"] is None
    assert entry["n_methods"] == 2
    assert "fewer than 3 methods" in entry["warning"]


def test_methods_without_reward_are_left_out_and_rouge_gets_its_own_entry() -> None:
    rows = [
        row("base", policy=0.9, rouge1=0.5),
        row("icl", policy=0.1, rouge1=0.1),
        *(row(f"bon[r{i}]", rm=0.5 + i / 10, policy=0.5, rouge1=0.3 - i / 10) for i in range(3)),
    ]
    entries = {e["y"]: e for e in crisis.tau_entries(rows)}
    assert entries["rouge1"]["methods"] == ["bon[r0]", "bon[r1]", "bon[r2]"]
    assert entries["rouge1"]["tau"] == pytest.approx(-1.0)
    assert entries["policy_acc"]["tau"] is None  # constant policy accuracy
    assert "y is the same for every method" in entries["policy_acc"]["warning"]


def test_pooled_entry_over_decoders() -> None:
    rows = TIED + [row("bon[e]", rm=0.9, policy=0.3)]
    entries = {(e["decoder"], e["y"]): e for e in crisis.tau_entries(rows)}
    assert set(entries) == {("args", "policy_acc"), ("bon", "policy_acc"), ("*", "policy_acc")}
    pooled = entries[("*", "policy_acc")]
    assert pooled["n_methods"] == 5
    assert "pooled over decoders" in pooled["warning"]
    assert pooled["tau"] == pytest.approx(
        sps.kendalltau([0.6, 0.7, 0.7, 0.8, 0.9], [0.5, 0.6, 0.4, 0.6, 0.3], variant="b").statistic
    )


def test_tau_interval_from_per_user_figures() -> None:
    # user u0 says x and y agree, user u1 says they disagree. Resamples of 2 users:
    # {u0, u0} tau = 1, {u1, u1} tau = -1, {u0, u1} (half of them) tau = 1 -> 95% CI [-1, 1]
    def per(xs: tuple[float, float], ys: tuple[float, float]) -> dict[str, dict[str, float]]:
        return {"rm_acc": {"u0": xs[0], "u1": xs[1]}, "policy_acc": {"u0": ys[0], "u1": ys[1]}}

    rows = [
        row("args[a]", rm=0.4, policy=0.5, per_user=per((0.2, 0.6), (0.2, 0.8))),
        row("args[b]", rm=0.55, policy=0.55, per_user=per((0.4, 0.7), (0.4, 0.7))),
        row("args[c]", rm=0.7, policy=0.6, per_user=per((0.6, 0.8), (0.6, 0.6))),
    ]
    (entry,) = crisis.tau_entries(rows)
    assert entry["tau"] == pytest.approx(1.0)
    assert entry["ci"] == pytest.approx([-1.0, 1.0])


# --------------------------------------------------------------------------------------------
# inversions
# --------------------------------------------------------------------------------------------


def test_inversion_found_with_both_figures() -> None:
    rows = [
        row("args[good_rm]", rm=0.8, policy=0.5),
        row("args[bad_rm]", rm=0.6, policy=0.7),
        row("args[mid]", rm=0.7, policy=0.6),
    ]
    found = [e for e in crisis.inversion_entries(rows) if e["y"] == "policy_acc"]
    pairs = {(e["a"], e["b"]): e for e in found}
    assert set(pairs) == {
        ("args[good_rm]", "args[bad_rm]"),
        ("args[good_rm]", "args[mid]"),
        ("args[mid]", "args[bad_rm]"),
    }
    e = pairs[("args[good_rm]", "args[bad_rm]")]
    assert (e["x_a"], e["x_b"], e["y_a"], e["y_b"]) == (0.8, 0.6, 0.5, 0.7)
    assert found[0]["a"] == "args[good_rm]" and found[0]["b"] == "args[bad_rm]"  # clearest first


def test_no_inversion_when_orders_agree_or_tie() -> None:
    rows = [
        row("args[a]", rm=0.8, policy=0.7, rouge1=0.3),
        row("args[b]", rm=0.6, policy=0.5, rouge1=0.3),  # rouge tie: not an inversion
        row("args[c]", rm=0.6, policy=0.9),
    ]  # rm tie with b: not an inversion with b
    found = crisis.inversion_entries(rows)
    assert [(e["a"], e["b"], e["y"]) for e in found] == [("args[a]", "args[c]", "policy_acc")]


def test_pooled_inversions_list_only_cross_decoder_pairs() -> None:
    rows = [
        row("args[a]", rm=0.8, policy=0.5),
        row("args[b]", rm=0.6, policy=0.7),
        row("bon[c]", rm=0.7, policy=0.9),
    ]
    found = {(e["decoder"], e["a"], e["b"]) for e in crisis.inversion_entries(rows)}
    # bon[c] is above args[b] on both figures: no inversion there
    assert found == {("args", "args[a]", "args[b]"), ("*", "args[a]", "bon[c]")}


# --------------------------------------------------------------------------------------------
# circular evaluation
# --------------------------------------------------------------------------------------------


def test_self_judged_method_flagged_circular_with_gap() -> None:
    rows = [
        row("base", policy=0.5, rouge1=0.30),
        row(
            "args[lore]",
            rm=0.7,
            policy=0.55,
            rouge1=0.25,
            metrics={"win_self": 1.0, "win_independent": 0.4},
            judge={"n": 10, "independent": "minilm-bt"},
        ),
    ]
    (entry,) = crisis.circular_entries(rows)
    assert entry["gap"] == pytest.approx(0.6)
    assert entry["rouge1_vs_base"] == pytest.approx(-0.05)
    lines = summary_lines(rows)
    table_row = next(line for line in lines if "args[lore]" in line and "circular" in line)
    assert "1.000 (circular)" in table_row and "0.400" in table_row and "+0.600" in table_row
    assert "minilm-bt" in table_row
    assert (
        "! args[lore] (s · 135m): wins 100% over base under its own RM but its ROUGE-1 is "
        "0.050 below base's"
    ) in lines


def test_missing_independent_judge_shows_its_reason() -> None:
    rows = [
        row(
            "args[lore]",
            rm=0.7,
            policy=0.55,
            metrics={"win_self": 0.7},
            judge={"n": 10, "reason": "the encoder package is missing"},
        )
    ]
    (entry,) = crisis.circular_entries(rows)
    assert entry["win_independent"] is None and entry["gap"] is None
    assert "  no independent judge for args[lore]: the encoder package is missing" in summary_lines(
        rows
    )


# --------------------------------------------------------------------------------------------
# per-user spread
# --------------------------------------------------------------------------------------------


def test_tail_mean_by_hand() -> None:
    assert crisis.tail_mean([0.9, 0.1, 0.5, 0.7, 0.3, 0.6, 0.8, 0.4, 0.2, 1.0]) == (
        pytest.approx(0.1),
        1,
    )  # 10 users: the worst 1
    assert crisis.tail_mean([0.9, 0.1, 0.5, 0.7, 0.3, 0.6, 0.8, 0.4, 0.2, 1.0, 0.0]) == (
        pytest.approx(0.05),
        2,
    )  # 11 users: ceil(1.1) = 2


def _policy(values: list[float]) -> dict[str, dict[str, float]]:
    return {"policy_acc": dict(zip(USERS, values, strict=True))}


def test_close_means_with_different_worst_decile_flagged() -> None:
    even = [0.5] * 10
    skewed = [5 / 9] * 9 + [0.0]  # mean 0.5, worst user 0
    rows = [
        row("args[a]", rm=0.6, policy=0.5, per_user=_policy(even)),
        row("args[b]", rm=0.7, policy=0.5, per_user=_policy(skewed)),
        row("args[c]", rm=0.8, policy=0.5, per_user=_policy(even)),
    ]
    flags = crisis.spread(rows)["flags"]
    assert [(f["kind"], f["a"], f["b"]) for f in flags] == [
        ("close_means", "args[b]", "args[a]"),
        ("close_means", "args[b]", "args[c]"),
    ]
    assert flags[0]["tail_a"] == pytest.approx(0.0) and flags[0]["tail_b"] == pytest.approx(0.5)
    assert "worst 1 of 10 users" in flags[0]["text"]


def test_gain_on_mean_with_loss_on_worst_decile_against_base() -> None:
    base = [0.4] * 10
    method = [0.6] * 9 + [0.2]  # mean 0.56 > 0.4, worst 0.2 <= 0.4 - 0.1
    rows = [
        row("base", policy=0.4, per_user=_policy(base)),
        row("args[a]", rm=0.6, policy=0.56, per_user=_policy(method)),
    ]
    (flag,) = crisis.spread(rows)["flags"]
    assert (flag["kind"], flag["a"], flag["b"]) == ("mean_only_gain", "args[a]", "base")
    assert "hurts the worst-served users" in flag["text"]


def test_spread_not_flagged_with_too_few_users() -> None:
    few = {"policy_acc": {"u0": 0.5, "u1": 0.5, "u2": 0.5, "u3": 0.5}}
    skewed = {"policy_acc": {"u0": 2 / 3, "u1": 2 / 3, "u2": 2 / 3, "u3": 0.0}}
    rows = [
        row("args[a]", rm=0.6, policy=0.5, per_user=few),
        row("args[b]", rm=0.7, policy=0.5, per_user=skewed),
    ]
    result = crisis.spread(rows)
    assert result["flags"] == []
    assert {r["method"]: r["tail_mean"] for r in result["rows"]} == {"args[a]": 0.5, "args[b]": 0.0}


# --------------------------------------------------------------------------------------------
# terminal text
# --------------------------------------------------------------------------------------------


def test_summary_lines_content() -> None:
    rows = [*TIED, row("base", policy=0.5)]
    text = "\n".join(summary_lines(rows))
    assert "Kendall's tau-b" in text
    tau_line = next(line for line in text.splitlines() if "rm_acc ~ policy_acc" in line)
    assert "args" in tau_line and "+0.400" in tau_line and "[+0.40, +0.40]" in tau_line
    assert "4 methods: p >= 0.083" in tau_line
    # the one inversion: c is above a by RM accuracy (0.7 > 0.6) and below it by policy
    assert "Ranking inversions (1)" in text
    inv = next(line for line in text.splitlines() if "args[c]" in line and "<" in line)
    assert "0.700 > 0.600" in inv and "0.400 < 0.500" in inv


def test_summary_empty_without_reward_methods() -> None:
    assert summary_lines([row("base", policy=0.5), row("icl", policy=0.6)]) == []
