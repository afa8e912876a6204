"""benchmarks/claim_power.py: the paper's effects it simulates are the stated ones, and its
reached-verdict functions read findings.py's own verdicts."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType

import benchmark_scripts
import numpy as np
import pytest
from scipy.stats import kendalltau


@pytest.fixture(scope="module")
def claim_power() -> Iterator[ModuleType]:
    loaded = {name: sys.modules.get(name) for name in ("claim_power", "calibration", "findings")}
    yield benchmark_scripts.load("claim_power")
    for name, before in loaded.items():  # leave other tests' modules as they were
        if before is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before


def test_the_simulated_effects_are_the_papers(claim_power: ModuleType) -> None:
    # tau 0.2 between RM-accuracy order and policy-accuracy ranks: the middle of 0.08 to 0.31
    tau = kendalltau(range(5), claim_power.PAPER_TAU_RANKS).statistic
    assert tau == pytest.approx(0.2)
    levels = claim_power.SPREAD_LEVELS
    assert max(levels) - min(levels) == pytest.approx(0.20) and list(levels) == sorted(levels)
    assert claim_power.ICL_GAIN == pytest.approx(0.03)


def test_the_spread_claim_is_reached_only_where_rouge_is_the_same(claim_power: ModuleType) -> None:
    calibration = claim_power.calibration
    shape = claim_power.SHAPES["pref_lamp"]
    same = claim_power.EFFECTS["spread"].scenario
    rows = calibration.simulate(400, same, np.random.default_rng(0), shape)
    assert claim_power.spread_reached(rows)
    # the method with the highest RM accuracy also writes 8 ROUGE-1 points better: not the claim
    best = calibration.REWARDS[-1]
    apart = calibration.Scenario("apart", {}, {best: 0.08}, rm_levels=claim_power.SPREAD_LEVELS)
    rows = calibration.simulate(400, apart, np.random.default_rng(0), shape)
    assert not claim_power.spread_reached(rows)
