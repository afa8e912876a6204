"""Collection: a suite folder's ``suite.toml`` becomes one test per (method, size), and under
``--prefalign-guidance sweep`` one more per strength of the sweep for each reward-guided method
whose decoder declares a strength.

The items ask their ``Host`` (the run's session) to evaluate their case and to check the result;
the host is handed down at collection, so nothing here imports the session.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import pytest

from pytest_prefalign.errors import MethodFailure, PrefalignError
from pytest_prefalign.evaluation.context import row_name
from pytest_prefalign.registry import MethodName, UnknownName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.registry import Registry
    from pytest_prefalign.runs.records import CaseResult

RESULT = "prefalign_result"  # the report attribute that carries a test's result
# plain data a test hands to its report, each value as an attribute of the report's name: it
# crosses from an xdist worker to the controller with the report, but stays out of the junitxml
# (which writes every user property); set with ``carry``
CARRIED = pytest.StashKey[dict[str, Any]]()
# suite -> the suite.toml it was collected from, and its options, in this session
COLLECTED = pytest.StashKey[dict[str, tuple[Path, dict[str, str]]]]()


class Host(Protocol):
    """What the items need of the run."""

    registry: Registry
    methods: list[MethodName]
    sizes: list[str]

    def sweep(self, method: MethodName) -> list[tuple[str, float]]:
        """The (option, value) of each test of the strength sweep the method has beside its
        own (none unless ``--prefalign-guidance sweep``)."""

    def evaluate(self, item: CaseItem) -> CaseResult:
        """Evaluate the item's case."""

    def problems(self, item: CaseItem, result: CaseResult) -> list[str]:
        """What fails the item: floors, gates, plugins' checks."""


