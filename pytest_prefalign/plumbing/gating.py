"""Regression gating inside a pytest run: store a run as a baseline, compare every test with it,
fail a test whose gated metric dropped (docs/ci-gating.md; the comparison itself lives in
analysis/compare.py, the baseline files in runs/baselines.py).

Built like pytest's ``stepwise.py``: this module owns its options and one stateful plugin,
``Gating``, which the prefalign session registers only when a gating option is given. pytest
imports this module on every run, so ``gate`` (numpy, scipy) is imported inside functions only,
the option types included.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_prefalign.plumbing.collect import carry
from pytest_prefalign.plumbing.workers import is_worker

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.analysis.compare import Comparison, Threshold
    from pytest_prefalign.runs.records import CaseResult, Key, RunFile

PROPERTY = "prefalign_comparison"  # the report attribute that carries a test's comparison
MARKER = "prefalign_tolerance"
DEFAULT_ALPHA = 0.05


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------


def check_baseline_name(text: str) -> str:
    """``--prefalign-save`` type: a baseline name that cannot climb out of its folder."""
    from pytest_prefalign.runs import baselines

    return baselines.check_name(text)


def parse_thresholds(text: str) -> list[Threshold]:
    """``--prefalign-compare-fail`` type: ``policy_acc:2pp[,rouge1:1pp...]``."""
    from pytest_prefalign.analysis import compare

    return compare.parse_thresholds(text)


def parse_alpha(text: str) -> float:
    """``--prefalign-compare-alpha`` type: a significance level strictly between 0 and 1."""
    from pytest_prefalign.analysis import compare

    return compare.parse_alpha(text)


def addoption(parser: pytest.Parser) -> None:
    """The gating options, in the ``prefalign`` group."""
    group = parser.getgroup("prefalign")
    group.addoption(
        "--prefalign-save",
        type=check_baseline_name,
        default=None,
        metavar="NAME",
        help="after the run, store it as the baseline .prefalign/baselines/NAME.json "
        "under the rootdir (replaces one of that name).",
    )
    group.addoption(
        "--prefalign-compare",
        nargs="?",
        const="",
        default=None,
        metavar="NAME|PATH",
        help="compare each test with a baseline: a saved NAME, a run file PATH, or "
        "without a value the latest saved baseline (write --prefalign-compare= "
        "before test paths).",
    )
    group.addoption(
        "--prefalign-compare-fail",
        type=parse_thresholds,
        action="append",
        default=[],
        metavar="EXPR",
        help="fail a test whose metric dropped by more than N percentage points, "
        "significantly: METRIC:Npp[,METRIC:Npp], e.g. policy_acc:2pp "
        "(ini: prefalign_compare_fail).",
    )
    group.addoption(
        "--prefalign-compare-alpha",
        type=parse_alpha,
        default=DEFAULT_ALPHA,
        metavar="A",
        help=f"significance level of the paired tests (default: {DEFAULT_ALPHA}).",
    )
    group.addoption(
        "--prefalign-allow-partial",
        action="store_true",
        default=False,
        help="compare with a baseline from an incomplete run (interrupted, or with tests "
        "deselected, not run or without a result), which is refused otherwise.",
    )
    parser.addini(
        "prefalign_compare_fail",
        "regression gates METRIC:Npp, comma-separated, used with --prefalign-compare",
    )


def active(config: pytest.Config) -> bool:
    """Whether any gating option was given (``Gating`` then checks that they fit together)."""
    return (
        config.getoption("prefalign_save") is not None
        or config.getoption("prefalign_compare") is not None
        or bool(config.getoption("prefalign_compare_fail"))
    )


# --------------------------------------------------------------------------------------------
# The plugin
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """A loaded baseline: its display name, its file, and one single-result run per test key
    (so that each test compares only its own records)."""

    name: str
    path: Path
    runs: dict[Key, RunFile]


class Gating:
    """Saves and compares baselines; registered as ``prefalign-gating`` on every process (under
    pytest-xdist the workers compare and the controller summarises and saves)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.save_name: str | None = config.getoption("prefalign_save")
        self.alpha: float = config.getoption("prefalign_compare_alpha")
        compare: str | None = config.getoption("prefalign_compare")
        cli_gates = [t for group in config.getoption("prefalign_compare_fail") for t in group]
        if cli_gates and compare is None:
            raise pytest.UsageError(
                "--prefalign-compare-fail needs --prefalign-compare [NAME|PATH]: "
                "there is no baseline to gate on"
            )
        self.thresholds = _checked_gates(cli_gates) if cli_gates else _ini_gates(config)
        self.baseline = None if compare is None else _load(config, compare)
        self.outcomes: list[dict[str, Any]] = []  # controller: one per compared test
        self.saved: Path | None = None

    # -- on the process that runs the test ----------------------------------------------------

    def pytest_prefalign_check(self, item: pytest.Item, result: CaseResult) -> list[str] | None:
        """Compare the test's result with the baseline; its regressions fail the test."""
        if self.baseline is None:
            return None
        outcome = compare_result(self.baseline, item, result, self.thresholds, self.alpha)
        carry(item, PROPERTY, outcome)  # plain data: it travels to the controller
        return outcome["problems"] or None

    # -- on the controller --------------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or is_worker(self.config):
            return
        value = getattr(report, PROPERTY, None)
        if isinstance(value, dict):
            self.outcomes.append(value)

    def pytest_prefalign_run_written(self, path: str, run: RunFile, config: pytest.Config) -> None:
        """Store the run, records included, as the named baseline."""
        if self.save_name is None or is_worker(config):
            return
        from pytest_prefalign.runs import baselines

        self.saved = baselines.save(run, self.save_name, Path(config.rootpath))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if is_worker(self.config):
            return
        if self.baseline is not None:
            summarise(terminalreporter, self.baseline, self.outcomes, self.thresholds, self.alpha)
        if self.save_name is None:
            return
        if self.saved is not None:
            terminalreporter.write_line(f"baseline {self.save_name!r} saved: {self.saved}")
        else:
            terminalreporter.write_line(
                f"baseline {self.save_name!r} not saved: no test produced a result", yellow=True
            )


