"""Where a suite's data folder is found: four places, searched in a fixed order.

1. the ``--prefalign-data DIR`` option,
2. the ini value ``prefalign_data`` (a relative path is taken from the rootdir),
3. the environment variable ``PREFALIGN_DATA``,
4. the user cache, ``storage.cache_root() / "data"``, where ``prefalign data fetch`` builds it.

The first place that holds the suite's sub-folder wins. Where none does and a suite that needs
it can be fetched, it is fetched into the user cache (once, under a lock: see ``fetch.py``);
offline, the error is one line naming the command that fetches it. Otherwise the error lists
every place with the path actually tried. Light: imported by the plugin's evaluation and by the
``prefalign data`` command.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_prefalign import storage
from pytest_prefalign.api import DataNotFound, declared, requires_data_dir

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
    subdir: str,
    *,
    option: str | None = None,
    ini: str | None = None,
    rootdir: Path | None = None,
    fetch: bool = True,
) -> Path:
    """The first place that holds ``subdir``; the place itself is returned (the data folder is
    ``result / subdir``). Where none does, with ``fetch``, a suite's data that can be fetched is
    fetched into the user cache (offline: DataNotFound in one line); else DataNotFound lists
    all four places."""
    places = data_places(option=option, ini=ini, rootdir=rootdir)
    asked = places[0].path
    if asked is not None:  # never replaced by another place
        if places[0].holds(subdir):
            return asked
        raise DataNotFound(
            f"--prefalign-data {asked}: holds no {subdir}/ (give the directory that holds it)"
        )
    for place in places:
        if place.path is not None and place.holds(subdir):
            return place.path
    if fetch:
        from pytest_prefalign.fetch import fetch_missing

        cache = places[-1].path
        fetched = fetch_missing(subdir, cache, searched=searched_line(subdir, places))
        if fetched is not None:
            return fetched
    raise DataNotFound(not_found_message(subdir, places))


def unreachable_data(
    subdir: str, *, ini: str | None = None, rootdir: Path | None = None
) -> str | None:
    """Why a run without ``--prefalign-data`` cannot have ``subdir``, in one line, or None: no
    place holds it and the fetch that builds it cannot reach its source (offline). None where a
    place holds it, where a fetch may build it (online: the first test fetches it) and where no
    suite builds it (the test says what is missing)."""
    places = data_places(ini=ini, rootdir=rootdir)
    if any(place.holds(subdir) for place in places):
        return None
    from pytest_prefalign.fetch import offline_message

    return offline_message(subdir, places[-1].path, searched=searched_line(subdir, places))


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
        f"prefalign_data = DIR or {ENV}=DIR, or place the data in {cache}/{subdir}/ "
        "(prefalign data fetch builds it there for the suites it can fetch)."
    )
    return "\n".join(lines)


def searched_line(subdir: str, places: list[DataPlace]) -> str:
    """The places searched for ``subdir``, in one line (for a one-line error)."""
    return "looked in " + "; ".join(place.describe(subdir) for place in places)


def _expand(text: str) -> Path:
    return Path(text).expanduser().resolve()


def _from_ini(text: str, rootdir: Path | None) -> Path:
    # ini paths are written relative to the ini file's folder, which pytest calls the rootdir
    path = Path(text).expanduser()
    if not path.is_absolute() and rootdir is not None:
        path = Path(rootdir) / path
    return path.resolve()


# -- the ``prefalign data`` command ---------------------------------------------------------------


def data_main(argv: list[str]) -> int:
    """``prefalign data [--data DIR] [--check]``: each registered suite, its source, licence
    and where its data is found, then the four places. With ``--data DIR`` or ``--check``, each
    suite's data found is read with the rules a run applies and every record dropped or
    altered for a fault is listed (``check_data``). Exit status 1 where a suite that needs a
    data directory has none. ``prefalign data fetch ...`` builds the data (see ``fetch.py``)."""
    if argv[:1] == ["fetch"]:
        from pytest_prefalign.fetch import fetch_main

        return fetch_main(argv[1:])
    if argv[:1] == ["build-pairs"]:
        return build_pairs_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="prefalign data",
        description="Each registered suite, its source, licence and where its data is found, "
        "then the four places searched. Exit status 1 where a suite that needs a data directory "
        "has none. prefalign data fetch [SUITE...] builds the data.",
    )
    parser.add_argument("--data", metavar="DIR", help="as --prefalign-data in a pytest run")
    parser.add_argument(
        "--check",
        action="store_true",
        help="read each suite's data found with a run's rules and list its faults "
        "(the default with --data)",
    )
    args = parser.parse_args(argv)
    check = args.check or args.data is not None
    places, inifile = places_searched(args.data)
    missing = False
    from pytest_prefalign.fetch import registered_suites

    for suite in registered_suites():
        found = holding(places, suite.source)
        if declared(suite, "embedded"):  # generates its records (synthetic)
            where = "generated by the suite: no data files"
        elif found is not None:
            where = str(found / suite.source)
        elif requires_data_dir(suite, {}):
            where, missing = "NOT FOUND", True
            if declared(suite, "fetcher"):
                where += f" (prefalign data fetch {suite.name} builds it in the user cache)"
        else:
            where = "no local copy: read through the datasets library (cache or hub)"
        print(
            f"{suite.name}: {suite.description}\n  source: {suite.source}\n"
            f"  licence: {suite.licence}\n  data: {where}"
        )
        if check and found is not None and hasattr(suite, "load"):
            print("\n".join(check_data(suite, found / suite.source)))
    print("Places searched, in order:")
    for n, place in enumerate(places, 1):
        origin = f" (from {inifile})" if place.label.startswith("ini") and inifile else ""
        print(f"  {n}. {place.label}: {place.path or 'not set'}{origin}")
    return 1 if missing else 0


def places_searched(option: str | None) -> tuple[list[DataPlace], Path | None]:
    """The places a command searches for data, as a run from the current directory would,
    with ``option`` as ``--prefalign-data``; and the configuration file read."""
    ini, inifile = ini_data_value(Path.cwd())
    return data_places(option=option, ini=ini, rootdir=inifile.parent if inifile else None), inifile


def holding(places: list[DataPlace], source: str) -> Path | None:
    """The first place that holds ``source``; as in a run, a DIR given (the first place) is
    the only one searched: never replaced by another one."""
    searched = places[:1] if places[0].path is not None else places
    return next((p.path for p in searched if p.path is not None and p.holds(source)), None)


def build_pairs_main(argv: list[str]) -> int:
    """``prefalign data build-pairs SUITE ...``: the suite's own builder of released pairs
    (its ``pairs_builder``, ``"module:function"``), given the rest of the arguments."""
    from importlib import import_module

    from pytest_prefalign.fetch import registered_suites

    builders = {
        s.name: declared(s, "pairs_builder")
        for s in registered_suites()
        if declared(s, "pairs_builder")
    }
    if not argv or argv[0] not in builders:
        names = ", ".join(sorted(builders)) or "none"
        print(
            f"usage: prefalign data build-pairs SUITE [--help]; suites with released pairs: "
            f"{names}",
            file=sys.stderr,
        )
        return 2
    module, function = builders[argv[0]].split(":")
    return int(getattr(import_module(module), function)(argv[1:]))


def check_data(suite: Any, folder: Path) -> list[str]:
    """The lines ``prefalign data`` prints for a suite's data read with a run's rules (all its
    users, the suite's default options): every record dropped or altered for a fault, or why
    the data cannot be read at all."""
    from pytest_prefalign.api import DataError, describe_fault

    try:
        data = suite.load(folder, limit=None, options={})
    except (DataError, DataNotFound, OSError, ValueError) as exc:
        return [f"  faults: the data cannot be read: {exc}"]
    if not data.faults:
        return ["  faults: none"]
    total = int(data.provenance.get("faults_total", len(data.faults)))
    lines = [f"  faults: {total} record(s) dropped or altered:"]
    lines += [f"    {describe_fault(f)}" for f in data.faults]
    if total > len(data.faults):
        lines.append(f"    ... and {total - len(data.faults)} more")
    return lines


def ini_data_value(start: Path) -> tuple[str | None, Path | None]:
    """``prefalign_data`` from the configuration file that pytest itself finds from ``start``
    upwards (``pytest.toml``, ``pytest.ini``, ``pyproject.toml``, ``tox.ini``, ``setup.cfg``,
    ... with pytest's own precedence and rules: ``inifile.py``), and that file."""
    from pytest_prefalign import inifile

    path, values = inifile.locate(start)
    value = values.get("prefalign_data")
    return (str(value) if value else None), path


def project_root(start: Path) -> Path:
    """The folder pytest takes as its rootdir when run from ``start``, where ``--prefalign-save``
    keeps baselines: the folder of the configuration file it finds, else ``start``."""
    _, inifile = ini_data_value(start)
    return Path(inifile).parent if inifile else start
