"""Regression comparisons: a run against a baseline on the same pairs, metric by metric.

A drop counts only when it is both larger than its tolerance and significant under a paired test
(docs/ci-gating.md): McNemar's exact test on the shared pairs for accuracies, the exact sign-flip
test over users on per-item scores for the others (each user's mean change as likely up as down
under the null; the paired bootstrap's interval describes the difference, it does not decide);
which metrics exist, which may be gated and which test each takes come from the metric
catalogue. Runs that cannot be compared (other pairs or
items, other data, model or environment: analysis/comparable.py) are refused, not compared. A
gate states its power: the smallest drop McNemar's test could find with the run's pairs
(``Comparison.detectable``), and the test over users is refused over fewer users than it could
ever find significant. ``judge`` is what both the pytest gate and ``prefalign
compare`` call.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_prefalign.analysis import catalogue
from pytest_prefalign.analysis.comparable import (
    STATED,
    Difference,
    RunMismatch,
    check_case,
    coverage,
    key_text,
)
from pytest_prefalign.analysis.metrics import per_user_mean
from pytest_prefalign.analysis.stats import (
    mcnemar_exact,
    paired_bootstrap,
    sign_flip_over_users,
    sign_test_floor,
    smallest_detectable_drop,
)
from pytest_prefalign.analysis.thresholds import (
    Threshold,
    check_unique,
    form,
    parse_alpha,
    parse_threshold,
    parse_thresholds,
)
from pytest_prefalign.runs.parts import Record
from pytest_prefalign.runs.records import CaseResult, Key, RunFile

# re-exported: the gate, the command and the tests import them from here
__all__ = [
    "Comparison", "RunMismatch", "Threshold", "Verdict", "check_unique", "compare_case",
    "compare_runs", "form", "judge", "key_text", "parse_alpha", "parse_threshold",
    "parse_thresholds",
]  # fmt: skip

# a drop equal to the tolerance is not larger than it, whatever float subtraction says
_EPS = 1e-9


# --------------------------------------------------------------------------------------------
# Comparing runs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """One metric of one (suite, method, size) in the baseline and the current run.

    ``diff`` is ``new - old`` and ``ci`` its interval at level ``1 - alpha``; ``n`` counts the
    shared pairs (accuracies) or items (ROUGE) the test ran on.
    """

    suite: str
    method: str
    size: str
    metric: str
    old: float
    new: float
    diff: float
    ci: tuple[float, float]
    p_value: float
    test: str  # "mcnemar" or "signflip"
    n: int
    n_users: int
    gated: bool
    tolerance: float  # 0..1 scale; nan where not gated
    alpha: float
    regressed: bool
    note: str = ""
    # the smallest drop McNemar's test could find significant with these pairs (inf: none);
    # nan for the bootstrap
    detectable: float = math.nan

    @property
    def underpowered(self) -> bool:
        """A gate that cannot find a drop as large as its tolerance significant."""
        return self.gated and self.detectable > self.tolerance + _EPS

    def power_message(self) -> str:
        """Why an underpowered gate could miss a drop beyond its tolerance."""
        k = sign_test_floor(self.alpha)
        could = (
            f"no drop can be significant (McNemar's exact test needs at least {k} pairs that "
            "changed, all one way)"
            if math.isinf(self.detectable)
            else f"a drop smaller than {self.detectable * 100:.2f} pp cannot be significant "
            f"(McNemar's exact test needs at least {k} pairs that changed, all one way)"
        )
        return (
            f"underpowered gate: {self.metric} of {self.method} on {self.suite} ({self.size}): "
            f"with {self.n} pairs of {self.n_users} users at alpha {self.alpha:g}, {could}; "
            f"the tolerance is {self.tolerance * 100:g} pp, so a drop between the two passes "
            "(more users: --prefalign-limit)"
        )

    @property
    def status(self) -> str:
        """``REGRESSED``, ``ok``, ``not significant`` (a drop beyond tolerance) or the note of
        an ungated row; ``, underpowered`` after a gated one that could miss a drop beyond its
        tolerance."""
        if not self.gated:
            return self.note
        if self.regressed:
            return "REGRESSED"
        status = "not significant" if self.old - self.new > self.tolerance + _EPS else "ok"
        return f"{status}, underpowered" if self.underpowered else status

    def message(self) -> str:
        """What happened, with old, new, the difference, its interval and the p-value."""
        head = "regressed" if self.regressed else "compared"
        level = f"{1 - self.alpha:.0%}"
        test = "McNemar exact" if self.test == "mcnemar" else "exact sign flip over users"
        unit = "pairs" if self.test == "mcnemar" else "items"
        text = (
            f"{self.metric} of {self.method} on {self.suite} ({self.size}) {head}: "
            f"{fraction(self.old)} -> {fraction(self.new)} ({signed(self.diff)}, {level} CI "
            f"[{signed(self.ci[0])}, {signed(self.ci[1])}]); {test} p = {p_text(self.p_value)} "
            f"over {self.n} {unit} of {self.n_users} users"
        )
        if self.gated:
            text += f"; tolerance {tolerance_text(self.tolerance)}, alpha {self.alpha:g}"
        return text + (f" ({self.note})" if self.note else "")

    def as_dict(self) -> dict[str, Any]:
        """Plain data (the interval a list) for a test report's ``user_properties``, which
        pytest-xdist sends from the worker to the controller."""
        return {**asdict(self), "ci": list(self.ci)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        """The inverse of ``as_dict``."""
        low, high = data["ci"]
        return cls(**{**data, "ci": (low, high)})


@dataclass(frozen=True)
class CaseOutcome:
    """One test's comparison with the baseline, as the pytest gate makes it on the process
    that ran the test (``plumbing/gating.py``): its ``key``, its ``status`` (``compared``,
    ``new`` or ``error``), its comparisons, the ``problems`` that fail it (regressions, or why
    it could not be compared), the gates that could miss a drop beyond their tolerance
    (``underpowered``) and the differences allowed (``notes``)."""

    key: Key
    status: str = "compared"
    comparisons: tuple[Comparison, ...] = ()
    problems: tuple[str, ...] = ()
    underpowered: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the test's report, which pytest-xdist sends from the worker to the
        controller."""
        return {
            "key": list(self.key),
            "status": self.status,
            "comparisons": [c.as_dict() for c in self.comparisons],
            "problems": list(self.problems),
            "underpowered": list(self.underpowered),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaseOutcome:
        """The inverse of ``as_dict``."""
        suite, method, size = data["key"]
        return cls(
            key=(suite, method, size),
            status=str(data["status"]),
            comparisons=tuple(Comparison.from_dict(c) for c in data["comparisons"]),
            problems=tuple(data["problems"]),
            underpowered=tuple(data["underpowered"]),
            notes=tuple(data["notes"]),
        )


def compare_runs(
    baseline: RunFile,
    current: RunFile,
    thresholds: Sequence[Threshold],
    *,
    alpha: float = 0.05,
    overrides: Mapping[Key, Sequence[Threshold]] | None = None,
    allow: Collection[str] = (),
    n_boot: int = 2000,
    seed: int = 0,
) -> list[Comparison]:
    """Compare every compared metric (catalogue) of every (suite, method, size) in both runs.

    Metrics in ``thresholds`` are gated; ``overrides`` replaces thresholds for one key (e.g. a
    test's ``prefalign_tolerance`` marker). ``regressed = gated and old - new > tolerance and
    p < alpha``. Raises ``RunMismatch`` when the runs share no key, when a shared key cannot be
    compared (``comparable.check_case``: other ids, or other data, model or environment not in
    ``allow``), or when a gated metric cannot be tested.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    check_unique(thresholds)
    old, new = {r.key: r for r in baseline.results}, {r.key: r for r in current.results}
    keys = sorted(old.keys() & new.keys())
    if not keys:
        raise RunMismatch(coverage(old, new)[0][0])
    comparisons = []
    for key in keys:
        gates = [*thresholds, *(overrides or {}).get(key, ())]
        comparisons += compare_case(old[key], new[key], gates, alpha, allow, n_boot, seed)[0]
    return comparisons


def compare_case(
    before: CaseResult,
    after: CaseResult,
    thresholds: Sequence[Threshold],
    alpha: float,
    allow: Collection[str] = (),
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[list[Comparison], list[Difference]]:
    """One test's comparisons and the allowed differences between its two results (a later
    threshold of a metric replaces an earlier one). Raises ``RunMismatch`` as ``compare_runs``."""
    key = after.key
    allowed = check_case(before, after, allow)
    gates = {t.metric: t for t in thresholds}
    comparisons = [
        _compare(key, metric, values, before, after, gates.get(metric.name), alpha, n_boot, seed)
        for metric, values in _shared_metrics(key, before, after, gates)
    ]
    return comparisons, allowed


@dataclass
class Verdict:
    """What comparing a run with a baseline found: the comparisons, what could not be compared
    (``errors``: each fails the gate), and what is stated without failing (``notes``: allowed
    differences, tests new to the baseline)."""

    comparisons: list[Comparison] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.regressed]

    @property
    def underpowered(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.underpowered]


def judge(
    baseline: RunFile,
    current: RunFile,
    thresholds: Sequence[Threshold],
    *,
    alpha: float = 0.05,
    allow: Collection[str] = (),
    overrides: Mapping[Key, Sequence[Threshold]] | None = None,
    whole_run: bool = True,
) -> Verdict:
    """Compare ``current`` with ``baseline``, test by test, collecting what cannot be compared
    instead of stopping at it: the one judgement behind the pytest gate (per test, then
    ``whole_run`` coverage on the controller) and ``prefalign compare`` (both at once).
    ``whole_run``: also check which tests the runs share (``comparable.coverage``)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    check_unique(thresholds)
    verdict = Verdict()
    old, new = {r.key: r for r in baseline.results}, {r.key: r for r in current.results}
    for key in sorted(old.keys() & new.keys()):
        gates = [*thresholds, *(overrides or {}).get(key, ())]
        try:
            comparisons, allowed = compare_case(old[key], new[key], gates, alpha, allow)
        except RunMismatch as exc:
            verdict.errors.append(str(exc))
            continue
        verdict.comparisons += comparisons
        verdict.notes += [
            f"{key_text(key)}: {'' if d.kind == STATED else 'allowed: '}{d.text}" for d in allowed
        ]
    if whole_run:
        gated = bool(thresholds) or any(overrides.values() if overrides else ())
        # a gate is idle when the tests it could check were compared and none had its metric
        names = [] if verdict.errors else [str(t) for t in thresholds]
        compared = [c.metric for c in verdict.comparisons]
        errors, notes = coverage(old, new, allow, gated=gated, gates=names, compared=compared)
        verdict.errors, verdict.notes = errors + verdict.errors, notes + verdict.notes
    return verdict


