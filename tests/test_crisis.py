"""The selection-crisis analysis on hand-made results: tau-b and its exact p worked out by hand,
the verdicts (a finding, no evidence, not enough evidence and why), inversions and circular flags
that fire only when their tests do once the run's looks are adjusted together, the per-user
spread, the cross-fitted selection regret, ICL against the best reward-guided row, and the
terminal text."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from pytest_prefalign.analysis import circular, crisis, regret, selection, spread, summary, users
from pytest_prefalign.runs.parts import PairRecord
from pytest_prefalign.runs.records import CaseResult, RunFile

USERS = [f"u{i:02d}" for i in range(10)]


def row(
    method: str,
    *,
    suite: str = "s",
    size: str = "135m",
    per_user: dict[str, dict[str, float]] | None = None,
    **figures: float,
) -> CaseResult:
    """A result whose every user has the method's figure unless ``per_user`` says otherwise;
    the figures are then the means of the per-user ones."""
    decoder, _, reward = method.partition("[")
    users = {k: dict.fromkeys(USERS, v) for k, v in figures.items()}
    users.update(per_user or {})
    metrics = {k: float(np.mean(list(v.values()))) for k, v in users.items()}
    return CaseResult(
        suite=suite,
        size=size,
        method=method,
        decoder=decoder,
        reward=reward.rstrip("]") or None,
        n_users=len(USERS),
        metrics=metrics,
        per_user=users,
        timings={"total_s": 1.0},
    )


def spread_users(values: list[float], noise: float = 0.01) -> dict[str, float]:
    """Per-user figures around each mean: users differ a little, so intervals are narrow but
    not a single point."""
    return dict(zip(USERS, (v + noise * ((i % 3) - 1) for i, v in enumerate(values)), strict=True))


def run_of(results: list[CaseResult]) -> RunFile:
    tau, found = crisis.analyse(results)
    return RunFile(results, tau=tau, crisis=found)


# --------------------------------------------------------------------------------------------
# tau
# --------------------------------------------------------------------------------------------

# rm_acc     a .6  b .7  c .7  d .8
# policy_acc a .5  b .6  c .4  d .6
# pairs: ab C, ac D, ad C, bc tie in x, bd tie in y, cd C  ->  C = 3, D = 1
# tau-b = (C - D) / sqrt((n0 - n1)(n0 - n2)) = 2 / sqrt((6 - 1)(6 - 1)) = 0.4
TIED = [
    row("args[a]", rm_acc=0.6, policy_acc=0.5),
    row("args[b]", rm_acc=0.7, policy_acc=0.6),
    row("args[c]", rm_acc=0.7, policy_acc=0.4),
    row("args[d]", rm_acc=0.8, policy_acc=0.6),
]


def test_tau_b_with_ties_and_its_exact_p_by_hand() -> None:
    (entry,) = crisis.tau_entries(TIED)
    assert (entry.suite, entry.size, entry.decoder) == ("s", "135m", "args")
    assert entry.tau == pytest.approx(0.4) and entry.n_methods == 4
    x, y = [0.6, 0.7, 0.7, 0.8], [0.5, 0.6, 0.4, 0.6]
    taus = [sps.kendalltau(x, list(p), variant="b").statistic for p in itertools.permutations(y)]
    assert entry.p_value == pytest.approx(np.mean([abs(t) >= 0.4 - 1e-12 for t in taus]))
    assert entry.p_method == "exact permutation"
    # every user has the method's figure: every resample gives the same tau
    assert entry.ci == pytest.approx([0.4, 0.4]) and entry.n_users == 10
    # four methods cannot reach p < 0.05: not enough evidence, whatever the tau
    assert entry.verdict == (
        "not enough evidence: 4 methods: p >= 0.083 even for a perfect "
        "ranking; RM accuracy ties across the methods"
    ) or entry.verdict.startswith("not enough evidence: 4 methods: p >= 0.083")
    assert not entry.enough


def five(
    decoder: str = "args",
    policy: tuple[float, ...] = (0.50, 0.55, 0.60, 0.65, 0.70),
    rm: tuple[float, ...] = (0.70, 0.75, 0.80, 0.85, 0.90),
    **extra: Any,
) -> list[CaseResult]:
    return [
        row(
            f"{decoder}[m{i}]",
            per_user={"rm_acc": spread_users([r] * 10), "policy_acc": spread_users([p] * 10)},
            **extra,
        )
        for i, (r, p) in enumerate(zip(rm, policy, strict=True))
    ]


def test_five_methods_ranked_alike_are_a_finding() -> None:
    (entry,) = crisis.tau_entries(five())
    assert entry.tau == pytest.approx(1.0) and entry.p_value == pytest.approx(2 / 120)
    assert entry.ci[0] > 0 and entry.enough
    assert entry.verdict == "finding: RM accuracy orders the methods the same way as policy_acc"


def test_reversed_order_is_a_finding_the_opposite_way() -> None:
    (entry,) = crisis.tau_entries(five(policy=(0.70, 0.65, 0.60, 0.55, 0.50)))
    assert entry.tau == pytest.approx(-1.0)
    assert entry.verdict.endswith("the opposite way as policy_acc")


@pytest.mark.parametrize(
    ("rm", "reason"),
    [
        ((0.985, 0.99, 0.992, 0.995, 1.0), "RM accuracy saturated (all >= 0.98)"),
        ((0.8, 0.8, 0.8, 0.8, 0.9), "RM accuracy ties across the methods"),
    ],
)
def test_saturated_or_tied_rm_accuracy_is_not_enough_evidence(rm, reason) -> None:
    (entry,) = crisis.tau_entries(five(rm=rm))
    assert not entry.enough and reason in entry.verdict


def test_a_wide_interval_describes_and_the_permutation_test_decides() -> None:
    # half the users rank the five methods one way by policy accuracy, half the other way, a
    # little less steeply: over all users policy accuracy rises with RM accuracy (tau 1)
    flip = {u: (i % 2 == 0) for i, u in enumerate(USERS)}
    rows = [
        row(
            f"args[m{i}]",
            per_user={
                "rm_acc": dict.fromkeys(USERS, 0.7 + 0.05 * i),
                "policy_acc": {u: (0.5 + 0.05 * i if flip[u] else 0.7 - 0.04 * i) for u in USERS},
            },
        )
        for i in range(5)
    ]
    (entry,) = crisis.tau_entries(rows)
    assert entry.tau == 1.0 and entry.enough
    # the resampled users order the methods either way: the interval spans more than 1, and it
    # is printed, but the test over the methods decides: p = 2/120 as a look of its own
    assert entry.ci[1] - entry.ci[0] > 1.0 and entry.p_value == pytest.approx(2 / 120)
    assert entry.upper_95 >= entry.ci[0]
    assert entry.verdict.startswith("finding")


def test_too_few_methods_or_users_say_why() -> None:
    (two,) = crisis.tau_entries(
        [row("args[a]", rm_acc=0.6, policy_acc=0.5), row("args[b]", rm_acc=0.7, policy_acc=0.6)]
    )
    assert two.tau is None and "fewer than 3 methods" in two.verdict
    few = [
        row(
            f"args[m{i}]",
            per_user={
                "rm_acc": {"u1": 0.6 + 0.05 * i, "u2": 0.6 + 0.05 * i},
                "policy_acc": {"u1": 0.5 + i / 20, "u2": 0.5 + i / 20},
            },
        )
        for i in range(5)
    ]
    (entry,) = crisis.tau_entries(few)
    assert "2 users" in entry.verdict and not entry.enough


def test_decoders_are_never_pooled_so_no_method_counts_twice() -> None:
    rows = five("args") + five("bon")
    entries = crisis.tau_entries(rows)
    assert sorted(e.decoder for e in entries) == ["args", "bon"]
    assert all(len(set(e.methods)) == len(e.methods) == 5 for e in entries)


def test_methods_without_reward_are_left_out_and_rouge_gets_its_own_entry() -> None:
    rows = [row("base", policy_acc=0.4, rouge1=0.3)] + [
        row(f"args[m{i}]", rm_acc=0.6 + 0.05 * i, policy_acc=0.5, rouge1=0.2 + 0.01 * i)
        for i in range(3)
    ]
    entries = crisis.tau_entries(rows)
    assert [e.y for e in entries] == ["policy_acc", "rouge1"]
    assert all("base" not in e.methods for e in entries)
    assert (
        "policy_acc is the same for every method" in entries[0].verdict
        or "y is the same" in entries[0].verdict
    )


# --------------------------------------------------------------------------------------------
# Inversions and circular evaluation: stated only when significant
# --------------------------------------------------------------------------------------------


def test_inversion_is_significant_only_when_both_differences_are() -> None:
    a = row(
        "args[a]",
        per_user={"rm_acc": spread_users([0.9] * 10), "policy_acc": spread_users([0.4] * 10)},
    )
    b = row(
        "args[b]",
        per_user={"rm_acc": spread_users([0.7] * 10), "policy_acc": spread_users([0.6] * 10)},
    )
    (clear,) = crisis.inversion_entries([a, b])
    assert (clear.a, clear.b) == ("args[a]", "args[b]")
    assert clear.x_diff_ci[0] > 0 and clear.y_diff_ci[0] > 0
    # every user moved both ways: each exact sign-flip p is 2 / 2^10, and so is the larger
    assert clear.p_x == clear.p_y == clear.p_value == pytest.approx(2 / 1024)
    _, found = crisis.analyse([a, b])
    (stated,) = found.inversions
    # three kinds made looks: the regret, this inversion, and the spread (the pair on policy
    # and on RM accuracy, effect sizes not reached: looks that could not fire); a third each
    assert found.family.by_kind == {"regret": 1, "inversions": 1, "spread": 2}
    # the regret is found too (a picked, b better for every user and no spread at all: every
    # resample under equal means gives 0, p = 1 / 2001): ranked first, it leaves the
    # inversion two thirds of the weight, so its adjusted p is (2/3) / (1/3) times its own
    (regret_look,) = [e for e in found.regret if e.y == "policy_acc"]
    assert regret_look.p_value == pytest.approx(1 / 2001) and regret_look.fires
    assert stated.p_holm == pytest.approx(2 * 2 / 1024) and stated.fires
    # the same means, but users split: b's policy lead is 0.2 for half the users, -0.2 for the
    # other half plus a little: the sign-flip test of that difference finds nothing
    mixed = {u: (0.4 if i % 2 else 0.8) for i, u in enumerate(USERS)}
    c = row("args[c]", per_user={"rm_acc": spread_users([0.7] * 10), "policy_acc": mixed})
    a2 = row(
        "args[a]",
        per_user={"rm_acc": spread_users([0.9] * 10), "policy_acc": dict.fromkeys(USERS, 0.59)},
    )
    _, found = crisis.analyse([a2, c])
    (unclear,) = found.inversions
    assert unclear.p_y > 0.5 and not unclear.fires
    text = "\n".join(summary.inversion_lines([unclear]))
    assert "No significant ranking inversion: 1 pair(s)" in text


def test_circular_flag_needs_both_tests() -> None:
    base = row("base", per_user={"rouge1": spread_users([0.30] * 10)})
    guided = row(
        "args[lore]",
        per_user={
            "rouge1": spread_users([0.20] * 10),
            "win_self": dict.fromkeys(USERS, 0.9),
            "win_independent": dict.fromkeys(USERS, 0.3),
        },
    )
    guided = replace(
        guided,
        ci={"win_self": [0.8, 1.0], "win_independent": [0.1, 0.5]},
        judge={"n": 10, "independent": "MiniLM judge"},
    )
    _, found = crisis.analyse([base, guided])
    (entry,) = found.circular
    assert entry.rouge1_vs_base == pytest.approx(-0.1)
    # every user's own-RM share is above 1/2 and every user lost ROUGE-1: both p are 2 / 2^10
    assert entry.p_win == entry.p_rouge == entry.p_value == pytest.approx(2 / 1024)
    # two kinds made looks: this one, and the spread's (base and the method on ROUGE-1, whose
    # effect sizes are not reached: a look that could not fire); half of alpha each
    assert found.family.by_kind == {"circular": 1, "spread": 2}
    assert entry.fires and entry.p_holm == pytest.approx(2 * 2 / 1024)
    assert entry.rouge1_vs_base_ci[1] < 0 and entry.gap == pytest.approx(0.6)
    # every user's gap is 0.6: so is every resample's (no item records: users weigh 1 each)
    assert entry.gap_ci == pytest.approx([0.6, 0.6])
    lines = "\n".join(summary.circular_lines([entry]))
    assert (
        "! args[lore] (s · 135m): wins 90% over base under its own RM (interval [0.80, "
        "1.00])" in lines
    )
    # six users whose own RM prefers the method, four whose RM prefers base: a mean above 1/2
    # that the sign-flip test does not separate from it
    guided = replace(
        guided,
        per_user={
            **guided.per_user,
            "win_self": {u: (0.9 if i < 6 else 0.2) for i, u in enumerate(USERS)},
        },
        metrics={**guided.metrics, "win_self": 0.62},
    )
    _, found = crisis.analyse([base, guided])
    (weak,) = found.circular
    assert weak.p_win > 0.05 and not weak.fires
    assert "!" not in "\n".join(summary.circular_lines([weak]))


def test_missing_independent_judge_shows_its_reason() -> None:
    r = row("args[lore]", win_self=0.8)
    r = replace(r, judge={"n": 10, "reason": "the encoder package is missing"})
    (entry,) = circular.entries([r])
    assert entry.win_independent is None and not entry.fires
    assert (
        "  no independent judge for args[lore]: the encoder package is missing"
        in summary.circular_lines([entry])
    )


# --------------------------------------------------------------------------------------------
# Per-user spread
# --------------------------------------------------------------------------------------------


def test_tail_mean_and_resampled_tails_by_hand() -> None:
    assert spread.tail_mean([0.9, 0.1, 0.5, 0.3]) == (0.1, 1)
    assert spread.tail_mean(list(range(20))) == (0.5, 2)  # worst 2 of 20: (0 + 1) / 2
    values = np.array([0.4, 0.1, 0.7])
    # draws: user 0 twice, user 1 never, user 2 once -> multiset 0.4 0.4 0.7; worst 1: 0.4
    counts = np.array([[2.0, 0.0, 1.0], [0.0, 3.0, 0.0]])
    assert spread.resampled_tails(values, counts, share=0.1).tolist() == [0.4, 0.1]


def test_close_means_with_different_worst_decile_flagged_only_with_enough_evidence() -> None:
    many = [f"v{i:03d}" for i in range(200)]
    steady = dict.fromkeys(many, 0.60)
    # twenty users of two hundred served badly, the rest a little better: the same mean, 0.600
    skewed = {u: (0.30 if i < 20 else 0.6333333333333333) for i, u in enumerate(many)}
    rows = [
        row("args[a]", per_user={"policy_acc": steady}),
        row("args[b]", per_user={"policy_acc": skewed}),
    ]
    flags = spread.flags(rows)
    assert [(f.kind, f.a, f.b) for f in flags] == [("close_means", "args[b]", "args[a]")]
    assert flags[0].tail_ci[1] < 0 and flags[0].tail_users == 20
    # the swap test: the difference of the worst deciles is as large only when the twenty bad
    # users all stay with b or all go to a (2 / 2^20); with 50,000 patterns drawn, p is 1/50001
    assert flags[0].p_value == pytest.approx(1 / 50_001)
    # a tail of five users is five signs: no swap test of it goes below 2 / 2^5 = 0.0625
    five_bad = {u: (0.30 if i < 5 else 0.6333333333333333) for i, u in enumerate(many[:50])}
    steady_50 = {u: 0.6 for u in many[:50]}
    (small,) = spread.flags(
        [
            row("args[a]", per_user={"policy_acc": steady_50}),
            row("args[b]", per_user={"policy_acc": five_bad}),
        ]
    )
    assert small.p_value == pytest.approx(2 / 32, abs=0.01)
    assert spread.silent_looks(rows, flags) == 0  # the one pair examined is the candidate
    _, found = crisis.analyse(rows)
    assert [f.fires for f in found.spread] == [True]
    # one user of ten: swapping that user alone moves the tail; p is far from small
    one_bad = {u: (0.30 if i == 0 else 0.6333333333333333) for i, u in enumerate(USERS)}
    weak = [
        row("args[a]", per_user={"policy_acc": dict.fromkeys(USERS, 0.6)}),
        row("args[b]", per_user={"policy_acc": one_bad}),
    ]
    (candidate,) = spread.flags(weak)
    assert candidate.p_value > 0.5
    _, found = crisis.analyse(weak)
    assert not found.spread[0].fires
    assert "Per-user spread" not in "\n".join(summary.spread_lines(found.spread))
    few = [
        row(m, per_user={"policy_acc": {u: v for u, v in d.items() if u in many[:5]}})
        for m, d in (("args[a]", steady), ("args[b]", skewed))
    ]
    assert spread.flags(few) == [] and spread.silent_looks(few, []) == 0


# --------------------------------------------------------------------------------------------
# Selection regret and ICL against reward-guided decoding
# --------------------------------------------------------------------------------------------


def test_regret_by_hand_and_with_ties() -> None:
    x, y = np.array([[0.9, 0.8, 0.7]]), np.array([[0.5, 0.7, 0.6]])
    assert regret.in_sample(x, y)[0] == pytest.approx(0.2)  # picked 0.5, best 0.7
    tied = np.array([[0.9, 0.9, 0.7]])
    assert regret.in_sample(tied, y)[0] == pytest.approx(0.1)  # 0.7 - mean(0.5, 0.7)
    rows = [
        row(f"args[m{i}]", rm_acc=r, policy_acc=p)
        for i, (r, p) in enumerate([(0.9, 0.5), (0.8, 0.7), (0.7, 0.6)])
    ]
    (entry,) = regret.entries(crisis.reward_groups(rows))
    assert entry.picked == ("args[m0]",) and entry.best == "args[m1]"
    # every user has the method's figures: every half chooses and measures the same, so the
    # cross-fitted regret is the in-sample one, and so is every resample's
    assert entry.regret == pytest.approx(0.2) and entry.regret_in_sample == pytest.approx(0.2)
    assert entry.ci == pytest.approx([0.2, 0.2])
    # shuffling each user's figures across the methods rarely gives every user the same
    # loss: with ten users, a small p
    assert entry.p_value < 0.01 and entry.holds


def test_the_cross_fitted_regret_chooses_on_one_half_and_measures_on_the_other() -> None:
    # four users; x picks m0 on every half; y: m1 is best for users 0 and 1, m0 for 2 and 3
    x = np.array([[[0.9, 0.9, 0.9, 0.9], [0.8, 0.8, 0.8, 0.8]]])
    y = np.array([[[0.2, 0.2, 0.8, 0.8], [0.6, 0.6, 0.4, 0.4]]])
    w = np.ones_like(x)
    halves = np.array([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    # split {0,1}|{2,3}: chosen on {0,1} (pick m0, best m1), measured on {2,3}: 0.4 - 0.8;
    # the other way: chosen on {2,3} (both m0), 0; mean -0.2
    # split {0,2}|{1,3}: on {0,2} best is m0 (0.5 vs 0.5: a tie, both), measured on {1,3}:
    # mean(0.5, 0.5) - 0.5 = 0; the same the other way; mean 0
    assert regret.crossfit(x, w, y, w, halves)[0] == pytest.approx((-0.2 + 0.0) / 2)
    # in sample the same data says 0: the best (m0, 0.5 = m1's 0.5) is picked
    assert regret.in_sample(x.mean(-1), y.mean(-1))[0] == pytest.approx(0.0)


def test_the_regret_test_statistic_is_the_held_halfs_t_by_hand() -> None:
    # the example above; per user, "best minus picked" where they differ
    x = np.array([[[0.9, 0.9, 0.9, 0.9], [0.8, 0.8, 0.8, 0.8]]])
    y = np.array([[[0.2, 0.2, 0.8, 0.8], [0.6, 0.6, 0.4, 0.4]]])
    w = np.ones_like(x)
    halves = np.array([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    # split {0,1}|{2,3}, chosen on {0,1}: m1 - m0 = 0.4, 0.4, -0.4, -0.4 over the users (mean 0,
    # variance 4 * 0.16 / 3 over every user); on {2,3} its mean is -0.4 with standard error
    # sqrt(0.64 / 3 * 2) / 2, t = -sqrt(1.5); chosen on {2,3} best is the pick: t = 0
    # split {0,2}|{1,3}: best is a tie of m0 and m1, so the difference is half of m1 - m0,
    # 0.2 and -0.2 on either held half: mean 0, t = 0 both ways
    # the mean over splits, each way, halved: (-sqrt(1.5) / 2 + 0) / 2
    assert regret.studentised(x, w, y, w, halves)[0] == pytest.approx(-math.sqrt(1.5) / 4)
    # a user without a figure of a method compared has no weight: user 3's m1 left out, on the
    # first split alone, the held half {2,3} has one user: mean -0.4, over the standard error
    # of one user, the variance now over the three users with both figures (0.4, 0.4, -0.4);
    # chosen on {2,3} (m1's mean 0.4 from user 2 alone), best is the pick: t = 0
    gone = w.copy()
    gone[0, 1, 3] = 0.0
    d = np.array([0.4, 0.4, -0.4])
    t = -0.4 / math.sqrt(((d - d.mean()) ** 2).sum() / 2)
    got = regret.studentised(x, w, np.where(gone == 0, np.nan, y), gone, halves[:1])[0]
    assert got == pytest.approx((t + 0) / 2)


def test_no_regret_when_the_pick_is_the_best() -> None:
    rows = five()
    entry = next(e for e in regret.entries(crisis.reward_groups(rows)) if e.y == "policy_acc")
    assert entry.regret == 0.0 and not entry.holds
    _, found = crisis.analyse(rows)
    assert not any(e.fires for e in found.regret)


def test_icl_against_the_best_reward_guided_row() -> None:
    rows = [
        row("icl", per_user={"rouge1": spread_users([0.35] * 10)}),
        row("args[a]", rm_acc=0.8, per_user={"rouge1": spread_users([0.30] * 10)}),
        row("args[b]", rm_acc=0.7, per_user={"rouge1": spread_users([0.25] * 10)}),
    ]
    (entry,) = selection.icl_entries(rows)
    assert (entry.icl, entry.rgd, entry.metric) == ("icl", "args[a]", "rouge1")
    assert entry.diff == pytest.approx(0.05) and entry.verdict == "icl better"
    found = selection.compare_rows(rows, "icl", "args[b]")
    assert [(f.metric, round(f.diff, 3)) for f in found] == [("rouge1", 0.1)]
    with pytest.raises(ValueError, match="has both 'icl' and 'bon"):
        selection.compare_rows(rows, "icl", "bon[x]")


# --------------------------------------------------------------------------------------------
# The terminal text
# --------------------------------------------------------------------------------------------


def test_summary_lines_content() -> None:
    rows = [
        row("base", policy_acc=0.5, rouge1=0.3),
        row("icl", policy_acc=0.6, rouge1=0.35),
        *five(),
    ]
    run = run_of(rows)
    text = "\n".join(summary.summary_lines(run))
    assert "Kendall's tau-b across the reward methods of each decoder (exact permutation p" in text
    # five methods ranked alike: p = 2/120 alone, but the run made looks of five kinds, and the
    # tau's share of alpha is 0.05 / 5: no finding in this run
    (tau,) = run.tau
    assert tau.p_value == pytest.approx(2 / 120) and tau.p_holm > 0.05
    assert "no evidence of association" in text
    assert "Selection regret" in text and "no evidence of regret" in text
    assert "No ranking inversions" in text
    family = run.crisis.family
    assert f"{family.looks} look(s) at this run" in text and "weighted Holm" in text


def test_six_methods_ranked_alike_are_a_finding_in_the_run() -> None:
    six = [
        row(
            f"args[m{i}]",
            per_user={
                "rm_acc": spread_users([0.65 + 0.05 * i] * 10),
                "policy_acc": spread_users([0.45 + 0.05 * i] * 10),
            },
        )
        for i in range(6)
    ]
    run = run_of(six)
    (tau,) = run.tau
    assert tau.p_value == pytest.approx(2 / 720) and tau.p_holm < 0.05
    assert tau.verdict == "finding: RM accuracy orders the methods the same way as policy_acc"


def test_not_enough_evidence_marks_the_numbers() -> None:
    text = summary.tau_table(crisis.tau_entries(TIED))
    line = next(ln for ln in text.splitlines() if "args" in ln)
    # the estimate is shown, in parentheses, and has no adjusted p-value: it made no look
    assert "(+0.400)" in line and "not enough evidence" in line
    run = run_of(TIED)
    lines = summary.summary_lines(run)
    assert any(
        ln.startswith("(in parentheses: an estimate without enough evidence") for ln in lines
    )


def test_the_summary_fits_the_terminal() -> None:
    rows = [
        row("base", policy_acc=0.5, rouge1=0.3),
        row("icl", policy_acc=0.6, rouge1=0.35),
        *[
            row(
                f"args[method_with_a_long_name_{i}]",
                per_user={
                    "rm_acc": spread_users([0.6 + 0.05 * i] * 10),
                    "policy_acc": spread_users([0.5 + 0.05 * i] * 10),
                    "rouge1": spread_users([0.3 - 0.01 * i] * 10),
                },
            )
            for i in range(5)
        ],
    ]
    run = run_of(rows)
    wide = summary.summary_lines(run)
    assert max(len(ln) for ln in wide) > 120  # the verdicts alone are longer
    fitted = summary.summary_lines(run, width=120)
    assert max(len(ln) for ln in fitted) <= 120

    # nothing is lost: wrapping moves characters to other lines, it drops none (spaces and the
    # rules under the headers aside)
    def characters(lines: list[str]) -> list[str]:
        return sorted(c for c in "".join(lines) if c not in " -")

    assert characters(wide) == characters(fitted)


def test_summary_empty_without_reward_methods() -> None:
    assert summary.summary_lines(run_of([row("base", policy_acc=0.5)])) == []


def test_figures_over_other_users_get_an_interval_over_the_users_both_have() -> None:
    # as on Polis: RM accuracy has every voter, ROUGE-1 only the eight who wrote something
    writers = USERS[:8]
    rows = [
        row(
            f"args[m{i}]",
            per_user={
                "rm_acc": spread_users([0.6 + 0.05 * i] * len(USERS)),
                "policy_acc": spread_users([0.5 + 0.05 * i] * len(USERS)),
                "rouge1": {u: 0.3 - 0.02 * i for u in writers},
            },
        )
        for i in range(5)
    ]
    entry = next(e for e in crisis.tau_entries(rows) if e.y == "rouge1")
    assert entry.tau == -1.0 and entry.n_users == 8
    assert entry.ci is not None and entry.ci[1] < 0  # every resample orders them so
    found = next(e for e in regret.entries({("s", "135m", "args"): rows}) if e.y == "rouge1")
    assert found.ci is not None and found.n_users == 8
    assert found.regret == pytest.approx(0.3 - 0.22) and found.p_value < 0.05


def test_the_figures_of_a_case_round_away_the_order_of_summation() -> None:
    from pytest_prefalign.analysis.figures import figures

    def records(rights: list[int]) -> list[PairRecord]:
        """Ten pairs per user, ``rights[u]`` of them right."""
        return [
            PairRecord("s", "m", "135m", f"p{u}-{k}", f"u{u}",
                       values={"rm_correct": float(k < r), "policy_correct": float(k < r)})
            for u, r in enumerate(rights)
            for k in range(10)
        ]  # fmt: skip

    # the same per-user accuracies (0.1, 0.2, 0.3) held by other users: summed in user order,
    # 0.1 + 0.2 + 0.3 and 0.3 + 0.2 + 0.1 differ in the last bit
    assert (0.1 + 0.2 + 0.3) / 3 != (0.3 + 0.2 + 0.1) / 3
    one, ci, _ = figures({"pair": records([1, 2, 3])})
    other, _, _ = figures({"pair": records([3, 2, 1])})
    assert one["rm_acc"] == other["rm_acc"] == 0.2
    # every figure carries its interval over users, the micro ones too
    assert {"rm_acc", "rm_acc_micro", "policy_acc", "policy_acc_micro"} <= set(ci)
    assert ci["rm_acc_micro"][0] < 0.2 < ci["rm_acc_micro"][1]


@pytest.mark.parametrize("metrics", [{}, {"rm_acc": None}, {"rm_acc": math.nan}])
def test_a_rows_figure_is_read_only_where_it_is_a_finite_number(metrics: dict[str, Any]) -> None:
    assert users.figure(row("args[a]", rm_acc=0.5), "rm_acc") == 0.5
    missing = replace(row("args[b]", rm_acc=0.6), metrics=metrics)
    with pytest.raises(ValueError, match=r"s 135m args\[b\]: rm_acc is .*expected a finite"):
        users.figure(missing, "rm_acc")