class SuiteFile(pytest.File):
    """``suites/NAME/suite.toml``: ``[suite] name = ...`` and optional ``[options]``."""

    def __init__(self, *, host: Host, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.host = host

    def collect(self):
        suite_name, suite_options = read_suite_toml(self.path)
        try:
            self.host.registry.suite(suite_name)
        except UnknownName as exc:
            raise self.CollectError(f"{self.path}: {exc}") from None
        first, first_options = self.config.stash.setdefault(COLLECTED, {}).setdefault(
            suite_name, (self.path, suite_options)
        )
        if first != self.path:
            raise self.CollectError(
                f"{self.path}: suite {suite_name!r} is already collected from {first} "
                f"(options {first_options or 'none'} there, {suite_options or 'none'} here): a "
                f"run keys its results by (suite, method, size), so run one folder at a time"
            )
        options = tuple(sorted(suite_options.items()))
        for size in self.host.sizes:
            for method in self.host.methods:
                for sweep in (None, *self.host.sweep(method)):
                    name = case_name(suite_name, method, size, sweep)
                    yield CaseItem.from_parent(
                        self,
                        name=name,
                        # as pytest builds a parametrized test's id ("name[params]" read as
                        # params, not as part of the name), so that the id written to the cache
                        # by --lf and the id collected again compare equal
                        nodeid=f"{self.nodeid}::{name}",
                        suite=suite_name,
                        suite_options=options,
                        method=method,
                        size=size,
                        host=self.host,
                        sweep=sweep,
                    )

    class CollectError(Exception):
        pass

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (self.CollectError, PrefalignError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)


def carry(item: pytest.Item, name: str, value: Any) -> None:
    """Hand ``value`` (plain data) to the test's call report as its attribute ``name``."""
    item.stash.setdefault(CARRIED, {})[name] = value


def figure_properties(result: CaseResult) -> list[tuple[str, str]]:
    """One number per user property, for the junitxml a CI dashboard reads: each metric, its
    interval as two properties, and the counts (``prefalign.rouge1``,
    ``prefalign.rouge1.ci_low``, ``prefalign.n_pairs``)."""
    out = []
    for name, value in result.metrics.items():
        out.append((f"prefalign.{name}", _number(value)))
        for bound, limit in zip(("ci_low", "ci_high"), result.ci.get(name) or (), strict=False):
            out.append((f"prefalign.{name}.{bound}", _number(limit)))
    for count in ("n_users", "n_items", "n_pairs"):
        out.append((f"prefalign.{count}", str(getattr(result, count))))
    return out


def _number(value: float | None) -> str:
    return "nan" if value is None else f"{value:.6g}"


def group_name(suite: str, options: tuple[tuple[str, str], ...], size: str) -> str:
    """The name of a (suite, options, size) group: its tests share a model, data, pairs,
    prefills and fitted reward methods (``xdist_group``, ``--prefalign-shard``)."""
    where = ",".join(f"{k}={v}" for k, v in options)
    return f"{suite}[{where}]-{size}" if where else f"{suite}-{size}"


def case_name(
    suite: str, method: MethodName, size: str, sweep: tuple[str, float] | None = None
) -> str:
    """A test's name, ``pref_lamp[args[lore]-135m]``: the suite with the method and the size as
    its parameters (``-k lore``, ``-k args`` and ``-k 135m`` select by them); a test of the
    strength sweep names its strength after the method (``pref_lamp[args[lore]@w=0.25-135m]``)."""
    return f"{suite}[{row_name(method, sweep)}-{size}]"


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
    """One (method, suite, size): evaluates its case, records the result, checks it."""

    def __init__(
        self,
        *,
        suite: str,
        suite_options: tuple[tuple[str, str], ...],
        method: MethodName,
        size: str,
        host: Host,
        sweep: tuple[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.suite, self.suite_options = suite, suite_options
        self.method, self.size, self.host = method, size, host
        self.sweep = sweep  # (option, value): a test of the strength sweep
        self.add_marker(pytest.mark.prefalign)

    @property
    def row(self) -> str:
        """The method its result names: the method, with a swept test's strength."""
        return row_name(self.method, self.sweep)

    def runtest(self) -> None:
        result = self.host.evaluate(self)
        carry(self, RESULT, result.to_json())
        self.user_properties += figure_properties(result)
        problems = self.host.problems(self, result)
        if problems:
            raise PrefalignError(f"{self.name}: " + "; ".join(problems))

    def repr_failure(self, excinfo, style=None):
        error = excinfo.value
        if isinstance(error, MethodFailure) and error.__cause__ is not None:
            style = style or self.config.getoption("tbstyle", "auto")
            if style not in ("no", "line"):
                return f"{error}\n\n{method_traceback(error.__cause__, style)}"
        if isinstance(error, PrefalignError):
            return str(error)
        if not self.config.getoption("fulltrace", False):
            # an unexpected error (a bug in a method, say) is shown from ``runtest`` down: the
            # frames above it are pytest's own and would push the method's frames off the screen
            excinfo.traceback = excinfo.traceback.cut(path=Path(__file__)).filter(excinfo)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


PACKAGE = Path(__file__).resolve().parents[1]  # pytest_prefalign/


def method_traceback(error: BaseException, style: str) -> str:
    """The traceback of a method's own exception as pytest shows one, trimmed to the frames
    outside pytest_prefalign: where the method (a plugin's module, a built-in under methods/)
    went wrong, not the evaluation that called it."""
    info = pytest.ExceptionInfo.from_exception(error)
    own = info.traceback.filter(lambda entry: PACKAGE not in Path(str(entry.path)).parents)
    if len(own):
        info.traceback = own
    shown = {"short": "short", "native": "native"}.get(style, "long")
    rendered = info.getrepr(style=cast(Any, shown), funcargs=False, tbfilter=False)
    text = str(rendered)  # as pytest renders it, stripped at both ends
    if shown == "long" and not text.startswith((">", "E ")):
        # the strip took the first source line's indentation: the long style writes each
        # source line four columns in, beside the ">" of the failing line and the "E" lines
        text = "    " + text
    return text
