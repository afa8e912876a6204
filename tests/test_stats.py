"""Known answers for Kendall's tau-b, inversions, McNemar and the paired bootstrap."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from pytest_prefalign.analysis.stats import (
    _sign_flip_p,
    inversions,
    kendall,
    mcnemar_exact,
    paired_bootstrap,
    tau_b_rows,
)

# --------------------------------------------------------------------------------------------
# Kendall's tau-b
# --------------------------------------------------------------------------------------------


def test_kendall_without_ties_by_hand() -> None:
    # x = 1 2 3 4, y = 1 3 2 4: of the 6 pairs only (2nd, 3rd) is discordant
    # tau = (nc - nd) / n0 = (5 - 1) / 6 = 2/3
    result = kendall([1, 2, 3, 4], [1, 3, 2, 4])
    assert result.tau == pytest.approx(2 / 3)
    assert result.n == 4 and result.reason == ""
    assert 0.0 < result.p_value <= 1.0


def test_kendall_tau_b_with_ties_by_hand() -> None:
    # x = 1 2 2 3, y = 1 2 3 3. Pairs (i, j):
    # (1,2) C  (1,3) C  (1,4) C  (2,3) tied in x  (2,4) C  (3,4) tied in y
    # nc = 4, nd = 0, n0 = 6, n1 (ties in x) = 1, n2 (ties in y) = 1
    # tau-b = (nc - nd) / sqrt((n0 - n1)(n0 - n2)) = 4 / sqrt(5 * 5) = 0.8
    # (tau-a would be 4/6: the tie correction matters)
    result = kendall([1, 2, 2, 3], [1, 2, 3, 3])
    assert result.tau == pytest.approx(0.8)


def test_kendall_reverse_order_and_nan_methods() -> None:
    # a method without RM accuracy (nan) drops out; the other three are in reverse order: -1
    result = kendall([0.9, 0.8, float("nan"), 0.7], [0.1, 0.2, 0.5, 0.3])
    assert result.tau == pytest.approx(-1.0) and result.n == 3


def test_kendall_is_undefined_for_few_points_or_constant_series() -> None:
    two = kendall([0.1, 0.2], [0.3, 0.4])
    assert math.isnan(two.tau) and math.isnan(two.p_value) and "fewer than 3" in two.reason
    flat = kendall([0.5, 0.5, 0.5], [0.1, 0.2, 0.3])
    assert math.isnan(flat.tau) and "x is the same" in flat.reason
    with pytest.raises(ValueError, match="same length"):
        kendall([1, 2, 3], [1, 2])


def test_vectorised_tau_b_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    # values on a coarse grid so that many rows carry ties
    x, y = rng.integers(0, 4, size=(50, 6)) / 4, rng.integers(0, 4, size=(50, 6)) / 4
    ours = tau_b_rows(x, y)
    for row, value in enumerate(ours):
        expected = sps.kendalltau(x[row], y[row], variant="b").statistic
        if math.isnan(expected):
            assert math.isnan(value)
        else:
            assert value == pytest.approx(expected)


def test_kendall_p_value_is_the_exact_permutation_p() -> None:
    # A perfect ranking of n methods: only the identity and the reversal reach |tau| = 1, so the
    # two-sided p is 2 / n!: 2/120 for 5 methods, 2/24 for 4.
    five = kendall([1, 2, 3, 4, 5], [10, 20, 30, 40, 50])
    assert five.tau == 1.0 and five.p_value == pytest.approx(2 / 120) and five.exact
    four = kendall([1, 2, 3, 4], [4, 3, 2, 1])
    assert four.tau == -1.0 and four.p_value == pytest.approx(2 / 24)


def test_kendall_exact_p_counts_every_permutation_by_hand() -> None:
    # x = 1 2 3 4, y = 1 3 2 4: tau = 2/3. Over the 24 orderings of y, tau-b takes the values
    # (#discordant pairs d = 0..6 -> tau = 1 - d/3) with the Mahonian counts 1 3 5 6 5 3 1, so
    # |tau| >= 2/3 for d in {0, 1, 5, 6}: 1 + 3 + 3 + 1 = 8 orderings, p = 8 / 24.
    result = kendall([1, 2, 3, 4], [1, 3, 2, 4])
    assert result.p_value == pytest.approx(8 / 24)


def test_kendall_exact_p_with_ties_enumerates_the_tied_values() -> None:
    # brute force over the 24 orderings of the tied y, tau-b recomputed for each
    x, y = [0.6, 0.7, 0.7, 0.8], [0.5, 0.6, 0.4, 0.6]
    observed = sps.kendalltau(x, y, variant="b").statistic
    taus = [
        sps.kendalltau(x, list(perm), variant="b").statistic for perm in itertools.permutations(y)
    ]
    expected = np.mean([abs(t) >= abs(observed) - 1e-12 for t in taus])
    assert kendall(x, y).p_value == pytest.approx(expected) == pytest.approx(2 / 3)
    # with ties scipy's default is its large-sample p-value, which is wrong here: 0.44
    assert sps.kendalltau(x, y).pvalue == pytest.approx(0.444, abs=1e-3)


def test_kendall_samples_permutations_beyond_eight_methods_seeded() -> None:
    x = list(range(10))
    y = [0, 2, 1, 3, 5, 4, 6, 8, 7, 9]
    first, again = kendall(x, y), kendall(x, y)
    assert not first.exact and first.p_value == again.p_value and 0 < first.p_value < 0.01


# --------------------------------------------------------------------------------------------
# Inversions
# --------------------------------------------------------------------------------------------


def test_inversions_finds_the_one_and_only_the_one() -> None:
    # RM accuracy ranks A > B > C > D; policy accuracy ranks B > A > C, and D ties C.
    # (A, B): x A > B, y A < B -> an inversion, reported as a = A (higher by x)
    # (A, C), (B, C): same order both ways -> none
    # (C, D): x C > D but y C == D: a tie is not an inversion
    names = ["A", "B", "C", "D"]
    x = [0.80, 0.70, 0.60, 0.55]
    y = [0.50, 0.60, 0.40, 0.40]
    found = inversions(names, x, y)
    assert [(inv.a, inv.b) for inv in found] == [("A", "B")]
    assert (found[0].x_a, found[0].x_b, found[0].y_a, found[0].y_b) == (0.80, 0.70, 0.50, 0.60)


def test_inversions_ignore_nan_and_check_lengths() -> None:
    assert inversions(["A", "B"], [0.9, float("nan")], [0.1, 0.9]) == []
    with pytest.raises(ValueError, match="names has 1 entries"):
        inversions(["A"], [0.1, 0.2], [0.2, 0.1])


# --------------------------------------------------------------------------------------------
# McNemar
# --------------------------------------------------------------------------------------------


def test_mcnemar_on_a_hand_counted_table() -> None:
    #              new right  new wrong
    #  old right      5          b = 8
    #  old wrong    c = 2          3
    # Exact two-sided: 2 * P(X <= 2 | n = 10, p = 1/2) = 2 * (1 + 10 + 45) / 1024 = 0.109375
    old = [1] * 5 + [1] * 8 + [0] * 2 + [0] * 3
    new = [1] * 5 + [0] * 8 + [1] * 2 + [0] * 3
    assert mcnemar_exact(old, new) == pytest.approx(112 / 1024)
    assert mcnemar_exact(new, old) == pytest.approx(112 / 1024)  # two-sided: symmetric
    # the sign-flip test used with ties reduces to the same figure without them:
    # doubled sum = 2 * (c - b) = -12 over 10 full discordances
    assert _sign_flip_p(10, 0, observed=-12) == pytest.approx(112 / 1024)


def test_mcnemar_without_discordant_pairs_is_one() -> None:
    assert mcnemar_exact([1, 0, 0.5], [1, 0, 0.5]) == 1.0
    assert mcnemar_exact([], []) == 1.0


def test_mcnemar_collapse_to_ties_is_significant() -> None:
    # 1 -> 0.5 on 10 pairs (a reward that became constant): 10 half discordances, all against
    # the new run. Under the null each sign is a fair coin: P(all 10 the same way) = 2 / 1024.
    assert mcnemar_exact([1] * 10, [0.5] * 10) == pytest.approx(2 / 1024)


def test_mcnemar_mixes_full_and_half_discordances_by_hand() -> None:
    # one full discordance (1 -> 0) and two half ones (1 -> 0.5, 0.5 -> 0), all against new.
    # Doubled, T = sum of signs weighted 2, 1, 1; observed T = -4. The 8 equally likely sign
    # patterns give T = +-4 (once each), +-2 (twice each), 0 (twice) -> P(|T| >= 4) = 2/8.
    assert mcnemar_exact([1, 1, 0.5, 1], [0, 0.5, 0, 1]) == pytest.approx(0.25)
    # with the half ones cancelling (1 -> 0.5 and 0.5 -> 1), T = -2: P(|T| >= 2) = 6/8
    assert mcnemar_exact([1, 1, 0.5], [0, 0.5, 1]) == pytest.approx(0.75)


def test_sign_flip_p_matches_enumeration() -> None:
    # every sign pattern of up to 3 full (weight 2) and 3 half (weight 1) discordances, counted
    for n_full, n_half in itertools.product(range(4), range(4)):
        weights = [2] * n_full + [1] * n_half
        totals = [sum(s * w for s, w in zip(signs, weights, strict=True))
                  for signs in itertools.product((-1, 1), repeat=len(weights))]  # fmt: skip
        for observed in set(totals):
            expected = sum(abs(t) >= abs(observed) for t in totals) / len(totals)
            assert _sign_flip_p(n_full, n_half, observed) == pytest.approx(expected)


def test_mcnemar_checks_its_input() -> None:
    with pytest.raises(ValueError, match="old has 2 outcomes but new has 1"):
        mcnemar_exact([1, 0], [1])
    with pytest.raises(ValueError, match=r"new\[1\] is 0.7"):
        mcnemar_exact([1, 0], [1, 0.7])


# --------------------------------------------------------------------------------------------
# Paired bootstrap
# --------------------------------------------------------------------------------------------


def test_paired_bootstrap_identical_runs() -> None:
    figures = {f"u{i}": i / 10 for i in range(10)}
    diff, (lo, hi), p = paired_bootstrap(figures, dict(figures))
    assert (diff, lo, hi, p) == (0.0, 0.0, 0.0, 1.0)


def test_paired_bootstrap_consistent_drop_by_hand() -> None:
    # every shared user loses exactly 0.1: every resampled mean difference is -0.1.
    # p = 2 * (0 + 1) / (2000 + 1) (no resample at or above 0). User "z" is only in the new run
    # and is left out.
    old = {f"u{i}": 0.5 for i in range(8)}
    new = {**{u: 0.4 for u in old}, "z": 0.0}
    diff, (lo, hi), p = paired_bootstrap(old, new, n_boot=2000)
    assert diff == pytest.approx(-0.1)
    assert (lo, hi) == pytest.approx((-0.1, -0.1))
    assert p == pytest.approx(2 / 2001)


def test_paired_bootstrap_weights_give_the_item_mean() -> None:
    # user a: 3 items, difference +0.2 each; user b: 1 item, difference -0.2
    # item mean = (3 * 0.2 - 0.2) / 4 = 0.1; user mean = (0.2 - 0.2) / 2 = 0
    old, new = {"a": 0.3, "b": 0.5}, {"a": 0.5, "b": 0.3}
    assert paired_bootstrap(old, new)[0] == pytest.approx(0.0)
    assert paired_bootstrap(old, new, weights={"a": 3, "b": 1})[0] == pytest.approx(0.1)


def test_paired_bootstrap_mixed_changes_are_not_significant() -> None:
    # half the users gain 0.1 and half lose 0.1: the mean difference is 0 and p is large
    old = {f"u{i}": 0.5 for i in range(20)}
    new = {u: 0.5 + (0.1 if i % 2 else -0.1) for i, u in enumerate(old)}
    diff, (lo, hi), p = paired_bootstrap(old, new, seed=2)
    assert diff == pytest.approx(0.0)
    assert lo < 0.0 < hi and p > 0.5


def test_paired_bootstrap_refuses_disjoint_users() -> None:
    with pytest.raises(ValueError, match="share no users"):
        paired_bootstrap({"a": 1.0}, {"b": 1.0})
    with pytest.raises(ValueError, match="weights has no entry for 1 users"):
        paired_bootstrap({"a": 1.0, "b": 0.0}, {"a": 1.0, "b": 0.0}, weights={"a": 1})


def test_kendall_p_with_an_asymmetric_null_is_the_share_at_least_as_far_from_zero() -> None:
    # with ties the permutation distribution of tau-b is not symmetric: the share of orderings
    # with |tau-b| >= the observed one (4 of 120 here) is not twice the smaller one-sided p
    # (scipy's "two-sided", 8 of 120), and only the first is under 0.05
    x, y = [0.77, 0.77, 0.65, 0.71, 0.89], [0.64, 0.64, 0.53, 0.53, 0.75]
    observed = sps.kendalltau(x, y, variant="b").statistic
    taus = [sps.kendalltau(x, list(p), variant="b").statistic for p in itertools.permutations(y)]
    expected = np.mean([abs(t) >= abs(observed) - 1e-12 for t in taus])
    result = kendall(x, y)
    assert result.tau == pytest.approx(observed)
    assert result.p_value == pytest.approx(expected) == pytest.approx(4 / 120)


def test_equal_figures_that_differ_in_the_last_bit_tie() -> None:
    # the same accuracy summed over users in another order: 0.6000000000000001 and 0.6
    x = [0.6000000000000001, 0.6, 0.7, 0.8, 0.5]
    y = [0.5, 0.7, 0.6, 0.9, 0.4]
    exact = [0.6, 0.6, 0.7, 0.8, 0.5]
    assert kendall(x, y).tau == pytest.approx(sps.kendalltau(exact, y, variant="b").statistic)
    assert inversions(list("abcde"), x, y) == inversions(list("abcde"), exact, y)
    assert not any({i.a, i.b} == {"a", "b"} for i in inversions(list("abcde"), x, y))
