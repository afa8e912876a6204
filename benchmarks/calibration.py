"""Are the verdicts right as often as they say? Each verdict's rate under its null (false
positives) and under known effects (power), measured on simulated runs by the tool's own
analysis (``crisis.analyse``), with Monte Carlo standard errors; docs/metrics.md carries the table.

    python benchmarks/calibration.py [--sims 200] [--users 8,20,40] [--markdown]
    python benchmarks/calibration.py --run .prefalign/runs/RUN.json [--sims 200]
    python benchmarks/calibration.py --unequal [--sims 200] [--users 40]
    python benchmarks/calibration.py --gap-level [--sims 1000] [--users 8,20,40] [--gap 0.10]
    python benchmarks/calibration.py --tau-coverage [--sims 200] [--taus 0,0.2,1] [--json FILE]

**Simulated runs** are shaped like the README's main job: ``base``, ``icl``, ``icl_rag``, five
reward methods under ``args`` and one under ``bon``; each user has ``PAIRS`` test pairs and
``ITEMS`` generation items. A user's pair outcomes are Bernoulli draws around the user's own
level (users differ, and a user's level is shared by every method: the per-user correlation
between methods of real runs), RM accuracy differs between the reward methods (so there is
something to pick by), ROUGE-1 is a per-item figure around the user's level, and the own-RM
win over base is a per-item win, tie or loss. Under the **null** every method is the same on
policy accuracy, ROUGE-1 and the win (its own RM is indifferent between its output and base's);
under each **effect** one verdict's statement is true (``EFFECTS``). With ``--unequal``, the
nulls ``UNEQUAL``: the reward methods equal on average, each with a per-user deviation of its
own whose spread differs between them (one 3x the others'; 4, 1, 1, 1 and 0.25; only the one
most often picked, 4x, right-skewed), or the ICL rows' 3x the reward methods'.

**From a real run file** (``--run``): the null is made from the run's own per-user figures,
each user's policy accuracy, ROUGE-1 and ROUGE-L exchanged at random between the methods that
have them, each user's own-RM win share reflected about 1/2 at random (method and base
exchanged), RM accuracy untouched; then the run is analysed again. This is the null of every
verdict at once, at the run's own users, methods and per-user spread.

Rates: the share of simulated runs in which a verdict of that kind fired (after the run's Holm
adjustment, as the summary states them), its Monte Carlo standard error sqrt(r (1 - r) / n);
and, beside it, each test alone: the share of its looks whose own p-value was below 0.05 (in
the statement's direction), averaged over the runs, its error from the spread of that share
over the runs. Power is the first rate under the kind's effect.

**Claim 2's "large" at its boundary** (``--gap-level``): how often a gap is called large when
the true difference between the highest and the lowest RM accuracy is exactly ``--gap``
(``claims.MIN_GAP``; the mean over users, found by bisection), on the simulated main jobs above
in three layouts (``GAP_LAYOUTS``: one method above four, two above three, five evenly
spaced). The claim picks the highest and the lowest of the five on the same data, so their
observed difference is above its truth on average; a gap called large at the boundary is a
false statement, and its rate should be at most 0.05. Also printed: the rate at the paper's gap
(0.20), the power.

**Claim 1's interval at the kept runs' spacing** (``--tau-coverage``): how often claim 1's tau
interval covers the true tau, on runs simulated from each kept run's own users
(``benchmarks/findings-runs/*.json.gz``, the pooled Pref-LaMP run among them) with a true tau
imposed, analysed as the run's analysis does it. The worlds: per kept run and decoder with 5
reward methods or more, RM accuracy's per-user figures as they are, and policy accuracy's
per-user figures moved (each user's deviations kept) so that their means are the run's own
means reassigned to the methods in the order whose tau against RM accuracy is the one asked for
(``power.order_with_tau``: the spacing is the run's, the order imposed). The true tau is that
of the two sets of means. Each simulated run draws the run's own number of users with
replacement from its users (every figure of a user drawn together, so the correlation between
methods is the run's). The intervals: the analysis's 95% projection interval
(``projection.tau_interval``, with ``users.N_BOOT`` resamples of users), and, beside it, the
percentile bootstrap of tau it replaced (its 90% two-sided bounds, the 5th and 95th
percentiles, from which claim 1 was read before issue 64). Coverage: the share of runs whose
interval holds the true tau, ± its Monte Carlo standard error; and the share of runs in which
claim 1 says "does not hold" and "holds". docs/metrics.md carries the table ("Its coverage at
the kept runs' own spacing").
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
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
)
from pytest_prefalign.analysis.metrics import resample_counts  # noqa: E402
from pytest_prefalign.analysis.users import N_BOOT, tables  # noqa: E402
from pytest_prefalign.runs.entries import Crisis, Look, TauEntry  # noqa: E402
from pytest_prefalign.runs.records import CaseResult, read  # noqa: E402

ALPHA = 0.05
PAIRS = 5  # test pairs per user (Pref-LaMP: about 5 per author)
ITEMS = 5  # generation items per user
KINDS = ("tau", "regret", "inversions", "icl_vs_rgd", "circular", "spread")
REWARDS = ("args[global_bt]", "args[per_user_bt]", "args[lore]", "args[vpl]", "args[pal]")
RM_LEVELS = (0.70, 0.74, 0.78, 0.82, 0.86)  # the reward methods' RM accuracies, truly apart
FREE = ("base", "icl", "icl_rag")
ROUGE_LEVEL = (0.20, 0.06)  # users' ROUGE-1 levels: mean and spread (clipped to 0.02..0.6)
RM_USER_SD = 0.5  # the sd of each user's RM-accuracy logit offset, shared by the reward methods
ITEM_SD = 0.12  # an item's ROUGE-1 about its user's level (clipped to 0..1)
# A method's own per-user deviation at spread 1, where a scenario gives the methods spreads:
# of ROUGE-1 (not clipped, so that the methods' means stay equal) and of policy accuracy's logit
SPREAD_SD = (0.04, 0.4)


@dataclass(frozen=True)
class Scenario:
    """What is true in a simulated run: per method, its shift of policy accuracy (logit) and of
    ROUGE-1; the own-RM win probability of every guided method; a shift of ROUGE-1 for ICL; a
    share of users for whom one method fails (its worst-served tail)."""

    name: str
    policy_shift: dict[str, float]
    rouge_shift: dict[str, float]
    win: float = 0.5  # P(own RM prefers the method's output), ties aside
    tail_method: str = ""
    tail_share: float = 0.0
    rm_levels: tuple[float, ...] = RM_LEVELS  # the reward methods' RM accuracies, in REWARDS order
    # per reward method (REWARDS order), the sd of its own per-user deviation in units of
    # SPREAD_SD: methods equal on average that differ in how much they vary (empty: none)
    spreads: tuple[float, ...] = ()
    # the same for the ICL rows (icl, icl_rag): 0, none
    icl_spread: float = 0.0
    # the shape of those ROUGE-1 deviations: 0 normal; s > 0 right-skewed as real per-user
    # ROUGE-1 is (a lognormal of shape s, moved to mean 0 and scaled to the same sd: s = 0.5
    # gives a skewness of 1.75, whose samples of 20 users show about 0.7; s = 1: 6.2 and 1.0)
    skew: float = 0.0
    # whether those spreads also move policy accuracy's logit: a wide symmetric spread on the
    # logit scale pulls a method's mean accuracy toward 1/2 (sd 1.6 costs it about 0.02), so that
    # a world meant to keep every mean equal keeps it on ROUGE-1 alone
    policy_spreads: bool = True


@dataclass(frozen=True)
class Shape:
    """How much each simulated user holds: test pairs (policy and RM accuracy are shares of
    them) and generation items (ROUGE-1 and the own-RM win are means over them)."""

    pairs: int = PAIRS
    items: int = ITEMS


SHAPE = Shape()


NULL = Scenario("null", {}, {})
EFFECTS: dict[str, Scenario] = {
    # policy accuracy rises with RM accuracy: tau's finding
    "tau": Scenario("tau", {m: 0.8 * i for i, m in enumerate(REWARDS)}, {}),
    # the method with the best RM accuracy is the worst generator: regret, and inversions
    "regret": Scenario("regret", {REWARDS[-1]: -1.5}, {REWARDS[-1]: -0.08}),
    "inversions": Scenario("inversions", {REWARDS[-1]: -1.5}, {REWARDS[-1]: -0.08}),
    # in-context learning writes better than every guided row
    "icl_vs_rgd": Scenario("icl_vs_rgd", {}, {"icl": 0.08, "icl_rag": 0.08}),
    # every guided method wins under its own RM and loses ROUGE-1 to base
    "circular": Scenario("circular", {}, {m: -0.06 for m in REWARDS}, win=0.85),
    # one method fails its worst-served users while the mean stays close
    "spread": Scenario("spread", {}, {}, tail_method="icl", tail_share=0.15),
}
# Nulls whose reward methods are equal on average but differ in spread (issue 38: real ROUGE-1
# spreads differ this much, args[pal]'s items near 0.015 and others' 0.09-0.16): a test that
# assumes the methods exchangeable within a user fires too often here
UNEQUAL: dict[str, Scenario] = {
    "equal spreads": Scenario("equal spreads", {}, {}, spreads=(1, 1, 1, 1, 1)),
    "one spread 3x": Scenario("one spread 3x", {}, {}, spreads=(1, 1, 1, 1, 3)),
    "spreads 4,1,1,1,0.25": Scenario("spreads 4,1,1,1,0.25", {}, {}, spreads=(4, 1, 1, 1, 0.25)),
    # the ICL rows vary 3x as much as the guided rows (the kept pref_lamp-270m run: ICL's
    # per-user ROUGE-1 sd 0.10-0.11, the guided rows' 0.04-0.07)
    "ICL spread 3x": Scenario("ICL spread 3x", {}, {}, spreads=(1, 1, 1, 1, 1), icl_spread=3),
    # only the method most often picked (the best RM accuracy) varies on its own, 4x and
    # right-skewed (its samples of 20 users: skewness about 0.7, the kept runs' 0.2 to 2.1)
    "one spread 4x, skewed": Scenario(
        "one spread 4x, skewed", {}, {}, spreads=(0, 0, 0, 0, 4), skew=0.5, policy_spreads=False
    ),
}


def simulate(
    n_users: int, scenario: Scenario, rng: np.random.Generator, shape: Shape = SHAPE
) -> list[CaseResult]:
    """One run's results under ``scenario``, each user holding ``shape``'s pairs and items."""
    users = [f"u{i:03d}" for i in range(n_users)]
    level = rng.normal(0.4, 0.8, n_users)  # each user's policy-accuracy logit, shared by methods
    rouge_level = _rouge_levels(rng, n_users)
    rm_user = rng.normal(0.0, RM_USER_SD, n_users)
    rows = []
    for method in (*FREE, *REWARDS, "bon[per_user_bt]"):
        decoder, _, reward = method.partition("[")
        reward = reward.rstrip("]") or None
        rouge_sd, logit_sd = _spread(scenario, method)
        logit = level + scenario.policy_shift.get(method, 0.0)
        if logit_sd:  # drawn only where asked, so that the other scenarios' draws are as before
            logit = logit + rng.normal(0.0, logit_sd, n_users)
        policy = _bernoulli_means(logit, rng, shape)
        rouge = _item_means(rouge_level + scenario.rouge_shift.get(method, 0.0), rng, shape)
        if rouge_sd:
            deviation = _shaped(rng.normal(0.0, 1.0, n_users), scenario.skew) * rouge_sd
            rouge = (np.asarray(rouge) + deviation).tolist()
        if method == scenario.tail_method:
            rouge = _with_tail(rouge, scenario.tail_share, rng)
        per_user = {
            "policy_acc": dict(zip(users, policy, strict=True)),
            "rouge1": dict(zip(users, rouge, strict=True)),
        }
        if reward:
            levels = scenario.rm_levels
            rm = levels[REWARDS.index(method)] if method in REWARDS else levels[1]
            logit = math.log(rm / (1 - rm)) + rm_user
            per_user["rm_acc"] = dict(zip(users, _bernoulli_means(logit, rng, shape), strict=True))
            wins = _wins(scenario.win, n_users, rng, shape)
            per_user["win_self"] = dict(zip(users, wins, strict=True))
        rows.append(_result(method, decoder, reward, per_user, n_users))
    return rows


def _spread(scenario: Scenario, method: str) -> tuple[float, float]:
    """The sd of ``method``'s own per-user deviation of ROUGE-1 and of policy accuracy's logit
    (0 unless the scenario gives the method a spread)."""
    if method in ("icl", "icl_rag"):
        factor = scenario.icl_spread
    elif scenario.spreads and method in REWARDS:
        factor = scenario.spreads[REWARDS.index(method)]
    else:
        return (0.0, 0.0)
    return (SPREAD_SD[0] * factor, SPREAD_SD[1] * factor if scenario.policy_spreads else 0.0)


def _shaped(z: np.ndarray, skew: float) -> np.ndarray:
    """Standard normal draws ``z`` as deviations of mean 0 and sd 1: themselves where ``skew``
    is 0, else a lognormal of shape ``skew`` moved and scaled (right-skewed)."""
    if skew == 0:
        return z
    mean, var = math.exp(skew**2 / 2), (math.exp(skew**2) - 1) * math.exp(skew**2)
    return (np.exp(skew * z) - mean) / math.sqrt(var)


def _bernoulli_means(logits: np.ndarray, rng: np.random.Generator, shape: Shape) -> list[float]:
    p = 1.0 / (1.0 + np.exp(-logits))
    return (rng.binomial(shape.pairs, p) / shape.pairs).tolist()


def _rouge_levels(rng: np.random.Generator, n_users: int) -> np.ndarray:
    return np.clip(rng.normal(*ROUGE_LEVEL, n_users), 0.02, 0.6)


def _items(levels: np.ndarray, noise: np.ndarray) -> np.ndarray:
    return np.clip(levels[:, None] + noise, 0.0, 1.0)


def _item_means(levels: np.ndarray, rng: np.random.Generator, shape: Shape) -> list[float]:
    noise = rng.normal(0.0, ITEM_SD, (len(levels), shape.items))
    return _items(levels, noise).mean(axis=1).tolist()


def rouge_gap(shift: float, draws: int = 1_000_000, seed: int = 0) -> float:
    """The true difference of mean ROUGE-1 that a ``rouge_shift`` of ``shift`` makes: less than
    the shift, where an item's ROUGE-1 is clipped at 0 (computed over ``draws`` users with
    common random numbers)."""
    rng = np.random.default_rng(seed)
    levels, noise = _rouge_levels(rng, draws), rng.normal(0.0, ITEM_SD, (draws, 1))
    return float((_items(levels + shift, noise) - _items(levels, noise)).mean())


def rouge_shift_for(gap: float, tolerance: float = 1e-5) -> float:
    """The ``rouge_shift`` whose true mean ROUGE-1 difference is ``gap`` (bisection on
    ``rouge_gap``, which grows with the shift)."""
    low, high = gap, 2 * gap
    while high - low > tolerance:
        middle = (low + high) / 2
        low, high = (middle, high) if rouge_gap(middle) < gap else (low, middle)
    return (low + high) / 2


def _with_tail(values: list[float], share: float, rng: np.random.Generator) -> list[float]:
    """A share of users served badly (their figure set near 0) and the others a little better,
    so that the mean stays about where it was."""
    out = np.array(values)
    worst = rng.choice(len(out), max(1, round(share * len(out))), replace=False)
    lost = out[worst].sum()
    out[worst] = 0.0
    others = np.setdiff1d(np.arange(len(out)), worst)
    out[others] += lost / max(1, len(others))
    return out.tolist()


def _wins(p_win: float, n_users: int, rng: np.random.Generator, shape: Shape) -> list[float]:
    """Each user's own-RM outcome share over the shape's items: win 1, tie 1/2 (one in ten),
    loss 0, a win ``p_win`` as likely as a win or a loss."""
    ties = rng.random((n_users, shape.items)) < 0.1
    wins = rng.random((n_users, shape.items)) < p_win
    return np.where(ties, 0.5, wins.astype(float)).mean(axis=1).tolist()


def _result(method: str, decoder: str, reward: str | None, per_user: dict, n: int) -> CaseResult:
    metrics = {k: round(float(np.mean(list(v.values()))), 12) for k, v in per_user.items()}
    return CaseResult(
        suite="sim",
        size="135m",
        method=method,
        decoder=decoder,
        reward=reward,
        n_users=n,
        metrics=metrics,
        per_user=per_user,
    )


# --------------------------------------------------------------------------------------------
# The null of a real run
# --------------------------------------------------------------------------------------------

EXCHANGED = ("policy_acc", "rouge1", "rougeL")


def real_null(results: list[CaseResult], rng: np.random.Generator) -> list[CaseResult]:
    """The run with each user's figures exchanged at random between the methods that have them
    (policy accuracy, ROUGE-1, ROUGE-L), each user's own-RM win share reflected about 1/2 at
    random, RM accuracy untouched; the metrics recomputed as the means of the per-user figures
    (weighted by the user's records for a micro figure, as the run did)."""
    out = [replace(r, per_user={k: dict(v) for k, v in r.per_user.items()}) for r in results]
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for r in out:
        groups.setdefault((r.suite, r.size), []).append(r)
    for rows in groups.values():
        for metric in EXCHANGED:
            having = [r for r in rows if metric in r.per_user]
            for user in sorted({u for r in having for u in r.per_user[metric]}):
                holders = [r for r in having if user in r.per_user[metric]]
                values = [r.per_user[metric][user] for r in holders]
                for r, v in zip(holders, rng.permutation(values), strict=True):
                    r.per_user[metric][user] = float(v)
        reflected = {id(r): _reflect_wins(r, rng) for r in rows}
        out = [reflected.get(id(r), r) for r in out]
    for r in out:
        for metric, values in r.per_user.items():
            if metric in (*EXCHANGED, "win_self") and values and metric in r.metrics:
                r.metrics[metric] = round(float(np.mean(list(values.values()))), 12)
    return out


def load_results(path: Path) -> list[CaseResult]:
    """A run file's results, or those of a trimmed file holding only ``{"results": [...]}``
    with their records (as tests/data/run_pref_lamp_8_users.json)."""
    data = json.loads(path.read_text())
    if "version" in data:
        return read(path).results
    return [
        CaseResult.from_json(row, f"{path}: results[{i}]") for i, row in enumerate(data["results"])
    ]


def with_users(results: list[CaseResult], n: int, rng: np.random.Generator) -> list[CaseResult]:
    """The run with ``n`` users drawn with replacement from its own (each draw a new user with
    the drawn user's figures and records in every method): a run of the same methods and
    spread at another size."""
    users = sorted({u for r in results for values in r.per_user.values() for u in values})
    drawn = [users[i] for i in rng.integers(0, len(users), n)]
    names = {f"{u}#{k}": u for k, u in enumerate(drawn)}
    out = []
    for r in results:
        per_user = {
            metric: {new: values[old] for new, old in names.items() if old in values}
            for metric, values in r.per_user.items()
        }
        items = [
            replace(it, user=new) for new, old in names.items() for it in r.items if it.user == old
        ]
        pairs = [
            replace(p, user=new) for new, old in names.items() for p in r.pairs if p.user == old
        ]
        out.append(replace(r, per_user=per_user, items=items, pairs=pairs, n_users=n))
    return out


def _reflect_wins(row: CaseResult, rng: np.random.Generator) -> CaseResult:
    """Each user's own-RM outcomes reflected about 1/2 (win and loss exchanged: the method's
    output and base's swapped) with probability 1/2, in the per-user shares and in the items'
    ``win_self_outcome`` records alike."""
    wins = row.per_user.get("win_self", {})
    flipped = {user for user in sorted(wins) if rng.random() < 0.5}
    for user in flipped:
        wins[user] = 1.0 - wins[user]
    items = [
        item.with_value("win_self_outcome", 1.0 - item.value("win_self_outcome"))
        if item.user in flipped and item.value("win_self_outcome") is not None
        else item
        for item in row.items
    ]
    return replace(row, items=items)


# --------------------------------------------------------------------------------------------
# Rates
# --------------------------------------------------------------------------------------------


NULL_METRICS = ("policy_acc", "rouge1", "rougeL")  # the figures the nulls make equal


def looks_by_kind(tau: Sequence[TauEntry], found: Crisis) -> dict[str, list[Look]]:
    """The looks of each kind whose null the simulated nulls make true: all of them but the
    spread flags on RM accuracy, which the nulls keep apart (the reward methods' RM accuracies
    differ in truth, there is something to pick by), so a flag there is no false positive."""
    sections = {kind: list(found.section(kind)) for kind in KINDS if kind not in ("tau", "spread")}
    spread: list[Look] = [e for e in found.spread if e.metric in NULL_METRICS]
    return {"tau": [e for e in tau if e.enough], **sections, "spread": spread}


def outcomes(results: list[CaseResult]) -> dict[str, tuple[bool, float]]:
    """Per kind: whether a verdict fired after the run's adjustment, and the share of its looks
    whose own p-value was below ``ALPHA`` with the statement's direction (nan without looks)."""
    tau, found = crisis.analyse(results)
    out: dict[str, tuple[bool, float]] = {}
    for kind, entries in looks_by_kind(tau, found).items():
        tested = [e for e in entries if e.p_value is not None]
        alone = [e.p_value is not None and e.p_value < ALPHA and e.holds for e in tested]
        out[kind] = (any(e.fires for e in entries), _mean(alone))
    out["any"] = (any(v[0] for v in out.values()), math.nan)
    return out


def _mean(values: list[bool]) -> float:
    return float(np.mean(values)) if values else math.nan


@dataclass(frozen=True)
class Rate:
    """A rate over simulated runs and its Monte Carlo standard error."""

    rate: float
    se: float
    n: int

    def cell(self) -> str:
        return "-" if self.n == 0 else f"{self.rate:.3f} ± {self.se:.3f}"


def rates(
    make: Callable[[np.random.Generator], list[CaseResult]], sims: int, seed: int
) -> dict[str, tuple[Rate, Rate]]:
    """Per kind: the share of ``sims`` runs in which a verdict fired (after the run's
    adjustment), and the mean over runs of the share of its looks below ``ALPHA`` alone (each
    test at its own level; its error from the spread of that share over the runs)."""
    fired: dict[str, list[bool]] = {kind: [] for kind in (*KINDS, "any")}
    alone: dict[str, list[float]] = {kind: [] for kind in (*KINDS, "any")}
    for i in range(sims):
        for kind, (did, share) in outcomes(make(np.random.default_rng([seed, i]))).items():
            fired[kind].append(did)
            if math.isfinite(share):
                alone[kind].append(share)
    return {kind: (_share(fired[kind]), _rate(alone[kind])) for kind in fired}


def _share(values: list[bool]) -> Rate:
    """The share of runs, with the binomial Monte Carlo error sqrt(r (1 - r) / n)."""
    n = len(values)
    r = float(np.mean(values)) if n else math.nan
    return Rate(r, math.sqrt(r * (1 - r) / n) if n else math.nan, n)


def _rate(values: list[float]) -> Rate:
    """The mean of per-run shares, with its error from their spread over the runs."""
    n = len(values)
    if n == 0:
        return Rate(math.nan, math.nan, 0)
    array = np.asarray(values, dtype=float)
    return Rate(float(array.mean()), float(array.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0, n)


# --------------------------------------------------------------------------------------------
# Claim 2's "large" at its boundary (--gap-level)
# --------------------------------------------------------------------------------------------

GAP_LAYOUTS = {
    "one above four": (1, 0, 0, 0, 0),
    "two above three": (1, 1, 0, 0, 0),
    "evenly spaced": (1.0, 0.75, 0.5, 0.25, 0.0),
}
GAP_LOW = 0.55  # the lowest method's true RM accuracy (the runs show 0.45 to 0.68)


def mean_accuracy(level: float, draws: int = 400_000, seed: int = 0) -> float:
    """The mean over users of the RM accuracy of a method at ``level`` (its accuracy at a user
    logit offset of 0): users' offsets are normal with sd ``RM_USER_SD``."""
    offsets = np.random.default_rng(seed).normal(0.0, RM_USER_SD, draws)
    return float((1.0 / (1.0 + np.exp(-(math.log(level / (1 - level)) + offsets)))).mean())


def level_for(mean: float, tolerance: float = 1e-6) -> float:
    """The level whose mean accuracy over users is ``mean`` (bisection)."""
    low, high = 0.01, 0.99
    while high - low > tolerance:
        middle = (low + high) / 2
        low, high = (middle, high) if mean_accuracy(middle) < mean else (low, middle)
    return (low + high) / 2


def gap_levels(layout: tuple[float, ...], gap: float) -> tuple[float, ...]:
    """The five methods' levels whose true mean accuracies are ``GAP_LOW + share * gap``."""
    return tuple(level_for(GAP_LOW + share * gap) for share in layout)


def large_rate(
    rm_levels: tuple[float, ...], n_users: int, sims: int, seed: int
) -> tuple[float, float]:
    """The share of simulated runs whose claim-2 entry for ARGS calls the gap large
    (``claims.gap_shown``: then ROUGE-1 decides the claim), and its Monte Carlo standard
    error."""
    scenario = Scenario("gap", {}, {}, rm_levels=rm_levels)
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(sims):
        results = simulate(n_users, scenario, rng)
        for entry in claims.spread_entries(results):
            if entry.decoder == "args" and claims.gap_shown(entry.rm):
                hits += 1
    rate = hits / sims
    return rate, math.sqrt(rate * (1 - rate) / sims)


def print_gap_level(sims: int, users: list[int], gap: float, seed: int) -> None:
    """Per layout and user count, the rate of "large" at a true gap of ``gap`` and at the
    paper's, each with its Monte Carlo standard error."""
    print(f"claim 2 'large' at a true gap of {gap:.2f} (level 0.05) and at 0.20 (power);")
    print(f"{sims} simulated runs a cell, rate +- Monte Carlo se\n")
    print(f"{'layout':<18} {'users':>5}  {'at ' + format(gap, '.2f'):>14}  {'at 0.20':>14}")
    for name, layout in GAP_LAYOUTS.items():
        boundary, paper = gap_levels(layout, gap), gap_levels(layout, claims.PAPER_GAP)
        for n in users:
            level, level_se = large_rate(boundary, n, sims, seed)
            power, power_se = large_rate(paper, n, sims, seed + 1)
            print(
                f"{name:<18} {n:>5}  {level:.3f} +- {level_se:.3f}  {power:.3f} +- {power_se:.3f}",
                flush=True,
            )


# --------------------------------------------------------------------------------------------
# Claim 1's interval at the kept runs' spacing (--tau-coverage)
# --------------------------------------------------------------------------------------------

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
        return read(plain)


def tau_groups(results: list[CaseResult]) -> dict[str, tuple[power.Figures, power.Figures]]:
    """Per decoder with ``MIN_METHODS`` reward methods or more: RM accuracy's and policy
    accuracy's per-user figures over the users both have."""
    x, y = catalogue.x_metric(), catalogue.plotted()
    out = {}
    for (suite, size, decoder), rows in crisis.reward_groups(results).items():
        kept = [r for r in rows if x in r.per_user and y in r.per_user]
        if len(kept) >= MIN_METHODS:
            tx, ty = tables(kept, x, y)
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


def tau_run(w: World, rng: np.random.Generator, n_boot: int) -> dict[str, Any]:
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


def tau_coverage(w: World, sims: int, seed: int, n_boot: int = N_BOOT) -> dict[str, Any]:
    """``sims`` simulated runs of ``w`` (run ``i`` from the seed ``[seed, i]``): each interval's
    coverage and claim 1's verdicts, as shares with their Monte Carlo standard errors."""
    runs = [tau_run(w, np.random.default_rng([seed, i]), n_boot) for i in range(sims)]

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


def print_tau_coverage(sims: int, taus: str, runs: str, seed: int) -> list[dict[str, Any]]:
    """Per kept run file matching the glob ``runs``, decoder and true tau in ``taus``: a row
    of the coverage table, printed as it is found; the rows returned."""
    table = []
    print("| run, decoder | spacing | users | true tau | 95% projection covers | old 90% "
          "percentile covers | does not hold (new / old) | holds | mean width |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for path in sorted(KEPT.glob(runs)):
        for name, (rm, policy) in tau_groups(kept_run(path).results).items():
            for tau in (float(t) for t in taus.split(",")):
                found = tau_coverage(world(name, rm, policy, tau), sims, seed)
                found["spacing"] = spacing(rm, policy)
                table.append(found)
                c, o = found["coverage"], found["old_coverage"]
                f, of, h = found["does_not_hold"], found["old_does_not_hold"], found["holds"]
                print(f"| {name} | {found['spacing']} | {found['users']} | "
                      f"{found['true_tau']:+.2f} | {c[0]:.3f} ± {c[1]:.3f} | "
                      f"{o[0]:.3f} ± {o[1]:.3f} | {f[0]:.3f} / {of[0]:.3f} | {h[0]:.3f} | "
                      f"{found['mean_width']:.2f} |", flush=True)  # fmt: skip
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, help="simulated runs per cell (default 200)")
    parser.add_argument(
        "--users",
        default="8,20,40",
        help="users per simulated run; with --run, users drawn with replacement from the run's",
    )
    parser.add_argument("--run", type=Path, help="a run file whose null to simulate")
    parser.add_argument("--seed", type=int, help="default 0 (38 with --gap-level)")
    parser.add_argument("--power-sims", type=int, help="simulated runs per effect (--sims)")
    parser.add_argument("--json", type=Path, help="also write the rates here")
    parser.add_argument(
        "--unequal",
        action="store_true",
        help="the nulls whose reward methods differ in spread (UNEQUAL), no power",
    )
    parser.add_argument(
        "--gap-level",
        action="store_true",
        help="claim 2's 'large' at a true gap of --gap (default --sims 1000)",
    )
    parser.add_argument("--gap", type=float, default=claims.MIN_GAP)
    parser.add_argument(
        "--tau-coverage",
        action="store_true",
        help="claim 1's tau interval's coverage at the kept runs' spacing (default --sims 200)",
    )
    parser.add_argument("--taus", default="0,0.2,1", help="with --tau-coverage: the true taus")
    parser.add_argument(
        "--runs",
        default="*.json.gz",
        help="with --tau-coverage: kept run files (a glob in benchmarks/findings-runs)",
    )
    args = parser.parse_args()
    args.users_given = any(a.startswith("--users") for a in sys.argv[1:])
    started = time.perf_counter()
    if args.tau_coverage:
        sims = args.sims or 200
        found = print_tau_coverage(sims, args.taus, args.runs, args.seed or 0)
        print(f"\n{sims} simulated runs per world; {time.perf_counter() - started:.0f} s")
        if args.json:
            command = "python benchmarks/calibration.py " + " ".join(sys.argv[1:])
            saved = {"command": command, "sims": sims, "worlds": found}
            args.json.write_text(json.dumps(saved, indent=1) + "\n")
        return
    if args.gap_level:
        users = [int(u) for u in args.users.split(",")]
        print_gap_level(args.sims or 1000, users, args.gap, 38 if args.seed is None else args.seed)
        print(f"\n{time.perf_counter() - started:.0f} s")
        return
    args.sims, args.seed = args.sims or 200, args.seed or 0
    power_sims = args.power_sims or args.sims
    table: dict[str, Any] = {}
    if args.run:
        results = load_results(args.run)
        for n in (int(u) for u in args.users.split(",")) if args.users_given else [0]:
            runs = lambda g, n=n: real_null(with_users(results, n, g) if n else results, g)  # noqa: E731
            null = rates(runs, args.sims, args.seed)
            title = f"null of {args.run.name}" + (f", {n} users drawn from its own" if n else "")
            table[f"{args.run.name}:{n or 'its users'}"] = {"null": null}
            print_cell(title, null, {})
    elif args.unequal:
        for n in (int(u) for u in args.users.split(",")):
            for name, scenario in UNEQUAL.items():
                null = rates(lambda g, n=n, s=scenario: simulate(n, s, g), args.sims, args.seed)
                table[f"{n}:{name}"] = {"null": null}
                print_cell(f"{n} users, null with {name}", null, {})
    else:
        for n in (int(u) for u in args.users.split(",")):
            null = rates(lambda g, n=n: simulate(n, NULL, g), args.sims, args.seed)
            power = {
                kind: rates(lambda g, n=n, s=s: simulate(n, s, g), power_sims, args.seed)[kind][0]
                for kind, s in EFFECTS.items()
            }
            table[str(n)] = {"null": null, "power": power}
            print_cell(f"{n} users", null, power)
    print(
        f"\n{args.sims} simulated runs per null, {power_sims} per effect; "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    if args.json:
        plain = json.loads(json.dumps(table, default=lambda r: [r.rate, r.se, r.n]))
        args.json.write_text(json.dumps({"sims": args.sims, "rates": plain}, indent=1) + "\n")


def print_cell(title: str, null: dict[str, tuple[Rate, Rate]], power: dict[str, Rate]) -> None:
    """One markdown table: per kind, the false-positive rate in the run (after Holm), each look
    alone at 0.05, and the power under the kind's effect."""
    print(f"\n{title}\n")
    print(
        "| verdict | false positives in a run (after Holm) | each look alone, p < 0.05 | "
        "power in a run (after Holm) |"
    )
    print("|---|---|---|---|")
    for kind in (*KINDS, "any"):
        fired, alone = null[kind]
        effect = power[kind].cell() if kind in power else "-"
        print(f"| {kind} | {fired.cell()} | {alone.cell()} | {effect} |", flush=True)


if __name__ == "__main__":
    main()
