"""How often claim 1's tau interval covers the true tau, at the kept runs' own spacing: runs
simulated from each kept run's own users (``benchmarks/findings-runs/*.json.gz``, the pooled
Pref-LaMP run among them) with a true tau imposed, analysed as the run's analysis does it.

    python benchmarks/tau_coverage.py [--sims 200] [--taus 0,0.2,1] [--json FILE]

**The worlds**: per kept run and decoder with 5 reward methods or more, RM accuracy's per-user
figures as they are, and policy accuracy's per-user figures moved (each user's deviations
kept) so that their means are the run's own means reassigned to the methods in the order whose
tau against RM accuracy is the one asked for (``power.order_with_tau``: the spacing is the
run's, the order imposed). The true tau is that of the two sets of means. Each simulated run
draws the run's own number of users with replacement from its users (every figure of a user
drawn together, so the correlation between methods is the run's).

**The intervals**: the analysis's 95% projection interval (``projection.tau_interval``, with
``users.N_BOOT`` resamples of users), and, beside it, the percentile bootstrap of tau it
replaced (its 90% two-sided bounds, the 5th and 95th percentiles, from which claim 1 was read
before issue 64). Coverage: the share of runs whose interval holds the true tau, ± its Monte
Carlo standard error; and the share of runs in which claim 1 says "does not hold" and "holds".
docs/metrics.md carries the table ("Claim 1's interval").
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_prefalign.analysis import (  # noqa: E402
    catalogue,
    claims,
    crisis,
    power,
    projection,
    stats,
    users,
)
from pytest_prefalign.analysis.metrics import resample_counts  # noqa: E402
from pytest_prefalign.runs import records  # noqa: E402
from pytest_prefalign.runs.records import CaseResult  # noqa: E402

KEPT = ROOT / "benchmarks" / "findings-runs"
MIN_METHODS = 5  # crisis.MIN_METHODS: below this no tau is read


@dataclass(frozen=True)
class World:
    """One kept run's group with a true tau imposed: ``rm`` and ``policy`` ``power.Figures``
    (policy accuracy's means moved), the true tau, and the run's users."""

    name: str
    rm: power.Figures
    policy: power.Figures
    true_tau: float

    @property
    def n_users(self) -> int:
        return int(self.rm.values.shape[1])


def kept_run(path: Path) -> Any:
    """A kept run file (``NAME.json.gz``), read through a temporary plain copy."""
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.name.removesuffix(".gz")
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        return records.read(plain)


def groups(results: list[CaseResult]) -> dict[str, tuple[power.Figures, power.Figures]]:
    """Per decoder with ``MIN_METHODS`` reward methods or more: RM accuracy's and policy
    accuracy's per-user figures over the users both have."""
    x, y = catalogue.x_metric(), catalogue.plotted()
    out = {}
    for (suite, size, decoder), rows in crisis.reward_groups(results).items():
        kept = [r for r in rows if x in r.per_user and y in r.per_user]
        if len(kept) >= MIN_METHODS:
            tx, ty = users.tables(kept, x, y)
            out[f"{suite} {size} {decoder}"] = (
                power.Figures(tx.values, tx.weights),
                power.Figures(ty.values, ty.weights),
            )
    return out


def world(name: str, rm: power.Figures, policy: power.Figures, tau: float) -> World:
    """``policy``'s means reassigned so that their tau against ``rm``'s is ``tau``'s nearest."""
    targets = power.order_with_tau(rm.means(), policy.means(), tau)
    true_tau = float(stats.tau_b_rows(rm.means()[None], targets[None])[0])
    return World(name, rm, policy.with_means(targets), true_tau)


def one_run(w: World, rng: np.random.Generator, n_boot: int) -> dict[str, Any]:
    """One simulated run of ``w``: both intervals and claim 1's verdict from the projection."""
    drawn = rng.integers(0, w.n_users, w.n_users)
    rm, policy = w.rm.drawn(drawn), w.policy.drawn(drawn)
    counts = np.concatenate(list(resample_counts(w.n_users, n_boot, rng)))
    rm_boot = power._resampled_means(rm, counts)
    policy_boot = power._resampled_means(policy, counts)
    lower, upper, _ = projection.tau_interval(
        rm.means(), policy.means(), rm_boot, policy_boot, w.n_users
    )
    taus = stats.tau_b_rows(rm_boot, policy_boot)
    taus = taus[np.isfinite(taus)]
    old = np.percentile(taus, [5.0, 95.0]) if len(taus) else (math.nan, math.nan)
    return {
        "covered": lower - 1e-9 <= w.true_tau <= upper + 1e-9,
        "old_covered": old[0] - 1e-9 <= w.true_tau <= old[1] + 1e-9,
        "claim": claims.tau_claim(True, lower, upper),
        "old_claim": claims.tau_claim(True, float(old[0]), float(old[1])),
        "width": upper - lower,
    }


def coverage(w: World, sims: int, seed: int, n_boot: int = users.N_BOOT) -> dict[str, Any]:
    """``sims`` simulated runs of ``w`` (run ``i`` from the seed ``[seed, i]``): each interval's
    coverage and claim 1's verdicts, as shares with their Monte Carlo standard errors."""
    runs = [one_run(w, np.random.default_rng([seed, i]), n_boot) for i in range(sims)]

    def share(hits: list[bool]) -> list[float]:
        rate = float(np.mean(hits))
        return [rate, math.sqrt(rate * (1 - rate) / sims)]

    return {
        "world": w.name,
        "true_tau": w.true_tau,
        "users": w.n_users,
        "methods": int(w.rm.values.shape[0]),
        "coverage": share([r["covered"] for r in runs]),
        "old_coverage": share([r["old_covered"] for r in runs]),
        "does_not_hold": share([r["claim"].startswith(claims.FAILS) for r in runs]),
        "holds": share([r["claim"] == claims.HOLDS for r in runs]),
        "old_does_not_hold": share([r["old_claim"].startswith(claims.FAILS) for r in runs]),
        "mean_width": float(np.mean([r["width"] for r in runs])),
    }


def spacing(rm: power.Figures, policy: power.Figures) -> str:
    """The run's spacing in words: each figure's range of means, in points."""
    return (
        f"RM acc {100 * np.ptp(rm.means()):.1f} points, policy acc "
        f"{100 * np.ptp(policy.means()):.1f} points"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=200, help="simulated runs per world")
    parser.add_argument("--taus", default="0,0.2,1")
    parser.add_argument("--runs", default="*.json.gz", help="kept run files (a glob in KEPT)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args()
    started = time.perf_counter()
    table = []
    print("| run, decoder | spacing | users | true tau | 95% projection covers | old 90% "
          "percentile covers | does not hold (new / old) | holds | mean width |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for path in sorted(KEPT.glob(args.runs)):
        for name, (rm, policy) in groups(kept_run(path).results).items():
            for tau in (float(t) for t in args.taus.split(",")):
                found = coverage(world(name, rm, policy, tau), args.sims, args.seed)
                found["spacing"] = spacing(rm, policy)
                table.append(found)
                c, o = found["coverage"], found["old_coverage"]
                f, of, h = found["does_not_hold"], found["old_does_not_hold"], found["holds"]
                print(f"| {name} | {found['spacing']} | {found['users']} | "
                      f"{found['true_tau']:+.2f} | {c[0]:.3f} ± {c[1]:.3f} | "
                      f"{o[0]:.3f} ± {o[1]:.3f} | {f[0]:.3f} / {of[0]:.3f} | {h[0]:.3f} | "
                      f"{found['mean_width']:.2f} |", flush=True)  # fmt: skip
    seconds = time.perf_counter() - started
    print(f"\n{args.sims} simulated runs per world; {seconds:.0f} s")
    if args.json:
        command = "python benchmarks/tau_coverage.py " + " ".join(sys.argv[1:])
        saved = {"command": command, "sims": args.sims, "worlds": table}
        args.json.write_text(json.dumps(saved, indent=1) + "\n")


if __name__ == "__main__":
    main()
