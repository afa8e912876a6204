"""Circular evaluation (docs/report.md): a method judged by the reward model that guided it.

For every row with a self-judged win rate over ``base``: the win rate under its own RM (circular:
the decoder optimised that very score) beside the independent judge's, the gap between them, and
the method's ROUGE-1 against base's. The flag is the paper's example of circular evaluation, two
statements at once: the own RM prefers the method's outputs to base's (the sign-flip test over
users of wins minus losses, the judge indifferent under the null) and the method's ROUGE-1 is
below base's (the sign-flip test over the shared users); its p-value is the larger of the two
(intersection-union), and it fires when that p-value, adjusted with the run's other looks
(``family``), is below the level.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from pytest_prefalign.analysis import catalogue, nulls, stats, users
from pytest_prefalign.analysis.metrics import FIGURE_DIGITS, finite
from pytest_prefalign.runs.entries import CircularEntry
from pytest_prefalign.runs.records import CaseResult

ALPHA = 0.05


def _gap_interval(row: CaseResult, n_boot: int = users.N_BOOT) -> list[float] | None:
    """The interval of ``win_self - win_independent`` with the row's users resampled (one draw
    for both judges)."""
    ts, ti = users.tables([row], catalogue.own_judge(), catalogue.independent_judge())
    if not ts.users:
        return None
    draws = [
        ts.resampled(c)[:, 0] - ti.resampled(c)[:, 0]
        for c in users.resamples(len(ts.users), n_boot)
    ]
    return users.interval(np.concatenate(draws))


def entries(results: Iterable[CaseResult]) -> list[CircularEntry]:
    """Methods with a self-judged win rate over ``base``, next to the independent judge's.

    ``gap`` = self - independent. ``rouge1_vs_base``: the method's ROUGE-1 minus base's on the
    same (suite, size), with its interval over the shared users. ``flag``: the paper's example
    of circular evaluation, stated only when the own-RM win rate's interval is above 1/2 and
    the ROUGE-1 difference's interval is below 0.
    """
    results = list(results)
    own = catalogue.own_judge()
    independent = catalogue.independent_judge()
    text = catalogue.text_metric()
    base = {(r.suite, r.size): r for r in results if r.decoder == "base" and not r.reward}
    entries = []
    for row in results:
        win_self = row.metrics.get(own)
        if not finite(win_self):
            continue
        indep = row.metrics.get(independent)
        indep = float(indep) if finite(indep) else None
        base_row = base.get((row.suite, row.size))
        diff, diff_ci = None, None
        if base_row is not None and text in row.per_user and text in base_row.per_user:
            d, diff_ci, _ = users.difference(row, base_row, text)
            diff = d if math.isfinite(d) else None
        self_ci = row.ci.get(own)
        test = _circular_test(row, base_row, diff)
        entries.append(
            CircularEntry(
                suite=row.suite,
                size=row.size,
                method=row.method,
                win_self=float(win_self),
                win_self_ci=self_ci,
                win_independent=indep,
                win_independent_ci=row.ci.get(independent),
                gap=round(float(win_self) - indep, FIGURE_DIGITS) if indep is not None else None,
                gap_ci=_gap_interval(row) if indep is not None else None,
                n=row.judge.n if row.judge and row.judge.n is not None else row.n_items,
                judge_independent=row.judge.independent if row.judge else None,
                reason=row.judge.reason if row.judge else None,
                rouge1_vs_base=diff,
                rouge1_vs_base_ci=diff_ci,
                **test,
            )
        )
    return entries


def _circular_test(
    row: CaseResult, base: CaseResult | None, rouge_diff: float | None
) -> dict[str, Any]:
    """The paper's circular evaluation needs two things at once: the method's own RM prefers
    its outputs to base's (each user's wins minus losses, a sign-flip test over users of the
    win share against 1/2) and its ROUGE-1 is below base's (a sign-flip test over the users
    both have). The p-value is the larger of the two (intersection-union); ``holds``: both
    observed in the flag's direction."""
    shares = _own_rm_shares(row)
    p_win = _win_sign_flip(shares)
    p_rouge = (
        users.sign_flip(row, base, catalogue.text_metric())
        if base is not None and rouge_diff is not None
        else None
    )
    return {
        "test": "intersection-union of two sign-flip tests over users",
        "p_win": p_win,
        "p_rouge": p_rouge,
        "p_value": nulls.intersection_union(p_win, p_rouge),
        "holds": bool(_prefers_method(shares) and rouge_diff is not None and rouge_diff < 0),
    }


def _win_sign_flip(shares: dict[str, tuple[float, float]]) -> float | None:
    """Two-sided sign-flip p-value over users of the own RM's preference: under the null the
    judge is indifferent between the method's output and base's, so each user's wins minus
    losses (per item, ties 0) is as likely negative as positive (users weigh by their items).
    ``shares``: ``_own_rm_shares``."""
    if len(shares) < stats.sign_test_floor(ALPHA):
        return None
    d = [share - 0.5 for share, _ in shares.values()]
    w = [n for _, n in shares.values()]
    return stats.sign_flip(d, w)[0]


def _own_rm_shares(row: CaseResult) -> dict[str, tuple[float, float]]:
    """Each user's mean own-RM outcome (win 1, tie 1/2, loss 0) and number of items, from the
    items' ``win_self_outcome``; a row without item records (an older run file) gives its
    per-user win shares, which then counted a tie 1/2."""
    outcomes: dict[str, list[float]] = defaultdict(list)
    for item in row.items:
        outcome = item.value("win_self_outcome")
        if outcome is not None:
            outcomes[item.user].append(float(outcome))
    if outcomes:
        return {u: (float(np.mean(v)), float(len(v))) for u, v in sorted(outcomes.items())}
    t = users.table([row], catalogue.own_judge())
    return {
        u: (float(v), float(w)) for u, v, w in zip(t.users, t.values[0], t.weights[0], strict=True)
    }


def _prefers_method(shares: dict[str, tuple[float, float]]) -> bool:
    """The own RM's wins outnumber its losses over the items (``shares``: ``_own_rm_shares``)."""
    total = sum(n for _, n in shares.values())
    return bool(total) and sum((s - 0.5) * n for s, n in shares.values()) > 0
