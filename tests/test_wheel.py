"""The package as a user gets it: a wheel built from the sources, installed (not editable) into
a fresh virtual environment outside the repository, then used from a project of one's own: a
two-line ``suite.toml`` and the tiny model in the ini. pytest's entry point, the built-ins
(listed in the registry, no entry point of their own), the package data (the suites'
``suite.toml``) and the ``prefalign`` command must all work from the wheel.

The fresh environment gets its dependencies without a network: a ``.pth`` file puts a folder
of links to this environment's installed packages on its path, every one but
pytest-prefalign's own (its editable finder and metadata), so that ``pytest_prefalign`` can only
come from the wheel. The wheel is installed with its dependencies and no index: the install
succeeds only if the declared ranges accept the versions already there, and it installs
nothing but pytest-prefalign."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["setup.cfg", "pyproject.toml", "README.md", "pytest_prefalign", "methods", "suites"]
FOLDERS = {"pytest_prefalign": "pytest_prefalign", "prefalign_methods": "methods"}
FOLDERS["prefalign_suites"] = "suites"
OWN = ("pytest_prefalign", "prefalign_methods", "prefalign_suites", "__editable__")


def run(*args: str | Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True)


def clean_env(venv: Path, **extra: str) -> dict[str, str]:
    """The environment of a shell where ``venv`` is active: nothing of this one's paths."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    return {**env, "VIRTUAL_ENV": str(venv), "PYTHONNOUSERSITE": "1", **extra}


def build_wheel(work: Path) -> Path:
    """The wheel, built offline from a copy of the sources (the build leaves nothing in the
    repository), with this environment's setuptools."""
    source = work / "src"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    dist = work / "dist"
    out = run(
        sys.executable,
        *("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet"),
        *("--wheel-dir", dist, source),
        cwd=work,
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = dist.glob("pytest_prefalign-*.whl")
    return wheel


def source_files() -> list[str]:
    """Every module and suite.toml of the sources, as the wheel names it."""
    found = []
    for package, folder in FOLDERS.items():
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts:
                found.append("/".join([package, *path.relative_to(ROOT / folder).parts]))
    return found


def linked_dependencies(work: Path) -> Path:
    """A folder of links to every package installed here except pytest-prefalign's own."""
    deps = work / "deps"
    deps.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not entry.name.startswith(OWN) and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    return deps


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed in it."""
    work = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(work)
    missing = sorted(set(source_files()) - set(zipfile.ZipFile(wheel).namelist()))
    assert missing == []  # a package left out of setup.cfg's list, or a suite.toml
    venv = work / "venv"
    out = run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=work, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    (site,) = venv.glob("lib/python*/site-packages")
    site.joinpath("_prefalign_test_deps.pth").write_text(f"{linked_dependencies(work)}\n")
    out = run(
        sys.executable,
        *("-m", "pip", "--python", venv / "bin" / "python", "install", "--no-index"),
        *("--find-links", wheel.parent, "--disable-pip-version-check", wheel),
        cwd=work,
        env=clean_env(venv),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # every dependency was there, in range: nothing but the package itself was installed
    (installed,) = [line for line in out.stdout.splitlines() if line.startswith("Successfully")]
    assert installed == "Successfully installed pytest-prefalign-0.1.0"
    return venv


@pytest.mark.slow  # builds a wheel, and a pytest subprocess imports torch and runs the tiny model
def test_the_wheel_runs_a_job_outside_the_repository(venv: Path, tmp_path: Path) -> None:
    env = clean_env(venv, PREFALIGN_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    project = tmp_path / "project"
    (project / "suites" / "synthetic").mkdir(parents=True)
    (project / "suites" / "synthetic" / "suite.toml").write_text('[suite]\nname = "synthetic"\n')
    (project / "pytest.ini").write_text("[pytest]\nprefalign_models = tiny = tiny\n")

    code = "import pytest_prefalign, prefalign_suites; print(pytest_prefalign.__file__)"
    out = run(venv / "bin" / "python", "-c", code, cwd=project, env=env)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).is_relative_to(venv)  # the wheel's, not the repository's

    out = run(venv / "bin" / "prefalign", "list", cwd=project, env=env)  # the console script
    assert out.returncode == 0, out.stdout + out.stderr
    assert "synthetic" in out.stdout and "per_user_bt" in out.stdout  # entry points

    out = run(  # pytest's own script is not in this venv (pytest is linked in): python -m
        venv / "bin" / "python",
        *("-m", "pytest"),
        *("--prefalign", "suites/synthetic", "--prefalign-sizes", "tiny"),
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
