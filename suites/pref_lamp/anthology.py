"""Reading the ``acl-anthology/`` folder: ``authors.json`` and ``papers-*.jsonl``.

What is fatal and what drops a record (every drop is counted under its rule and reported with
its file, record and field):

- fatal: a missing ``authors.json`` or no ``papers-*.jsonl``; ``authors.json`` that is not valid
  UTF-8 or JSON or not a list (nothing can be read from it);
- ``record:bad_paper``: a paper line that is not UTF-8 or JSON, or lacks a field or has one of
  the wrong type (``anthology_id``, ``title``, ``abstract``: non-empty strings; ``year``: an
  integer; ``authors``: a list of objects with a non-empty ``name``; a text of more than
  ``records.MAX_TEXT_CHARS`` characters);
- ``record:duplicate_paper_id``: every copy of an anthology id found twice (which copy is right
  cannot be told);
- ``record:bad_author``: an author entry that is not an object with a non-empty ``user_id``,
  ``author`` and a list ``paper_ids``; ``record:duplicate_user_id``: every copy of a repeated
  ``user_id``;
- ``record:bad_paper_id``: one entry of an author's ``paper_ids`` that is not a string, repeats,
  or names no (valid) paper; the entry is removed and the author kept.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from pathlib import Path

from prefalign_suites.pref_lamp.corpus import Paper, UserPapers
from prefalign_suites.raw_records import (
    WHOLE,
    Problems,
    Record,
    read_json_document,
    read_json_lines,
    unique,
)
from prefalign_suites.splits import held_out
from pytest_prefalign.api import DataError

AUTHORS = "authors.json"
PAPERS = "papers-*.jsonl"


def read(
    folder: Path, *, limit: int | None, share: Fraction, problems: Problems
) -> tuple[dict[str, UserPapers], list[Paper]]:
    """The first ``limit`` authors with their papers split in time (the most recent ``share``
    are test items), and every valid paper (the pool for other-author negatives)."""
    papers = read_papers(folder, problems)
    authors = read_authors(folder / AUTHORS, papers, problems)
    users = {}
    for user, ids in authors[:limit]:
        history = [papers[i] for i in ids]  # oldest first, as authors.json lists them
        cut = len(history) - held_out(len(history), share)
        users[user] = UserPapers(history[:cut], history[cut:])
    return users, list(papers.values())


def read_papers(folder: Path, problems: Problems) -> dict[str, Paper]:
    files = sorted(folder.glob(PAPERS))
    if not files:
        raise DataError(folder / PAPERS, "-", WHOLE, "no such file")
    found: dict[str, list[tuple[Record, Paper]]] = defaultdict(list)
    for path in files:
        for rec in read_json_lines(path, problems, "record:bad_paper", "anthology_id"):
            try:
                paper = _paper(rec)
            except DataError as exc:
                problems.bad("record:bad_paper", exc)
                continue
            found[paper.paper_id].append((rec, paper))
    return unique(found, "anthology_id", "record:duplicate_paper_id", problems)


def _paper(rec: Record) -> Paper:
    paper_id = rec.text("anthology_id")
    title, abstract = rec.text("title"), rec.text("abstract")
    rec.integer("year")
    names = [
        rec.child(f"authors[{n}]", a).text("name") for n, a in enumerate(rec.listing("authors"))
    ]
    return Paper(
        paper_id, title, abstract, key=paper_id, people=frozenset(name.casefold() for name in names)
    )


def read_authors(
    path: Path, papers: dict[str, Paper], problems: Problems
) -> list[tuple[str, list[str]]]:
    """``(user_id, paper ids)`` in file order, each id naming a valid paper."""
    if not path.is_file():
        raise DataError(path, "-", WHOLE, "no such file")
    doc = read_json_document(path)
    if not isinstance(doc, list):
        raise DataError(path, 1, WHOLE, "expected a JSON list of authors")
    found: dict[str, list[tuple[Record, list[str]]]] = defaultdict(list)
    for index, raw in enumerate(doc):
        rec = Record(str(path), index, raw, id_field="user_id")
        try:
            if not isinstance(raw, dict):
                raise rec.error(WHOLE, "expected an object")
            user, _ = rec.text("user_id"), rec.text("author")
            listed = rec.listing("paper_ids")
        except DataError as exc:
            problems.bad("record:bad_author", exc)
            continue
        found[user].append((rec, _known_ids(rec, listed, papers, problems)))
    return list(unique(found, "user_id", "record:duplicate_user_id", problems).items())


def _known_ids(
    rec: Record, listed: list[object], papers: dict[str, Paper], problems: Problems
) -> list[str]:
    ids: list[str] = []
    for n, paper_id in enumerate(listed):
        name = f"paper_ids[{n}]"
        if not isinstance(paper_id, str):
            problems.bad("record:bad_paper_id", rec.error(name, "expected a string"))
        elif paper_id in ids:
            problems.bad("record:bad_paper_id", rec.error(name, f"{paper_id!r} repeats"))
        elif paper_id not in papers:
            problems.bad(
                "record:bad_paper_id",
                rec.error(name, f"unknown paper id {paper_id!r} (no valid record in {PAPERS})"),
            )
        else:
            ids.append(paper_id)
    return ids
