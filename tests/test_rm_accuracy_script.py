"""benchmarks/rm_accuracy.py: the figures it prints from methods' pair outcomes, by hand."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType

import benchmark_scripts
import numpy as np
import pytest

USERS = ["a", "a", "b", "b"]


@pytest.fixture
def script() -> Iterator[ModuleType]:
    yield benchmark_scripts.load("rm_accuracy")
    sys.modules.pop("rm_accuracy", None)


def test_rm_accuracy_is_the_mean_over_users_and_the_difference_is_paired(
    script: ModuleType,
) -> None:
    # x: user a 2 of 2, user b 1 of 2 -> (1 + 0.5) / 2; y: a 1 of 2, b 0 of 2 -> 0.25
    outcomes = {"x": np.array([1.0, 1.0, 1.0, 0.0]), "y": np.array([0.0, 1.0, 0.0, 0.0])}
    x = script.figures("x", "x", outcomes, USERS)
    y = script.figures("y", "x", outcomes, USERS)
    assert x["rm_acc"] == pytest.approx(0.75) and x["rm_acc_micro"] == pytest.approx(0.75)
    assert "minus_first" not in x
    assert y["rm_acc"] == pytest.approx(0.25)
    assert y["minus_first"] == pytest.approx(-0.5)  # each user's own difference is -0.5
    line = script.extremes([x, y], outcomes, USERS)
    assert line.startswith("range over the methods 0.500: x minus y +0.500 [")


def test_a_tie_counts_one_half(script: ModuleType) -> None:
    outcomes = {"t": np.array([0.5, 0.5, 1.0, 1.0])}
    assert script.figures("t", "t", outcomes, USERS)["rm_acc"] == pytest.approx(0.75)
