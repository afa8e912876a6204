"""One prefalign run: the registry, the resolved options, the results collected from test
reports, the terminal summary and the run file. Imported only with ``--prefalign``; still light."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_prefalign import cache, method_options, registry, storage
from pytest_prefalign.plumbing import gating, options
from pytest_prefalign.registry import MethodName, UnknownName
from pytest_prefalign.runtime.pool import ModelPool

RESULT_PROPERTY = "prefalign_result"


def is_worker(config: pytest.Config) -> bool:
    """pytest-xdist workers run tests; only the controller summarises and writes files."""
    return hasattr(config, "workerinput")


class PrefalignSession:
    """The plugin object registered when ``--prefalign`` is given; its methods are hooks."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.settings = options.settings(config)
        self.registry = registry.load(config.pluginmanager)
        self.methods = self._resolve_methods()
        try:
            self.method_options = method_options.resolve(self.settings.assignments,
                                                         self.registry)
        except ValueError as exc:
            raise pytest.UsageError(f"--prefalign-option {exc}") from None
        self.models = ModelPool.from_lines(self.settings.models)
        self.models.check(self.settings.sizes)
        self.results: list[dict[str, Any]] = []
        self.run_path: Path | None = None
        self.report_path: Path | None = None
        self.state: dict[Any, Any] = {}  # worker-side caches: models, suite data, fitted RMs
        # values kept between runs, by content; --prefalign-no-cache: neither read nor written
        self.disk = cache.Disk(storage.cache_root(), enabled=self.settings.use_cache)
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

    def model_pool(self) -> ModelPool:
        return self.models

    # -- collection ----------------------------------------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector):
        if file_path.name == "suite.toml":
            from pytest_prefalign.plumbing.collect import SuiteFile

            return SuiteFile.from_parent(parent, path=file_path)
        return None

    # -- results -------------------------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or is_worker(self.config):
            return
        for name, value in report.user_properties:
            if name == RESULT_PROPERTY and isinstance(value, dict):
                self.results.append(value)
                self.config.hook.pytest_prefalign_result(result=value, config=self.config)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.disk.cleanup()
        if is_worker(self.config) or not self.results:
            return
        run = self.build_run()
        root = Path(self.config.rootpath)
        self.run_path = write_numbered_run(run, root / ".prefalign" / "runs")
        if self.settings.json_path:
            write_run(run, Path(self.settings.json_path))
        if self.settings.report_dir:
            from pytest_prefalign.analysis.report import write_report

            self.report_path = write_report(run, Path(self.settings.report_dir))
        self.config.hook.pytest_prefalign_run_written(
            path=str(self.run_path), run=run, config=self.config)

    def build_run(self) -> dict[str, Any]:
        from pytest_prefalign.analysis import crisis

        results, pairs, items, models = [], [], [], {}
        for res in self.results:
            res = dict(res)
            records = res.pop("records", {})
            pairs.extend(records.get("pairs", []))
            items.extend(records.get("items", []))
            models[res["size"]] = res.get("model", {})
            results.append(res)
        return {
            "version": 1,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "commit": git_commit(Path(self.config.rootpath)),
            "config": {
                "methods": [str(m) for m in self.methods], "sizes": self.settings.sizes,
                "limit": self.settings.limit, "reduce": self.settings.reduce,
                "seed": self.settings.seed, "args": list(self.config.invocation_params.args),
            },
            "models": models,
            "results": results,
            "tau": crisis.tau_entries(results),
            "crisis": {
                "inversions": crisis.inversion_entries(results),
                "circular": crisis.circular_entries(results),
                "spread": crisis.spread(results)["flags"],
            },
            "pairs": pairs,
            "items": items,
        }

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if is_worker(self.config):
            return
        from pytest_prefalign.analysis import table

        tr = terminalreporter
        for failure in self.registry.failures:
            tr.write_line(f"prefalign: could not load {failure}", yellow=True)
        if not self.results:
            return
        tr.write_sep("=", "prefalign leaderboard")
        for line in table.leaderboards(self.results):
            tr.write_line(line)
        from pytest_prefalign.analysis import crisis

        for line in crisis.summary_lines(self.results):
            tr.write_line(line)
        tr.write_line(cache_line(self.results, self.settings.use_cache))
        if self.run_path is not None:
            tr.write_line(f"run file: {self.run_path}")
        if self.report_path is not None:
            tr.write_line(f"report: {self.report_path}")


def cache_line(results: list[dict[str, Any]], use_cache: bool) -> str:
    """How many of the distinct cached values the tests used came from the cache."""
    used = {(u["artifact"], u["key"]): u["hit"] for r in results for u in r.get("cache", [])}
    reused = sum(used.values())
    if not use_cache:
        return (f"cache: off (--prefalign-no-cache), {len(used) - reused} values computed"
                + (", the converted model reused" if reused else ""))
    return (f"cache: {reused} of {len(used)} values reused, {len(used) - reused} computed "
            "(each keyed by its model, data, options, seed and code; --prefalign-no-cache "
            "computes everything)")


def git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def write_numbered_run(run: dict[str, Any], runs_dir: Path) -> Path:
    """Write the run as ``runs_dir/NNNN_<commit>_<timestamp>.json``, numbered under a lock."""
    with storage.locked(runs_dir / "index"):
        number = 1 + sum(1 for _ in runs_dir.glob("[0-9][0-9][0-9][0-9]_*.json"))
        stamp = run["created"].replace(":", "").replace("-", "")[:15]
        path = runs_dir / f"{number:04d}_{run['commit'] or 'nogit'}_{stamp}.json"
        write_run(run, path)
    return path


def write_run(run: dict[str, Any], path: Path) -> None:
    """Write the run atomically, its per-pair and per-item records in JSONL beside it."""
    stem = path.with_suffix("")
    storage.atomic_write_jsonl(stem.with_name(stem.name + ".pairs.jsonl"), run["pairs"])
    storage.atomic_write_jsonl(stem.with_name(stem.name + ".items.jsonl"), run["items"])
    storage.atomic_write_json(path, run)
