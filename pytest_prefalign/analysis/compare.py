"""Regression comparisons: a run against a baseline on the same pairs, metric by metric.

A drop counts only when it is both larger than its tolerance and significant under a paired test
(docs/ci-gating.md): McNemar's exact test on the shared pairs for accuracies, a paired bootstrap
over users on per-item scores for the others; which metrics exist, which may be gated and which
test each takes come from the metric catalogue. Runs made on other pairs or items are refused,
not compared.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_prefalign.analysis import catalogue
from pytest_prefalign.analysis.metrics import per_user_mean
from pytest_prefalign.analysis.stats import mcnemar_exact, paired_bootstrap
from pytest_prefalign.runs.records import CaseResult, Key, RunFile

_THRESHOLD = re.compile(r"(?P<metric>[A-Za-z0-9_]+):(?P<number>\d+(?:\.\d*)?|\.\d+)(?P<unit>\S*)")


def form() -> str:
    """The accepted form of a threshold, for messages."""
    return f"METRIC:Npp, e.g. policy_acc:2pp (METRIC one of {', '.join(catalogue.gateable())})"


# a drop equal to the tolerance is not larger than it, whatever float subtraction says
_EPS = 1e-9


class RunMismatch(ValueError):
    """The two runs cannot be compared: other pairs or items, or a gate's records are missing."""


# --------------------------------------------------------------------------------------------
# Thresholds
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Threshold:
    """A gate: ``metric`` may drop by at most ``points`` percentage points (metrics are 0..1)."""

    metric: str
    points: float

    @property
    def tolerance(self) -> float:
        """The tolerance on the 0..1 scale the run file uses."""
        return self.points / 100.0

    def __str__(self) -> str:
        return f"{self.metric}:{self.points:g}pp"


def parse_threshold(text: str) -> Threshold:
    """``policy_acc:2pp`` -> ``Threshold("policy_acc", 2.0)``; an ``argparse`` type.

    The unit is required: a bare ``2`` could mean 2 points or 0.02 and a typo would move the gate
    a hundredfold; ``%`` is refused because it reads as a relative change.
    """
    match = _THRESHOLD.fullmatch(text.strip().replace(" ", ""))
    if not match:
        raise argparse.ArgumentTypeError(f"invalid threshold {text!r}: expected {form()}")
    metric, unit = match["metric"], match["unit"]
    if metric not in catalogue.gateable():
        raise argparse.ArgumentTypeError(
            f"unknown metric {metric!r} in {text!r}: expected {form()}"
        )
    if unit != "pp":
        got = f"unit {unit!r}" if unit else "no unit"
        raise argparse.ArgumentTypeError(
            f"invalid threshold {text!r} ({got}): give the tolerance in percentage points, "
            f"{metric}:{match['number']}pp"
        )
    return Threshold(metric, float(match["number"]))


def parse_thresholds(text: str) -> list[Threshold]:
    """A comma-separated list, ``policy_acc:2pp,rouge1:1pp``; each metric at most once."""
    parts = text.split(",")
    if any(not part.strip() for part in parts):
        raise argparse.ArgumentTypeError(f"empty threshold in {text!r}: expected {form()}[,...]")
    thresholds = [parse_threshold(part) for part in parts]
    check_unique(thresholds)
    return thresholds


def parse_alpha(text: str) -> float:
    """A significance level strictly between 0 and 1; an ``argparse`` type."""
    try:
        alpha = float(text)
    except ValueError:
        alpha = math.nan
    if not 0.0 < alpha < 1.0:
        raise argparse.ArgumentTypeError(f"alpha must be a number between 0 and 1, got {text!r}")
    return alpha


def check_unique(thresholds: Sequence[Threshold]) -> None:
    seen: set[str] = set()
    for threshold in thresholds:
        if threshold.metric in seen:
            raise argparse.ArgumentTypeError(f"{threshold.metric} is given two thresholds")
        seen.add(threshold.metric)


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
    test: str  # "mcnemar" or "bootstrap"
    n: int
    n_users: int
    gated: bool
    tolerance: float  # 0..1 scale; nan where not gated
    alpha: float
    regressed: bool
    note: str = ""

    @property
    def status(self) -> str:
        """``REGRESSED``, ``ok``, ``not significant`` (a drop beyond tolerance) or ``""``."""
        if not self.gated:
            return self.note
        if self.regressed:
            return "REGRESSED"
        return "not significant" if self.old - self.new > self.tolerance + _EPS else "ok"

    def message(self) -> str:
        """What happened, with old, new, the difference, its interval and the p-value."""
        head = "regressed" if self.regressed else "compared"
        level = f"{1 - self.alpha:.0%}"
        test = "McNemar exact" if self.test == "mcnemar" else "paired bootstrap over users"
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
        data = asdict(self)
        data["ci"] = list(self.ci)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        """The inverse of ``as_dict``."""
        fields = dict(data)
        fields["ci"] = tuple(fields["ci"])
        return cls(**fields)


