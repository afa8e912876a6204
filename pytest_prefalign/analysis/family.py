"""The verdicts of one run are one family of tests, controlled by Holm's step-down procedure.

A run makes many looks: two tau findings and two selection regrets per decoder, an inversion test
per pair of reward methods and figure, the comparison of each ICL row with the best
reward-guided one, a circular-evaluation test per guided method, the per-user spread tests,
the test of each generating row's not-an-answer share against base's (``degenerate``). Each
look has its own p-value (``crisis``, ``regret``, ``selection``, ``spread``); at 5% each, thirty
looks at nothing would state something in most runs. Holm's procedure (Holm 1979) adjusts them
together so that the chance of stating anything false in the whole run is at most ``ALPHA``,
under any dependence between the looks (which share users and methods here).

The weighted form of the same procedure (Holm 1979, section 4) is used, so that a kind of
verdict with many looks (the per-user spread compares every pair of methods on three figures)
does not drown the kinds with few (tau, the regret): ``ALPHA`` is shared equally among the
kinds of verdict that made looks in the run, and within a kind equally among its looks. The
adjusted p-value of the look ranked i-th by ``p / w`` is ``max_{j <= i} min(1, p_(j) *
W_j / w_(j))``, ``W_j`` the weight of the looks ranked j-th or later; with equal weights this
is plain Holm. A verdict fires when its adjusted p-value is below ``ALPHA``.

A look that was made but whose statement cannot hold (a pair of methods that RM accuracy and the
other figure order the same way, a spread flag whose effect size is not reached) counts as a
look with p = 1: leaving it out would make the family smaller after seeing the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

import numpy as np

from pytest_prefalign.runs.entries import Crisis, Family, Look, TauEntry

ALPHA = 0.05
METHOD = "weighted Holm"

# the crisis sections whose entries are verdicts (their p-value is ``p_value``), in the order
# the kinds are adjusted
SECTIONS = ("regret", "inversions", "icl_vs_rgd", "circular", "spread", "degenerate")

L = TypeVar("L", bound=Look)


def holm(p_values: Sequence[float], weights: Sequence[float] | None = None) -> np.ndarray:
    """Holm's adjusted p-values, in the order given. Without weights, for the i-th smallest of
    m: ``max_{j <= i} min(1, (m - j + 1) p_(j))``. With positive weights, the looks are ranked
    by ``p / w`` and ``(m - j + 1)`` becomes ``W_j / w_(j)``, ``W_j`` the summed weight of the
    looks ranked j-th or later (the weighted Holm procedure)."""
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"p-values must be a 1-D list in [0, 1], got {p_values!r}")
    w = np.ones_like(p) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != p.shape or not np.all(w > 0):
        raise ValueError(f"weights must be positive, one per p-value, got {weights!r}")
    m = len(p)
    if m == 0:
        return p
    order = np.lexsort((np.arange(m), p / w))
    remaining = np.cumsum(w[order][::-1])[::-1]  # W_j: the weight ranked j-th or later
    scaled = np.minimum(1.0, p[order] * remaining / w[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


def looks(tau: Sequence[TauEntry], crisis: Crisis) -> dict[str, list[Look]]:
    """Every entry of the run's analysis that is a look (it has a p-value; a tau entry also
    enough evidence to read it), by kind."""
    found: dict[str, list[Look]] = {"tau": [e for e in tau if e.is_look]}
    for section in SECTIONS:
        found[section] = [e for e in crisis.section(section) if e.is_look]
    return found


def adjust(
    tau: Sequence[TauEntry], crisis: Crisis, *, alpha: float = ALPHA
) -> tuple[tuple[TauEntry, ...], Crisis]:
    """Adjust every look of the run together: new records of every entry with ``p_holm`` and
    ``fires`` (its adjusted p below ``alpha`` and its statement's conditions met, ``holds``;
    an entry that is no look: None and false). ``crisis.silent_looks`` gives, per kind, the
    looks made that could not fire (p = 1). The crisis returned carries the ``family``: the
    method, the level, the looks per kind and in all, and how many fired."""
    by_kind = looks(tau, crisis)
    silent = crisis.silent_looks
    counts = {k: len(v) + int(silent.get(k, 0)) for k, v in by_kind.items()}
    counts = {k: n for k, n in counts.items() if n}
    entries: list[Look | None] = []  # None: a silent look
    p_values: list[float] = []
    weights: list[float] = []
    for kind, n in counts.items():
        share = 1.0 / (len(counts) * n)  # alpha shared by the kinds, then by their looks
        entries += [*by_kind[kind], *([None] * int(silent.get(kind, 0)))]
        p_values += [float(e.p_value or 0.0) for e in by_kind[kind]]  # looks have a p-value
        p_values += [1.0] * int(silent.get(kind, 0))
        weights += [share] * n
    adjusted = holm(p_values, weights) if p_values else np.zeros(0)
    p_holm = {id(e): float(p) for e, p in zip(entries, adjusted, strict=True) if e is not None}

    def stated(entry: L) -> L:
        p = p_holm.get(id(entry))
        return replace(entry, p_holm=p, fires=bool(p is not None and p < alpha and entry.holds))

    found = Family(
        method=METHOD,
        alpha=alpha,
        looks=sum(counts.values()),
        by_kind=counts,
        fired=sum(p_holm[id(e)] < alpha and e.holds for e in entries if e is not None),
    )
    return tuple(map(stated, tau)), replace(
        crisis,
        regret=tuple(map(stated, crisis.regret)),
        inversions=tuple(map(stated, crisis.inversions)),
        icl_vs_rgd=tuple(map(stated, crisis.icl_vs_rgd)),
        circular=tuple(map(stated, crisis.circular)),
        spread=tuple(map(stated, crisis.spread)),
        degenerate=tuple(map(stated, crisis.degenerate)),
        family=found,
    )


def describe(family: Family | None) -> str:
    """One line for the summary: how many looks, how they were controlled, how many fired."""
    if family is None:
        return ""
    kinds = ", ".join(f"{k} {n}" for k, n in family.by_kind.items())
    return (
        f"{family.looks} look(s) at this run ({kinds}), one family: a verdict fires when "
        f"its {family.method}-adjusted p-value (p_holm; {family.alpha:g} shared equally "
        f"by the kinds, then by their looks) is below {family.alpha:g}, so the chance of "
        f"any false statement in the run is at most {family.alpha:g}; "
        f"{family.fired} fired."
    )
