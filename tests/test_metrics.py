"""Known answers for the metrics of docs/metrics.md, worked out by hand in the comments."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from pytest_prefalign.analysis.metrics import (
    accuracy,
    bootstrap_ci,
    pair_outcomes,
    per_user_mean,
    resample_counts,
    rouge,
)

# --------------------------------------------------------------------------------------------
# ROUGE
# --------------------------------------------------------------------------------------------


def test_rouge_with_stemming_by_hand() -> None:
    # "The cats were running quickly" -> the cat were run quickli  (5 tokens; "were" stays,
    #   Porter leaves it; "cats" -> cat, "running" -> run, "quickly" -> quickli)
    # "A cat runs quickly"            -> a cat run quickli         (4 tokens)
    # unigram overlap {cat, run, quickli} = 3: P = 3/5, R = 3/4, F1 = 2PR/(P+R) = 0.9/1.35 = 2/3
    # LCS = cat run quickli = 3, the same P, R, so ROUGE-L F1 = 2/3 too
    r1, rl = rouge(["The cats were running quickly"], ["A cat runs quickly"])
    assert r1[0] == pytest.approx(2 / 3)
    assert rl[0] == pytest.approx(2 / 3)


def test_rouge_l_sees_word_order_rouge_1_does_not() -> None:
    # output    "Models learning preferences" -> model learn prefer
    # reference "Learning preference models"  -> learn prefer model
    # ROUGE-1: all 3 stems shared -> F1 = 1 (without stemming, "preferences" != "preference"
    # would give 2/3). ROUGE-L: LCS = learn prefer = 2 of 3 on both sides -> F1 = 2/3.
    r1, rl = rouge(
        ["Models learning preferences", "nothing in common", ""],
        ["Learning preference models", "alpha beta", "a title"],
    )
    np.testing.assert_allclose(r1, [1.0, 0.0, 0.0])
    np.testing.assert_allclose(rl, [2 / 3, 0.0, 0.0])


def test_rouge_refuses_mismatched_or_missing_references() -> None:
    with pytest.raises(ValueError, match="outputs has 2 entries but references has 1"):
        rouge(["a", "b"], ["a"])
    with pytest.raises(ValueError, match=r"references\[1\] is NoneType"):
        rouge(["a", "b"], ["a", None])  # type: ignore[list-item]


# --------------------------------------------------------------------------------------------
# Pair outcomes and accuracy
# --------------------------------------------------------------------------------------------

CHOSEN_QUALITY = np.array([0.9, 0.2, 0.5, 0.7])  # a latent quality of each pair's chosen side
REJECTED_QUALITY = np.array([0.1, -0.3, 0.4, 0.0])  # always lower: the chosen side is preferred
USERS = ["u1", "u1", "u2", "u3"]


def test_oracle_reward_scores_one() -> None:
    # the oracle scores each response by its quality: chosen > rejected on all 4 pairs -> 4/4
    acc = accuracy(pair_outcomes(CHOSEN_QUALITY, REJECTED_QUALITY), USERS)
    assert (acc.micro, acc.macro) == (1.0, 1.0)
    assert (acc.n_users, acc.n_pairs) == (3, 4)


def test_negated_reward_scores_zero() -> None:
    # -quality: chosen < rejected on every pair -> 0/4
    acc = accuracy(pair_outcomes(-CHOSEN_QUALITY, -REJECTED_QUALITY), USERS)
    assert (acc.micro, acc.macro) == (0.0, 0.0)


def test_constant_reward_ties_score_one_half() -> None:
    # a constant reward ties on every pair: each counts 1/2 -> micro = macro = 0.5
    outcomes = pair_outcomes(np.full(4, 3.0), np.full(4, 3.0))
    np.testing.assert_array_equal(outcomes, [0.5, 0.5, 0.5, 0.5])
    acc = accuracy(outcomes, USERS)
    assert (acc.micro, acc.macro) == (0.5, 0.5)


def test_macro_differs_from_micro_when_users_have_different_counts() -> None:
    # user a: 3 pairs, all right (mean 1); user b: 1 pair, wrong (mean 0)
    # micro = 3/4 = 0.75 (pairs weigh 1 each); macro = (1 + 0) / 2 = 0.5 (users weigh 1 each)
    acc = accuracy([1, 1, 1, 0], ["a", "a", "a", "b"])
    assert acc.micro == pytest.approx(0.75)
    assert acc.macro == pytest.approx(0.5)
    assert acc.per_user == {"a": 1.0, "b": 0.0}


def test_ties_mix_with_wins_in_a_users_mean() -> None:
    # user x: win, tie, loss -> (1 + 0.5 + 0) / 3 = 0.5; user y: tie -> 0.5; macro 0.5
    # micro = (1 + 0.5 + 0 + 0.5) / 4 = 0.5
    outcomes = pair_outcomes([2.0, 1.0, 0.0, 5.0], [1.0, 1.0, 1.0, 5.0])
    np.testing.assert_array_equal(outcomes, [1.0, 0.5, 0.0, 0.5])
    acc = accuracy(outcomes, ["x", "x", "x", "y"])
    assert (acc.micro, acc.macro) == (0.5, 0.5)


def test_pair_outcomes_name_the_bad_entry() -> None:
    with pytest.raises(ValueError, match=r"rejected_scores\[2\] is nan"):
        pair_outcomes([1.0, 2.0, 3.0], [0.0, 1.0, float("nan")])
    with pytest.raises(ValueError, match=r"chosen_scores\[0\] is inf"):
        pair_outcomes([float("inf")], [0.0])
    with pytest.raises(ValueError, match="chosen_scores has 2 entries but rejected_scores has 1"):
        pair_outcomes([1.0, 2.0], [0.0])


def test_accuracy_checks_its_input() -> None:
    with pytest.raises(ValueError, match=r"outcomes\[1\] is 2.0"):
        accuracy([1, 2], ["a", "b"])
    with pytest.raises(ValueError, match="users has 1 entries but values has 2"):
        accuracy([1, 0], ["a"])
    empty = accuracy([], [])
    assert math.isnan(empty.micro) and math.isnan(empty.macro) and empty.n_pairs == 0


def test_per_user_mean_keys_users_as_strings() -> None:
    # user 1: (0.2 + 0.4) / 2 = 0.3; user 2: 1.0
    assert per_user_mean([0.2, 1.0, 0.4], [1, 2, 1]) == pytest.approx({"1": 0.3, "2": 1.0})


# --------------------------------------------------------------------------------------------
# Bootstrap over users
# --------------------------------------------------------------------------------------------


def test_bootstrap_two_users_by_hand() -> None:
    # users a (value 0) and b (value 1). A resample draws 2 users with replacement:
    # {a,a} -> 0 (p 1/4), {a,b} -> 0.5 (p 1/2), {b,b} -> 1 (p 1/4).
    # The 2.5th percentile is 0 and the 97.5th is 1, since each end holds ~25% of the draws;
    # the 30th..70th percentiles both fall inside the middle half -> (0.5, 0.5).
    assert bootstrap_ci([0.0, 1.0], ["a", "b"], n_boot=2000) == (0.0, 1.0)
    assert bootstrap_ci([0.0, 1.0], ["a", "b"], n_boot=2000, level=0.4) == (0.5, 0.5)


def test_bootstrap_resamples_users_not_pairs() -> None:
    # user a: 99 pairs all 1, user b: 1 pair 0. Resampling users, a resample of {b, b} has micro
    # 0 (p 1/4), so the micro interval reaches 0. Resampling pairs would almost never draw b's
    # pair 100 times, and its interval would sit near 0.99.
    values, users = [1.0] * 99 + [0.0], ["a"] * 99 + ["b"]
    lo, hi = bootstrap_ci(values, users, statistic="micro", n_boot=2000)
    assert lo == 0.0 and hi == 1.0
    # micro of {a, b} is 99/100; macro of {a, b} is 1/2: the middle values differ
    assert bootstrap_ci(values, users, statistic="micro", level=0.4) == (0.99, 0.99)
    assert bootstrap_ci(values, users, statistic="mean", level=0.4) == (0.99, 0.99)
    assert bootstrap_ci(values, users, statistic="macro", level=0.4) == (0.5, 0.5)


def test_bootstrap_is_degenerate_when_every_user_agrees_and_seeded() -> None:
    values, users = [0.25] * 30, [f"u{i % 10}" for i in range(30)]
    assert bootstrap_ci(values, users) == pytest.approx((0.25, 0.25))
    rng = np.random.default_rng(1)
    noisy, groups = rng.random(200), [f"u{i % 40}" for i in range(200)]
    first = bootstrap_ci(noisy, groups, seed=3)
    assert first == bootstrap_ci(noisy, groups, seed=3)
    assert first != bootstrap_ci(noisy, groups, seed=4)
    lo, hi = first
    assert lo < accuracy(noisy, groups).macro < hi


def test_bootstrap_is_fast_for_a_thousand_resamples() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2, size=1500).astype(float)
    users = [f"u{i % 300}" for i in range(1500)]
    start = time.perf_counter()
    for statistic in ("macro", "micro"):
        bootstrap_ci(values, users, statistic=statistic, n_boot=1000)  # type: ignore[arg-type]
    assert time.perf_counter() - start < 2.0


def test_bootstrap_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="statistic must be one of"):
        bootstrap_ci([1.0], ["a"], statistic="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_boot must be a positive integer"):
        bootstrap_ci([1.0], ["a"], n_boot=0)
    with pytest.raises(ValueError, match="level must be between 0 and 1"):
        bootstrap_ci([1.0], ["a"], level=95)
    assert all(math.isnan(v) for v in bootstrap_ci([], []))


def test_resample_counts_draw_n_users_per_row_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_prefalign.analysis.metrics as metrics

    monkeypatch.setattr(metrics, "_BLOCK_CELLS", 7 * 5)  # 7 rows of 5 users per block
    blocks = list(resample_counts(5, 20, seed=0))
    assert [len(b) for b in blocks] == [7, 7, 6]
    rows = np.concatenate(blocks)
    np.testing.assert_array_equal(rows.sum(axis=1), np.full(20, 5))
    # each user is drawn 1 time per row on average: 20 rows x 5 draws / 5 users = 20 per user
    assert rows.sum() == 100 and rows.min() >= 0
