"""The selection-crisis analysis of a run (docs/report.md): does RM accuracy order the reward
methods of one decoder the way policy accuracy and ROUGE-1 do, which pairs of methods it orders
the wrong way, and where a method is judged by its own reward model.

Every statement is a test with a stated null (docs/metrics.md#verdicts): tau's exact
permutation test over the methods; an inversion's two sign-flip tests over users, both needed
(intersection-union); the circular flag's sign-flip tests of the own-RM win against 1/2 and of
the ROUGE-1 loss to base, both needed. The selection regret (``regret``), the comparison of
in-context learning with the best guided row (``selection``), the per-user spread
(``spread``) and the degenerate rows (``degenerate``: a one-sided sign-flip test of the
not-an-answer share against base's) bring their own. All the looks of a run are one family,
adjusted by Holm (``family``): a statement fires only when its adjusted p-value is below
``ALPHA``. The intervals (users resampled) describe; they do not decide. Where the data cannot
say (saturated or tied RM accuracies, too few methods or users), the entry says "not enough
evidence" and why, and makes no look. Groups never mix decoders, so no reward method is
counted twice; nor strengths: the tests of the strength sweep (``--prefalign-guidance sweep``)
are grouped per decoder and strength (``reward_groups``), and stay out of the looks across
every method of a (suite, size) (``working_points``).

Pure computation on the results of a run, done once when it ends (``analyse``); the run file
stores what it finds, the summary and the report print it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pytest_prefalign.analysis import (
    catalogue,
    circular,
    degenerate,
    family,
    nulls,
    projection,
    regret,
    selection,
    spread,
    stats,
    users,
)
from pytest_prefalign.analysis.metrics import finite
from pytest_prefalign.runs.entries import Crisis, InversionEntry, TauEntry
from pytest_prefalign.runs.records import CaseResult

ALPHA = 0.05
MIN_METHODS = 5  # below this no tau can reach p < 0.05 (2 / n! > 0.05)
MIN_USERS = 5  # below this the users-resampled interval means little
SATURATED = 0.98  # RM accuracies all at or above this leave nothing to rank
MAX_LISTED = 10  # inversions printed per section before "... and N more"


def analyse(results: Iterable[CaseResult]) -> tuple[tuple[TauEntry, ...], Crisis]:
    """``(tau, crisis)`` as the run file stores them: the tau entries; and the inversions,
    circular-evaluation entries, per-user spread flags, selection regret, the comparison of
    in-context learning with the best reward-guided row, the degenerate rows, and the
    ``family`` of all their looks (Holm), each entry's ``p_holm``, ``fires`` and verdict set
    from it."""
    results = list(results)
    working = working_points(results)
    tau = tau_entries(results)
    inversions = inversion_entries(results)
    spread_found = spread.flags(working)
    found = Crisis(
        inversions=tuple(inversions),
        circular=tuple(circular.entries(results)),
        spread=tuple(spread_found),
        regret=tuple(regret.entries(reward_groups(results))),
        icl_vs_rgd=tuple(selection.icl_entries(working)),
        degenerate=tuple(degenerate.entries(results)),
        silent_looks={
            "inversions": inversion_looks(results) - sum(e.p_value is not None for e in inversions),
            "spread": spread.silent_looks(working, spread_found),
        },
    )
    adjusted_tau, adjusted = family.adjust(tau, found, alpha=ALPHA)
    return _state_verdicts(adjusted_tau, adjusted)


def _state_verdicts(tau: Sequence[TauEntry], found: Crisis) -> tuple[tuple[TauEntry, ...], Crisis]:
    """Each entry's verdict from its adjusted p-value: new records, the others as they are."""
    tau = tuple(replace(e, verdict=_tau_verdict(e, e.p_holm)) if e.enough else e for e in tau)
    return tau, replace(
        found,
        icl_vs_rgd=tuple(
            replace(e, verdict=selection.icl_verdict(e, e.p_holm)) for e in found.icl_vs_rgd
        ),
        degenerate=tuple(degenerate.state(e) for e in found.degenerate),
    )


def reward_groups(results: Iterable[CaseResult]) -> dict[tuple[str, str, str], list[CaseResult]]:
    """Rows of reward-guided methods with an RM accuracy, by (suite, size, panel): the panel
    is the decoder, and for the tests of the strength sweep the decoder at one strength
    (``CaseResult.panel``: ``args@w=0.25``), so that every entry grouped here (tau, the
    inversions, the regret, the claims) comes per strength, its ``decoder`` the panel. A
    method listed twice keeps its last row; decoders are never pooled (a reward method run
    under two decoders would count twice, and decoder effects would pass for reward effects),
    nor strengths (a strength's effect would pass for the reward's)."""
    x = catalogue.x_metric()
    by_method: dict[tuple[str, str, str], CaseResult] = {}
    for row in results:
        if row.reward and finite(row.metrics.get(x)):
            by_method[(row.suite, row.size, row.method)] = row
    groups: dict[tuple[str, str, str], list[CaseResult]] = defaultdict(list)
    for (suite, size, _), row in sorted(by_method.items()):
        groups[(suite, size, row.panel)].append(row)
    return dict(sorted(groups.items()))


