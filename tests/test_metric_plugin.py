"""A third party's metric end to end: the example of docs/metrics.md, "Adding a metric" (a
plugin declares it through ``pytest_prefalign_metrics``), in a real run (pytester, the toy suite
and the tiny model of tests/test_plugin.py) that computes it in each test's records, shows it on
the leaderboard, stores it in the run file and, as a ``y``, tests it in tau and the selection
regret."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import test_plugin as toy_project
from test_plugin import run

from pytest_prefalign.analysis import catalogue

# the toy project's fixtures (tests/test_plugin.py)
heavy_modules_imported_once = toy_project.heavy_modules_imported_once
toy = toy_project.toy

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
EXAMPLE = re.compile(
    r"<!-- example: run by tests/test_metric_plugin.py -->\s*```python\n(?P<code>.*?)```", re.S
)

# two reward methods that need no training, for tau and the regret to have rows: the longer
# response, or the shorter, is preferred
REWARDS = """
import numpy as np

from pytest_prefalign.api import RewardMethod


class Longer(RewardMethod):
    name = "longer"
    sign = 1.0

    def fingerprint(self):
        return self.name

    def fit(self, lm, pairs, cache_dir):
        pass

    def score(self, lm, batch):
        return np.array([self.sign * len(r) for r in batch.responses], dtype=float)


class Shorter(Longer):
    name = "shorter"
    sign = -1.0


def pytest_prefalign_register(registry):
    registry.add_reward("longer", Longer)
    registry.add_reward("shorter", Shorter)
"""


def example() -> str:
    found = EXAMPLE.search(DOC.read_text())
    assert found, "docs/metrics.md lost its example"
    return found["code"]


METHODS = "base,bon[longer],bon[shorter]"


def test_a_plugins_metric_reaches_the_leaderboard_the_run_file_tau_and_regret(toy):
    toy.makeconftest(toy_project.TOY_SUITE + example())  # the page's conftest.py
    toy.syspathinsert()
    toy.makepyfile(lengthrewards=REWARDS)
    result = run(
        toy, "--prefalign", "toy", "-p", "lengthrewards", "--prefalign-methods", METHODS,
        "--prefalign-json", "out.json",
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*method*ROUGE-1*policy acc*RM acc*brevity*time*"])
    assert catalogue.find("brevity") is None  # forgotten when the run ended
    run_file = json.loads((toy.path / "out.json").read_text())
    rows = {r["method"]: r for r in run_file["results"]}
    for method, row in rows.items():
        mine = [i for i in run_file["items"] if i["method"] == method]
        want = sum(i["brevity"] for i in mine) / len(mine)  # micro: the mean of the items
        assert row["metrics"]["brevity"] == pytest.approx(want, abs=1e-6), method
        assert set(row["per_user"]["brevity"]) == {"ann", "bob"} and len(row["ci"]["brevity"]) == 2
    assert {(e["x"], e["y"]) for e in run_file["tau"]} >= {("rm_acc", "brevity")}
    regret = run_file["crisis"]["regret"]
    (entry,) = [e for e in regret if e["y"] == "brevity"]
    assert entry["n_methods"] == 2 and set(entry["picked"]) <= {"bon[longer]", "bon[shorter]"}


BROKEN = """
from pytest_prefalign.analysis.catalogue import Metric


def pytest_prefalign_metrics():
    return [Metric("twice", "pair", "policy_correct", "macro", roles=("x",))]
"""


def test_a_metric_the_catalogue_refuses_is_a_usage_error_naming_its_plugin(toy):
    toy.syspathinsert()
    toy.makepyfile(twiceplugin=BROKEN)
    result = run(toy, "--prefalign", "toy", "-p", "twiceplugin", "--prefalign-methods", "base")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*pytest_prefalign_metrics of plugin 'twiceplugin'*'rm_acc' plays the role 'x' already*"]
    )
