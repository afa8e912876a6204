"""The built-in ``pref_lamp`` suite (registered through the ``prefalign`` entry point)."""

from __future__ import annotations

from prefalign_suites.pref_lamp.suite import PrefLamp


def pytest_prefalign_register(registry) -> None:
    registry.add_suite(PrefLamp())
