"""Claim 1's tau interval (``analysis/projection.py``): the projection worked by hand, the
simultaneous intervals' critical value, its coverage where the methods lie close (5 and 12
methods), and tau's spread from the choice of methods against its exact value at tau 0."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from pytest_prefalign.analysis import claims, crisis, power, projection, selection, stats
from pytest_prefalign.analysis.metrics import resample_counts
from pytest_prefalign.runs.records import CaseResult


def pairs(lower: list[float], upper: list[float]) -> projection.Pairs:
    low, high = np.array(lower), np.array(upper)
    return projection.Pairs((low + high) / 2, low, high)


def test_the_projection_by_hand() -> None:
    # three methods, pairs (0,1), (0,2), (1,2): RM accuracy orders (0,1) and (0,2), not (1,2);
    # the y orders all three, (0,2) against RM accuracy. Concordant 1, discordant 1, one free
    # pair: tau between (0 - 1) / 3 and (0 + 1) / 3, two pairs ordered by both
    x = pairs([0.01, 0.02, -0.01], [0.03, 0.05, 0.02])
    y = pairs([0.01, -0.04, 0.01], [0.02, -0.01, 0.03])
    assert projection.tau_range(x, y) == pytest.approx((-1 / 3, 1 / 3, 2))
    # every pair resolved the same way by both: tau is 1 and known
    same = pairs([0.01, 0.02, 0.01], [0.03, 0.05, 0.02])
    assert projection.tau_range(same, same) == (1.0, 1.0, 3)
    # nothing resolved: any order, tau anywhere in [-1, 1]
    loose = pairs([-0.1] * 3, [0.1] * 3)
    assert projection.tau_range(loose, same) == (-1.0, 1.0, 0)


def test_a_pair_tied_exactly_counts_as_tau_b_counts_a_tie() -> None:
    # (1,2) has the same per-user figures in x (its interval [0, 0]): tau-b's denominator
    # sqrt(2 * 3); the two other pairs concordant and discordant: tau 0 exactly
    x = pairs([0.01, 0.02, 0.0], [0.03, 0.05, 0.0])
    y = pairs([0.01, -0.04, 0.01], [0.02, -0.01, 0.03])
    assert projection.tau_range(x, y) == (0.0, 0.0, 2)
    assert stats.tau_b_rows(np.array([[3.0, 1.0, 1.0]]), np.array([[2.0, 1.0, 3.0]]))[0] == 0.0


def test_one_pairs_interval_is_the_normal_one_widened() -> None:
    # one pair, its resampled differences normal: the max-t critical value is the normal's
    # two-sided 1.96, widened by Hesterberg's factor for the users (1.03 at 40 users)
    rng = np.random.default_rng(0)
    boot = np.stack([rng.normal(0.05, 0.01, 20_000), np.zeros(20_000)], axis=1)
    (found,) = projection.pair_intervals([np.array([0.05, 0.0])], [boot], 40)
    half = (found.upper[0] - found.lower[0]) / 2
    widen = selection.expansion(40, 0.025)
    assert half == pytest.approx(1.96 * 0.01 * widen, rel=0.03)
    assert 1.0 < widen < 1.05


def simulated_interval(
    x_means: np.ndarray, y_means: np.ndarray, rng: np.random.Generator, n_users: int = 40
) -> tuple[float, float]:
    """One run: each user a level shared by the methods (as real users are), each method's
    figure that level plus its mean plus noise of SD 0.05; the projection from 400
    resamples."""
    figures = []
    for means in (x_means, y_means):
        level = rng.normal(0.5, 0.1, n_users)
        figures.append(level + means[:, None] + rng.normal(0, 0.05, (len(means), n_users)))
    counts = np.concatenate(list(resample_counts(n_users, 400, rng)))
    boots = [counts @ f.T / n_users for f in figures]
    low, high, _ = projection.tau_interval(
        figures[0].mean(1), figures[1].mean(1), boots[0], boots[1], n_users
    )
    return low, high


@pytest.mark.parametrize(
    ("n_methods", "tau", "step"),
    [
        (5, 1.0, 0.004),  # the kept run's spacing: differences a quarter of their standard error
        (5, 0.0, 0.004),
        (5, 1.0, 0.03),  # far enough apart that the interval says something
        (5, 0.0, 0.03),
        (12, 1.0, 0.02),  # more methods than the exact p-value enumerates
    ],
)
def test_the_interval_covers_the_true_tau_where_methods_lie_close(
    n_methods: int, tau: float, step: float
) -> None:
    x_means = step * np.arange(n_methods, dtype=float)
    y_means = power.order_with_tau(x_means, x_means.copy(), tau)
    truth = stats.tau_b_rows(x_means[None], y_means[None])[0]
    assert truth == pytest.approx(tau, abs=0.05)
    rng = np.random.default_rng([64, n_methods, int(100 * tau), int(1000 * step)])
    found = [simulated_interval(x_means, y_means, rng) for _ in range(60)]
    covered = np.mean([low - 1e-9 <= truth <= high + 1e-9 for low, high in found])
    assert covered >= 0.9
    width = np.mean([high - low for low, high in found])
    if step >= 0.02:
        # not the trivial [-1, 1]: the data orders most pairs
        assert width < 1.0


def test_the_percentile_bootstrap_it_replaces_does_not_cover_there() -> None:
    # the same close world, true tau 1: the 90% percentile bounds of tau over users miss it in
    # most runs (why claim 1 no longer reads them)
    x_means = 0.004 * np.arange(5, dtype=float)
    rng = np.random.default_rng(7)
    covered = []
    for _ in range(60):
        level = rng.normal(0.5, 0.1, 40)
        x = level + x_means[:, None] + rng.normal(0, 0.05, (5, 40))
        y = level + x_means[:, None] + rng.normal(0, 0.05, (5, 40))
        counts = np.concatenate(list(resample_counts(40, 400, rng)))
        taus = stats.tau_b_rows(counts @ x.T / 40, counts @ y.T / 40)
        low, high = np.percentile(taus, [5, 95])
        covered.append(low <= 1.0 <= high)
    assert np.mean(covered) < 0.6


def test_taus_spread_from_the_choice_of_methods_at_tau_0_is_kendalls_exact_variance() -> None:
    # with independent figures, tau's variance over n untied methods is 2 (2n + 5) / (9n(n-1))
    for n in (5, 10):
        sd, se = projection.choice_spread(n, tau=0.0)
        exact = math.sqrt(2 * (2 * n + 5) / (9 * n * (n - 1)))
        assert abs(sd - exact) < 4 * se and se < 0.01
    # a population whose tau is 1 leaves nothing to the choice of methods
    assert projection.choice_spread(5, tau=1.0)[0] == pytest.approx(0.0, abs=1e-9)
    # the spread falls as the methods grow, and the sentence says which methods it is about
    assert projection.choice_spread(15)[0] < projection.choice_spread(5)[0]
    text = projection.estimand_text(5, 40)
    assert "these 5 methods, 40 users the unit" in text and "population" in text


def test_the_order_nearest_a_tau_beyond_the_methods_enumerated() -> None:
    for n in (9, 12, 15):
        ranks = np.arange(n, dtype=float)
        for tau in (-1.0, 0.0, 0.2, 1.0):
            order = power.order_by_swaps(n, tau).astype(float)
            got = stats.tau_b_rows(ranks[None], order[None])[0]
            # the nearest a step of 2 / P allows
            assert abs(got - tau) <= 1 / (n * (n - 1) / 2) + 1e-12


def rows(n_methods: int, n_users: int, step: float, seed: int = 0) -> list[CaseResult]:
    rng = np.random.default_rng(seed)
    level = rng.normal(0.5, 0.1, n_users)
    out = []
    for m in range(n_methods):
        per_user = {}
        for metric in ("rm_acc", "policy_acc"):
            values = level + step * m + rng.normal(0, 0.05, n_users)
            per_user[metric] = {f"u{u:02d}": float(v) for u, v in enumerate(values)}
        metrics = {k: float(np.mean(list(v.values()))) for k, v in per_user.items()}
        out.append(CaseResult(suite="s", size="135m", method=f"args[r{m}]", decoder="args",
                              reward=f"r{m}", n_users=n_users, metrics=metrics,
                              per_user=per_user))  # fmt: skip
    return out


def test_the_analysis_reads_claim_one_from_the_projection_with_many_methods() -> None:
    # 12 methods far apart in both figures, the same order: every one of the 66 pairs
    # ordered, the interval [1, 1], claim 1 does not hold; the p-value sampled, its Monte
    # Carlo error stated
    (entry,) = [e for e in crisis.tau_entries(rows(12, 30, 0.1)) if e.y == "policy_acc"]
    assert entry.interval == projection.METHOD and entry.resolved_pairs == 66
    assert entry.ci == (1.0, 1.0) and entry.lower_95 == entry.upper_95 == 1.0
    assert claims.tau_entry_claim(entry) == claims.FAILS
    assert "Monte Carlo standard error" in entry.p_method and "12!" in entry.p_method
    # five methods close together: the interval wide, claim 1 undecided
    (close,) = [e for e in crisis.tau_entries(rows(5, 30, 0.002)) if e.y == "policy_acc"]
    assert close.p_method == "exact permutation"
    assert close.ci[1] - close.ci[0] > 1.0 and claims.tau_entry_claim(close) == claims.UNDECIDED


def test_an_entry_written_before_the_projection_is_given_it_again() -> None:
    results = rows(5, 30, 0.05)
    (entry,) = [e for e in crisis.tau_entries(results) if e.y == "policy_acc"]
    old = type(entry).from_json(
        {k: v for k, v in entry.to_json().items() if k not in ("interval", "resolved_pairs")}
        | {"ci": [0.9, 1.0], "lower_95": 0.95, "upper_95": 1.0}
    )
    assert old.interval == ""  # the reader leaves it empty: written before the projection
    again = claims.projected(old, results)
    assert again.ci == entry.ci and again.resolved_pairs == entry.resolved_pairs
    # an entry that has it is left as it is
    assert claims.projected(entry, results) is entry


def test_the_summary_says_each_claims_verdict_and_the_users_it_needs() -> None:
    from pytest_prefalign.analysis import summary

    where = ("pref_lamp", "135m", "args")
    verdicts = {(where, "tau"): claims.UNDECIDED, (where, "spread"): claims.HOLDS}
    curves = {
        (where, "tau"): power.Curve("tau", (10, 20), (0.0, 0.1), (0.0, 0.07), 20, "tau 0.2"),
        (where, "spread"): power.Curve("spread", (10, 20), (0.5, 0.85), (0.11, 0.08), 20, "same"),
        (where, "spread@0.01"): power.Curve(
            "spread@0.01", (10, 20), (0.2, 0.4), (0.09, 0.11), 20, "+0.01"
        ),
    }
    lines = summary.claim_lines(verdicts, curves)
    (tau,) = [ln for ln in lines if ln.startswith("- 1. tau weak")]
    assert tau == (
        "- 1. tau weak (pref_lamp · 135m · args): not enough evidence; users needed, tau 0.2: "
        "more than 20 (power 0.10 ± 0.07 at 20, 20 runs each)"
    )
    (spread,) = [ln for ln in lines if ln.startswith("- 2. spread")]
    # claim 2 at both true ROUGE-1 differences, each with the error of the powers behind it
    assert spread.endswith(
        "holds; users needed, same: 20 (power 0.85 ± 0.08; 10: 0.50 ± 0.11, 20 runs each); "
        "+0.01: more than 20 (power 0.40 ± 0.11 at 20, 20 runs each)"
    )
    assert summary.claim_lines({}, {}) == []


def test_the_summarys_simulations_are_bounded() -> None:
    # a main-job-shaped group (5 reward methods, 40 users): the claims' curves the terminal
    # summary simulates stop at SUMMARY_GRID's last and take SUMMARY_SIMS runs each (what
    # bounds its time; docs/metrics.md gives the seconds measured)
    from pytest_prefalign.runs.records import RunFile

    results = rows(5, 40, 0.01)
    for r in results:
        r.per_user["rouge1"] = dict(r.per_user["policy_acc"])
        r.metrics["rouge1"] = r.metrics["policy_acc"]
    tau, found = crisis.analyse(results)
    curves = power.summary_curves(RunFile(results, tau=tau, crisis=found))
    assert {name for _, name in curves} == {"tau", "spread", "spread@0.01"}
    assert all(c.grid[-1] <= power.SUMMARY_GRID[-1] and c.sims == power.SUMMARY_SIMS
               for c in curves.values())  # fmt: skip


def test_no_tau_power_where_every_method_has_the_same_policy_accuracy() -> None:
    # best-of-N's policy accuracy is base's for every reward method: tau there is undefined
    # (the analysis says "y is the same for every method"), and the summary simulates no claim
    # 1 for it, instead of looking for an order of equal means (the main job's bon group)
    from pytest_prefalign.runs.records import RunFile

    results = rows(4, 12, 0.05)
    same = dict(results[0].per_user["policy_acc"])
    results = [
        dataclasses.replace(
            r,
            per_user={**r.per_user, "policy_acc": same},
            metrics={**r.metrics, "policy_acc": results[0].metrics["policy_acc"]},
        )
        for r in results
    ]
    tau, found = crisis.analyse(results)
    (entry,) = [e for e in tau if e.y == "policy_acc"]
    assert entry.tau is None and "the same for every method" in entry.verdict
    assert power.summary_curves(RunFile(results, tau=tau, crisis=found)) == {}
    # the RM accuracies differing is not enough, nor the policy accuracies alone
    varied = rows(4, 12, 0.05)
    assert {name for _, name in power.run_curves(varied, grid=(6,), sims=2)} == {"tau"}
