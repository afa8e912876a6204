"""Whether the verdicts of docs/findings.md's claims are right as often as they say: the share of
simulated runs that say each verdict in worlds where it is false (its error rate, at its level
on the nearest edge of its null) and in worlds where it is true (its power: a verdict that no
run can reach is no verdict), by findings.py's own rules on runs simulated by calibration.py.

    python benchmarks/claim_power.py [--sims 100] [--users 20,40] [--json FILE]

docs/findings.md prints the table (``--json docs/findings-errors.json``). How many users a claim
needs is not here: it is simulated from each run's own noise (``analysis/power.py``), since a
table made from assumed effects and spreads (RM accuracies 0.70 to 0.86, 20-point gaps) says
what runs that do not look like that would need.

**The worlds** (``error_worlds``; every other figure as calibration.py makes it: users differ, a
user's level shared by every method, the reward methods' RM accuracies apart):

- claim 1: tau 0.4 in truth (the nearest above the paper's 0.31 that five methods allow):
  "holds" is false; tau 0.2 (the paper's, policy-accuracy ranks 1 0 4 3 2 against the RM
  order, 0.3 logit apart per rank): "does not hold" is false; tau 1 in truth (the same
  steps in RM accuracy's order): "does not hold" is true, its rate is the claim's power to fail;
- claim 2: RM accuracies 20 points apart (0.66 to 0.86) with the highest's ROUGE-1 2 points
  above (the edge of "nearly the same") or every RM accuracy the same: "holds" is false; RM
  accuracies 20 points apart, ROUGE-1 the same (the paper's): "does not hold" is false; two
  RM accuracies exactly 10 points above three others (the edge of "large", as
  ``calibration.py --gap-level`` sets it; the highest and the lowest are chosen on the same
  users) with their ROUGE-1 3 points above: "does not hold" is false (the gap is not large,
  so the claim says nothing about it), its rate the level of "large".

**Shapes**: a user of Pref-LaMP holds about 5 test pairs and 5 generation items (one per test
paper); a voter of Polis 12 test pairs and 2 items.
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
    (entry,) = [e for e in findings.spread_entries(results) if e.decoder == "args"]
    return entry.claim


def spread_reached(results: list[CaseResult]) -> bool:
    """Claim 2's verdict on the ``args`` decoder is "holds"."""
    return spread_said(results) == "holds"


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
MARGIN_DIFFS = (0.0, 0.01, 0.02, 0.03)  # claim 2's true ROUGE-1 differences, about its margin


@dataclass(frozen=True)
class Error:
    """A world in which one of a claim's verdicts is false. The share of simulated runs that
    say it there is that verdict's error rate; a world on the edge of the verdict's null gives
    its level."""

    claim: str  # the EFFECTS key
    world: str
    scenario: Any  # calibration.Scenario
    verdict: str  # the verdict counted (a verdict that begins with it)
    said: Callable[[list[CaseResult]], str]
    true: bool = False  # the verdict is true in this world: its rate is its power, not an error


def error_worlds(diffs: tuple[float, ...] = MARGIN_DIFFS) -> list[Error]:
    """The worlds where claims 1 and 2 would say something false ("holds" on the nearest edge
    of its null, "does not hold" where the paper's effect is true), and where claim 1's "does
    not hold" is true (a true tau of 1: whether the claim can fail at all). (Claim 3's "holds
    at this size" is the analysis's icl_vs_rgd verdict, whose rate under its null is in
    docs/metrics.md's calibration table.)"""
    rouge_3 = calibration.rouge_shift_for(0.03)
    # the two highest RM accuracies exactly MIN_GAP above the three others (over users)
    gap_edge = calibration.gap_levels(calibration.GAP_LAYOUTS["two above three"], findings.MIN_GAP)
    tau_04 = {m: TAU_STEP * r for m, r in zip(calibration.REWARDS, NULL_TAU_RANKS, strict=True)}
    tau_1 = {m: TAU_STEP * r for r, m in enumerate(calibration.REWARDS)}
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
            "tau",
            "tau 1 in truth (policy accuracy 0.3 logit apart per rank, in RM accuracy's order)",
            calibration.Scenario("tau 1", tau_1, {}),
            "does not hold",
            tau_said,
            true=True,
        ),
        *margin_worlds(diffs),
        Error(
            "spread",
            "RM accuracy 10 points apart (two methods above three: the edge of large), the "
            "two higher's ROUGE-1 3 points above",
            calibration.Scenario(
                "gap edge", {}, {m: rouge_3 for m in calibration.REWARDS[:2]}, rm_levels=gap_edge
            ),
            "does not hold",
            spread_said,
        ),
        Error(
            "spread",
            "RM accuracy the same for every method, ROUGE-1 the same",
            calibration.Scenario("spread none", {}, {}, rm_levels=ALL_SAME),
            "holds",
            spread_said,
        ),
    ]