def compare_runs(
    baseline: RunFile,
    current: RunFile,
    thresholds: Sequence[Threshold],
    *,
    alpha: float = 0.05,
    overrides: Mapping[Key, Sequence[Threshold]] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> list[Comparison]:
    """Compare every compared metric (catalogue) of every (suite, method, size) in both runs.

    Metrics in ``thresholds`` are gated; ``overrides`` replaces thresholds for one key (e.g. a
    test's ``prefalign_tolerance`` marker). ``regressed = gated and old - new > tolerance and
    p < alpha``. Raises ``RunMismatch`` when the runs share no key, when a shared key was run on
    other pair or item ids, or when a gated metric cannot be tested.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    check_unique(thresholds)
    old, new = {r.key: r for r in baseline.results}, {r.key: r for r in current.results}
    keys = sorted(old.keys() & new.keys())
    if not keys:
        raise RunMismatch("the baseline and the current run share no (suite, method, size)")
    comparisons = []
    for key in keys:
        before, after = old[key], new[key]
        _check_same_ids(
            key, "pair", _by_id(before.pairs, "pair_id"), _by_id(after.pairs, "pair_id")
        )
        _check_same_ids(
            key, "item", _by_id(before.items, "item_id"), _by_id(after.items, "item_id")
        )
        gates = {t.metric: t for t in thresholds}
        gates.update({t.metric: t for t in (overrides or {}).get(key, ())})
        for metric, values in _shared_metrics(key, before, after, gates):
            comparisons.append(
                _compare(
                    key, metric, values, before, after, gates.get(metric.name), alpha, n_boot, seed
                )
            )
    return comparisons


def unmatched(baseline: RunFile, current: RunFile) -> tuple[list[Key], list[Key]]:
    """The (suite, method, size) keys only in the baseline, and those only in the current run."""
    old, new = {r.key for r in baseline.results}, {r.key for r in current.results}
    return sorted(old - new), sorted(new - old)


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
    section, id_field = ("pairs", "pair_id") if metric.level == "pair" else ("items", "item_id")
    users, before, after = _paired_values(
        _by_id(getattr(old, section), id_field),
        _by_id(getattr(new, section), id_field),
        metric.field,
    )
    ci, p_value, note = (math.nan, math.nan), math.nan, ""
    if users:
        weights = _counts(users) if metric.pooling == "micro" else None
        _, ci, p_boot = paired_bootstrap(
            per_user_mean(before, users), per_user_mean(after, users), n_boot, seed,
            weights=weights, level=1.0 - alpha,
        )  # fmt: skip
        p_value = mcnemar_exact(before, after) if metric.test == "mcnemar" else p_boot
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
        regressed=regressed, note=note,
    )  # fmt: skip


def _by_id(records: Sequence[Mapping[str, Any]], id_field: str) -> dict[str, Mapping[str, Any]]:
    return {str(r[id_field]): r for r in records}


def _paired_values(
    old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]], field: str
) -> tuple[list[str], list[float], list[float]]:
    """Users and both runs' values of ``field`` on the shared ids where neither value is null."""
    users, before, after = [], [], []
    for record_id in sorted(old.keys() & new.keys()):
        a, b = old[record_id].get(field), new[record_id].get(field)
        if a is not None and b is not None:
            users.append(str(old[record_id]["user"]))
            before.append(float(a))
            after.append(float(b))
    return users, before, after


def _counts(users: Sequence[str]) -> dict[str, float]:
    counts: dict[str, float] = {}
    for user in users:
        counts[user] = counts.get(user, 0.0) + 1.0
    return counts


def _check_same_ids(key: Key, kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Refuse to compare a key whose runs were made on different pair (or item) ids."""
    only_old, only_new = sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())
    if only_old or only_new:
        raise RunMismatch(
            f"{key_text(key)}: the runs were made on different {kind}s: "
            f"{len(only_old)} of the baseline's {len(old)} {kind} ids are not in the current run"
            f"{_examples(only_old)} and {len(only_new)} of the current run's {len(new)} are not "
            f"in the baseline{_examples(only_new)} (other data or another --prefalign-limit?)"
        )


def _metric(result: CaseResult, metric: str) -> float | None:
    value = result.metrics.get(metric)
    return None if value is None or not math.isfinite(float(value)) else float(value)


def key_text(key: Key | Sequence[str]) -> str:
    return f"{key[1]} on {key[0]} ({key[2]})"


def _examples(ids: Sequence[str]) -> str:
    return f" (e.g. {', '.join(map(repr, ids[:3]))})" if ids else ""


# figures as the leaderboard shows them: fractions (0..1), three decimals


def fraction(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3f}"


def signed(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:+.3f}"


def tolerance_text(tolerance: float) -> str:
    """``0.02 (2pp)``: the fraction, and the gate as it is written."""
    return f"{tolerance:g} ({tolerance * 100:g}pp)"


def p_text(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3g}"
