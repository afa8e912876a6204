"""The built-in ``pref_lamp`` suite, ``PrefLamp`` (``suite.py``),
listed in ``pytest_prefalign.registry.BUILTINS``."""

from __future__ import annotations

from prefalign_suites.pref_lamp.suite import PrefLamp

__all__ = ["PrefLamp"]
