"""One prefalign run: the registry and the resolved options, checked when the run is configured,
the results gathered from the test reports, and the hooks that hand the rest to the modules
that do it: collection (``collect.py``, ``preflight.py``), each test's evaluation
(``dispatch.py``), the run file (``run_file.py``) and the summary (``run_summary.py``). Imported
only with ``--prefalign``; the evaluation (numpy, torch) is imported when the first test runs."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_prefalign import cache, method_options, registry, storage
from pytest_prefalign.errors import PrefalignWarning
from pytest_prefalign.plumbing import (
    gating,
    options,
    paths,
    preflight,
    progress,
    run_file,
    run_summary,
    shards,
    waiting,
)
from pytest_prefalign.plumbing.collect import CARRIED, RESULT, SuiteFile
from pytest_prefalign.plumbing.dispatch import Dispatch
from pytest_prefalign.plumbing.outcomes import Outcomes
from pytest_prefalign.plumbing.workers import is_worker, process_count
from pytest_prefalign.registry import MethodName, UnknownName
from pytest_prefalign.runtime.pool import ModelPool

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runs.records import CaseResult, RunFile


def set_memory(config: pytest.Config, gb: float) -> None:
    """``--prefalign-memory``: the run's total for this process and the workers it starts
    (``memory.TOTAL_ENV``, read by the runtime's budgets), as it was once the run ends."""
    from pytest_prefalign.runtime import memory

    before = os.environ.get(memory.TOTAL_ENV)
    os.environ[memory.TOTAL_ENV] = str(gb)

    def restore() -> None:
        if before is None:
            os.environ.pop(memory.TOTAL_ENV, None)
        else:
            os.environ[memory.TOTAL_ENV] = before

    config.add_cleanup(restore)


class PrefalignSession:
    """The plugin object registered when ``--prefalign`` is given; its methods are hooks."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.settings = options.settings(config)
        if self.settings.memory is not None:
            set_memory(config, self.settings.memory)
        self.registry = registry.load(config.pluginmanager)
        check_plugins(config, self.registry, strict=self.settings.strict_plugins)
        self.methods = self._resolve_methods()
        self.sizes = self.settings.sizes
        try:
            resolved = method_options.resolve(self.settings.assignments, self.registry)
        except ValueError as exc:
            raise pytest.UsageError(f"--prefalign-option {exc}") from None
        # output and data paths, checked before any work
        self.json_path = paths.given(config, self.settings.json_path)
        self.report_dir = paths.given(config, self.settings.report_dir)
        self.data_dir = paths.given(config, self.settings.data)
        if self.json_path is not None:
            paths.check_output_file("--prefalign-json", self.json_path)
        if self.report_dir is not None:
            paths.check_output_folder("--prefalign-report", self.report_dir)
        if self.data_dir is not None:
            paths.check_data_dir(self.data_dir)
        self.models = ModelPool.from_lines(self.settings.models, self.settings.dtype)
        self.models.check(self.settings.sizes)
        self.models.check_dtype()
        # values kept between runs, by content; --prefalign-no-cache: neither read nor written
        self.disk = cache.Disk(storage.cache_root(), enabled=self.settings.use_cache)
        # what interrupted writes of earlier runs left (a killed conversion, say)
        self.leftovers = (
            [] if is_worker(config) else storage.remove_stale_temporaries(self.disk.root)
        )
        # the collected items' host: each test's evaluation and the checks that fail it
        self.host = Dispatch(
            config,
            self.settings,
            self.registry,
            self.methods,
            resolved,
            self.models,
            self.disk,
            self.data_dir,
        )
        self.suites_checked = False  # the collected suites' options and data (preflight)
        self.results: list[CaseResult] = []
        self.notes: list[str] = []  # lines for the summary
        self.run: RunFile | None = None
        self.written = run_file.Written()
        # what becomes of each test, for the run file (its completeness)
        self.outcomes = Outcomes(config)
        config.pluginmanager.register(self.outcomes, "prefalign-outcomes")
        if self.settings.shard is not None:
            sharding = shards.Sharding(config, self.settings.shard)
            self.outcomes.shard = (str(self.settings.shard), sharding.left_out)
            config.pluginmanager.register(sharding, "prefalign-shard")
        if gating.active(config):
            config.pluginmanager.register(gating.Gating(config), "prefalign-gating")

    def _resolve_methods(self) -> list[MethodName]:
        if self.settings.methods is None:
            return self.registry.default_methods()
        methods = []
        for text in self.settings.methods:
            try:
                method = MethodName.parse(text)
                self.registry.check_method(method)
            except (ValueError, UnknownName) as exc:
                raise pytest.UsageError(f"--prefalign-methods: {exc}") from None
            methods.append(method)
        return methods

    @property
    def run_path(self) -> Path | None:
        """The numbered run file this run wrote (None before the end, or where it could not)."""
        return self.written.run_path

    def pytest_sessionstart(self) -> None:
        # after every plugin's configure: the terminal reporter is there to write to
        if progress.wanted(self.config):
            self.config.pluginmanager.register(progress.Progress(self.config), "prefalign-progress")

    def pytest_report_header(self) -> list[str]:
        lines = []
        chosen = self.config.stash.get(waiting.KEY, None)
        if chosen is not None and chosen.how != "user":
            lines.append(chosen.header())
        if not self.leftovers:
            return lines
        return lines + [
            f"prefalign: removed {len(self.leftovers)} leftover temporary file(s) of interrupted "
            f"writes from the cache {self.disk.root}"
        ]

    # -- collection ----------------------------------------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector):
        if file_path.name == "suite.toml":
            return SuiteFile.from_parent(parent, path=file_path, host=self.host)
        return None

    @pytest.hookimpl(tryfirst=True)  # before --collect-only lists the tests
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The options and data of the collected suites, checked before any test runs
        (``preflight``)."""
        if not is_worker(self.config):
            self._check_suites(preflight.suites_of_items(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        """Under xdist the workers collect: the same check, on the ids the first one reports."""
        if not self.suites_checked:
            self._check_suites(preflight.suites_of_ids(Path(self.config.rootpath), ids))

    def _check_suites(self, found: preflight.Found) -> None:
        self.suites_checked = True
        listing = bool(self.config.option.collectonly)
        preflight.check(
            self.registry,
            found,
            self.settings,
            self.data_dir,
            Path(self.config.rootpath),
            listing=listing,
        )
        if not listing:  # a run likely to exceed its memory is told before its first test
            count = process_count(self.config)
            warning = preflight.memory_warning(self.registry, found, self.models, self.sizes, count)
            if warning:
                warnings.warn_explicit(PrefalignWarning(warning), PrefalignWarning, "prefalign", 0)

    # -- results -------------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):
        report = yield
        if call.when == "call":
            for name, value in item.stash.get(CARRIED, {}).items():
                setattr(report, name, value)  # pytest and xdist carry a report's extra attributes
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or is_worker(self.config):
            return
        from pytest_prefalign.runs.records import CaseResult

        value = getattr(report, RESULT, None)
        if isinstance(value, dict):
            result = CaseResult.from_json(value, report.nodeid)
            # a test run again (xdist reruns a crashed worker's test whose report had already
            # come) counts once, with its last result: one result per (suite, method, size)
            self.results = [r for r in self.results if r.key != result.key]
            self.results.append(result)
            self.config.hook.pytest_prefalign_result(result=result, config=self.config)

    # -- the end: the run file and the summary -------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.disk.cleanup()
        if is_worker(self.config):
            return
        if not self.results:
            if not self.config.option.collectonly:
                note = run_file.remove_stale(self.json_path)
                self.notes += [note] if note else []
            return
        self.outcomes.stopped(session)
        run = self.run = run_file.build(
            self.config,
            self.settings,
            self.methods,
            self.results,
            self.outcomes.summary(),
            self.data_dir,
            self.disk,
        )
        rootdir = Path(self.config.rootpath)
        self.written = run_file.write(run, rootdir, self.json_path, self.report_dir)
        if self.written.run_path is not None:
            self.config.hook.pytest_prefalign_run_written(
                path=str(self.written.run_path), run=run, config=self.config
            )
        if self.written.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # CI must see what is missing

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if is_worker(self.config):
            return
        run_summary.write(
            terminalreporter,
            self.registry,
            self.notes,
            self.run,
            self.written,
            self.disk,
            use_cache=self.settings.use_cache,
        )


def check_plugins(config: pytest.Config, found: registry.Registry, *, strict: bool) -> None:
    """A name two plugins register is a usage error naming both; a plugin that failed to load
    is a warning (in the warnings summary, and a line at the end), or with
    ``--prefalign-strict-plugins`` a usage error with its traceback."""
    if found.conflicts:
        raise pytest.UsageError("prefalign: " + "\n".join(found.conflicts))
    if not found.failures:
        return
    if strict:
        raise pytest.UsageError(
            "prefalign: a plugin failed to load (--prefalign-strict-plugins):\n"
            + "\n".join(f.full() for f in found.failures)
        )
    for failure in found.failures:
        config.issue_config_time_warning(
            PrefalignWarning(f"prefalign: could not load {failure}"), stacklevel=2
        )
