"""The project's own failures: raised anywhere, reported by the test they happened in."""

from __future__ import annotations

import importlib
from types import ModuleType


class PrefalignError(Exception):
    """A failure whose message says everything: reported without a traceback."""


class MethodFailure(PrefalignError):
    """A method's own code raised (a reward method's ``fit`` or ``score``, say): reported with
    its one-line message and, below it, the traceback of the exception it carries as
    ``__cause__``, trimmed to the frames outside pytest_prefalign (the method's own)."""


class PrefalignWarning(UserWarning):
    """Something the run went on without that the user should know: a plugin that failed to
    load, a regression gate that cannot detect a drop as large as its tolerance."""


class SuiteUnavailable(PrefalignError):
    """A suite whose data could not be loaded: every test of the suite meets it. ``fetch``: the
    command that builds the data, where a builder exists."""

    def __init__(self, suite: str, message: str, fetch: str | None = None) -> None:
        super().__init__(message)
        self.suite, self.fetch = suite, fetch


def missing_extra(package: str, extra: str, needed_for: str) -> str:
    """The one line for an optional dependency that is not installed: what needs it, and the
    extra that installs it (the extras are listed in setup.cfg, ``[options.extras_require]``)."""
    install = f"pip install pytest-prefalign[{extra}]"
    return f"{needed_for} needs {package}, which is not installed: {install}"


def import_extra(
    module: str, *, package: str, extra: str, needed_for: str, error: type[Exception]
) -> ModuleType:
    """``module`` imported, or ``error`` raised with the one line of ``missing_extra`` (no
    ImportError traceback: the error carries no cause)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise error(missing_extra(package, extra, needed_for)) from None