def _checked_gates(thresholds: list[Threshold]) -> list[Threshold]:
    """Gates from repeated options: each metric at most once, as within one expression."""
    metrics = [t.metric for t in thresholds]
    twice = sorted({m for m in metrics if metrics.count(m) > 1})
    if twice:
        raise pytest.UsageError(
            f"--prefalign-compare-fail: {', '.join(twice)} is given two thresholds"
        )
    return thresholds


def _ini_gates(config: pytest.Config) -> list[Threshold]:
    raw = config.getini("prefalign_compare_fail")
    if not raw or config.getoption("prefalign_compare") is None:
        return []
    try:
        return parse_thresholds(str(raw))
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini value prefalign_compare_fail: {exc}") from None


def _load(config: pytest.Config, value: str) -> Baseline:
    """The baseline named by ``--prefalign-compare``; a missing or unreadable one is a usage
    error that says where it looked."""
    from pytest_prefalign.runs import baselines, records

    root = Path(config.rootpath)
    # paths are relative to where pytest was invoked, also on an xdist worker
    if value and baselines.is_path(value):
        value = str(Path(config.invocation_params.dir, Path(value).expanduser()))
    try:
        path = baselines.path_of(value or None, root)
        run = records.read(path)
    except (baselines.BaselineNotFound, ValueError) as exc:
        raise pytest.UsageError(f"--prefalign-compare: {exc}") from None
    if not run.complete and not config.getoption("prefalign_allow_partial"):
        from pytest_prefalign.plumbing.outcomes import describe

        raise pytest.UsageError(
            f"--prefalign-compare: the baseline {path} is a partial run "
            f"({describe(run.outcomes)}); compare with a complete run, or pass "
            "--prefalign-allow-partial to compare with it anyway"
        )
    return Baseline(baselines.display_name(path, root), path, run.by_case())


def _key_text(key: Key | list[str]) -> str:
    return f"{key[1]} on {key[0]} ({key[2]})"


# --------------------------------------------------------------------------------------------
# One test against the baseline
# --------------------------------------------------------------------------------------------