def _shared_metrics(
    key: Key, old: CaseResult, new: CaseResult, gates: Mapping[str, Threshold]
) -> list[tuple[catalogue.Metric, tuple[float, float]]]:
    """Metrics with a value in both runs, with both values; a gated one in only one run is an
    error (the gate could not be checked)."""
    shared = []
    for metric in catalogue.compared():
        before, after = _metric(old, metric.name), _metric(new, metric.name)
        if before is not None and after is not None:
            shared.append((metric, (before, after)))
        elif metric.name in gates and (before is None) != (after is None):
            side = "current run" if before is not None else "baseline"
            raise RunMismatch(f"{key_text(key)}: the {side} has no {metric.name} to gate on")
    return shared


def _compare(
    key: Key,
    metric: catalogue.Metric,
    values: tuple[float, float],
    old: CaseResult,
    new: CaseResult,
    threshold: Threshold | None,
    alpha: float,
    n_boot: int,
    seed: int,
) -> Comparison:
    """One Comparison: figures from the results, interval and p-value from the paired records."""
    old_value, new_value = values
    section = "pairs" if metric.level == "pair" else "items"
    users, before, after = _paired_values(
        _by_id(getattr(old, section)),
        _by_id(getattr(new, section)),
        metric.field,
    )
    ci, p_value, note, detectable = (math.nan, math.nan), math.nan, "", math.nan
    if users:
        weights = _counts(users) if metric.pooling == "micro" else None
        old_means, new_means = per_user_mean(before, users), per_user_mean(after, users)
        _, ci, _ = paired_bootstrap(
            old_means, new_means, n_boot, seed, weights=weights, level=1.0 - alpha
        )
        if metric.test == "mcnemar":
            p_value = mcnemar_exact(before, after)
            detectable = smallest_detectable_drop(users, alpha, metric.pooling)
        elif len(set(users)) >= (floor := sign_test_floor(alpha)):
            p_value = sign_flip_over_users(old_means, new_means, weights)
        elif threshold is not None:
            raise RunMismatch(too_few_users(key, metric.name, len(set(users)), alpha))
        else:
            note = f"too few users to test ({len(set(users))} < {floor})"
    elif threshold is not None:
        raise RunMismatch(
            f"{key_text(key)}: no per-{metric.level} {metric.field!r} records shared by both "
            f"runs, so {metric.name} cannot be tested; save runs with their records"
        )
    else:
        note = "no records"
    regressed = (
        threshold is not None
        and old_value - new_value > threshold.tolerance + _EPS
        and p_value < alpha
    )
    return Comparison(
        suite=key[0], method=key[1], size=key[2], metric=metric.name, old=old_value,
        new=new_value, diff=new_value - old_value, ci=ci, p_value=p_value, test=metric.test,
        n=len(users), n_users=len(set(users)), gated=threshold is not None,
        tolerance=threshold.tolerance if threshold else math.nan, alpha=alpha,
        regressed=regressed, note=note, detectable=detectable,
    )  # fmt: skip


