"""The project's own failure: raised anywhere, reported by the test it happened in."""

from __future__ import annotations


class PrefalignError(Exception):
    """A failure whose message says everything: reported without a traceback."""
