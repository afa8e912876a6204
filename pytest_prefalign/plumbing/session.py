"""One prefalign run: the registry, the resolved options, the evaluator the tests use, the results
collected from test reports, the terminal summary and the run file. Imported only with
``--prefalign``; the evaluation (numpy, torch) is imported when the first test runs."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_prefalign import cache, method_options, portable, registry, storage
from pytest_prefalign.errors import PrefalignError, PrefalignWarning, SuiteUnavailable
from pytest_prefalign.plumbing import gating, options, paths, preflight, progress, shards
from pytest_prefalign.plumbing.collect import CARRIED, RESULT, CaseItem, SuiteFile
from pytest_prefalign.plumbing.outcomes import Outcomes, describe
from pytest_prefalign.plumbing.workers import is_worker
from pytest_prefalign.registry import MethodName, UnknownName
from pytest_prefalign.runtime.pool import ModelPool

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.evaluation.case import Evaluator
    from pytest_prefalign.runs.records import CaseResult, RunFile


class PrefalignSession:
    """The plugin object registered when ``--prefalign`` is given; its methods are hooks, and
    it is the ``Host`` of the collected items."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.settings = options.settings(config)
        self.registry = registry.load(config.pluginmanager)
        check_plugins(config, self.registry, strict=self.settings.strict_plugins)
        self.methods = self._resolve_methods()
        self.sizes = self.settings.sizes
        try:
            self.method_options = method_options.resolve(self.settings.assignments, self.registry)
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
        self.models = ModelPool.from_lines(self.settings.models)
        self.models.check(self.settings.sizes)
        # values kept between runs, by content; --prefalign-no-cache: neither read nor written
        self.disk = cache.Disk(storage.cache_root(), enabled=self.settings.use_cache)
        # what interrupted writes of earlier runs left (a killed conversion, say)
        self.leftovers = (
            [] if is_worker(config) else storage.remove_stale_temporaries(self.disk.root)
        )
        self._evaluator: Evaluator | None = None
        self.suites_checked = False  # the collected suites' options and data (preflight)
        self.results: list[CaseResult] = []
        self.write_errors: list[str] = []
        self.notes: list[str] = []  # lines for the summary
        self.unavailable: dict[
            tuple[str, tuple[tuple[str, str], ...]], str
        ] = {}  # -> 1st test  # files the end of the run could not write
        self.run: RunFile | None = None
        self.run_path: Path | None = None
        self.report_path: Path | None = None
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

    def pytest_sessionstart(self) -> None:
        # after every plugin's configure: the terminal reporter is there to write to
        if progress.wanted(self.config):
            self.config.pluginmanager.register(progress.Progress(self.config), "prefalign-progress")

    def pytest_report_header(self) -> list[str]:
        if not self.leftovers:
            return []
        return [
            f"prefalign: removed {len(self.leftovers)} leftover temporary file(s) of interrupted "
            f"writes from the cache {self.disk.root}"
        ]

    # -- collection and evaluation (the items' host) --------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector):
        if file_path.name == "suite.toml":
            return SuiteFile.from_parent(parent, path=file_path, host=self)
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
        problem = preflight.bad_options(self.registry, found)
        if problem:
            raise pytest.UsageError(problem)
        if self.config.option.collectonly and self.data_dir is None:
            return  # listing the tests needs no data
        rootdir = Path(self.config.rootpath)
        needed = preflight.needing_data(self.registry, found)
        problem = preflight.problem(needed, self.settings, self.data_dir, rootdir)
        if problem:
            raise pytest.UsageError(problem)

    @property
    def evaluator(self) -> Evaluator:
        if self._evaluator is None:
            from pytest_prefalign.evaluation.case import Evaluator
            from pytest_prefalign.evaluation.context import RunContext, Settings

            settings = Settings(
                limit=self.settings.limit,
                seed=self.settings.seed,
                reduce=self.settings.reduce,
                guidance=self.settings.guidance,
                data=str(self.data_dir) if self.data_dir is not None else None,
                data_ini=self.settings.data_ini,
                rootdir=Path(self.config.rootpath),
            )
            self._evaluator = Evaluator(
                RunContext(self.registry, settings, self.models, self.disk, self.method_options)
            )
        return self._evaluator

    def evaluate(self, item: CaseItem) -> CaseResult:
        from pytest_prefalign.evaluation.context import Case

        try:
            return self.evaluator.run(Case(item.suite, item.suite_options, item.method, item.size))
        except SuiteUnavailable as exc:
            # in full once per suite; its other tests point there in one line
            first = self.unavailable.setdefault((item.suite, item.suite_options), item.name)
            if first == item.name:
                raise
            fetch = f"; fetch its data with: {exc.fetch}" if exc.fetch else ""
            raise PrefalignError(
                f"suite {exc.suite!r} could not load: see the failure of {first} above{fetch}"
            ) from None

    def problems(self, item: CaseItem, result: CaseResult) -> list[str]:
        from pytest_prefalign.evaluation.case import check

        floors = [(floor.metric, floor.value) for floor in self.settings.floors]
        problems = check(result, floors)
        for extra in self.config.hook.pytest_prefalign_check(item=item, result=result):
            problems += extra or []
        return problems

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
            self.config.hook.pytest_prefalign_result(result=result.row(), config=self.config)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.disk.cleanup()
        if is_worker(self.config):
            return
        if not self.results:
            self._no_results()
            return
        from pytest_prefalign.runs import records

        self.outcomes.stopped(session)
        run = self.run = self.build_run()
        runs = Path(self.config.rootpath) / ".prefalign" / "runs"
        self.run_path = self._written(
            "the run file", runs, lambda: records.write_numbered(run, runs)
        )
        if self.json_path is not None:
            path = self.json_path

            def write_json() -> Path:
                records.write(run, path)
                return path

            self._written("--prefalign-json", path, write_json)
        if self.report_dir is not None:
            from pytest_prefalign.analysis.report import write_report

            folder = self.report_dir
            self.report_path = self._written(
                "--prefalign-report", folder, lambda: write_report(run, folder)
            )
        if self.run_path is not None:
            self.config.hook.pytest_prefalign_run_written(
                path=str(self.run_path), run=self.run, config=self.config
            )
        if self.write_errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # CI must see what is missing

    def _no_results(self) -> None:
        """No test left a result: an earlier run's file at ``--prefalign-json`` would pass for
        this run's, so it is removed, and the summary says so."""
        path = self.json_path
        if path is None or self.config.option.collectonly:
            return
        removed = path.is_file()
        path.unlink(missing_ok=True)
        self.notes.append(
            f"--prefalign-json: no test left a result, so nothing was written to {path}"
            + (" (the earlier file there was removed)" if removed else "")
        )

    def _written(self, what: str, where: Path, write: Callable[[], Path]) -> Path | None:
        """``write()``; a failure (a full disk, a folder removed since the run began) is one line
        of the summary, after the leaderboard, instead of a traceback that hides it."""
        try:
            return write()
        except OSError as exc:
            reason = exc.strerror or str(exc)
            self.write_errors.append(f"could not write {what} {exc.filename or where}: {reason}")
            return None

    def build_run(self) -> RunFile:
        """The run file: every result, and the crisis analysis computed once."""
        from pytest_prefalign.analysis import crisis
        from pytest_prefalign.analysis.merge import result_order
        from pytest_prefalign.runs.records import RunFile

        # in a single run's order (suite, size, method as listed), not the order results came
        # in, which under xdist depends on the scheduling: equal figures then rank alike
        order = result_order(
            {"methods": [str(m) for m in self.methods], "sizes": self.settings.sizes}
        )
        results = sorted(self.results, key=order)
        tau, found = crisis.analyse(results)
        complete, outcomes = self.outcomes.summary()
        # no path of this machine: the command line's paths from their roots, named once
        roots = portable.machine_roots(data=self.data_dir, rootdir=Path(self.config.rootpath))
        args = portable.relative(list(self.config.invocation_params.args), roots)
        return RunFile(
            results=results,
            created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            commit=git_commit(Path(self.config.rootpath)),
            config={
                "methods": [str(m) for m in self.methods],
                "sizes": self.settings.sizes,
                "limit": self.settings.limit,
                "reduce": self.settings.reduce,
                "seed": self.settings.seed,
                "options": [str(a) for a in self.settings.assignments],
                "args": args,
                "shard": str(self.settings.shard) if self.settings.shard else None,
                "roots": dict(portable.NAMES),
            },
            models={r.size: r.model for r in self.results},
            tau=tau,
            crisis=found,
            complete=complete,
            outcomes=portable.relative(outcomes, roots),
        )

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if is_worker(self.config):
            return
        from pytest_prefalign.analysis import summary, table

        tr = terminalreporter
        for failure in self.registry.failures:
            tr.write_line(f"prefalign: could not load {failure}", yellow=True)
        for note in self.notes:
            tr.write_line(f"prefalign: {note}", yellow=True)
        if not self.results or self.run is None:
            return
        tr.write_sep("=", "prefalign leaderboard")
        width = terminal_width(tr)
        for line in table.leaderboards(self.run.results, width):
            tr.write_line(line)
        for line in summary.summary_lines(self.run, width):
            tr.write_line(line)
        tr.write_line(cache_line(self.run.results, self.settings.use_cache))
        if self.run_path is not None:
            tr.write_line(f"run file: {self.run_path}")
        if not self.run.complete:
            tr.write_line(
                f"this run is partial ({describe(self.run.outcomes)}): its run file says so "
                "(complete: false), and --prefalign-compare refuses it as a baseline",
                yellow=True,
            )
        if self.report_path is not None:
            tr.write_line(f"report: {self.report_path}")
        for error in self.write_errors:
            tr.write_line(f"prefalign: {error}", red=True)


def terminal_width(tr: pytest.TerminalReporter) -> int | None:
    """The width the summary's tables fit (``wrap.terminal_width``): whether pytest's reporter
    writes to a terminal, and the terminal's width."""
    from pytest_prefalign.analysis import wrap

    return wrap.terminal_width(progress.on_a_terminal(tr))


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


def cache_line(results: list[CaseResult], use_cache: bool) -> str:
    """How many of the distinct cached values the tests used came from the cache."""
    used = {(u["artifact"], u["key"]): u["hit"] for r in results for u in r.cache}
    reused = sum(used.values())
    if not use_cache:
        return f"cache: off (--prefalign-no-cache), {len(used) - reused} values computed" + (
            ", the converted model reused" if reused else ""
        )
    return (
        f"cache: {reused} of {len(used)} values reused, {len(used) - reused} computed "
        "(each keyed by its model, data, options, seed and code; --prefalign-no-cache "
        "computes everything)"
    )


def git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
