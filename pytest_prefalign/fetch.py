"""``prefalign data fetch``: build suites' data folders from their public sources.

    prefalign data fetch [SUITE...] [--to DIR] [--force] [--check] [source options]

A suite that can be fetched names a builder module in its ``fetcher`` attribute (imported on
use). The builder adds its options to the command and writes the suite's files into an empty
folder; this module does the rest, the same for every suite:

- the folder is built beside its final place (``DIR/.NAME.partial``) and renamed into place
  once complete, so the loaders never see half a folder;
- ``MANIFEST.json`` in it records the source, its version, the date, the licence and
  attribution, and the SHA-256 and size of every file written;
- a lock beside the folder (``DIR/NAME.lock``) makes concurrent fetches (pytest-xdist workers,
  two terminals) build it once: the others wait, then find it built;
- builders keep their downloads in the user cache (``downloads/``), checked against pinned
  hashes, so a fetch that was interrupted resumes with what it already has.

``fetch_missing`` is what a pytest run calls (through ``datadir.find_data_dir``) when no place
holds a suite's data: it fetches into the user cache, or, offline, fails at once with one line
that names the command to run. Light at import: builders import their libraries on use.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
from collections.abc import Iterable, Iterator
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TextIO, TypeVar, cast

from pytest_prefalign import storage
from pytest_prefalign.api import DataNotFound, declared
from pytest_prefalign.manifest import MANIFEST, Built, check_manifest, write_manifest

OFFLINE_VARIABLES = ("PREFALIGN_OFFLINE", "HF_HUB_OFFLINE")
TRUE = {"1", "ON", "YES", "TRUE"}  # how boolean variables are read (as the Hugging Face libraries)
T = TypeVar("T")


class FetchError(Exception):
    """A fetch that cannot go on: the message says what failed and where."""


class Builder(Protocol):
    """A builder module (a suite's ``fetcher``)."""

    def add_arguments(self, group: argparse._ArgumentGroup) -> None: ...

    def hosts(self, options: argparse.Namespace) -> list[str]:
        """The network hosts a build with these options needs (none for local sources)."""
        ...

    def build(self, folder: Path, options: argparse.Namespace, progress: Progress) -> Built: ...


class Progress:
    """Messages and progress bars of one suite's fetch, on stderr (bars only on a terminal)."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr

    @property
    def interactive(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def say(self, text: str) -> None:
        print(f"[{self.label}] {text}", file=self.stream, flush=True)

    def bar(
        self, items: Iterable[T], *, total: int | None = None, desc: str = "", unit: str = "it"
    ) -> Iterator[T]:
        from tqdm import tqdm

        yield from tqdm(
            items,
            total=total,
            desc=f"[{self.label}] {desc}",
            unit=unit,
            file=self.stream,
            disable=not self.interactive,
        )


# -- suites and their builders ---------------------------------------------------------------


def fetchable_suites() -> dict[str, Any]:
    """Registered suites that name a builder (``fetcher``), by name."""

    return {s.name: s for s in registered_suites() if declared(s, "fetcher")}


def builder(suite: Any) -> Builder:
    module: ModuleType = import_module(declared(suite, "fetcher"))
    return cast(Builder, module)


def default_options(suite: Any) -> argparse.Namespace:
    """The builder's options as the command would parse them with none given."""
    parser = argparse.ArgumentParser(add_help=False)
    builder(suite).add_arguments(parser.add_argument_group(suite.name))
    return parser.parse_args([])


def default_root() -> Path:
    """Where fetched data goes by default: the user cache's data folder (the fourth place)."""
    return storage.cache_root() / "data"


def offline_reason(hosts: list[str]) -> str | None:
    """Why a fetch that needs ``hosts`` cannot reach them, or None: an offline variable, or a
    host name that does not resolve (checked so that a machine without a network fails now,
    not after retries). A fetch that needs no host is never offline."""
    if not hosts:
        return None
    for name in OFFLINE_VARIABLES:
        if os.environ.get(name, "").upper() in TRUE:
            return f"offline ({name}={os.environ[name]})"
    for host in hosts:
        try:
            socket.getaddrinfo(host, 443)
        except OSError:
            return f"offline ({host} does not resolve)"
    return None


# -- building one folder ---------------------------------------------------------------------


def fetch_suite(
    suite: Any,
    root: Path,
    options: argparse.Namespace,
    *,
    force: bool = False,
    progress: Progress | None = None,
) -> Path:
    """Build ``root / suite.source`` (once, under a lock) and return it. An existing folder is
    kept unless ``force``. Raises FetchError; nothing is left where the loaders look."""
    progress = progress or Progress(suite.name)
    final = root / suite.source
    with storage.locked(final):
        if final.is_dir() and not force:
            progress.say(f"{final} is already there (--force builds it again)")
            return final
        staging = final.parent / f".{final.name}.partial"
        shutil.rmtree(staging, ignore_errors=True)  # left by an interrupted build
        staging.mkdir(parents=True)
        try:
            built = builder(suite).build(staging, options, progress)
            manifest = write_manifest(staging, suite.name, built)
            _move_into_place(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    size = sum(f["bytes"] for f in manifest["files"].values())
    progress.say(
        f"built {final}: {len(manifest['files'])} files, {size / 1e6:.1f} MB, "
        f"{built.source} at {built.version}"
    )
    return final


def _move_into_place(staging: Path, final: Path) -> None:
    old = final.parent / f".{final.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    shutil.rmtree(old, ignore_errors=True)


# -- what a pytest run calls -----------------------------------------------------------------


def fetch_missing(subdir: str, root: Path | None = None, *, searched: str = "") -> Path | None:
    """Fetch ``subdir`` into the user cache for a run that found it nowhere; returns the data
    directory that now holds it, or None where no suite that needs a data directory builds
    ``subdir``. Offline, or when the fetch fails, raises DataNotFound with one line
    (``searched``: the places searched, in one line, added to the offline message)."""
    root = root or default_root()
    suite = _builds(subdir)
    if suite is None:
        return None
    offline = offline_message(subdir, root, searched=searched)
    if offline:
        raise DataNotFound(offline)
    command = f"prefalign data fetch {suite.name}"
    progress = Progress(suite.name)
    progress.say(f"no data folder {subdir}/ found: fetching it into {root} (`{command}`)")
    try:
        fetch_suite(suite, root, default_options(suite), progress=progress)
    except FetchError as exc:
        raise DataNotFound(
            f"fetching {subdir}/ into {root} failed: {exc} (`{command}` tries again)"
        ) from None
    return root


def offline_message(subdir: str, root: Path | None = None, *, searched: str = "") -> str | None:
    """The one-line error of a run that needs ``subdir``, found in no place, where the suite's
    fetch cannot reach its source: the reason, the command to run with a network and the
    places ``searched``. None where a fetch could run, or no suite builds ``subdir``."""
    suite = _builds(subdir)
    if suite is None:
        return None
    root = root or default_root()
    reason = offline_reason(builder(suite).hosts(default_options(suite)))
    if not reason:
        return None
    return (
        f"data folder {subdir}/ not found and {reason}: run `prefalign data fetch {suite.name}` "
        f"once with a network (it builds {root / subdir}/), or pass --prefalign-data DIR"
        + (f"; {searched}" if searched else "")
    )


def _builds(subdir: str) -> Any:
    """The fetchable suite that needs a data directory and reads ``subdir``, or None."""
    return next(
        (s for s in fetchable_suites().values() if s.source == subdir and _needs_folder(s)),
        None,
    )


# -- the command -----------------------------------------------------------------------------


def fetch_main(argv: list[str]) -> int:
    """``prefalign data fetch``: build each SUITE's data folder (default: every suite that needs
    a data directory) in DIR (default: the user cache), with a MANIFEST.json."""
    suites = fetchable_suites()
    parser = _parser(suites)
    args = parser.parse_args(argv)
    unknown = [name for name in args.suites if name not in suites]
    if unknown:
        parser.error(f"no fetchable suite {unknown[0]!r}; fetchable: {', '.join(sorted(suites))}")
    names = args.suites or [n for n, s in sorted(suites.items()) if _needs_folder(s)]
    root = Path(args.to).expanduser().resolve() if args.to else default_root()
    if args.check:
        return _check(root, [suites[n] for n in names])
    failed = False
    for name in names:
        suite = suites[name]
        progress = Progress(name)
        # a folder already there needs no network: reported as kept, offline or not
        building = args.force or not (root / suite.source).is_dir()
        reason = offline_reason(builder(suite).hosts(args)) if building else None
        try:
            if reason:
                raise FetchError(
                    f"{reason}; a local source needs no network (see prefalign data fetch --help)"
                )
            fetch_suite(suite, root, args, force=args.force, progress=progress)
        except (FetchError, OSError) as exc:
            print(f"prefalign data fetch: {name}: error: {_reason(exc)}", file=sys.stderr)
            failed = True
        except KeyboardInterrupt:
            print(
                f"prefalign data fetch: {name}: interrupted; nothing was installed", file=sys.stderr
            )
            return 130
    if not failed:
        print(
            f"Data directory: {root}"
            + (
                ""
                if args.to
                else " (the user cache: found by pytest --prefalign without further settings)"
            )
        )
    return 1 if failed else 0


def _reason(exc: BaseException) -> str:
    """A failure in one line: an OSError as its path and reason (a file where the data folder
    should go, a folder that cannot be written), anything else as its message."""
    if isinstance(exc, OSError) and not isinstance(exc, FetchError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)


def _parser(suites: dict[str, Any]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prefalign data fetch",
        description="Build each SUITE's data folder from its public source, with a "
        "MANIFEST.json (source, version, date, licence, attribution, SHA-256 of every file). "
        "Without SUITE: every suite that needs a data directory.",
    )
    parser.add_argument(
        "suites",
        nargs="*",
        metavar="SUITE",
        help=f"suites to fetch, of: {', '.join(sorted(suites))}",
    )
    parser.add_argument(
        "--to", metavar="DIR", help=f"data directory to build in (default: {default_root()})"
    )
    parser.add_argument("--force", action="store_true", help="build folders that are there again")
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the folders against their MANIFEST.json instead of fetching",
    )
    for name, suite in sorted(suites.items()):
        builder(suite).add_arguments(parser.add_argument_group(f"{name} ({suite.source}/)"))
    return parser


def _needs_folder(suite: Any) -> bool:
    from pytest_prefalign.api import requires_data_dir

    return requires_data_dir(suite, {})


def _check(root: Path, suites: list[Any]) -> int:
    bad = False
    for suite in suites:
        problems = check_manifest(root / suite.source)
        for line in problems:
            print(f"{suite.name}: {line}")
        if not problems:
            print(f"{suite.name}: {root / suite.source}: every file matches {MANIFEST}")
        bad = bad or bool(problems)
    return 1 if bad else 0


def registered_suites() -> list[Any]:
    """The suites registered through the ``prefalign`` entry points, by name, outside a pytest
    run (the ``prefalign data`` commands); an entry point that fails to load is a warning."""
    import pytest

    from pytest_prefalign import hookspec
    from pytest_prefalign.registry import load

    manager = pytest.PytestPluginManager()
    manager.add_hookspecs(hookspec)
    found = load(manager)
    for failure in found.failures:
        print(f"warning: {failure}", file=sys.stderr)  # stdout is the command's answer
    return [entry.obj for _, entry in sorted(found.suites.items())]
