"""What became of each test of a run, for its run file: which passed, failed, errored, were
skipped, deselected or never ran (an interrupted run), and so whether the run is complete.

A plugin of the controller, registered by the session. Under pytest-xdist the workers collect
and deselect: each hands its deselected tests to the controller through ``workeroutput``.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_prefalign.plumbing.collect import RESULT, CaseItem
from pytest_prefalign.plumbing.workers import is_worker
from pytest_prefalign.runs.header import RunOutcomes, ShardTests

DESELECTED = "prefalign_deselected"  # the workeroutput key of a worker's deselected tests


def is_case(nodeid: str) -> bool:
    """An evaluation test: collected from a ``suite.toml`` (under xdist, ids are all there is)."""
    return nodeid.partition("::")[0].endswith("suite.toml")


class Outcomes:
    """Each prefalign test's outcome, as reported; ``summary()`` is the run file's part."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.selected: list[str] = []
        self.deselected: set[str] = set()
        self.status: dict[str, str] = {}  # nodeid -> passed, failed, error, skipped
        self.with_result: set[str] = set()
        self.interrupted: str | None = None
        # with --prefalign-shard: (K/N, the tests other shards run); those are not deselected
        self.shard: tuple[str, set[str]] | None = None

    # -- collection ---------------------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.selected = [item.nodeid for item in session.items if isinstance(item, CaseItem)]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.selected = [nodeid for nodeid in ids if is_case(nodeid)]

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        others = self.shard[1] if self.shard else set()
        ids = [item.nodeid for item in items if isinstance(item, CaseItem)]
        self.deselected.update(i for i in ids if i not in others)
        if is_worker(self.config):
            self.config.workeroutput[DESELECTED] = sorted(self.deselected)  # type: ignore[attr-defined]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.deselected.update(getattr(node, "workeroutput", {}).get(DESELECTED, []))

    # -- running ------------------------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if is_worker(self.config) or not is_case(report.nodeid):
            return
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        elif report.skipped:
            outcome = "skipped"
        elif report.when == "call":
            outcome = "passed"
        else:
            return
        if self.status.get(report.nodeid) not in ("failed", "error"):  # a teardown does not undo
            self.status[report.nodeid] = outcome
        if isinstance(getattr(report, RESULT, None), dict):
            self.with_result.add(report.nodeid)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.interrupted = excinfo.typename

    def stopped(self, session: pytest.Session) -> None:
        """Note why the session stopped early, if it did (``-x``, ``--maxfail``, a plugin)."""
        reason = session.shouldfail or session.shouldstop
        if reason and self.interrupted is None:
            self.interrupted = str(reason)

    # -- the run file's part ------------------------------------------------------------------

    def summary(self) -> tuple[bool, RunOutcomes]:
        """``(complete, outcomes)``: complete when the run was not interrupted, nothing was
        deselected (other than the tests of other shards), and every selected test ran and
        left a result (a test failed by a floor or a gate keeps its result; one that errored,
        was skipped or failed in its method has none)."""
        by = {k: sorted(n for n, s in self.status.items() if s == k) for k in _KINDS}
        not_run = [n for n in self.selected if n not in self.status]
        no_result = [n for n in self.selected if n in self.status and n not in self.with_result]
        reasons = []
        if self.interrupted:
            reasons.append(f"interrupted ({self.interrupted})")
        for what, ids in (("not run", not_run), ("deselected", sorted(self.deselected))):
            if ids:
                reasons.append(f"{len(ids)} test(s) {what}")
        if no_result:
            reasons.append(f"{len(no_result)} test(s) without a result ({_kinds(no_result, by)})")
        tests: dict[str, Any] = {kind: tuple(ids) for kind, ids in by.items()}  # of _KINDS
        shard = ShardTests(self.shard[0], tuple(sorted(self.shard[1]))) if self.shard else None
        outcomes = RunOutcomes(
            selected=len(self.selected),
            **tests,
            deselected=tuple(sorted(self.deselected)),
            not_run=tuple(not_run),
            without_result=tuple(no_result),
            interrupted=self.interrupted,
            incomplete=tuple(reasons),
            shard=shard,
        )
        return not reasons, outcomes


_KINDS = ("passed", "failed", "error", "skipped")


def _kinds(ids: list[str], by: dict[str, list[str]]) -> str:
    counts = {kind: sum(n in by[kind] for n in ids) for kind in _KINDS}
    return ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)


def describe(outcomes: RunOutcomes | None) -> str:
    """One line: why a run is incomplete."""
    reasons = outcomes.incomplete if outcomes is not None else ()
    return "; ".join(reasons or ["no record of its tests' outcomes"])
