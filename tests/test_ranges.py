"""The ranges setup.cfg declares are true at their lower ends: every lower bound is the exact
version the minimum lock (constraints-min.txt) pins, the set CI installs in a second
environment to run the fast tests against (issue 40: a lower bound is the oldest version the
tests pass with, so a bound cannot drift from what was tested); the lock of the README's set-up
(constraints.txt) lies inside every range; and both locks hold every declared dependency."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> list[tuple[str, str]]:
    """``(normalised name, specifier)`` of every declared dependency, extras' included."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    options = config["options"]
    lines = options["install_requires"].splitlines()
    for extra in config["options.extras_require"].values():
        lines += extra.splitlines()
    found = []
    for line in (line.strip() for line in lines):
        if not line or line.startswith("#"):
            continue
        match = re.match(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(.*)", line)
        assert match, line
        if _normal(match.group(1)) != "pytest-prefalign":  # an extra naming the others
            found.append((_normal(match.group(1)), match.group(2)))
    return found


def _locked(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            package, version = line.split("==", 1)
            pins[_normal(package)] = version.strip()
    return pins


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def test_every_lower_bound_is_the_minimum_locked_version() -> None:
    lowest = _locked("constraints-min.txt")
    checked = 0
    for name, spec in _requirements():
        assert name in lowest, f"{name} is declared but not in constraints-min.txt"
        lower = re.search(r">=\s*([^,\s]+)", spec)
        if lower:
            assert lower.group(1) == lowest[name], (name, lower.group(1), lowest[name])
            checked += 1
        assert SpecifierSet(spec).contains(lowest[name]), (name, spec, lowest[name])
    assert checked >= 20


def test_the_main_lock_lies_inside_every_range() -> None:
    locked = _locked("constraints.txt")
    for name, spec in _requirements():
        assert name in locked, f"{name} is declared but not locked in constraints.txt"
        assert SpecifierSet(spec).contains(locked[name]), (name, spec, locked[name])


def test_install_sh_pins_the_locked_torch() -> None:
    # torch goes first and alone, by its exact version: an unpinned torch pulls a CUDA build
    (pin,) = re.findall(r'"torch==([^"]+)"', (ROOT / "install.sh").read_text())
    assert pin == _locked("constraints.txt")["torch"]


def test_ci_installs_the_minimum_lock_and_runs_the_fast_tests_there() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    (pin,) = re.findall(r'"torch==([^"]+)"', ci)
    assert pin == _locked("constraints-min.txt")["torch"]
    assert "-c constraints-min.txt" in ci
    assert re.search(r'\.venv-min/bin/python -m pytest -m "not slow"', ci)
    assert "PREFALIGN_MIN_VENV=" in ci  # and the install test, on that environment
