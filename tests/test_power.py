"""The claims' power from a run's own noise (``analysis/power.py``): the effects it imposes,
worked by hand, and on a run made from a known simulation, the power and the users needed it
estimates against those of the simulation itself."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from types import ModuleType

import benchmark_scripts
import numpy as np
import pytest

from pytest_prefalign.analysis import claims, nulls, power, stats, users
from pytest_prefalign.runs import parts


@pytest.fixture(scope="module")
def calibration() -> Iterator[ModuleType]:
    yield benchmark_scripts.load("calibration")
    del sys.modules["calibration"]


def test_the_papers_tau_imposed_on_the_runs_own_means() -> None:
    rm = np.array([0.70, 0.74, 0.78, 0.82, 0.86])
    policy = np.array([0.50, 0.52, 0.55, 0.60, 0.61])
    imposed = power.order_with_tau(rm, policy, claims.PAPER_TAU_MIDDLE)
    # the same five means, in an order whose tau against RM accuracy is the paper's 0.2
    assert sorted(imposed) == sorted(policy)
    assert stats.tau_b_rows(rm[None], imposed[None])[0] == pytest.approx(0.2)
    # the order depends on RM accuracy's order, not on the methods' positions
    shuffled = power.order_with_tau(rm[::-1], policy, 1.0)
    assert list(shuffled) == list(policy[::-1])


def test_the_papers_gap_imposed_about_the_middle() -> None:
    assert power.stretched(np.array([0.5, 0.6, 0.55]), 0.2) == pytest.approx([0.45, 0.65, 0.55])
    # all equal: spread evenly over the gap, in their (stable) order
    assert power.stretched(np.array([0.6, 0.6, 0.6]), 0.2) == pytest.approx([0.5, 0.6, 0.7])


def test_new_means_keep_every_users_deviation() -> None:
    figures = power.Figures(np.array([[0.2, 0.4], [0.5, 0.9]]), np.array([[1.0, 1.0], [1.0, 3.0]]))
    moved = figures.with_means(np.array([0.0, 1.0]))
    # method 0: mean 0.3, deviations -0.1 and +0.1; method 1: weighted mean (0.5 + 3 * 0.9) / 4
    # = 0.8, deviations -0.3 and +0.1
    assert moved.values == pytest.approx(np.array([[-0.1, 0.1], [0.7, 1.1]]))
    assert moved.means() == pytest.approx([0.0, 1.0])


def test_a_users_needed_figure_is_the_fewest_users_reaching_the_target() -> None:
    curve = power.Curve("spread", (10, 20, 40), (0.1, 0.85, 0.95), (0.03, 0.03, 0.02), 100, "-")
    assert curve.needed == 20
    beyond = power.Curve("tau", (10, 20), (0.1, 0.5), (0.03, 0.05), 100, "-")
    assert beyond.needed is None and beyond.to_json()["needed"] is None
    assert curve.needed_text() == "20 (power 0.85 ± 0.03; 10: 0.10 ± 0.03, 100 runs each)"
    assert beyond.needed_text() == "more than 20 (power 0.50 ± 0.05 at 20, 100 runs each)"


def test_a_curve_reads_back_from_a_power_table() -> None:
    # as benchmarks/findings.py keeps it: the run's suite, size and decoder beside the curve
    curve = power.Curve("spread", (10, 20), (0.3, 0.86), (0.06, 0.05), 50, "the paper's")
    kept = {"suite": "pref_lamp", "size": "135m", "decoder": "args", **curve.to_json()}
    assert power.Curve.from_json(json.loads(json.dumps(kept))) == curve
    with pytest.raises(parts.PartError, match="curve: grid"):
        power.Curve.from_json({**kept, "grid": "10"})


def test_power_from_a_runs_own_noise_is_the_power_of_its_world(calibration: ModuleType) -> None:
    # a world where claim 2 is true (the paper's: RM accuracies 20 points apart, ROUGE-1 the
    # same for every method), Pref-LaMP's shape; one run of 400 users made from it; the power
    # simulated from that run's own noise, against the power of runs made from the world itself
    world = calibration.Scenario("paper spread", {}, {}, rm_levels=(0.66, 0.71, 0.76, 0.81, 0.86))
    shape = calibration.Shape(pairs=5, items=5)

    def figures(rows: list) -> tuple[power.Figures, power.Figures]:
        guided = [r for r in rows if r.method in calibration.REWARDS]
        rm, rouge = users.tables(guided, "rm_acc", "rouge1")
        return power.Figures(rm.values, rm.weights), power.Figures(rouge.values, rouge.weights)

    grid, sims = (40, 160), 40
    run = calibration.simulate(400, world, np.random.default_rng(123), shape)
    estimated = power.spread_curve(*figures(run), grid=grid, sims=sims)
    truth = []
    for n in grid:
        hits = 0
        for i in range(sims):
            rows = calibration.simulate(n, world, np.random.default_rng([5, n, i]), shape)
            hits += power.spread_said(*figures(rows), np.random.default_rng(i)) == claims.HOLDS
        truth.append(hits / sims)
    for n, got, se, want in zip(grid, estimated.power, estimated.se, truth, strict=True):
        truth_se = np.sqrt(max(want * (1 - want), 1 / sims) / sims)
        assert abs(got - want) <= 3 * np.hypot(max(se, 1 / sims), truth_se), (n, got, want)
    # 40 users are far from enough and 160 enough, in the world as from the run
    assert truth[0] < 0.5 < power.TARGET <= truth[1]
    assert estimated.needed == 160


def test_the_icl_test_reaches_its_small_share_of_alpha() -> None:
    # the ICL look's share of alpha is small (0.004 in the main job), below what a count of
    # sign patterns drawn could say: the simulated rule reads each pair's sign-flip tail from
    # the normal distribution, so a clear lead is found
    rng = np.random.default_rng(0)
    level = rng.normal(0.2, 0.05, 200)
    guided = [level + rng.normal(0, 0.02, 200) for _ in range(2)]
    ahead = np.stack([level + 0.03 + rng.normal(0, 0.02, 200), *guided])
    assert power.icl_ahead(power.Figures(ahead, np.ones_like(ahead)), 0.004)
    # and no lead, none found
    level_with = np.stack([level + rng.normal(0, 0.02, 200), *guided])
    assert not power.icl_ahead(power.Figures(level_with, np.ones_like(level_with)), 0.004)
    # ahead of one guided row but level with the other: not ahead of the best
    split = np.stack([ahead[0], guided[0], ahead[0] + rng.normal(0, 0.02, 200)])
    assert not power.icl_ahead(power.Figures(split, np.ones_like(split)), 0.004)


def test_the_icl_rules_normal_tail_is_the_sign_flips() -> None:
    # 14 users: every sign pattern counted (2^14); the exact one-sided p of the pair against
    # the normal tail the simulated rule reads, at an alpha share it is tested at
    rng = np.random.default_rng(3)
    d = rng.normal(0.02, 0.03, 14)
    exact, is_exact = nulls.sign_flip_greater(d, np.ones(14))
    assert is_exact
    normal = power._normal_upper(float(d.sum() / np.sqrt((d**2).sum())))
    assert normal == pytest.approx(exact, rel=0.25)
    table = np.stack([d, np.zeros(14)])
    said = power.icl_ahead(power.Figures(table, np.ones_like(table)), 2 * normal * 1.01)
    assert said and not power.icl_ahead(power.Figures(table, np.ones_like(table)), 2 * normal)
