"""Hook specifications of pytest-prefalign, added to pytest's plugin manager in ``pytest_addhooks``.

A plugin implements a hook by defining a function of the same name in a module that is registered
with pytest: a ``conftest.py``, a module named in ``-p``, or a module in the ``prefalign``
entry-point group (this is how the built-in methods and suites register too).

The types the hooks pass are imported for annotations only (``TYPE_CHECKING``): the run file's
records and the catalogue's ``Metric`` sit in higher layers, and pytest loads this module on
every run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.analysis.catalogue import Metric
    from pytest_prefalign.registry import Registry
    from pytest_prefalign.runs.records import CaseResult, RunFile


def pytest_prefalign_register(registry: Registry) -> None:
    """Called once per run, before collection, to add reward methods, decoders, suites and
    judges.

    :param registry: call ``registry.add_reward(name, factory)``, ``registry.add_decoder(name,
        factory)``, ``registry.add_suite(suite)`` or ``registry.add_judge(name, judge)`` (the
        independent judge of the win rates, ``api.Judge``). A name that a built-in uses is
        overridden by a third-party registration, whatever the order of the calls.
    """


def pytest_prefalign_result(result: CaseResult, config: pytest.Config) -> None:
    """Called on the controller with each finished (method, suite, size) result, as its row
    will be written to the run file (``suite``, ``method``, ``size``, ``metrics``, ``ci``,
    counts, ``model``, ``data``, ``environment``, ``reward_fingerprint``, ``reward_package``,
    ``reward_version``, ...), a frozen record (``result.row()`` is its row of the run file as
    plain data).

    Use it to send results to an experiment tracker. The return value is ignored.
    """


def pytest_prefalign_run_written(path: str, run: RunFile, config: pytest.Config) -> None:
    """Called on the controller after the run file ``run`` was written to ``path``."""


def pytest_prefalign_check(item: pytest.Item, result: CaseResult) -> list[str] | None:
    """Called on the process that ran ``item`` with its finished result (records in
    ``result.pairs`` and ``result.items``). Return a list of problems (each a full
    sentence) to fail the test, or None. Floors and regression gates are implemented through
    this hook."""


def pytest_prefalign_metrics() -> list[Metric] | None:
    """Called once per run, on the controller and on every worker, after
    ``pytest_prefalign_register``: return the metrics to add to the catalogue. A metric's
    figure is then pooled from each test's records (its ``compute`` gives one record's
    observation), stored in the run file, shown as a leaderboard column (with a ``title``) and,
    by its ``roles``, taken into the analysis (``"y"``: tau, the inversions and the selection
    regret). A name the catalogue has already is a usage error. See docs/metrics.md, "Adding a
    metric"."""
