"""The paths a run is given, declared and checked before any work: where its results go
(``--prefalign-json``, ``--prefalign-report``) and where its data comes from
(``--prefalign-data``). A path that cannot serve is a usage error that names the option and the
path, not a traceback after the run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_prefalign.api import declared


def add_data_options(parser: pytest.Parser) -> None:
    """Where the suites' data comes from (``check_data_dir``, then ``datadir.find_data_dir``)."""
    group = parser.getgroup("prefalign")
    group.addoption(
        "--prefalign-data",
        metavar="DIR",
        help="data directory (else ini prefalign_data, env PREFALIGN_DATA, user cache).",
    )
    parser.addini("prefalign_data", "data directory for prefalign suites (relative to rootdir)")


def add_output_options(parser: pytest.Parser) -> None:
    """Where the run's results go besides the terminal (``check_output_file``,
    ``check_output_folder``)."""
    group = parser.getgroup("prefalign")
    group.addoption(
        "--prefalign-json", metavar="PATH", help="also write this run's results to PATH."
    )
    group.addoption(
        "--prefalign-report",
        metavar="DIR",
        help="write the HTML report (leaderboards, tau, inversions, circular flags, "
        "plot) to DIR at the end of the run.",
    )


def given(config: pytest.Config, text: str | None) -> Path | None:
    """A path option as given, relative to where pytest was invoked (also on xdist workers)."""
    if text is None:
        return None
    return Path(config.invocation_params.dir, Path(text).expanduser()).resolve()


def check_output_file(option: str, path: Path) -> None:
    """A file the run will write (with files beside it): not a folder, in a folder it may
    create and write."""
    if path.is_dir():
        raise pytest.UsageError(f"{option} {path}: is a folder; give a file, e.g. {path}/run.json")
    problem = _unwritable(path.parent)
    if problem:
        raise pytest.UsageError(f"{option} {path}: {problem}")


def check_output_folder(option: str, path: Path) -> None:
    """A folder the run will write files into (created if missing)."""
    if path.exists() and not path.is_dir():
        raise pytest.UsageError(f"{option} {path}: exists and is not a folder")
    problem = _unwritable(path)
    if problem:
        raise pytest.UsageError(f"{option} {path}: {problem}")


def _unwritable(folder: Path) -> str | None:
    """Why files cannot be written in ``folder`` (or in the folders that would be created down
    to it), or None."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot write in {existing} (permission denied)"
    return None


def check_data_dir(path: Path) -> None:
    """``--prefalign-data DIR`` exists: a data directory asked for is never silently replaced by
    another place."""
    if not path.is_dir():
        raise pytest.UsageError(
            f"--prefalign-data {path}: no such directory (it should hold one folder per suite, "
            "e.g. acl-anthology/; prefalign data lists what each suite reads)"
        )


def missing_suite_data(path: Path, suites: dict[str, Any]) -> str | None:
    """Why ``--prefalign-data DIR`` cannot serve the collected suites that need a data folder
    (``suites``: name -> the suite), or None."""
    lacking = sorted(
        (name, s.source) for name, s in suites.items() if not (path / s.source).is_dir()
    )
    if not lacking:
        return None
    folders = ", ".join(f"{source}/ (suite {name})" for name, source in lacking)
    fetchable = [name for name, _ in lacking if declared(suites[name], "fetcher")]
    fetch = (
        f", or build it there with: prefalign data fetch {' '.join(fetchable)} --to {path}"
        if fetchable
        else ""
    )
    return f"--prefalign-data {path}: holds no {folders}; give the directory that holds it{fetch}"
