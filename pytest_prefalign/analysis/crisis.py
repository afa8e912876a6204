"""The selection-crisis analysis of a run (docs/report.md): does RM accuracy order the reward
methods of one decoder the way policy accuracy and ROUGE-1 do, which pairs of methods it orders
the wrong way, and where a method is judged by its own reward model.

Every figure that compares methods carries an interval with users resampled (``users``), and
every statement fires only when its interval excludes the null: a tau is a finding only when its
exact permutation p-value is below ALPHA and its interval excludes 0, an inversion only when
both of its differences are significant, a circular-evaluation flag only when the own-RM win
rate is above 1/2 and the ROUGE-1 loss to base below 0, both by their intervals. Where the data
cannot say (saturated or tied RM accuracies, too few methods or users, an interval wider than
1), the entry says "not enough evidence" and why, instead of a number that looks like a finding.
Groups never mix decoders, so no reward method is counted twice.

Pure computation on the results of a run, done once when it ends (``analyse``); the run file
stores what it finds, the summary and the report print it. The per-user spread and the selection
regret are in ``spread`` and ``selection``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, TypeGuard

import numpy as np

from pytest_prefalign.analysis import selection, spread, stats, users
from pytest_prefalign.analysis.metrics import FIGURE_DIGITS
from pytest_prefalign.runs.records import CaseResult

X_METRIC = "rm_acc"
Y_METRICS = ("policy_acc", "rouge1")
ALPHA = 0.05
MIN_METHODS = 5  # below this no tau can reach p < 0.05 (2 / n! > 0.05)
MIN_USERS = 5  # below this the users-resampled interval means little
SATURATED = 0.98  # RM accuracies all at or above this leave nothing to rank
MAX_WIDTH = 1.0  # a tau interval wider than this is no evidence either way
MAX_LISTED = 10  # inversions printed per section before "... and N more"

Row = dict[str, Any]  # an entry of the analysis, as the run file stores it


def analyse(results: Iterable[CaseResult]) -> tuple[list[Row], dict[str, Any]]:
    """``(tau, crisis)`` as the run file stores them: the tau entries; and the inversions,
    circular-evaluation entries, per-user spread flags, selection regret and the comparison of
    in-context learning with the best reward-guided row."""
    results = list(results)
    return tau_entries(results), {
        "inversions": inversion_entries(results),
        "circular": circular_entries(results),
        "spread": spread.flags(results),
        "regret": selection.regret_entries(reward_groups(results)),
        "icl_vs_rgd": selection.icl_entries(results),
    }


def reward_groups(results: Iterable[CaseResult]) -> dict[tuple[str, str, str], list[CaseResult]]:
    """Rows of reward-guided methods with an RM accuracy, by (suite, size, decoder). A method
    listed twice keeps its last row; decoders are never pooled (a reward method run under two
    decoders would count twice, and decoder effects would pass for reward effects)."""
    by_method: dict[tuple[str, str, str], CaseResult] = {}
    for row in results:
        if row.reward and _finite(row.metrics.get(X_METRIC)):
            by_method[(row.suite, row.size, row.method)] = row
    groups: dict[tuple[str, str, str], list[CaseResult]] = defaultdict(list)
    for (suite, size, _), row in sorted(by_method.items()):
        groups[(suite, size, row.decoder)].append(row)
    return dict(sorted(groups.items()))


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and math.isfinite(value)


def _with_both(rows: list[CaseResult], y: str) -> list[CaseResult]:
    return [r for r in rows if _finite(r.metrics.get(y))]


# --------------------------------------------------------------------------------------------
# Kendall's tau-b between RM accuracy and policy accuracy / ROUGE-1
# --------------------------------------------------------------------------------------------


def tau_entries(results: Iterable[CaseResult], *, n_boot: int = users.N_BOOT) -> list[Row]:
    """Kendall's tau-b of RM accuracy against policy accuracy and against ROUGE-1, across the
    reward methods of each (suite, size, decoder), with its exact permutation p-value, an
    interval with users resampled, and a ``verdict``: a finding, no evidence of association,
    or not enough evidence (with the reasons). A y that no method of the group has (ROUGE-1 on
    a suite without generation items) gives no entry."""
    entries = []
    for (suite, size, decoder), rows in reward_groups(results).items():
        for y in Y_METRICS:
            kept = _with_both(rows, y)
            if kept:
                entries.append(_tau_entry(suite, size, decoder, y, kept, n_boot))
    return entries


def _tau_entry(
    suite: str, size: str, decoder: str, y: str, rows: list[CaseResult], n_boot: int
) -> Row:
    xs = [r.metrics[X_METRIC] for r in rows]
    tau = stats.kendall(xs, [r.metrics[y] for r in rows])
    ci, n_users = _tau_interval(rows, y, n_boot) if math.isfinite(tau.tau) else (None, 0)
    reasons = _thin_evidence(tau, xs, ci, n_users)
    if reasons:
        verdict = "not enough evidence: " + "; ".join(reasons)
    elif tau.p_value < ALPHA and ci is not None and (ci[0] > 0 or ci[1] < 0):
        direction = "the same way" if tau.tau > 0 else "the opposite way"
        verdict = f"finding: RM accuracy orders the methods {direction} as {y}"
    else:
        verdict = "no evidence of association"
    return {
        "suite": suite,
        "size": size,
        "decoder": decoder,
        "x": X_METRIC,
        "y": y,
        "tau": _or_none(tau.tau),
        "p_value": _or_none(tau.p_value),
        "p_method": "exact permutation" if tau.exact else "permutation (sampled)",
        "ci": ci,
        "n_methods": tau.n,
        "n_users": n_users,
        "methods": [r.method for r in rows],
        "verdict": verdict,
        "enough": not reasons,
    }


def _thin_evidence(
    tau: stats.Tau, xs: list[float], ci: list[float] | None, n_users: int
) -> list[str]:
    """Why this tau cannot be read as evidence, if it cannot."""
    reasons = [tau.reason] if tau.reason else []
    if tau.n < MIN_METHODS and tau.n >= 3:
        reasons.append(
            f"{tau.n} methods: p >= {2 / math.factorial(tau.n):.2g} even for a perfect ranking"
        )
    if xs and min(xs) >= SATURATED:
        reasons.append(f"RM accuracy saturated (all >= {SATURATED:g})")
    elif len(set(xs)) < min(3, len(xs)):
        reasons.append("RM accuracy ties across the methods")
    if math.isfinite(tau.tau) and n_users < MIN_USERS:
        reasons.append(f"{n_users} users")
    if ci is not None and ci[1] - ci[0] > MAX_WIDTH:
        reasons.append(f"the interval over users spans {ci[1] - ci[0]:.2f}")
    return reasons


def _tau_interval(rows: list[CaseResult], y: str, n_boot: int) -> tuple[list[float] | None, int]:
    """The percentile interval of tau-b with users resampled (one draw shared by every method
    and both figures, over the users both figures have), and the number of those users."""
    tx, ty = users.tables(rows, X_METRIC, y)
    if not tx.users:
        return None, 0
    taus = [
        stats.tau_b_rows(tx.resampled(c), ty.resampled(c))
        for c in users.resamples(len(tx.users), n_boot)
    ]
    return users.interval(np.concatenate(taus)), len(tx.users)


def _or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


# --------------------------------------------------------------------------------------------
# Ranking inversions
# --------------------------------------------------------------------------------------------


def inversion_entries(results: Iterable[CaseResult]) -> list[Row]:
    """Pairs of reward methods of one decoder that RM accuracy orders one way and policy
    accuracy (or ROUGE-1) the other way, with both differences and their intervals over the
    shared users. ``significant``: both intervals exclude 0; only those are inversions the
    summary states. Clearest first."""
    entries = []
    for (suite, size, decoder), rows in reward_groups(results).items():
        for y in Y_METRICS:
            kept = _with_both(rows, y)
            for inv in stats.inversions(
                [r.method for r in kept],
                [r.metrics[X_METRIC] for r in kept],
                [r.metrics[y] for r in kept],
            ):
                a = next(r for r in kept if r.method == inv.a)
                b = next(r for r in kept if r.method == inv.b)
                dx, x_ci, _ = users.difference(a, b, X_METRIC)
                dy, y_ci, n = users.difference(b, a, y)
                significant = bool(x_ci and y_ci and x_ci[0] > 0 and y_ci[0] > 0)
                entries.append(
                    {
                        "suite": suite,
                        "size": size,
                        "decoder": decoder,
                        "x": X_METRIC,
                        "y": y,
                        "a": inv.a,
                        "b": inv.b,
                        "x_a": inv.x_a,
                        "x_b": inv.x_b,
                        "y_a": inv.y_a,
                        "y_b": inv.y_b,
                        "x_diff_ci": x_ci,
                        "y_diff_ci": y_ci,
                        "n_users": n,
                        "significant": significant,
                    }
                )
    return sorted(
        entries,
        key=lambda e: (
            e["suite"],
            e["size"],
            e["decoder"],
            e["y"],
            not e["significant"],
            -disagreement(e),
        ),
    )


def disagreement(entry: Row) -> float:
    """How clear an inversion is: the smaller of the two gaps."""
    return min(entry["x_a"] - entry["x_b"], entry["y_b"] - entry["y_a"])


# --------------------------------------------------------------------------------------------
# Circular evaluation
# --------------------------------------------------------------------------------------------


def _gap_interval(row: CaseResult, n_boot: int = users.N_BOOT) -> list[float] | None:
    """The interval of ``win_self - win_independent`` with the row's users resampled (one draw
    for both judges)."""
    ts, ti = users.tables([row], "win_self", "win_independent")
    if not ts.users:
        return None
    draws = [
        ts.resampled(c)[:, 0] - ti.resampled(c)[:, 0]
        for c in users.resamples(len(ts.users), n_boot)
    ]
    return users.interval(np.concatenate(draws))


def circular_entries(results: Iterable[CaseResult]) -> list[Row]:
    """Methods with a self-judged win rate over ``base``, next to the independent judge's.

    ``gap`` = self - independent. ``rouge1_vs_base``: the method's ROUGE-1 minus base's on the
    same (suite, size), with its interval over the shared users. ``flag``: the paper's example
    of circular evaluation, stated only when the own-RM win rate's interval is above 1/2 and
    the ROUGE-1 difference's interval is below 0.
    """
    results = list(results)
    base = {(r.suite, r.size): r for r in results if r.decoder == "base" and not r.reward}
    entries = []
    for row in results:
        win_self = row.metrics.get("win_self")
        if not _finite(win_self):
            continue
        indep = row.metrics.get("win_independent")
        indep = float(indep) if _finite(indep) else None
        base_row = base.get((row.suite, row.size))
        diff, diff_ci = None, None
        if base_row is not None and "rouge1" in row.per_user and "rouge1" in base_row.per_user:
            d, diff_ci, _ = users.difference(row, base_row, "rouge1")
            diff = d if math.isfinite(d) else None
        self_ci = row.ci.get("win_self")
        entries.append(
            {
                "suite": row.suite,
                "size": row.size,
                "method": row.method,
                "win_self": float(win_self),
                "win_self_ci": self_ci,
                "win_independent": indep,
                "win_independent_ci": row.ci.get("win_independent"),
                "gap": round(float(win_self) - indep, FIGURE_DIGITS) if indep is not None else None,
                "gap_ci": _gap_interval(row) if indep is not None else None,
                "n": row.judge.get("n", row.n_items),
                "judge_independent": row.judge.get("independent"),
                "reason": row.judge.get("reason"),
                "rouge1_vs_base": diff,
                "rouge1_vs_base_ci": diff_ci,
                "flag": bool(self_ci and self_ci[0] > 0.5 and diff_ci and diff_ci[1] < 0),
            }
        )
    return entries
