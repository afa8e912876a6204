"""Building ``acl-anthology/`` from the official ACL Anthology, read with the ``acl-anthology``
library (the builder of ``prefalign data fetch pref_lamp``).

Source: the ``data/`` folder of the Anthology's repository, github.com/acl-org/acl-anthology:
fetched at a pinned commit (so that two users who fetch get the same authors), at the newest
(``--anthology-revision latest``), or a local folder (``--anthology-data DIR``). The fetched
repository is kept in the user cache (``downloads/acl-anthology/``, only ``data/`` checked out;
``repository.py``).

Selection, the rules of the shipped set, with authors now the Anthology's people (its person
ids, which tell apart people who share a name) instead of names:

- papers from ``FIRST_YEAR`` on (the ACL licenses them CC BY 4.0), not frontmatter, not
  retracted, with a title and an abstract of at least ``MIN_ABSTRACT`` characters;
- people with at least ``MIN_PAPERS`` such papers; ``AUTHORS`` of them drawn with
  ``random.Random(SEED)`` from the sorted person ids; each keeps the ``MAX_PAPERS`` most recent,
  listed oldest first (by year, then Anthology id).

Written: ``authors.json`` (``{user_id: "acl:<person id>", author, paper_ids}``, by user id) and
``papers-NN.jsonl`` (``{anthology_id, year, venue, title, abstract, authors: [{name, id}]}``,
oldest first, ``PAPERS_PER_FILE`` a file), the layout ``anthology.py`` reads.
"""

from __future__ import annotations

import argparse
import json
import random
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from prefalign_suites.pref_lamp.repository import LATEST, checkout, local_revision
from prefalign_suites.pref_lamp.suite import PrefLamp
from pytest_prefalign import storage
from pytest_prefalign.errors import import_extra
from pytest_prefalign.fetch import Built, FetchError, Progress

if TYPE_CHECKING:  # pragma: no cover
    from acl_anthology import Anthology
    from acl_anthology.collections import Paper

REPOSITORY = "https://github.com/acl-org/acl-anthology.git"
# A commit of acl-org/acl-anthology whose python/ is acl-anthology 1.3.3, which reads the same
# XML schema as the pinned 1.3.4: the data format the library expects.
REVISION = "00d552435a6595d01b604e64ef396658f9531efa"
FIRST_YEAR = 2016  # ACL materials from 2016 on are CC BY 4.0
MIN_ABSTRACT = 200  # characters of the whitespace-normalised abstract
MIN_PAPERS = 12  # papers a person needs to be an author of the suite
MAX_PAPERS = 25  # an author's most recent papers kept
AUTHORS = 200  # authors drawn
SEED = 5  # the draw's seed (the shipped set's)
PAPERS_PER_FILE = 2000
LICENCE = "CC BY 4.0 (ACL Anthology materials published in or after 2016)"
ATTRIBUTION = PrefLamp.attribution


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--anthology-data",
        metavar="DIR",
        help="read this local data/ folder of the Anthology repository (or a "
        "clone holding it) instead of fetching; needs no network",
    )
    group.add_argument(
        "--anthology-revision",
        metavar="REV",
        default=REVISION,
        help=f"commit of the repository to fetch (default: the pinned %(default)s); "
        f"'{LATEST}' for the newest",
    )
    group.add_argument(
        "--anthology-repository",
        metavar="URL",
        type=_repository,
        default=REPOSITORY,
        help="the repository to fetch from, a mirror or a local clone (a path is read from "
        "the current folder; default: %(default)s)",
    )
    group.add_argument(
        "--anthology-authors",
        metavar="N",
        type=_positive,
        default=AUTHORS,
        help="authors to draw (default: %(default)s)",
    )
    group.add_argument(
        "--anthology-seed",
        metavar="N",
        type=int,
        default=SEED,
        help="seed of the draw (default: %(default)s)",
    )


def _repository(text: str) -> str:
    """A URL as it is; a local clone's path made absolute (git runs in the cache's folder)."""
    return str(Path(text).resolve()) if not urlparse(text).scheme and Path(text).exists() else text


