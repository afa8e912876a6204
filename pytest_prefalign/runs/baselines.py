"""Named baselines: run files kept under ``<rootdir>/.prefalign/baselines/NAME.json`` for the
regression gates (docs/ci-gating.md)."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from pytest_prefalign.runs import records
from pytest_prefalign.runs.records import RunFile

BASELINE_DIR = Path(".prefalign") / "baselines"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class BaselineNotFound(FileNotFoundError):
    """No baseline where one was looked for; the message names the place."""


def check_name(name: str) -> str:
    """A baseline name (see ``valid_name``) for an option's ``type=``: errors are usage errors."""
    try:
        return valid_name(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def valid_name(name: str) -> str:
    """Letters, digits, ``.``, ``_``, ``-``, starting with a letter or digit: a file name that
    cannot climb out of the baselines folder."""
    if not _NAME.fullmatch(name) or name.endswith(".json"):
        raise ValueError(
            f"invalid baseline name {name!r}: use 1-100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '.json' (e.g. main or v1.2)"
        )
    return name


def save(run: RunFile, name: str, root: Path) -> Path:
    """Write ``run`` to ``root/.prefalign/baselines/NAME.json`` and return the path."""
    path = Path(root) / BASELINE_DIR / f"{valid_name(name)}.json"
    records.write(run, path)
    return path


def load(name_or_path: str | None, root: Path) -> RunFile:
    """A run file: the latest saved baseline (``None``), a saved one by name, or a path.

    A value with a path separator or ending in ``.json`` is a path (relative to the current
    directory); anything else is a name under ``root/.prefalign/baselines``.
    """
    return records.read(path_of(name_or_path, root))


def path_of(name_or_path: str | None, root: Path) -> Path:
    """Where ``load`` reads from; raises ``BaselineNotFound`` naming the place looked."""
    folder = Path(root) / BASELINE_DIR
    if name_or_path is None:
        saved = _saved(folder)
        if not saved:
            raise BaselineNotFound(
                f"no baseline saved in {folder}: save one first with --prefalign-save NAME"
            )
        return max(saved, key=lambda p: (p.stat().st_mtime, p.name))
    if is_path(name_or_path):
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise BaselineNotFound(f"no run file at {path}")
        return path
    path = folder / f"{valid_name(name_or_path)}.json"
    if not path.is_file():
        names = ", ".join(p.stem for p in _saved(folder)) or "none"
        raise BaselineNotFound(f"no baseline named {name_or_path!r} at {path} (saved: {names})")
    return path


def is_path(name_or_path: str) -> bool:
    """A baseline argument with a path separator or ending in ``.json`` is a file, not a name."""
    return os.sep in name_or_path or "/" in name_or_path or name_or_path.endswith(".json")


def display_name(path: Path, root: Path) -> str:
    """The name of a saved baseline, or the path of any other run file."""
    return path.stem if path.parent == Path(root) / BASELINE_DIR else str(path)


def _saved(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.json")) if folder.is_dir() else []
