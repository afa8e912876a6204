"""Regression gates as the user writes them: ``policy_acc:2pp``, parsed and checked (the
``type=`` of ``--prefalign-compare-fail`` and of ``prefalign compare --fail``), and the
significance level."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_prefalign.analysis import catalogue

_THRESHOLD = re.compile(r"(?P<metric>[A-Za-z0-9_]+):(?P<number>\d+(?:\.\d*)?|\.\d+)(?P<unit>\S*)")


def form() -> str:
    """The accepted form of a threshold, for messages."""
    return f"METRIC:Npp, e.g. policy_acc:2pp (METRIC one of {', '.join(catalogue.gateable())})"


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
    """``METRIC:2pp`` -> ``Threshold(METRIC, 2.0)``, METRIC a gateable metric of the
    catalogue; an ``argparse`` type.

    The unit is required: a bare ``2`` could mean 2 points or 0.02 and a typo would move the gate
    a hundredfold; ``%`` is refused because it reads as a relative change.
    """
    match = _THRESHOLD.fullmatch(text.strip().replace(" ", ""))
    if not match:
        raise argparse.ArgumentTypeError(f"invalid threshold {text!r}: expected {form()}")
    metric, unit = match.group("metric", "unit")
    if metric not in catalogue.gateable():
        raise argparse.ArgumentTypeError(
            f"unknown metric {metric!r} in {text!r}: expected {form()}"
        )
    if unit != "pp":
        got = f"unit {unit!r}" if unit else "no unit"
        raise argparse.ArgumentTypeError(
            f"invalid threshold {text!r} ({got}): give the tolerance in percentage points, "
            f"{metric}:{match.group('number')}pp"
        )
    return Threshold(metric, float(match.group("number")))


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
