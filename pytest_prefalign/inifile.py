"""The configuration file pytest reads, found outside a pytest run as pytest itself finds it,
for the ``prefalign`` command (the data folder an ini value names, the project root).

Inside a run pytest says it (``config.inipath``, ``config.rootpath``, ``config.getini``); the
command has no run, and pytest's own discovery (``locate_config``) is private and changed its
signature between pytest 8 and 9. So the rules are written here, after pytest's documentation
("Configuration file formats", "Finding the rootdir"): from the folder given upwards, each
folder's files in this order, the first that is a pytest configuration file wins:

- ``pytest.toml``, ``.pytest.toml`` (pytest 9 on): always, the ``[pytest]`` table;
- ``pytest.ini``, ``.pytest.ini``: always, even without a ``[pytest]`` section;
- ``pyproject.toml``: with a ``[tool.pytest.ini_options]`` table (or, pytest 9 on, a
  ``[tool.pytest]`` table of native values);
- ``tox.ini``: with a ``[pytest]`` section; ``setup.cfg``: with a ``[tool:pytest]`` section.

Where none is found, the first ``pyproject.toml`` on the way up is the file (pytest 8.1 on),
with no values. ``tests/test_datadir.py`` compares what is found here with what the installed
pytest reads, file layout by layout, so a change in pytest's rules shows there.
"""

from __future__ import annotations

import os
import re
import tomllib
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import iniconfig  # pytest's own ini parser (a dependency of pytest)


@cache
def pytest_version() -> tuple[int, int]:
    """The installed pytest's (major, minor): ``9.2.0`` is (9, 2), ``8.1.0rc1`` (8, 1)."""
    found = re.match(r"(\d+)\.(\d+)", version("pytest"))
    return (int(found[1]), int(found[2])) if found else (0, 0)


def names() -> list[str]:
    """The configuration files pytest looks for in each folder, in its order of precedence."""
    found = ["pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"]
    if pytest_version() >= (9, 0):
        found = ["pytest.toml", ".pytest.toml", *found]
    return found


def settings(path: Path) -> dict[str, Any] | None:
    """The pytest values ``path`` holds, read by the rule for its name, or None where it is not
    a pytest configuration file. A file that cannot be parsed is a ValueError naming it."""
    name = path.name
    try:
        if name.endswith(".toml"):
            document = tomllib.loads(path.read_text(encoding="utf-8"))
            return _toml_settings(name, document)
        ini = iniconfig.IniConfig(str(path))
    except (tomllib.TOMLDecodeError, iniconfig.ParseError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable configuration file: {exc}") from None
    section = "tool:pytest" if name == "setup.cfg" else "pytest"
    if section in ini:
        return dict(ini[section].items())
    return {} if name in ("pytest.ini", ".pytest.ini") else None


def _toml_settings(name: str, document: dict[str, Any]) -> dict[str, Any] | None:
    if name in ("pytest.toml", ".pytest.toml"):
        return dict(document.get("pytest", {}))
    tool = document.get("tool", {}).get("pytest", {})
    if "ini_options" in tool:
        return dict(tool["ini_options"])
    native = {key: value for key, value in tool.items() if key != "ini_options"}
    return native if native and pytest_version() >= (9, 0) else None


def locate(start: Path) -> tuple[Path | None, dict[str, Any]]:
    """The configuration file pytest reads when run from ``start`` (with no path arguments),
    and its values; ``(None, {})`` where there is none."""
    start = Path(os.path.abspath(start))
    first_pyproject: Path | None = None
    for folder in (start, *start.parents):
        for name in names():
            path = folder / name
            if not path.is_file():
                continue
            if name == "pyproject.toml" and first_pyproject is None:
                first_pyproject = path
            values = settings(path)
            if values is not None:
                return path, values
    if first_pyproject is not None and pytest_version() >= (8, 1):
        return first_pyproject, {}
    return None, {}
