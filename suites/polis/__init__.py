"""The built-in ``polis`` suite, ``Polis`` (``suite.py``),
listed in ``pytest_prefalign.registry.BUILTINS``."""

from __future__ import annotations

from prefalign_suites.polis.suite import Polis

__all__ = ["Polis"]