def compare_result(
    baseline: Baseline,
    item: pytest.Item,
    result: CaseResult,
    thresholds: list[Threshold],
    alpha: float,
) -> dict[str, Any]:
    """A test's outcome as plain data: ``key``, ``status`` (``compared``, ``new`` or
    ``error``), ``comparisons`` (``Comparison.as_dict()``) and ``problems`` (messages that fail
    the test: regressions, or why the comparison could not be made)."""
    from pytest_prefalign.analysis import compare
    from pytest_prefalign.runs.records import RunFile

    key = result.key
    outcome: dict[str, Any] = {
        "key": list(key),
        "status": "compared",
        "comparisons": [],
        "problems": [],
    }
    old = baseline.runs.get(key)
    if old is None:  # a new test is not a regression; the summary lists it
        return {**outcome, "status": "new"}
    try:
        overrides = {key: marker_thresholds(item)}
        comparisons = compare.compare_runs(
            old, RunFile([result]), thresholds, alpha=alpha, overrides=overrides
        )
    except (argparse.ArgumentTypeError, ValueError) as exc:  # RunMismatch is a ValueError
        problem = f"cannot compare with baseline {baseline.name!r}: {exc}"
        return {**outcome, "status": "error", "problems": [problem]}
    outcome["comparisons"] = [c.as_dict() for c in comparisons]
    outcome["problems"] = [
        f"regression against baseline {baseline.name!r}: {c.message()}"
        for c in comparisons
        if c.regressed
    ]
    return outcome


def marker_thresholds(item: pytest.Item) -> list[Threshold]:
    """The test's ``prefalign_tolerance(policy_acc="3pp", ...)`` gates (closest marker wins);
    a malformed marker raises ``argparse.ArgumentTypeError`` with the accepted form."""
    from pytest_prefalign.analysis import compare

    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return []
    if marker.args or not marker.kwargs:
        raise argparse.ArgumentTypeError(
            f"marker {MARKER} takes keyword arguments METRIC='Npp', e.g. "
            f"{MARKER}(policy_acc='3pp'); got {marker.args!r} {marker.kwargs!r}"
        )
    try:
        return [
            compare.parse_threshold(f"{metric}:{value}") for metric, value in marker.kwargs.items()
        ]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"marker {MARKER}: {exc}") from None


# --------------------------------------------------------------------------------------------
# The summary
# --------------------------------------------------------------------------------------------


def summarise(
    tr: pytest.TerminalReporter,
    baseline: Baseline,
    outcomes: list[dict[str, Any]],
    thresholds: list[Threshold],
    alpha: float,
) -> None:
    """Every comparison in one table (regressions in red), then what could not be compared,
    the tests new to the baseline and the baseline's tests this run did not compare."""
    from pytest_prefalign.analysis.compare import Comparison

    tr.write_sep("=", f"prefalign comparison with baseline {baseline.name}")
    outcomes = sorted(outcomes, key=lambda o: o["key"])
    comparisons = [Comparison.from_dict(c) for o in outcomes for c in o["comparisons"]]
    if comparisons:
        _write_table(tr, comparisons)
    else:
        tr.write_line("no test was compared with the baseline")
    regressed = sum(c.regressed for c in comparisons)
    gates = ", ".join(map(str, thresholds)) or "none (display only)"
    tr.write_line(
        f"{regressed} regression(s); gates: {gates} (per test: {MARKER} markers); "
        f"alpha {alpha:g}; baseline file: {baseline.path}",
        red=bool(regressed),
    )
    for outcome in outcomes:
        if outcome["status"] == "error":
            tr.write_line(f"not compared, failed: {'; '.join(outcome['problems'])}", red=True)
    seen = {tuple(o["key"]) for o in outcomes}
    new = [_key_text(o["key"]) for o in outcomes if o["status"] == "new"]
    missing = [_key_text(key) for key in sorted(baseline.runs.keys() - seen)]
    if new:
        tr.write_line(f"new, not in the baseline: {', '.join(new)}", yellow=True)
    if missing:
        tr.write_line(f"in the baseline, not compared in this run: {', '.join(missing)}")


def _write_table(tr: pytest.TerminalReporter, comparisons: list[Comparison]) -> None:
    from pytest_prefalign.analysis.table import comparison_table

    lines = comparison_table(comparisons).splitlines()
    for line in lines[:2]:  # header and rule
        tr.write_line(line)
    for line, comparison in zip(lines[2:], comparisons, strict=True):
        tr.write_line(line, red=comparison.regressed, bold=comparison.regressed)
