"""The project's own failure: raised anywhere, reported by the test it happened in."""

from __future__ import annotations


class PrefalignError(Exception):
    """A failure whose message says everything: reported without a traceback."""


class SuiteUnavailable(PrefalignError):
    """A suite whose data could not be loaded: every test of the suite meets it. ``fetch``: the
    command that builds the data, where a builder exists."""

    def __init__(self, suite: str, message: str, fetch: str | None = None) -> None:
        super().__init__(message)
        self.suite, self.fetch = suite, fetch