def working_points(results: Iterable[CaseResult]) -> list[CaseResult]:
    """The rows that are not tests of the strength sweep: what the looks across all the
    methods of a (suite, size) compare (in-context learning against the best reward-guided
    row, the per-user spread), so that each method counts once, at its working point."""
    return [r for r in results if r.sweep is None]


def _with_both(rows: list[CaseResult], y: str) -> list[CaseResult]:
    return [r for r in rows if finite(r.metrics.get(y))]


# --------------------------------------------------------------------------------------------
# Kendall's tau-b between RM accuracy and policy accuracy / ROUGE-1
# --------------------------------------------------------------------------------------------


def tau_entries(results: Iterable[CaseResult], *, n_boot: int = users.N_BOOT) -> list[TauEntry]:
    """Kendall's tau-b of RM accuracy against policy accuracy and against ROUGE-1, across the
    reward methods of each (suite, size, decoder), with its exact permutation p-value, an
    interval with users resampled, and a ``verdict``: a finding, no evidence of association,
    or not enough evidence (with the reasons). A y that no method of the group has (ROUGE-1 on
    a suite without generation items) gives no entry."""
    entries = []
    for (suite, size, decoder), rows in reward_groups(results).items():
        for y in catalogue.y_metrics():
            kept = _with_both(rows, y)
            if kept:
                entries.append(_tau_entry(suite, size, decoder, y, kept, n_boot))
    return entries


def _tau_entry(
    suite: str, size: str, decoder: str, y: str, rows: list[CaseResult], n_boot: int
) -> TauEntry:
    x = catalogue.x_metric()
    xs = [users.figure(r, x) for r in rows]
    tau = stats.kendall(xs, [users.figure(r, y) for r in rows])
    found = TauInterval(None, None, 0, None)
    if math.isfinite(tau.tau):
        found = tau_interval(rows, y, n_boot)
    reasons = _thin_evidence(tau, xs, found.n_users)
    entry = TauEntry(
        suite=suite,
        size=size,
        decoder=decoder,
        x=x,
        y=y,
        tau=_or_none(tau.tau),
        p_value=_or_none(tau.p_value),
        p_method=_p_method(tau),
        test="permutation of the methods' y against their RM accuracy",
        ci=found.ci,
        upper_95=found.upper,
        lower_95=found.lower,
        n_methods=tau.n,
        n_users=found.n_users,
        methods=tuple(r.method for r in rows),
        enough=not reasons,
        interval=projection.METHOD,
        resolved_pairs=found.resolved,
    )
    # the verdict of this look alone; ``analyse`` states it again at the run's adjusted p
    verdict = "not enough evidence: " + "; ".join(reasons) if reasons else _tau_verdict(entry)
    return replace(entry, verdict=verdict)


def _p_method(tau: stats.Tau) -> str:
    """How tau's p-value was found: every permutation of the methods, or a sample of them with
    its Monte Carlo standard error."""
    if tau.exact:
        return "exact permutation"
    return (
        f"permutation ({stats.PERMUTATIONS:,} sampled of {tau.n}! orderings; Monte Carlo "
        f"standard error {tau.mc_se:.2g})"
    )


def _tau_verdict(entry: TauEntry, p_value: float | None = None) -> str:
    """A finding when the p-value (the entry's own unless given) is below ``ALPHA``."""
    p_value = entry.p_value if p_value is None else p_value
    if p_value is not None and p_value < ALPHA and entry.tau is not None:
        direction = "the same way" if entry.tau > 0 else "the opposite way"
        return f"finding: RM accuracy orders the methods {direction} as {entry.y}"
    return "no evidence of association"


def _thin_evidence(tau: stats.Tau, xs: list[float], n_users: int) -> list[str]:
    """Why this tau cannot be read as evidence, if it cannot: reasons that depend on the
    design and on RM accuracy only, never on the figure tau is tested against (leaving a look
    out for what it showed would shrink the family after seeing the data)."""
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
    return reasons


