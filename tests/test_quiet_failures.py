"""A third-party reward method's failure is reported with its message and its own frames, not
with the noise of the plugin's work around it: no ``DEBUG bm25s`` lines (bm25s sets its logger
to DEBUG when imported) and no transformers loading bars in the test's captured output. The
toy project is tests/test_plugin.py's."""

from __future__ import annotations

import logging

import pytest
import test_plugin as toy_project

heavy_modules_imported_once = toy_project.heavy_modules_imported_once
toy = toy_project.toy

# a method that ranks with the plugin's BM25 helper while it trains, then fails
RANKING = """
from pytest_prefalign import bm25
from pytest_prefalign.api import RewardMethod


class Ranking(RewardMethod):
    name = "ranking"

    def fingerprint(self):
        return self.name

    def fit(self, lm, pairs, cache_dir):
        bm25.index(["a paper about titles", "another paper on words"])
        raise ValueError("no ranking learnt")

    def score(self, lm, batch):
        raise AssertionError("never scored")


def pytest_prefalign_register(registry):
    registry.add_reward("ranking", Ranking)
"""


def test_a_failing_method_is_reported_without_the_plugins_log_lines(toy):
    toy.syspathinsert()
    toy.makepyfile(rankingrm=RANKING)
    # in a fresh process, where bm25s is first imported by the plugin's work
    result = toy.runpytest_subprocess(
        "--prefalign", "toy", "-p", "rankingrm", "--prefalign-methods", "bon[ranking]",
        "-p", "no:cacheprovider",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    failure = out.split(" FAILURES ")[1].split("short test summary")[0]
    assert "reward method 'ranking' failed in fit: ValueError: no ranking learnt" in failure
    assert "bm25s" not in failure and "Building index" not in failure, failure


def test_the_bm25s_logger_is_kept_at_warning():
    from pytest_prefalign import bm25

    bm25.index(["a paper about titles", "another paper"])
    assert logging.getLogger("bm25s").getEffectiveLevel() >= logging.WARNING


def test_transformers_bars_are_off_while_the_plugin_loads_and_restored_after():
    from transformers.utils import logging as hf_logging

    from pytest_prefalign.runtime.quiet import no_progress_bars

    assert hf_logging.is_progress_bar_enabled()
    with no_progress_bars():
        assert not hf_logging.is_progress_bar_enabled()
    assert hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with no_progress_bars():
            pass
        assert not hf_logging.is_progress_bar_enabled()  # a user's choice stays
    finally:
        hf_logging.enable_progress_bar()


@pytest.mark.parametrize("module", ["runtime/models.py", "runtime/convert.py"])
def test_the_plugins_model_loading_goes_through_no_progress_bars(module):
    from pathlib import Path

    source = (Path(__file__).parents[1] / "pytest_prefalign" / module).read_text()
    assert "with no_progress_bars()" in source or "no_progress_bars():" in source
