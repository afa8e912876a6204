"""How many users each claim of docs/findings.md needs: the share of simulated runs in which the
claim reaches its verdict when the paper's effect is true (its power), at several numbers of
users, by findings.py's own verdict rules on runs simulated by calibration.py. docs/findings.md
reads the table (``--json``) and, where a claim is "not enough evidence", states the users it
would need.

    python benchmarks/claim_power.py [--sims 100] [--users 10,20,40,80,160,320,640] [--json FILE]

**The paper's effects** (Rezk et al., arXiv 2512.23067; ``EFFECTS`` below), each simulated
with every other figure as calibration.py makes it (users differ, a user's level shared by
every method, RM accuracies of the five reward methods apart):

- claim 1, tau weak: policy accuracy ordered against RM accuracy with Kendall's tau 0.2, the
  middle of the paper's 0.08 to 0.31 (the reward methods' policy-accuracy ranks 1 0 4 3 2
  against their RM-accuracy order, 0.3 logit apart per rank): the claim should **hold**;
- claim 2, a large RM-accuracy difference with nearly the same ROUGE-1: RM accuracies 20 points
  apart from the lowest to the highest (0.66 to 0.86), ROUGE-1 the same for every method: the
  claim should **hold**;
- claim 3, ICL ahead: ``icl`` and ``icl_rag`` 3 ROUGE-1 points above every other row (the
  paper's gap at 7B): the claim should **hold at this size** for ``icl``.

**Shapes**: a user of Pref-LaMP holds about 5 test pairs and 5 generation items (one per test
paper); a voter of Polis 12 test pairs and 2 items (the default options allow 3 statements of
their own, and most voters wrote fewer: 60 items for 40 voters). Power is the share of
simulated runs with the verdict sought, with its Monte Carlo standard error; the users a claim
needs are the fewest of the grid at which power reaches 0.8 (the grid stops there: more users
only cost time).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_prefalign.analysis import crisis  # noqa: E402
from pytest_prefalign.runs.records import CaseResult  # noqa: E402

TARGET = 0.8  # the power at which a number of users is enough
PAPER_TAU_RANKS = (1, 0, 4, 3, 2)  # policy-accuracy ranks against RM-accuracy order: tau 0.2
TAU_STEP = 0.3  # logit of policy accuracy per rank
SPREAD_LEVELS = (0.66, 0.71, 0.76, 0.81, 0.86)  # RM accuracies, 20 points from low to high
ICL_GAIN = 0.03  # ROUGE-1


def _load(name: str) -> ModuleType:
    """A sibling benchmark script as a module (benchmarks/ is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


calibration = _load("calibration")
findings = _load("findings")

SHAPES = {
    "pref_lamp": calibration.Shape(pairs=5, items=5),
    "polis": calibration.Shape(pairs=12, items=2),
}


@dataclass(frozen=True)
class Claim:
    """A claim of findings.py: the world in which it is true, and whether a run reached it."""

    name: str
    title: str
    scenario: Any  # calibration.Scenario
    reached: Callable[[list[CaseResult]], bool]


def tau_reached(results: list[CaseResult]) -> bool:
    """Claim 1's verdict on the ``args`` decoder's tau over policy accuracy is "holds"."""
    (entry,) = [
        e for e in crisis.tau_entries(results) if (e["decoder"], e["y"]) == ("args", "policy_acc")
    ]
    return bool(findings.tau_verdict(entry) == "holds")


def spread_reached(results: list[CaseResult]) -> bool:
    """Claim 2's verdict on the ``args`` decoder is "holds"."""
    (entry,) = [e for e in findings.spread_entries(results) if e["decoder"] == "args"]
    return bool(entry["claim"].startswith("holds"))


def icl_reached(results: list[CaseResult]) -> bool:
    """Claim 3's verdict on the ``icl`` row is "holds at this size" (the run's own family of
    looks adjusted, as the summary states it)."""
    _, found = crisis.analyse(results)
    rows = [e for e in found.get("icl_vs_rgd", []) if e["icl"] == "icl"]
    return any(findings.icl_verdict(e) == "holds at this size" for e in rows)


EFFECTS = {
    "tau": Claim(
        "tau",
        "1. tau weak (tau 0.2 in truth)",
        calibration.Scenario(
            "paper tau",
            {m: TAU_STEP * r for m, r in zip(calibration.REWARDS, PAPER_TAU_RANKS, strict=True)},
            {},
        ),
        tau_reached,
    ),
    "spread": Claim(
        "spread",
        "2. RM accuracy 20 points apart, ROUGE-1 the same",
        calibration.Scenario("paper spread", {}, {}, rm_levels=SPREAD_LEVELS),
        spread_reached,
    ),
    "icl": Claim(
        "icl",
        "3. ICL 3 ROUGE-1 points ahead",
        calibration.Scenario("paper icl", {}, {"icl": ICL_GAIN, "icl_rag": ICL_GAIN}),
        icl_reached,
    ),
}


def power(claim: Claim, n_users: int, shape: Any, sims: int, seed: int) -> tuple[float, float]:
    """The share of ``sims`` simulated runs in which ``claim`` was reached, and its Monte Carlo
    standard error."""
    hits = []
    for i in range(sims):
        rng = np.random.default_rng([seed, i])
        hits.append(claim.reached(calibration.simulate(n_users, claim.scenario, rng, shape)))
    rate = float(np.mean(hits))
    return rate, math.sqrt(rate * (1 - rate) / sims)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=100, help="simulated runs per cell")
    parser.add_argument("--users", default="10,20,40,80,160,320,640")
    parser.add_argument("--claims", default=",".join(EFFECTS))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the table here (findings.py reads it)")
    args = parser.parse_args()
    grid = [int(u) for u in args.users.split(",")]
    started = time.perf_counter()
    table: dict[str, dict[str, dict[str, list[float]]]] = {}
    for shape_name in args.shapes.split(","):
        for claim_name in args.claims.split(","):
            claim = EFFECTS[claim_name]
            row = table.setdefault(shape_name, {}).setdefault(claim_name, {})
            for n in grid:
                rate, se = power(claim, n, SHAPES[shape_name], args.sims, args.seed)
                row[str(n)] = [rate, se]
                print(f"{shape_name:9} {claim.title:50} {n:4d} users: {rate:.2f} ± {se:.2f}",
                      flush=True)  # fmt: skip
                if rate >= TARGET:  # enough users found; more only cost time
                    break
    seconds = time.perf_counter() - started
    print(f"{args.sims} simulated runs per cell; {seconds:.0f} s")
    if args.json:
        saved = {
            "command": "python benchmarks/claim_power.py " + " ".join(sys.argv[1:]),
            "sims": args.sims,
            "target": TARGET,
            "claims": {name: c.title for name, c in EFFECTS.items()},
            "shapes": {name: [s.pairs, s.items] for name, s in SHAPES.items()},
            "power": table,
        }
        args.json.write_text(json.dumps(saved, indent=1) + "\n")


if __name__ == "__main__":
    main()
