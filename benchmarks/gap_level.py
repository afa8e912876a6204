"""Claim 2's "large RM-accuracy gap" at its boundary: how often is a gap called large when the
true difference between the highest and the lowest RM accuracy is exactly ``claims.MIN_GAP``?

    python benchmarks/gap_level.py [--sims 1000] [--users 8,20,40] [--gap 0.10]

The runs are ``benchmarks/calibration.py``'s simulated main jobs (five reward methods under
ARGS, ``PAIRS`` test pairs a user, each user's RM-accuracy logit shared by the methods), with
the reward methods' true RM accuracies set so that the highest minus the lowest is ``--gap``
(the mean over users, found by bisection), in three layouts: one method above four, two above
three, and five evenly spaced. The claim picks the highest and the lowest of the five on the
same data, so their observed difference is above its truth on average; a gap called large at
the boundary is a false statement, and its rate should be at most 0.05 (its Monte Carlo
standard error printed beside it). Also printed: the rate at the paper's gap (0.20), the power.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import calibration  # noqa: E402

from pytest_prefalign.analysis import claims  # noqa: E402

LAYOUTS = {
    "one above four": (1, 0, 0, 0, 0),
    "two above three": (1, 1, 0, 0, 0),
    "evenly spaced": (1.0, 0.75, 0.5, 0.25, 0.0),
}
LOW = 0.55  # the lowest method's true RM accuracy (the runs show 0.45 to 0.68)


def mean_accuracy(level: float, draws: int = 400_000, seed: int = 0) -> float:
    """The mean over users of the RM accuracy of a method at ``level`` (its accuracy at a user
    logit offset of 0): users' offsets are normal with sd ``calibration.RM_USER_SD``."""
    offsets = np.random.default_rng(seed).normal(0.0, calibration.RM_USER_SD, draws)
    return float((1.0 / (1.0 + np.exp(-(math.log(level / (1 - level)) + offsets)))).mean())


def level_for(mean: float, tolerance: float = 1e-6) -> float:
    """The level whose mean accuracy over users is ``mean`` (bisection)."""
    low, high = 0.01, 0.99
    while high - low > tolerance:
        middle = (low + high) / 2
        low, high = (middle, high) if mean_accuracy(middle) < mean else (low, middle)
    return (low + high) / 2


def levels(layout: tuple[float, ...], gap: float) -> tuple[float, ...]:
    """The five methods' levels whose true mean accuracies are ``LOW + share * gap``."""
    return tuple(level_for(LOW + share * gap) for share in layout)


def large_rate(
    rm_levels: tuple[float, ...], n_users: int, sims: int, seed: int
) -> tuple[float, float]:
    """The share of simulated runs whose claim-2 entry for ARGS calls the gap large
    (``claims.gap_shown``: then ROUGE-1 decides the claim), and its Monte Carlo standard
    error."""
    scenario = calibration.Scenario("gap", {}, {}, rm_levels=rm_levels)
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(sims):
        results = calibration.simulate(n_users, scenario, rng)
        for entry in claims.spread_entries(results):
            if entry["decoder"] == "args" and claims.gap_shown(entry["rm"]):
                hits += 1
    rate = hits / sims
    return rate, math.sqrt(rate * (1 - rate) / sims)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=1000)
    parser.add_argument("--users", default="8,20,40")
    parser.add_argument("--gap", type=float, default=claims.MIN_GAP)
    parser.add_argument("--seed", type=int, default=38)
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"claim 2 'large' at a true gap of {args.gap:.2f} (level 0.05) and at 0.20 (power);")
    print(f"{args.sims} simulated runs a cell, rate +- Monte Carlo se\n")
    print(f"{'layout':<18} {'users':>5}  {'at ' + format(args.gap, '.2f'):>14}  {'at 0.20':>14}")
    for name, layout in LAYOUTS.items():
        boundary, paper = levels(layout, args.gap), levels(layout, claims.PAPER_GAP)
        for n in (int(u) for u in args.users.split(",")):
            level, level_se = large_rate(boundary, n, args.sims, args.seed)
            power, power_se = large_rate(paper, n, args.sims, args.seed + 1)
            print(
                f"{name:<18} {n:>5}  {level:.3f} +- {level_se:.3f}  {power:.3f} +- {power_se:.3f}",
                flush=True,
            )
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
