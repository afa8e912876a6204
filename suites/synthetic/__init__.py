"""The built-in ``synthetic`` suite (``suite.py``): users with known preferences, for the tool's
known-answer checks, and its ``oracle`` reward methods (``oracle.py``); each is a line of
``pytest_prefalign.registry.BUILTINS``."""

from __future__ import annotations

from prefalign_suites.synthetic.suite import Synthetic

__all__ = ["Synthetic"]
