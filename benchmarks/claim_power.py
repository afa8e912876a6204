"""How many users each claim of docs/findings.md needs: the share of simulated runs in which the
claim reaches its verdict when the paper's effect is true (its power), at several numbers of
users, by findings.py's own verdict rules on runs simulated by calibration.py. docs/findings.md
reads the table (``--json``) and, where a claim is "not enough evidence", states the users it
would need.

    python benchmarks/claim_power.py [--sims 100] [--users 10,20,40,80,160,320,640] [--json FILE]
    python benchmarks/claim_power.py --errors [--sims 200] [--users 20,40,needed] [--json FILE]

With ``--errors``, the other side: how often claims 1 and 2 say a false verdict (``Error``,
``error_worlds``): "holds" on the nearest edge of its null, where its rate is its level, and
"does not hold" where the paper's effect is true; ``needed`` in ``--users`` is the users the
claim needs at that shape by the power table (``--power``).

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

POWER = ROOT / "docs" / "findings-power.json"  # this script's power table, as findings.py reads it
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


def tau_said(results: list[CaseResult]) -> str:
    """Claim 1's verdict on the ``args`` decoder's tau over policy accuracy."""
    (entry,) = [
        e for e in crisis.tau_entries(results) if (e.decoder, e.y) == ("args", "policy_acc")
    ]
    return str(findings.tau_verdict(entry))


def tau_reached(results: list[CaseResult]) -> bool:
    """Claim 1's verdict on the ``args`` decoder's tau over policy accuracy is "holds"."""
    return tau_said(results) == "holds"


def spread_said(results: list[CaseResult]) -> str:
    """Claim 2's verdict on the ``args`` decoder."""
    (entry,) = [e for e in findings.spread_entries(results) if e["decoder"] == "args"]
    return str(entry["claim"])


def spread_reached(results: list[CaseResult]) -> bool:
    """Claim 2's verdict on the ``args`` decoder is "holds" (either way)."""
    return spread_said(results).startswith("holds")


def icl_reached(results: list[CaseResult]) -> bool:
    """Claim 3's verdict on the ``icl`` row is "holds at this size" (the run's own family of
    looks adjusted, as the summary states it)."""
    _, found = crisis.analyse(results)
    rows = [e for e in found.icl_vs_rgd if e.icl == "icl"]
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


NULL_TAU_RANKS = (1, 0, 4, 2, 3)  # tau 0.4: above the paper's 0.31, the nearest five methods allow
ALL_SAME = (0.76,) * 5  # every reward method's RM accuracy, the same


@dataclass(frozen=True)
class Error:
    """A world in which one of a claim's verdicts is false. The share of simulated runs that
    say it there is that verdict's error rate; a world on the edge of the verdict's null gives
    its level."""

    claim: str  # the EFFECTS key
    world: str
    scenario: Any  # calibration.Scenario
    verdict: str  # the false verdict counted (a verdict that begins with it)
    said: Callable[[list[CaseResult]], str]


def error_worlds() -> list[Error]:
    """The worlds where claims 1 and 2 would say something false: "holds" on the nearest edge
    of its null, "does not hold" where the paper's effect is true. (Claim 3's "holds at this
    size" is the analysis's icl_vs_rgd verdict, whose rate under its null is in
    docs/metrics.md's calibration table.)"""
    best = calibration.REWARDS[-1]  # the highest RM accuracy of SPREAD_LEVELS
    edge = calibration.rouge_shift_for(findings.NEAR)  # a true ROUGE-1 gap of exactly NEAR
    tau_04 = {m: TAU_STEP * r for m, r in zip(calibration.REWARDS, NULL_TAU_RANKS, strict=True)}
    return [
        Error(
            "tau",
            "tau 0.4 in truth (the nearest above the paper's 0.31 that five methods allow)",
            calibration.Scenario("tau 0.4", tau_04, {}),
            "holds",
            tau_said,
        ),
        Error(
            "tau",
            "tau 0.2 in truth (the paper's)",
            EFFECTS["tau"].scenario,
            "does not hold",
            tau_said,
        ),
        Error(
            "spread",
            f"RM accuracy 20 points apart, the highest's ROUGE-1 {findings.NEAR} above "
            "(the edge of nearly the same)",
            calibration.Scenario("spread edge", {}, {best: edge}, rm_levels=SPREAD_LEVELS),
            "holds",
            spread_said,
        ),
        Error(
            "spread",
            "RM accuracy the same for every method, ROUGE-1 the same",
            calibration.Scenario("spread none", {}, {}, rm_levels=ALL_SAME),
            "holds",
            spread_said,
        ),
        Error(
            "spread",
            "RM accuracy 20 points apart, ROUGE-1 the same (the paper's)",
            EFFECTS["spread"].scenario,
            "does not hold",
            spread_said,
        ),
    ]


