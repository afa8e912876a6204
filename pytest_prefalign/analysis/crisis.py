"""The selection-crisis analysis of a run (docs/report.md): does RM accuracy order the reward
methods the way policy accuracy and ROUGE-1 do, which pairs of methods it orders the wrong way,
where a method is judged by its own reward model, and what the per-user view shows that a mean
hides.

Pure computation on the results of a run, done once when it ends (``analyse``); the run file
stores what it finds, and the summary and the report print it (``table``, ``report``). The
rules (how many methods a tau needs, when the decoders are pooled, when a spread is flagged)
are documented in ``docs/report.md``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, TypeGuard

import numpy as np

from pytest_prefalign.analysis import stats
from pytest_prefalign.runs.records import CaseResult

X_METRIC = "rm_acc"
Y_METRICS = ("policy_acc", "rouge1")
POOLED = "*"  # the decoder label of entries pooled over every decoder of a (suite, size)
N_BOOT = 1000  # bootstrap resamples of users for the tau interval
ALPHA = 0.05  # the significance level the few-methods warning refers to

# Per-user spread (see ``spread``): the tail is the worst TAIL_SHARE of users, at least one.
SPREAD_METRICS = ("policy_acc", "rm_acc", "rouge1")
TAIL_SHARE = 0.10
MIN_USERS = 5  # below this the "worst decile" is one user of very few: not flagged
CLOSE = 0.02  # means within 2 points count as close
APART = 0.10  # tails 10 points apart count as different

MAX_LISTED = 10  # inversions and spread notes printed per section before "... and N more"

Row = dict[str, Any]  # an entry of the analysis, as the run file stores it


# --------------------------------------------------------------------------------------------
# Grouping
# --------------------------------------------------------------------------------------------


def reward_groups(results: Iterable[CaseResult]) -> dict[tuple[str, str, str], list[CaseResult]]:
    """Rows of reward-guided methods with an RM accuracy, by (suite, size, decoder).

    A (suite, size) whose reward methods run under more than one decoder also gets a pooled
    group ``(suite, size, "*")``. A method listed twice keeps its last row.
    """
    by_method: dict[tuple[str, str, str], CaseResult] = {}
    for row in results:
        if row.reward and _finite(row.metrics.get(X_METRIC)):
            by_method[(row.suite, row.size, row.method)] = row
    groups: dict[tuple[str, str, str], list[CaseResult]] = defaultdict(list)
    pooled: dict[tuple[str, str], list[CaseResult]] = defaultdict(list)
    for (suite, size, _), row in sorted(by_method.items()):
        groups[(suite, size, row.decoder)].append(row)
        pooled[(suite, size)].append(row)
    for (suite, size), rows in pooled.items():
        if len({r.decoder for r in rows}) > 1:
            groups[(suite, size, POOLED)] = rows
    return dict(sorted(groups.items(), key=lambda kv: _group_order(kv[0])))


def _group_order(key: tuple[str, str, str]) -> tuple[str, str, bool, str]:
    suite, size, decoder = key
    return (suite, size, decoder == POOLED, decoder)


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _with_both(rows: list[CaseResult], y: str) -> list[CaseResult]:
    return [r for r in rows if _finite(r.metrics.get(y))]


# --------------------------------------------------------------------------------------------
# Kendall's tau-b between RM accuracy and policy accuracy / ROUGE-1
# --------------------------------------------------------------------------------------------


def tau_entries(results: Iterable[CaseResult], *, n_boot: int = N_BOOT, seed: int = 0) -> list[Row]:
    """Kendall's tau-b of RM accuracy against policy accuracy and against ROUGE-1, across the
    reward methods of each (suite, size, decoder) and pooled over decoders (``decoder="*"``).

    The interval resamples users (one draw shared by all methods). ``warning`` says why a tau is
    missing or cannot be significant (see ``few_methods_warning``). A y that no method of the
    group has (ROUGE-1 on a suite without generation items) gives no entry.
    """
    entries = []
    for (suite, size, decoder), rows in reward_groups(results).items():
        for y in Y_METRICS:
            kept = _with_both(rows, y)
            if kept:
                entries.append(_tau_entry(suite, size, decoder, y, kept, n_boot, seed))
    return entries


def _tau_entry(
    suite: str, size: str, decoder: str, y: str, rows: list[CaseResult], n_boot: int, seed: int
) -> Row:
    tau = stats.kendall([r.metrics[X_METRIC] for r in rows], [r.metrics[y] for r in rows])
    ci = _tau_interval(rows, y, n_boot, seed) if math.isfinite(tau.tau) else None
    # an undefined tau says why; a defined one may still be unable to reach significance
    warnings = [tau.reason] if tau.reason else [few_methods_warning(tau.n)]
    if decoder == POOLED:
        warnings.append("pooled over decoders")
    return {
        "suite": suite,
        "size": size,
        "decoder": decoder,
        "x": X_METRIC,
        "y": y,
        "tau": _or_none(tau.tau),
        "p_value": _or_none(tau.p_value),
        "ci": ci,
        "n_methods": tau.n,
        "methods": [r.method for r in rows],
        "warning": "; ".join(w for w in warnings if w) or None,
    }


def _tau_interval(rows: list[CaseResult], y: str, n_boot: int, seed: int) -> list[float] | None:
    per_x = [r.per_user.get(X_METRIC) or {} for r in rows]
    per_y = [r.per_user.get(y) or {} for r in rows]
    if any(not p for p in (*per_x, *per_y)):
        return None
    lo, hi = stats.kendall_bootstrap(per_x, per_y, n_boot=n_boot, seed=seed)
    return [lo, hi] if math.isfinite(lo) and math.isfinite(hi) else None


def few_methods_warning(n: int) -> str | None:
    """A warning when ``n`` methods are too few for tau to reach significance at all.

    With n methods and no ties, the smallest two-sided exact p-value (a perfect ranking) is
    ``2 / n!``: 0.33 for 3 methods, 0.083 for 4, 0.017 for 5. So below 5 methods no tau can be
    significant at 5%, whatever the data; the tau is still shown, with this warning.
    """
    smallest_p = 2.0 / math.factorial(n) if n >= 1 else 1.0
    if smallest_p <= ALPHA:
        return None
    return f"{n} methods: p >= {smallest_p:.2g} even for a perfect ranking"


def _or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


# --------------------------------------------------------------------------------------------
# Ranking inversions
# --------------------------------------------------------------------------------------------


def inversion_entries(results: Iterable[CaseResult]) -> list[Row]:
    """Pairs of reward methods that RM accuracy orders one way and policy accuracy (or ROUGE-1)
    strictly the other way, with both figures of both methods.

    Within one decoder, and pooled: the pooled group lists only pairs of *different* decoders
    (a same-decoder pair is already listed under its decoder). Largest disagreement first.
    """
    entries = []
    for (suite, size, decoder), rows in reward_groups(results).items():
        for y in Y_METRICS:
            kept = _with_both(rows, y)
            dec = {r.method: r.decoder for r in kept}
            found = stats.inversions(
                [r.method for r in kept],
                [r.metrics[X_METRIC] for r in kept],
                [r.metrics[y] for r in kept],
            )
            for inv in found:
                if decoder == POOLED and dec[inv.a] == dec[inv.b]:
                    continue
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
                    }
                )
    return sorted(
        entries,
        key=lambda e: (
            *_group_order((e["suite"], e["size"], e["decoder"])),
            e["y"],
            -disagreement(e),
        ),
    )


def disagreement(entry: Row) -> float:
    """How clear an inversion is: the smaller of the two gaps."""
    return min(entry["x_a"] - entry["x_b"], entry["y_b"] - entry["y_a"])


# --------------------------------------------------------------------------------------------
# Circular evaluation
# --------------------------------------------------------------------------------------------


def circular_entries(results: Iterable[CaseResult]) -> list[Row]:
    """Methods with a self-judged win rate over ``base``, next to the independent judge's.

    ``gap`` = self - independent (positive: the method's own RM likes its outputs more than an
    outside judge does). ``rouge1_vs_base``: the method's ROUGE-1 minus base's on the same
    (suite, size), where both exist: a high self win rate with a ROUGE-1 below base is the
    paper's example of circular evaluation.
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
        judge = row.judge
        base_row = base.get((row.suite, row.size))
        base_r1 = base_row.metrics.get("rouge1") if base_row is not None else None
        r1 = row.metrics.get("rouge1")
        entries.append(
            {
                "suite": row.suite,
                "size": row.size,
                "method": row.method,
                "win_self": float(win_self),
                "win_independent": indep,
                "gap": float(win_self) - indep if indep is not None else None,
                "n": judge.get("n", row.n_items),
                "judge_independent": judge.get("independent"),
                "reason": judge.get("reason"),
                "rouge1_vs_base": r1 - base_r1 if _finite(r1) and _finite(base_r1) else None,
            }
        )
    return entries


