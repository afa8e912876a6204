"""The built-in ``tldr`` suite, ``Tldr`` (``suite.py``),
listed in ``pytest_prefalign.registry.BUILTINS``."""

from __future__ import annotations

from prefalign_suites.tldr.suite import Tldr

__all__ = ["Tldr"]