def users_needed(power: dict[str, Any], shape: str, claim: str) -> int:
    """The fewest users of the power table's grid at which ``claim`` reached its target at
    ``shape`` (its largest where none did)."""
    row = power["power"][shape][claim]
    fewest = findings.fewest_users(row, power["target"])
    return max(map(int, row)) if fewest is None else fewest


def error_rate(error: Error, n_users: int, shape: Any, sims: int, seed: int) -> tuple[float, float]:
    """The share of ``sims`` simulated runs in ``error``'s world that say its false verdict,
    and its Monte Carlo standard error."""
    return share(
        lambda rows: error.said(rows).startswith(error.verdict),
        error.scenario,
        n_users,
        shape,
        sims,
        seed,
    )


def power(claim: Claim, n_users: int, shape: Any, sims: int, seed: int) -> tuple[float, float]:
    """The share of ``sims`` simulated runs in which ``claim`` was reached, and its Monte Carlo
    standard error."""
    return share(claim.reached, claim.scenario, n_users, shape, sims, seed)


def share(
    hit: Callable[[list[CaseResult]], bool],
    scenario: Any,
    n_users: int,
    shape: Any,
    sims: int,
    seed: int,
) -> tuple[float, float]:
    """The share of ``sims`` runs simulated under ``scenario`` (run ``i`` drawn from the seed
    ``[seed, i]``) for which ``hit`` is true, and its Monte Carlo standard error."""
    hits = []
    for i in range(sims):
        rng = np.random.default_rng([seed, i])
        hits.append(hit(calibration.simulate(n_users, scenario, rng, shape)))
    rate = float(np.mean(hits))
    return rate, math.sqrt(rate * (1 - rate) / sims)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=100, help="simulated runs per cell")
    parser.add_argument("--users", default="10,20,40,80,160,320,640")
    parser.add_argument("--claims", default=",".join(EFFECTS))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--errors", action="store_true", help="the false verdicts' rates instead of the power"
    )
    parser.add_argument(
        "--power", type=Path, default=POWER, help="with --errors: the power table, for 'needed'"
    )
    parser.add_argument("--json", type=Path, help="write the table here (findings.py reads it)")
    args = parser.parse_args()
    started = time.perf_counter()
    saved = errors_table(args) if args.errors else power_table(args)
    print(f"{args.sims} simulated runs per cell; {time.perf_counter() - started:.0f} s")
    if args.json:
        command = "python benchmarks/claim_power.py " + " ".join(sys.argv[1:])
        claims = {name: c.title for name, c in EFFECTS.items()}
        saved = {"command": command, "sims": args.sims, **saved, "claims": claims}
        saved["shapes"] = {name: [s.pairs, s.items] for name, s in SHAPES.items()}
        args.json.write_text(json.dumps(saved, indent=1) + "\n")


def power_table(args: argparse.Namespace) -> dict[str, Any]:
    """Each claim's power by users, per shape, up to the first number of users reaching TARGET."""
    grid = [int(u) for u in args.users.split(",")]
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
    return {"target": TARGET, "power": table}


def errors_table(args: argparse.Namespace) -> dict[str, Any]:
    """Each false verdict's rate in its world, by shape and users (``needed`` in ``--users``:
    the users the claim needs at that shape by the power table ``--power``)."""
    power = json.loads(args.power.read_text())
    worlds = []
    for error in (e for e in error_worlds() if e.claim in args.claims.split(",")):
        rates: dict[str, dict[str, list[float]]] = {}
        for shape_name in args.shapes.split(","):
            needed = users_needed(power, shape_name, error.claim)
            grid = sorted({needed if u == "needed" else int(u) for u in args.users.split(",")})
            for n in grid:
                rate, se = error_rate(error, n, SHAPES[shape_name], args.sims, args.seed)
                rates.setdefault(shape_name, {})[str(n)] = [rate, se]
                print(f"{shape_name:9} {error.world[:60]:60} {error.verdict!r:16} {n:4d} users: "
                      f"{rate:.3f} ± {se:.3f}", flush=True)  # fmt: skip
        worlds.append({"claim": error.claim, "world": error.world, "verdict": error.verdict,
                       "rates": rates})  # fmt: skip
    return {"errors": worlds}


if __name__ == "__main__":
    main()
