"""Collection: a suite folder's ``suite.toml`` becomes one test per (method, size)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_prefalign.registry import MethodName, UnknownName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.plumbing.session import PrefalignSession


class PrefalignError(Exception):
    """A failure whose message says everything: reported without a traceback."""


class SuiteFile(pytest.File):
    """``suites/NAME/suite.toml``: ``[suite] name = ...`` and optional ``[options]``."""

    def collect(self):
        suite_name, suite_options = read_suite_toml(self.path)
        session = prefalign_session(self.config)
        try:
            session.registry.suite(suite_name)
        except UnknownName as exc:
            raise self.CollectError(f"{self.path}: {exc}") from None
        for size in session.settings.sizes:
            for method in session.methods:
                yield CaseItem.from_parent(
                    self, name=f"{suite_name}[{method}-{size}]", suite=suite_name,
                    suite_options=suite_options, method=method, size=size)

    class CollectError(Exception):
        pass

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (self.CollectError, PrefalignError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)


def read_suite_toml(path: Path) -> tuple[str, dict[str, str]]:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SuiteFile.CollectError(f"{path}: not valid TOML: {exc}") from None
    name = doc.get("suite", {}).get("name")
    if not isinstance(name, str) or not name:
        raise SuiteFile.CollectError(f"{path}: [suite] needs a string field 'name'")
    opts = doc.get("options", {})
    if not isinstance(opts, dict):
        raise SuiteFile.CollectError(f"{path}: [options] must be a table")
    return name, {str(k): str(v) for k, v in opts.items()}


class CaseItem(pytest.Item):
    """One (method, suite, size): runs the method, records its metrics, checks the floors."""

    def __init__(self, *, suite: str, suite_options: dict[str, str], method: MethodName,
                 size: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite
        self.suite_options = suite_options
        self.method = method
        self.size = size
        self.add_marker(pytest.mark.prefalign)

    def runtest(self) -> None:
        from pytest_prefalign.evaluation import case as evaluate  # heavy: torch, transformers

        session = prefalign_session(self.config)
        result = evaluate.run_case(session, self)
        self.user_properties.append(("prefalign_result", result))
        problems = evaluate.check(result, session.settings.floors)
        for extra in self.config.hook.pytest_prefalign_check(item=self, result=result):
            problems += extra or []
        if problems:
            raise PrefalignError(f"{self.name}: " + "; ".join(problems))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, PrefalignError):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def _traceback_filter(self, excinfo):
        """An unexpected error (a bug in a method, say) is shown from ``runtest`` down: the
        frames above it are pytest's own and would push the method's frames off the screen."""
        cut = excinfo.traceback.cut(path=Path(__file__))
        return cut.filter(excinfo)

    def reportinfo(self):
        return self.path, None, self.name


def prefalign_session(config: pytest.Config) -> PrefalignSession:
    from pytest_prefalign.plugin import session_key

    return config.stash[session_key]
