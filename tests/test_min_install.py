"""Installed into a researcher's existing environment, the package replaces nothing: a copy of
the minimum-versions environment (every dependency at the version constraints-min.txt pins,
the lower bounds of setup.cfg) gets the built wheel by a plain ``pip install``, and afterwards
every distribution in it is the version it was, and a synthetic-suite job runs from it.

The environment is the one CI's minimum-versions step makes (``.ci/run``), named by
``PREFALIGN_MIN_VENV``; without that variable the test is skipped and says so (making one
downloads about 3 GB: torch 2.6's CUDA wheel and its libraries). Set, it must be such an
environment, or the test fails. The test works on a copy made of hard links (seconds for some
60,000 files; a file that pip or Python writes replaces its link in the copy and leaves the
original as it was), so the environment is the same for the next run. Run it with a Python that
can build the wheel (``.venv``'s: setuptools and wheel, no network):

    PREFALIGN_MIN_VENV=$PWD/.venv-min .venv/bin/python -m pytest tests/test_min_install.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from test_wheel import build_wheel, clean_env, run

ROOT = Path(__file__).resolve().parents[1]
ENV = "PREFALIGN_MIN_VENV"
PROJECT = "pytest-prefalign"
VERSIONS = (
    "import json, importlib.metadata as m;"
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
)


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def minimum_lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints-min.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[normal(name)] = version.strip()
    return pins


def link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system: a real copy
        shutil.copy2(source, target)


def installed(python: Path, env: dict[str, str]) -> dict[str, str]:
    """Every distribution the environment of ``python`` has, by normalised name: its version
    (pytest-prefalign's own left out: the wheel replaces the editable install)."""
    out = run(python, "-c", VERSIONS, cwd=python.parent, env=env)
    assert out.returncode == 0, out.stderr
    found = {normal(n): v for n, v in json.loads(out.stdout).items()}
    found.pop(PROJECT, None)
    return found


@pytest.fixture(scope="module")
def minimum_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the minimum-versions environment."""
    given = os.environ.get(ENV)
    if not given:
        pytest.skip(f"{ENV} is not set: CI's minimum-versions step makes that environment")
    source = Path(given).resolve()
    assert (source / "pyvenv.cfg").is_file(), f"{ENV}={given} is not a virtual environment"
    copy = tmp_path_factory.mktemp("min") / "venv"
    shutil.copytree(source, copy, symlinks=True, copy_function=link_or_copy)
    return copy


def test_the_wheel_installs_beside_the_lower_bounds_and_replaces_nothing(
    minimum_venv: Path, tmp_path: Path
) -> None:
    python = minimum_venv / "bin" / "python"
    env = clean_env(minimum_venv, PREFALIGN_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    before = installed(python, env)
    # the environment is the minimum lock: every pinned package at its pinned version
    off = {
        name: (before.get(name), version)
        for name, version in minimum_lock().items()
        if before.get(name, "").split("+")[0] != version
    }
    assert off == {}, f"{ENV} is not the environment of constraints-min.txt: {off}"

    wheel = build_wheel(tmp_path)
    out = run(  # as a user would: the index within reach, nothing told to stay
        python,
        *("-m", "pip", "install", "--disable-pip-version-check", "--retries", "0"),
        *("--timeout", "15", wheel),
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Downloading" not in out.stdout, out.stdout  # nothing fetched for a dependency
    (done,) = [line for line in out.stdout.splitlines() if line.startswith("Successfully")]
    assert done == "Successfully installed pytest-prefalign-0.1.0"
    after = installed(python, env)
    changed = {n: (before.get(n), after.get(n)) for n in before.keys() | after.keys()}
    assert {n: c for n, c in changed.items() if c[0] != c[1]} == {}

    project = tmp_path / "project"
    (project / "suites" / "synthetic").mkdir(parents=True)
    (project / "suites" / "synthetic" / "suite.toml").write_text('[suite]\nname = "synthetic"\n')
    (project / "pytest.ini").write_text("[pytest]\nprefalign_models = tiny = tiny\n")
    code = "import pytest_prefalign; print(pytest_prefalign.__file__)"
    out = run(python, "-c", code, cwd=project, env=env)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).is_relative_to(minimum_venv)  # the wheel's, in the copy

    out = run(
        python,
        *("-m", "pytest", "--prefalign", "suites/synthetic", "--prefalign-sizes", "tiny"),
        *("--prefalign-limit", "2", "--prefalign-methods", "base"),
        *("--prefalign-json", "run.json", "-p", "no:cacheprovider"),
        cwd=project,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "1 passed" in out.stdout
    (row,) = json.loads((project / "run.json").read_text())["results"]
    assert (row["suite"], row["method"]) == ("synthetic", "base")
    assert 0 <= row["metrics"]["rougeL"] <= 1 and row["n_users"] == 2
