"""The end of a run: its run file built from the results (the analysis computed once, the
configuration, the commit, no path of the machine) and written where the run asked
(``.prefalign/runs/NNNN_...json``, ``--prefalign-json``, ``--prefalign-report``).

A file that cannot be written (a full disk, a folder removed since the run began) is one line of
the summary, after the leaderboard, instead of a traceback that hides it."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_prefalign import cache, portable

if TYPE_CHECKING:  # pragma: no cover
    import pytest

    from pytest_prefalign.plumbing.options import Settings
    from pytest_prefalign.registry import MethodName
    from pytest_prefalign.runs.header import RunOutcomes
    from pytest_prefalign.runs.records import CaseResult, RunFile


@dataclass
class Written:
    """Where the run's files went, and the lines for those that could not be written."""

    run_path: Path | None = None  # the numbered run file
    report_path: Path | None = None
    errors: list[str] = field(default_factory=list)

    def attempt(self, what: str, where: Path, write: Callable[[], Path]) -> Path | None:
        """``write()``; an OSError becomes a line of ``errors`` naming ``what`` and ``where``."""
        try:
            return write()
        except OSError as exc:
            reason = exc.strerror or str(exc)
            self.errors.append(f"could not write {what} {exc.filename or where}: {reason}")
            return None


def build(
    config: pytest.Config,
    settings: Settings,
    methods: list[MethodName],
    results: list[CaseResult],
    outcomes: tuple[bool, RunOutcomes],
    data_dir: Path | None,
    disk: cache.Disk,
) -> RunFile:
    """The run file: every result, and the crisis analysis computed once (or read from
    ``disk`` where the same rows were analysed before: ``analysis/memo.py``); ``outcomes`` is
    ``Outcomes.summary()``'s (complete, outcomes)."""
    from pytest_prefalign.analysis import memo
    from pytest_prefalign.analysis.merge import result_order
    from pytest_prefalign.runs.header import RunConfig, RunOutcomes
    from pytest_prefalign.runs.records import RunFile

    rootdir = Path(config.rootpath)
    # no path of this machine: the command line's paths from their roots, named once
    roots = portable.machine_roots(data=data_dir, rootdir=rootdir)
    run_config = RunConfig(
        methods=tuple(str(m) for m in methods),
        sizes=tuple(settings.sizes),
        limit=settings.limit,
        reduce=settings.reduce,
        seed=settings.seed,
        guidance=settings.guidance,
        options=tuple(str(a) for a in settings.assignments),
        args=tuple(portable.relative(list(config.invocation_params.args), roots)),
        shard=str(settings.shard) if settings.shard else None,
        roots=dict(portable.NAMES),
    )
    # in a single run's order (suite, size, method as listed), not the order results came
    # in, which under xdist depends on the scheduling: equal figures then rank alike
    ordered = sorted(results, key=result_order(run_config))
    tau, found = memo.analysed(ordered, disk)
    complete, what_became = outcomes
    return RunFile(
        results=ordered,
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        commit=git_commit(rootdir),
        config=run_config,
        models={r.size: r.model for r in results},
        tau=tau,
        crisis=found,
        complete=complete,
        outcomes=RunOutcomes.from_json(portable.relative(what_became.to_json(), roots)),
    )


def write(run: RunFile, rootdir: Path, json_path: Path | None, report_dir: Path | None) -> Written:
    """The numbered run file under ``rootdir/.prefalign/runs``, the same at ``json_path`` and
    the HTML report in ``report_dir`` where given."""
    from pytest_prefalign.runs import records

    written = Written()
    runs = rootdir / ".prefalign" / "runs"
    written.run_path = written.attempt(
        "the run file", runs, lambda: records.write_numbered(run, runs)
    )
    if json_path is not None:
        path = json_path

        def write_json() -> Path:
            records.write(run, path)
            return path

        written.attempt("--prefalign-json", path, write_json)
    if report_dir is not None:
        from pytest_prefalign.analysis.report import write_report

        folder = report_dir
        written.report_path = written.attempt(
            "--prefalign-report", folder, lambda: write_report(run, folder)
        )
    return written


def remove_stale(json_path: Path | None) -> str | None:
    """No test left a result: an earlier run's file at ``--prefalign-json`` would pass for
    this run's, so it is removed; the line the summary says it with (None: no such path)."""
    if json_path is None:
        return None
    removed = json_path.is_file()
    json_path.unlink(missing_ok=True)
    return f"--prefalign-json: no test left a result, so nothing was written to {json_path}" + (
        " (the earlier file there was removed)" if removed else ""
    )


def git_commit(root: Path) -> str | None:
    """The short commit of the checkout at ``root`` that the run file records, or None (no
    git, not a checkout)."""
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