# --------------------------------------------------------------------------------------------
# Per-user spread
# --------------------------------------------------------------------------------------------


def tail_mean(values: Sequence[float], share: float = TAIL_SHARE) -> tuple[float, int]:
    """Mean of the lowest ``share`` of the values (at least one value), and how many that is."""
    ordered = np.sort(np.asarray(values, dtype=float))
    if len(ordered) == 0:
        raise ValueError("tail_mean of no values")
    k = max(1, math.ceil(share * len(ordered)))
    return float(ordered[:k].mean()), k


def spread(results: Iterable[CaseResult]) -> dict[str, list[Row]]:
    """The per-user view: each method's mean over users and the mean of its worst decile of
    users, per (suite, size, metric), and flags where the tail tells what the mean hides.

    ``rows``: ``{suite, size, metric, method, n_users, user_mean, tail_mean, tail_users}``.
    ``flags`` (only for methods with at least ``MIN_USERS`` users):

    - ``close_means``: two methods whose user means are within ``CLOSE`` of each other but whose
      worst deciles are at least ``APART`` apart (same average, very different worst users);
    - ``mean_only_gain``: a method above ``base`` on the user mean but at least ``APART`` below
      base on the worst decile (helps on average, hurts the worst-served users).
    """
    rows = _spread_rows(results)
    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for row in rows:
        if row["n_users"] >= MIN_USERS:
            groups[(row["suite"], row["size"], row["metric"])].append(row)
    flags = []
    for group in groups.values():
        flags += _close_means_flags(group) + _mean_only_gain_flags(group)
    return {"rows": rows, "flags": flags}


