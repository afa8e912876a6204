"""The built-in ``prism`` suite, ``Prism`` (``suite.py``),
listed in ``pytest_prefalign.registry.BUILTINS``."""

from __future__ import annotations

from prefalign_suites.prism.suite import Prism

__all__ = ["Prism"]