@dataclass(frozen=True)
class TauInterval:
    """Tau's 95% projection interval (``projection``): its bounds (None where there is
    none), the users both figures have, and the pairs of methods both figures' simultaneous
    intervals order."""

    lower: float | None
    upper: float | None
    n_users: int
    resolved: int | None

    @property
    def ci(self) -> list[float] | None:
        if self.lower is None or self.upper is None:
            return None
        return [self.lower, self.upper]


def tau_interval(rows: list[CaseResult], y: str, n_boot: int = users.N_BOOT) -> TauInterval:
    """Tau's projection interval over the users both figures have, one draw of users shared by
    every method and both figures (the analysis's seed, so that an older run file's entry can
    be given it again, the same)."""
    tx, ty = users.tables(rows, catalogue.x_metric(), y)
    n = len(tx.users)
    if n < 2:
        return TauInterval(None, None, n, None)
    counts = list(users.resamples(n, n_boot))
    x_boot = np.concatenate([tx.resampled(c) for c in counts])
    y_boot = np.concatenate([ty.resampled(c) for c in counts])
    lower, upper, resolved = projection.tau_interval(tx.means(), ty.means(), x_boot, y_boot, n)
    if not (math.isfinite(lower) and math.isfinite(upper)):
        return TauInterval(None, None, n, resolved)
    return TauInterval(lower, upper, n, resolved)


def _or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


# --------------------------------------------------------------------------------------------
# Ranking inversions
# --------------------------------------------------------------------------------------------


def inversion_entries(results: Iterable[CaseResult]) -> list[InversionEntry]:
    """Pairs of reward methods of one decoder that RM accuracy orders one way and policy
    accuracy (or ROUGE-1) the other way, with both differences, their intervals over the
    shared users and the intersection-union p-value of the two sign-flip tests (each
    two-sided; an inversion needs both). ``fires`` (set by ``analyse``): that p-value,
    adjusted with the run's other looks, below ``ALPHA``. Clearest first."""
    x = catalogue.x_metric()
    entries = []
    for (suite, size, decoder), rows in reward_groups(results).items():
        for y in catalogue.y_metrics():
            kept = _with_both(rows, y)
            for inv in stats.inversions(
                [r.method for r in kept],
                [users.figure(r, x) for r in kept],
                [users.figure(r, y) for r in kept],
            ):
                a = next(r for r in kept if r.method == inv.a)
                b = next(r for r in kept if r.method == inv.b)
                entries.append(
                    InversionEntry(
                        suite=suite,
                        size=size,
                        decoder=decoder,
                        x=x,
                        y=y,
                        a=inv.a,
                        b=inv.b,
                        x_a=inv.x_a,
                        x_b=inv.x_b,
                        y_a=inv.y_a,
                        y_b=inv.y_b,
                        **_inversion_test(a, b, y),
                    )
                )
    return sorted(
        entries,
        key=lambda e: (
            e.suite,
            e.size,
            e.decoder,
            e.y,
            e.p_value is None,
            e.p_value if e.p_value is not None else 1.0,
            -disagreement(e),
        ),
    )


def _inversion_test(a: CaseResult, b: CaseResult, y: str) -> dict[str, Any]:
    """``a`` above ``b`` by RM accuracy and below by ``y``: both differences with their
    intervals (descriptions), and the larger of the two sign-flip p-values (None below
    ``stats.sign_test_floor`` shared users, where no sign-flip test can be significant)."""
    x = catalogue.x_metric()
    _, x_ci, _ = users.difference(a, b, x)
    _, y_ci, n = users.difference(b, a, y)
    p_x, p_y = users.sign_flip(a, b, x), users.sign_flip(b, a, y)
    return {
        "x_diff_ci": x_ci,
        "y_diff_ci": y_ci,
        "n_users": n,
        "test": "intersection-union of two sign-flip tests over users",
        "p_x": p_x,
        "p_y": p_y,
        "p_value": nulls.intersection_union(p_x, p_y),
    }


def inversion_looks(results: Iterable[CaseResult]) -> int:
    """The inversion tests a run makes: every pair of reward methods of a group, per y, with
    enough shared users for a test; the pairs that are not inverted are looks that could not
    fire (p = 1 in the family)."""
    x, floor = catalogue.x_metric(), stats.sign_test_floor(ALPHA)
    looks = 0
    for rows in reward_groups(results).values():
        for y in catalogue.y_metrics():
            kept = _with_both(rows, y)
            looks += sum(
                len(users.paired_differences(a, b, y)[0]) >= floor
                and len(users.paired_differences(a, b, x)[0]) >= floor
                for i, a in enumerate(kept)
                for b in kept[i + 1 :]
            )
    return looks


def disagreement(entry: InversionEntry) -> float:
    """How clear an inversion is: the smaller of the two gaps."""
    return min(entry.x_a - entry.x_b, entry.y_b - entry.y_a)