def margin_worlds(diffs: tuple[float, ...] = MARGIN_DIFFS) -> list[Error]:
    """Claim 2 at true ROUGE-1 differences ``MARGIN_DIFFS`` (the highest RM accuracy's ROUGE-1
    above the others', RM accuracies 20 points apart): inside the margin "holds" is true and
    "does not hold" false; on its edge (``findings.NEAR``) both are false, their rates their
    levels; outside it "holds" is false and "does not hold" true."""
    best = calibration.REWARDS[-1]  # the highest RM accuracy of SPREAD_LEVELS
    worlds = []
    for diff in diffs:
        shift = {best: calibration.rouge_shift_for(diff)} if diff else {}
        scenario = calibration.Scenario(f"spread {diff}", {}, shift, rm_levels=SPREAD_LEVELS)
        where = "inside" if diff < findings.NEAR else "on" if diff == findings.NEAR else "outside"
        text = (
            f"RM accuracy 20 points apart, the highest's ROUGE-1 {diff:.2f} above ({where} the "
            f"margin +-{findings.NEAR})"
        )
        for verdict in ("holds", "does not hold"):
            true = (verdict == "holds") == (diff < findings.NEAR) and diff != findings.NEAR
            worlds.append(Error("spread", text, scenario, verdict, spread_said, true=true))
    return worlds


def error_rate(error: Error, n_users: int, shape: Any, sims: int, seed: int) -> tuple[float, float]:
    """The share of ``sims`` simulated runs in ``error``'s world that say its verdict, and its
    Monte Carlo standard error (the runs' verdicts kept, so that two verdicts counted in one
    world are counted on the same runs)."""
    said = verdicts(error.said, error.scenario, n_users, shape, sims, seed)
    rate = float(np.mean([s.startswith(error.verdict) for s in said]))
    return rate, math.sqrt(rate * (1 - rate) / sims)


_SAID: dict[tuple[Any, ...], list[str]] = {}


def verdicts(
    said: Callable[[list[CaseResult]], str],
    scenario: Any,
    n_users: int,
    shape: Any,
    sims: int,
    seed: int,
) -> list[str]:
    """What ``said`` says on each of ``sims`` runs simulated under ``scenario`` (run ``i``
    drawn from the seed ``[seed, i]``), kept for the next verdict counted in that world."""
    key = (said, repr(scenario), n_users, shape, sims, seed)
    if key not in _SAID:
        _SAID[key] = [
            said(calibration.simulate(n_users, scenario, np.random.default_rng([seed, i]), shape))
            for i in range(sims)
        ]
    return _SAID[key]


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
    parser.add_argument("--users", default="20,40")
    parser.add_argument("--claims", default=",".join(EFFECTS))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the table here (findings.py reads it)")
    parser.add_argument(
        "--diffs",
        default=",".join(map(str, MARGIN_DIFFS)),
        help="claim 2's true ROUGE-1 differences about its margin",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    saved = errors_table(args)
    print(f"{args.sims} simulated runs per cell; {time.perf_counter() - started:.0f} s")
    if args.json:
        command = "python benchmarks/claim_power.py " + " ".join(sys.argv[1:])
        claims = {name: c.title for name, c in EFFECTS.items()}
        saved = {"command": command, "sims": args.sims, **saved, "claims": claims}
        saved["shapes"] = {name: [s.pairs, s.items] for name, s in SHAPES.items()}
        args.json.write_text(json.dumps(saved, indent=1) + "\n")


def errors_table(args: argparse.Namespace) -> dict[str, Any]:
    """Each verdict's rate in its worlds, by shape and users."""
    worlds = []
    diffs = tuple(float(d) for d in args.diffs.split(","))
    for error in (e for e in error_worlds(diffs) if e.claim in args.claims.split(",")):
        rates: dict[str, dict[str, list[float]]] = {}
        for shape_name in args.shapes.split(","):
            grid = sorted({int(u) for u in args.users.split(",")})
            for n in grid:
                rate, se = error_rate(error, n, SHAPES[shape_name], args.sims, args.seed)
                rates.setdefault(shape_name, {})[str(n)] = [rate, se]
                print(f"{shape_name:9} {error.world[:60]:60} {error.verdict!r:16} {n:4d} users: "
                      f"{rate:.3f} ± {se:.3f}", flush=True)  # fmt: skip
        worlds.append({"claim": error.claim, "world": error.world, "verdict": error.verdict,
                       "true": error.true, "rates": rates})  # fmt: skip
    return {"errors": worlds}


if __name__ == "__main__":
    main()
