"""The built-in ``tldr`` suite (registered through the ``prefalign`` entry point)."""

from __future__ import annotations

from prefalign_suites.tldr.suite import Tldr


def pytest_prefalign_register(registry) -> None:
    registry.add_suite(Tldr())
