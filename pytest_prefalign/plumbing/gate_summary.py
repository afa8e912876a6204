"""The terminal summary of a comparison with a baseline (plumbing/gating.py), printed once, by
the controller, from the outcomes the tests carried to it: rendering only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import pytest

    from pytest_prefalign.analysis.compare import CaseOutcome, Comparison, Threshold


class Compared(Protocol):
    """What the summary reads of the gating plugin (``gating.Gating``)."""

    outcomes: list[CaseOutcome]  # one per test that produced a result
    thresholds: list[Threshold]
    alpha: float
    allow: frozenset[str]
    power: str  # warn or fail
    run_notes: list[str]
    run_problems: list[str]


def summarise(
    tr: pytest.TerminalReporter, gating: Compared, name: str, path: Path, marker: str
) -> None:
    """Every comparison with baseline ``name`` (file ``path``) in one table (regressions in
    red), then the gates (per test: ``marker`` markers), what could not be compared, what was
    allowed or is new, the underpowered gates, and what fails the run as a whole."""
    tr.write_sep("=", f"prefalign comparison with baseline {name}")
    outcomes = sorted(gating.outcomes, key=lambda o: o.key)
    comparisons = [c for o in outcomes for c in o.comparisons]
    if comparisons:
        _write_table(tr, comparisons)
    else:
        tr.write_line("no test was compared with the baseline")
    regressed = sum(c.regressed for c in comparisons)
    gates = ", ".join(map(str, gating.thresholds)) or "none (display only)"
    allowed = f"; allowed: {','.join(sorted(gating.allow))}" if gating.allow else ""
    tr.write_line(
        f"{regressed} regression(s); gates: {gates} (per test: {marker} markers); "
        f"alpha {gating.alpha:g}{allowed}; baseline file: {path}",
        red=bool(regressed),
    )
    for outcome in outcomes:
        if outcome.status == "error":
            tr.write_line(f"not compared, failed: {'; '.join(outcome.problems)}", red=True)
        for note in outcome.notes:
            tr.write_line(note, yellow=True)
        for message in outcome.underpowered:
            tr.write_line(message, yellow=gating.power == "warn", red=gating.power == "fail")
    for note in gating.run_notes:
        tr.write_line(note, yellow=True)
    for problem in gating.run_problems:
        tr.write_line(f"FAILED the comparison: {problem}", red=True)


def _write_table(tr: pytest.TerminalReporter, comparisons: list[Comparison]) -> None:
    from pytest_prefalign.analysis.table import comparison_table

    lines = comparison_table(comparisons).splitlines()
    for line in lines[:2]:  # header and rule
        tr.write_line(line)
    for line, comparison in zip(lines[2:], comparisons, strict=True):
        tr.write_line(line, red=comparison.regressed, bold=comparison.regressed)
