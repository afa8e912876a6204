"""The built-in ``prism`` suite (registered through the ``prefalign`` entry point)."""

from __future__ import annotations

from prefalign_suites.prism.suite import Prism


def pytest_prefalign_register(registry) -> None:
    registry.add_suite(Prism())
