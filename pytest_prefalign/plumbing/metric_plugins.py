"""The metrics plugins declare (the ``pytest_prefalign_metrics`` hook), added to the catalogue
for one run: on the controller and on every worker, after the registry has loaded the plugins,
and forgotten when the run ends."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_prefalign.analysis import catalogue


def register(config: pytest.Config) -> None:
    """Add each plugin's metrics to the catalogue, in the order pytest calls the hook; a
    declaration the catalogue refuses (a name declared already, a role one metric plays that
    another plays already, ...) is a usage error naming its plugin."""
    catalogue.reset()
    config.add_cleanup(catalogue.reset)
    for impl in reversed(config.pluginmanager.hook.pytest_prefalign_metrics.get_hookimpls()):
        declared: Any = impl.function()  # a list of Metric, or None
        for metric in declared or ():
            try:
                catalogue.register(metric)
            except ValueError as exc:
                raise pytest.UsageError(
                    f"pytest_prefalign_metrics of plugin {impl.plugin_name!r}: {exc}"
                ) from None
