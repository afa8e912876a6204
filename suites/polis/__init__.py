"""The built-in ``polis`` suite (registered through the ``prefalign`` entry point)."""

from __future__ import annotations

from prefalign_suites.polis.suite import Polis


def pytest_prefalign_register(registry) -> None:
    registry.add_suite(Polis())