def _spread_rows(results: Iterable[CaseResult]) -> list[Row]:
    rows = []
    for res in results:
        for metric in SPREAD_METRICS:
            per_user = res.per_user.get(metric)
            if not per_user:
                continue
            values = [float(v) for v in per_user.values()]
            tail, k = tail_mean(values)
            rows.append(
                {
                    "suite": res.suite,
                    "size": res.size,
                    "metric": metric,
                    "method": res.method,
                    "base": res.decoder == "base" and not res.reward,
                    "n_users": len(values),
                    "user_mean": float(np.mean(values)),
                    "tail_mean": tail,
                    "tail_users": k,
                }
            )
    return rows


def _flag(kind: str, a: Row, b: Row, text: str) -> Row:
    return {
        "suite": a["suite"],
        "size": a["size"],
        "metric": a["metric"],
        "kind": kind,
        "a": a["method"],
        "b": b["method"],
        "mean_a": a["user_mean"],
        "mean_b": b["user_mean"],
        "tail_a": a["tail_mean"],
        "tail_b": b["tail_mean"],
        "tail_users_a": a["tail_users"],
        "n_users_a": a["n_users"],
        "tail_users_b": b["tail_users"],
        "n_users_b": b["n_users"],
        "text": text,
    }


def _close_means_flags(group: list[Row]) -> list[Row]:
    flags = []
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            if (
                abs(a["user_mean"] - b["user_mean"]) <= CLOSE
                and abs(a["tail_mean"] - b["tail_mean"]) >= APART
            ):
                lo, hi = (a, b) if a["tail_mean"] < b["tail_mean"] else (b, a)
                text = (
                    f"{lo['metric']}: {lo['method']} and {hi['method']} have close user means "
                    f"({lo['user_mean']:.3f} vs {hi['user_mean']:.3f}) but different worst "
                    f"deciles ({lo['tail_mean']:.3f} vs {hi['tail_mean']:.3f}; "
                    f"{_tail_words(lo)})"
                )
                flags.append(_flag("close_means", lo, hi, text))
    return flags


def _mean_only_gain_flags(group: list[Row]) -> list[Row]:
    base = next((r for r in group if r["base"]), None)
    if base is None:
        return []
    flags = []
    for row in group:
        if (
            row is not base
            and row["user_mean"] > base["user_mean"]
            and row["tail_mean"] <= base["tail_mean"] - APART
        ):
            text = (
                f"{row['metric']}: {row['method']} beats base on the user mean "
                f"({row['user_mean']:.3f} vs {base['user_mean']:.3f}) but its worst decile is "
                f"lower ({row['tail_mean']:.3f} vs {base['tail_mean']:.3f}; "
                f"{_tail_words(row)}): it helps on average and hurts the worst-served users"
            )
            flags.append(_flag("mean_only_gain", row, base, text))
    return flags


def _tail_words(row: Row) -> str:
    return f"worst {row['tail_users']} of {row['n_users']} users"


# --------------------------------------------------------------------------------------------
# The whole analysis, once per run
# --------------------------------------------------------------------------------------------


def analyse(results: Iterable[CaseResult]) -> tuple[list[Row], dict[str, list[Row]]]:
    """``(tau, crisis)`` as the run file stores them: the tau entries, and the inversions,
    circular-evaluation entries and per-user spread flags."""
    results = list(results)
    return tau_entries(results), {
        "inversions": inversion_entries(results),
        "circular": circular_entries(results),
        "spread": spread(results)["flags"],
    }
