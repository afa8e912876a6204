"""The run's part of pytest's terminal summary: the plugins that failed to load, the leaderboard
and the analysis fitted to the terminal's width, what the cache held, where the run file and the
report went, and what could not be written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_prefalign import cache
from pytest_prefalign.plumbing import progress
from pytest_prefalign.plumbing.outcomes import describe

if TYPE_CHECKING:  # pragma: no cover
    import pytest

    from pytest_prefalign.plumbing.run_file import Written
    from pytest_prefalign.registry import Registry
    from pytest_prefalign.runs.records import CaseResult, RunFile


def write(
    tr: pytest.TerminalReporter,
    registry: Registry,
    notes: list[str],
    run: RunFile | None,
    written: Written,
    disk: cache.Disk,
    *,
    use_cache: bool,
) -> None:
    """The summary's lines, through the reporter's public writers (``write_line``,
    ``write_sep``); the leaderboard only where the run has results. The claims' power curves
    are read from ``disk`` where the same rows had them (``analysis/memo.py``)."""
    from pytest_prefalign.analysis import claims, memo, summary, table, wrap

    for failure in registry.failures:
        tr.write_line(f"prefalign: could not load {failure}", yellow=True)
    for note in notes:
        tr.write_line(f"prefalign: {note}", yellow=True)
    if run is None or not run.results:
        return
    tr.write_sep("=", "prefalign leaderboard")
    # the width the tables fit: the terminal's, where pytest's reporter writes to one
    width = wrap.terminal_width(progress.on_a_terminal(tr))
    for line in table.leaderboards(run.results, width):
        tr.write_line(line)
    for line in summary.summary_lines(run, width):
        tr.write_line(line)
    verdicts = claims.run_claims(run)
    curves = memo.summary_curves(run, disk) if verdicts else {}
    for line in summary.fit_prose(summary.claim_lines(verdicts, curves), width):
        tr.write_line(line)
    tr.write_line(cache_line(run.results, use_cache))
    if written.run_path is not None:
        tr.write_line(f"run file: {written.run_path}")
    if not run.complete:
        tr.write_line(
            f"this run is partial ({describe(run.outcomes)}): its run file says so "
            "(complete: false), and --prefalign-compare refuses it as a baseline",
            yellow=True,
        )
    if written.report_path is not None:
        tr.write_line(f"report: {written.report_path}")
    for error in written.errors:
        tr.write_line(f"prefalign: {error}", red=True)


def cache_line(results: list[CaseResult], use_cache: bool) -> str:
    """How many of the distinct cached values the tests used came from the cache."""
    used = {(u.artifact, u.key): u.hit for r in results for u in r.cache}
    reused = sum(used.values())
    if not use_cache:
        return f"cache: off (--prefalign-no-cache), {len(used) - reused} values computed" + (
            ", the converted model reused" if reused else ""
        )
    return (
        f"cache: {reused} of {len(used)} values reused, {len(used) - reused} computed "
        "(each keyed by its model, data, options, seed and code; --prefalign-no-cache "
        "computes everything)"
    )