def _positive(text: str) -> int:
    """A whole number of at least 1 (``int`` decides what is a number: not "²")."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def hosts(options: argparse.Namespace) -> list[str]:
    if options.anthology_data:
        return []
    host = urlparse(options.anthology_repository).hostname
    return [host] if host else []


def build(folder: Path, options: argparse.Namespace, progress: Progress) -> Built:
    # checked first: a clone of the Anthology takes minutes, and the library reads it
    import_extra(
        "acl_anthology",
        package="acl-anthology",
        extra="anthology",
        needed_for="fetching Pref-LaMP's data from the ACL Anthology",
        error=FetchError,
    )
    if options.anthology_data:
        datadir = local_data_folder(Path(options.anthology_data).expanduser().resolve())
        version = local_revision(datadir)
        where = str(datadir)
    else:
        root = storage.cache_dir("downloads", "acl-anthology")
        datadir, version = checkout(
            options.anthology_repository, options.anthology_revision, root, progress
        )
        where = options.anthology_repository
    anthology = open_anthology(datadir, progress)
    papers = eligible_papers(anthology, progress)
    authors = draw_authors(
        anthology, papers, progress, count=options.anthology_authors, seed=options.anthology_seed
    )
    if not authors:  # an empty folder would be installed, and every run would find no user
        raise FetchError(
            f"{where}: no author has {MIN_PAPERS} papers from {FIRST_YEAR} on: not the "
            f"Anthology's data, or an empty copy of it"
        )
    written = write_folder(folder, anthology, papers, authors)
    progress.say(f"{len(authors)} authors, {written} papers")
    return Built(
        source=f"ACL Anthology data/ ({where}), read with acl-anthology {_library_version()}",
        version=version,
        licence=LICENCE,
        attribution=ATTRIBUTION,
        details={
            "revision_requested": None if options.anthology_data else options.anthology_revision,
            "rules": {
                "first_year": FIRST_YEAR,
                "min_abstract_chars": MIN_ABSTRACT,
                "min_papers": MIN_PAPERS,
                "max_papers": MAX_PAPERS,
                "authors": options.anthology_authors,
                "seed": options.anthology_seed,
                "users": "Anthology person ids",
            },
            "eligible_papers": len(papers),
            "authors": len(authors),
            "papers": written,
        },
    )


# -- the source ------------------------------------------------------------------------------


def local_data_folder(path: Path) -> Path:
    """``path`` itself where it is a ``data/`` folder (it holds ``xml/``), else ``path/data``."""
    for candidate in (path, path / "data"):
        if (candidate / "xml").is_dir():
            return candidate
    raise FetchError(f"{path}: not the Anthology's data/ folder (no xml/ in it or in data/)")


def _library_version() -> str:
    from importlib.metadata import version

    return version("acl-anthology")


def open_anthology(datadir: Path, progress: Progress) -> Anthology:
    """The Anthology with its people index built (every paper's authors resolved to ids)."""
    from acl_anthology import Anthology

    if not (datadir / "xml" / "schema.rnc").is_file():
        raise FetchError(f"{datadir}: no xml/schema.rnc: not the Anthology's data/ folder")
    if not (datadir / "json" / "people.json").is_file():
        raise FetchError(too_old(datadir))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        anthology = Anthology(datadir=datadir, verbose=progress.interactive)
    for warning in caught:
        progress.say(f"warning: {warning.message} (acl-anthology {_library_version()})")
    progress.say(f"reading {len(anthology.collections)} collections and resolving authors")
    try:
        anthology.people.load()
    except Exception as exc:  # the library gathers every failure in one ExceptionGroup
        raise FetchError(
            f"{datadir}: acl-anthology {_library_version()} cannot read it: {_first_problem(exc)}"
        ) from None
    return anthology


def too_old(datadir: Path) -> str:
    """The error for a checkout without ``json/people.json``, the people index the library
    reads: an Anthology from before that file (it kept names in ``yaml/name_variants.yaml``)."""
    return (
        f"{datadir}: no json/people.json: this Anthology checkout's format predates "
        f"acl-anthology {_library_version()}, which reads its people from that file; fetch the "
        f"pinned revision {REVISION}, which it reads (the default of prefalign data fetch "
        f"pref_lamp; --anthology-revision {REVISION} with --anthology-repository for a mirror), "
        "or update the checkout"
    )


def _first_problem(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    notes = "; ".join(getattr(exc, "__notes__", []))
    return f"{type(exc).__name__}: {exc}" + (f" ({notes})" if notes else "")


# -- the selection ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PaperRow:
    anthology_id: str
    year: int
    venue: str
    title: str
    abstract: str

    @property
    def order(self) -> tuple[int, str]:
        return self.year, self.anthology_id


def eligible_papers(anthology: Anthology, progress: Progress) -> dict[tuple[Any, ...], PaperRow]:
    """Papers that meet the rules, by the library's id tuple."""
    found = {}
    for collection in progress.bar(
        list(anthology.collections.values()), desc="papers", unit="collection"
    ):
        for volume in collection.volumes():
            for paper in volume.papers():
                row = _row(paper)
                if row is not None:
                    found[paper.full_id_tuple] = row
    return found


def _row(paper: Paper) -> PaperRow | None:
    if paper.is_frontmatter or paper.is_deleted or paper.abstract is None:
        return None
    try:
        year = int(paper.year)
    except (TypeError, ValueError):
        return None
    abstract, title = paper.abstract.as_text(), paper.title.as_text()
    if year < FIRST_YEAR or len(" ".join(abstract.split())) < MIN_ABSTRACT or not title.strip():
        return None
    venue = paper.parent.title.as_text() if paper.parent.title else paper.parent.full_id
    return PaperRow(paper.full_id, year, venue, title, abstract)


def draw_authors(
    anthology: Anthology,
    papers: dict[tuple[Any, ...], PaperRow],
    progress: Progress,
    *,
    count: int,
    seed: int,
) -> list[dict[str, Any]]:
    """``count`` people with ``MIN_PAPERS`` eligible papers, drawn with the seed from the
    sorted ids; each with their ``MAX_PAPERS`` most recent papers, oldest first."""
    histories: dict[str, list[PaperRow]] = {}
    for person in anthology.people.values():
        rows = sorted(
            (papers[i] for i in set(person.item_ids) if i in papers), key=lambda r: r.order
        )
        if len(rows) >= MIN_PAPERS:
            histories[person.id] = rows[-MAX_PAPERS:]
    eligible = sorted(histories)
    progress.say(
        f"{len(eligible)} people with at least {MIN_PAPERS} papers from {FIRST_YEAR} "
        f"on; drawing {min(count, len(eligible))}"
    )
    drawn = sorted(random.Random(seed).sample(eligible, min(count, len(eligible))))
    return [
        {
            "user_id": f"acl:{pid}",
            "author": anthology.people[pid].canonical_name.as_first_last(),
            "paper_ids": [row.anthology_id for row in histories[pid]],
        }
        for pid in drawn
    ]


def write_folder(
    folder: Path,
    anthology: Anthology,
    papers: dict[tuple[Any, ...], PaperRow],
    authors: list[dict[str, Any]],
) -> int:
    """``authors.json`` and ``papers-NN.jsonl``; returns the number of papers written."""
    wanted = {pid for author in authors for pid in author["paper_ids"]}
    rows = sorted(
        (row for row in papers.values() if row.anthology_id in wanted), key=lambda row: row.order
    )
    records = [_record(anthology, row) for row in rows]
    storage.atomic_write_text(
        folder / "authors.json", json.dumps(authors, ensure_ascii=False, indent=1) + "\n"
    )
    for n in range(0, max(len(records), 1), PAPERS_PER_FILE):
        chunk = records[n : n + PAPERS_PER_FILE]
        storage.atomic_write_text(
            folder / f"papers-{n // PAPERS_PER_FILE:02d}.jsonl",
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in chunk),
        )
    return len(records)


def _record(anthology: Anthology, row: PaperRow) -> dict[str, Any]:
    paper = anthology.get(row.anthology_id)
    authors = [
        {"name": spec.name.as_first_last(), "id": anthology.people.get_by_namespec(spec).id}
        for spec in getattr(paper, "authors", [])
    ]
    return {
        "anthology_id": row.anthology_id,
        "year": row.year,
        "venue": row.venue,
        "title": row.title,
        "abstract": row.abstract,
        "authors": authors,
    }
