"""Paths in what a run stores, written relative to named roots, so that a run file carries no
path of the machine that made it and reads the same wherever it is opened.

A path under a root is written ``{NAME}/the/rest`` (the home folder as ``~/the/rest``); the
roots, longest first so that the most specific one names a path:

- ``data``: the folder that holds the suite's data folder, where the run found it (one of
  the four places of ``datadir.py``);
- ``cache``: prefalign's cache (``storage.cache_root()``: pairs written, negatives, models);
- ``rootdir``: pytest's rootdir, the project the run was made in;
- ``tmp``: the system's temporary folder;
- ``~``: the home folder.

The run file names them once (``config["roots"]``, ``NAMES``: what each stands for); a path
under none of them is kept as it is. ``relative`` rewrites every string of a JSON value, a
path inside a message too (``"/data/polis/x.csv: record 3: ..."``); ``local`` puts a named
path back under this machine's roots. A run file written before the roots (absolute paths)
is read as it is.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_prefalign import storage

NAMES = {
    "data": "the folder holding the suite's data folder, where the run found it "
    "(--prefalign-data, ini prefalign_data, $PREFALIGN_DATA or the user cache's data/)",
    "cache": "prefalign's cache ($PREFALIGN_CACHE, else the user cache folder)",
    "rootdir": "pytest's rootdir, the project the run was made in",
    "tmp": "the system's temporary folder",
    "~": "the home folder",
}


def machine_roots(*, data: Path | None = None, rootdir: Path | None = None) -> dict[str, Path]:
    """This machine's roots (``NAMES``): ``data`` and ``rootdir`` as the run has them (None:
    left out), the cache, the temporary folder and the home folder."""
    found = {
        "data": data,
        "cache": storage.cache_root(),
        "rootdir": rootdir,
        "tmp": Path(tempfile.gettempdir()),
        "~": Path.home(),
    }
    return {name: Path(path) for name, path in found.items() if path is not None}


def written(name: str) -> str:
    """How a root is written at the head of a path: ``{data}``, ``~``."""
    return name if name == "~" else "{" + name + "}"


def _pattern(roots: Mapping[str, Path]) -> tuple[re.Pattern[str], dict[str, str]] | None:
    """One pattern for every spelling of every root (as given and resolved), longest first,
    matching a whole path component: ``/data`` names ``/data/x`` and ``/data``, not
    ``/database``."""
    by_text: dict[str, str] = {}
    for name, path in roots.items():
        for text in {str(path), str(Path(path).resolve())}:
            text = text.rstrip(os.sep)
            if text and os.path.isabs(text):
                by_text.setdefault(text, name)
    if not by_text:
        return None
    spellings = sorted(by_text, key=len, reverse=True)
    alternatives = "|".join(re.escape(text) for text in spellings)
    return re.compile(rf"(?<![\w.~/-])({alternatives})(?=/|$|[^\w.-])"), by_text


def relative(value: Any, roots: Mapping[str, Path]) -> Any:
    """``value`` (a JSON value: dicts, lists, strings, numbers) with every path under a root
    written from its root's name; the rest unchanged."""
    found = _pattern(roots)
    if found is None:
        return value
    pattern, by_text = found

    def rewrite(item: Any) -> Any:
        if isinstance(item, str):
            return pattern.sub(lambda m: written(by_text[m.group(1)]), item)
        if isinstance(item, dict):
            return {key: rewrite(inner) for key, inner in item.items()}
        if isinstance(item, (list, tuple)):
            return [rewrite(inner) for inner in item]
        return item

    return rewrite(value)


def local(text: str, roots: Mapping[str, Path]) -> str:
    """A path written by ``relative`` put back under this machine's roots (a root it does not
    have stays named)."""
    for name, path in roots.items():
        head = written(name)
        if text == head or text.startswith(head + "/"):
            return str(path) + text[len(head) :]
    return text
