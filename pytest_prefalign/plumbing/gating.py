"""Regression gating inside a pytest run: store a run as a baseline, compare every test with it,
fail a test whose gated metric dropped or that cannot be compared, warn (or fail) when a gate
cannot detect a drop as large as its tolerance, and fail the run when nothing was compared or,
with gates, a baseline test was not (docs/ci-gating.md). The judgement is compare.judge, as in
``prefalign compare``; baselines: runs/baselines.py, the summary: plumbing/gate_summary.py.

Built like pytest's ``stepwise.py``: this module owns its options and one stateful plugin,
``Gating``, which the prefalign session registers only when a gating option is given. pytest
imports this module on every run, so the analysis (numpy, scipy) is imported inside functions
only, the option types included.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from pytest_prefalign.errors import PrefalignWarning
from pytest_prefalign.plumbing.collect import carry
from pytest_prefalign.plumbing.workers import is_worker

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.analysis.compare import CaseOutcome, Threshold
    from pytest_prefalign.runs.records import CaseResult, Key, RunFile

T = TypeVar("T")
PROPERTY = "prefalign_comparison"  # the report attribute that carries a test's comparison
MARKER = "prefalign_tolerance"
DEFAULT_ALPHA = 0.05
POWER = ("warn", "fail")  # what an underpowered gate does


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


def parse_allow(text: str) -> frozenset[str]:
    """``--prefalign-compare-allow`` type: ``data,model,environment,missing``."""
    from pytest_prefalign.analysis import comparable

    return comparable.parse_allow(text)


def parse_power(text: str) -> str:
    """``--prefalign-compare-power`` type: ``warn`` or ``fail``."""
    if text not in POWER:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {' or '.join(POWER)}")
    return text


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
        "--prefalign-compare-allow",
        type=parse_allow,
        default=None,
        metavar="KINDS",
        help="compare even though the runs differ in these, stating it: data (same ids, "
        "other contents), model, environment, settings (policy reduction, seed), missing "
        "(baseline tests not in this run); comma-separated (ini: prefalign_compare_allow).",
    )
    group.addoption(
        "--prefalign-compare-power",
        type=parse_power,
        default=None,
        metavar="warn|fail",
        help="a gate that cannot detect a drop as large as its tolerance with this run's "
        "pairs: a warning (default) or a failed test (ini: prefalign_compare_power).",
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
    parser.addini("prefalign_compare_allow", "differences a comparison allows, comma-separated")
    parser.addini("prefalign_compare_power", "an underpowered gate: warn or fail")


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
        self.allow: frozenset[str] = _ini_or_option(
            config, "prefalign_compare_allow", parse_allow, frozenset()
        )
        self.power: str = _ini_or_option(config, "prefalign_compare_power", parse_power, "warn")
        self.baseline = None if compare is None else _load(config, compare)
        self.outcomes: list[CaseOutcome] = []  # controller: one per compared test
        self.run_problems: list[str] = []  # controller: what fails the run as a whole
        self.run_notes: list[str] = []
        self.saved: Path | None = None

    # -- on the process that runs the test ----------------------------------------------------

    def pytest_prefalign_check(self, item: pytest.Item, result: CaseResult) -> list[str] | None:
        """Compare the test's result with the baseline; its regressions fail the test."""
        if self.baseline is None:
            return None
        outcome = compare_result(
            self.baseline, item, result, self.thresholds, self.alpha, self.allow
        )
        carry(item, PROPERTY, outcome.as_dict())  # plain data: it travels to the controller
        if self.power == "fail":
            return [*outcome.problems, *outcome.underpowered] or None
        for message in outcome.underpowered:  # in the warnings summary, under the test's id
            warnings.warn_explicit(PrefalignWarning(message), PrefalignWarning, "prefalign", 0)
        return list(outcome.problems) or None

    # -- on the controller --------------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or is_worker(self.config):
            return
        value = getattr(report, PROPERTY, None)
        if isinstance(value, dict):  # a test run again counts once, as in the run file
            from pytest_prefalign.analysis.compare import CaseOutcome

            outcome = CaseOutcome.from_dict(value)
            self.outcomes = [o for o in self.outcomes if o.key != outcome.key]
            self.outcomes.append(outcome)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """What fails the run as a whole (nothing compared; with gates, a baseline test this
        run did not compare, or a gate no test could check) turns a passing run's exit status
        into a failure. Under ``--prefalign-shard`` the baseline's tests of the other shards
        are not this run's to compare."""
        if self.baseline is None or is_worker(self.config):
            return
        from pytest_prefalign.analysis import compare

        sharding = self.config.pluginmanager.get_plugin("prefalign-shard")
        others = set(getattr(sharding, "left_keys", ()))  # other shards' tests: not this run's
        mine = [key for key in self.baseline.runs if tuple(key) not in others]
        self.run_problems, self.run_notes = compare.gate_coverage(
            mine, self.outcomes, self.thresholds, self.allow
        )
        if self.run_problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

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
            from pytest_prefalign.plumbing.gate_summary import summarise

            summarise(terminalreporter, self, self.baseline.name, self.baseline.path, MARKER)
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


def _ini_or_option(config: pytest.Config, name: str, parse: Callable[[str], T], default: T) -> T:
    """The option ``--NAME`` (dashes), else the ini value ``NAME`` parsed, else ``default``."""
    value = config.getoption(name)
    if value is not None:
        return value
    raw = config.getini(name)
    if not raw:
        return default
    try:
        return parse(str(raw))
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini value {name}: {exc}") from None


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


# --------------------------------------------------------------------------------------------
# One test against the baseline
# --------------------------------------------------------------------------------------------


def compare_result(
    baseline: Baseline,
    item: pytest.Item,
    result: CaseResult,
    thresholds: list[Threshold],
    alpha: float,
    allow: frozenset[str] = frozenset(),
) -> CaseOutcome:
    """The test's comparison with the baseline (``compare.CaseOutcome``)."""
    from pytest_prefalign.analysis import compare
    from pytest_prefalign.analysis.compare import CaseOutcome
    from pytest_prefalign.runs.records import RunFile

    key = result.key
    old = baseline.runs.get(key)
    if old is None:  # a new test is not a regression; the summary lists it
        return CaseOutcome(key, "new")
    cannot = f"cannot compare with baseline {baseline.name!r}"
    try:
        overrides = {key: marker_thresholds(item)}
    except argparse.ArgumentTypeError as exc:
        return CaseOutcome(key, "error", problems=(f"{cannot}: {exc}",))
    verdict = compare.judge(
        old, RunFile([result]), thresholds, alpha=alpha, allow=allow, overrides=overrides,
        whole_run=False,
    )  # fmt: skip
    if verdict.errors:
        return CaseOutcome(key, "error", problems=tuple(f"{cannot}: {e}" for e in verdict.errors))
    return CaseOutcome(
        key,
        comparisons=tuple(verdict.comparisons),
        problems=tuple(
            f"regression against baseline {baseline.name!r}: {c.message()}"
            for c in verdict.regressions
        ),
        underpowered=tuple(c.power_message() for c in verdict.underpowered),
        notes=tuple(verdict.notes),
    )


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
