"""Where a suite's data folder is found: four places, searched in a fixed order.

1. the ``--prefalign-data DIR`` option,
2. the ini value ``prefalign_data`` (a relative path is taken from the rootdir),
3. the environment variable ``PREFALIGN_DATA``,
4. the user cache, ``storage.cache_root() / "data"``, where a download step can place data.

The first place that holds the suite's sub-folder wins. Where none does, the error lists every
place with the path actually tried, so that a machine without a network says what to provide.
Light: imported by the plugin's evaluation and by the ``prefalign data`` command.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pytest_prefalign import storage
from pytest_prefalign.api import DataNotFound

ENV = "PREFALIGN_DATA"


@dataclass(frozen=True)
class DataPlace:
    """One place data is looked up: ``label`` names it, ``path`` is ``None`` where it is unset."""

    label: str
    path: Path | None

    def holds(self, subdir: str) -> bool:
        return self.path is not None and (self.path / subdir).is_dir()

    def describe(self, subdir: str) -> str:
        """One line for the error message: the place, its path and what was found there."""
        if self.path is None:
            return f"{self.label}: not set"
        if self.holds(subdir):
            return f"{self.label}: {self.path} (holds {subdir}/)"
        if not self.path.is_dir():
            return f"{self.label}: {self.path} (no such directory)"
        return f"{self.label}: {self.path} (no {subdir}/ in it)"


def data_places(
    *, option: str | None = None, ini: str | None = None, rootdir: Path | None = None
) -> list[DataPlace]:
    """The four places in search order, with the paths they stand for in this run."""
    env = os.environ.get(ENV) or None
    return [
        DataPlace("--prefalign-data", _expand(option) if option else None),
        DataPlace("ini prefalign_data", _from_ini(ini, rootdir) if ini else None),
        DataPlace(f"${ENV}", _expand(env) if env else None),
        DataPlace("user cache", storage.cache_root() / "data"),
    ]


def find_data_dir(
    subdir: str, *, option: str | None = None, ini: str | None = None, rootdir: Path | None = None
) -> Path:
    """The first place that holds ``subdir``; the place itself is returned (the data folder is
    ``result / subdir``). Raises DataNotFound listing all four places otherwise."""
    places = data_places(option=option, ini=ini, rootdir=rootdir)
    for place in places:
        if place.path is not None and place.holds(subdir):
            return place.path
    raise DataNotFound(not_found_message(subdir, places))


def suite_folder(data_dir: Path | None, subdir: str, marker: str) -> Path:
    """A suite's data folder: ``data_dir / subdir``, or ``data_dir`` itself where it already is
    that folder (it holds ``marker``, a glob pattern such as ``authors.json``)."""
    if data_dir is None:
        raise DataNotFound(f"no data directory holds {subdir}/")
    for folder in (Path(data_dir) / subdir, Path(data_dir)):
        if folder.is_dir() and any(folder.glob(marker)):
            return folder
    raise DataNotFound(f"{Path(data_dir) / subdir} holds no {marker}")


def not_found_message(subdir: str, places: list[DataPlace]) -> str:
    """The message of DataNotFound: what is missing, where it was looked for, how to provide it."""
    lines = [f"data folder {subdir}/ not found; looked in:"]
    lines += [f"  {n}. {place.describe(subdir)}" for n, place in enumerate(places, 1)]
    cache = places[-1].path
    lines.append(
        f"Provide a directory DIR that holds {subdir}/ with --prefalign-data DIR, the ini value "
        f"prefalign_data = DIR or {ENV}=DIR, or place the data in {cache}/{subdir}/."
    )
    return "\n".join(lines)


def _expand(text: str) -> Path:
    return Path(text).expanduser().absolute()


def _from_ini(text: str, rootdir: Path | None) -> Path:
    # ini paths are written relative to the ini file's folder, which pytest calls the rootdir
    path = Path(text).expanduser()
    if not path.is_absolute() and rootdir is not None:
        path = Path(rootdir) / path
    return path.absolute()