def too_few_users(key: Key, metric: str, n_users: int, alpha: float) -> str:
    """Why a test over users is refused."""
    floor = sign_test_floor(alpha)
    return (
        f"{key_text(key)}: {metric} cannot be tested: the sign-flip test over users needs at "
        f"least {floor} users at alpha {alpha:g} (with fewer, even every user dropping is not "
        f"significant), and the runs share {n_users} (more users: --prefalign-limit)"
    )


def _by_id(records: Sequence[Record]) -> dict[str, Record]:
    return {str(r.record_id): r for r in records}


def _paired_values(
    old: Mapping[str, Record], new: Mapping[str, Record], field: str
) -> tuple[list[str], list[float], list[float]]:
    """Users and both runs' values of ``field`` on the shared ids where neither value is null."""
    users, before, after = [], [], []
    for record_id in sorted(old.keys() & new.keys()):
        a, b = old[record_id].value(field), new[record_id].value(field)
        if a is not None and b is not None:
            users.append(str(old[record_id].user))
            before.append(float(a))
            after.append(float(b))
    return users, before, after


def _counts(users: Sequence[str]) -> dict[str, float]:
    counts: dict[str, float] = {}
    for user in users:
        counts[user] = counts.get(user, 0.0) + 1.0
    return counts


def _metric(result: CaseResult, metric: str) -> float | None:
    value = result.metrics.get(metric)
    return None if value is None or not math.isfinite(float(value)) else float(value)


def fraction(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3f}"


def signed(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:+.3f}"


def tolerance_text(tolerance: float) -> str:
    """``0.02 (2pp)``: the fraction, and the gate as it is written."""
    return f"{tolerance:g} ({tolerance * 100:g}pp)"


def p_text(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3g}"


def gate_coverage(
    baseline: Iterable[Key],
    outcomes: Sequence[CaseOutcome],
    thresholds: Sequence[Any],
    allow: Collection[str],
) -> tuple[list[str], list[str]]:
    """``coverage`` (``comparable``) for the pytest gate, from its tests' outcomes and its run-wide
    ``thresholds``."""
    comparisons = [c for o in outcomes for c in o.comparisons]
    # a test that could not be compared fails, saying why: no gate is idle then
    failed = any(o.status == "error" for o in outcomes)
    return coverage(
        baseline,
        [o.key for o in outcomes],
        allow,
        gated=bool(thresholds) or any(c.gated for c in comparisons),
        gates=[] if failed else [str(t) for t in thresholds],
        compared=[c.metric for c in comparisons],
    )
