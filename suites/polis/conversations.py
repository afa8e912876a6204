"""Reading one Polis conversation folder: ``summary.csv``, ``comments.csv`` and ``votes.csv``.

Rules (from the data's README): statements with ``moderated = -1`` are dropped; of several votes
by one voter on one statement only the last (by timestamp, then by line) counts.

Fatal for the conversation (it is dropped, counted as ``conversation:unreadable``, and the
others go on): a missing file or column, a ``summary.csv`` without a ``topic``. Dropped records,
each reported with file, line and field: ``record:bad_comment`` (``comment-id``, ``author-id``,
``timestamp``: integers; ``moderated``: -1, 0 or 1; ``comment-body``: non-empty),
``record:duplicate_comment_id`` (every copy), ``record:bad_vote`` (``timestamp``, ``comment-id``,
``voter-id``: integers; ``vote``: -1, 0 or 1; a ``comment-id`` absent from ``comments.csv``).
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from prefalign_suites.raw_records import WHOLE, Problems, Record, normalise_ws, read_csv, unique
from pytest_prefalign.api import DataError

COMMENT_COLUMNS = ("timestamp", "comment-id", "author-id", "moderated", "comment-body")
VOTE_COLUMNS = ("timestamp", "comment-id", "voter-id", "vote")


@dataclass(frozen=True)
class Statement:
    comment_id: int
    author: int
    text: str
    time: int


@dataclass
class Conversation:
    """One conversation after the rules. ``votes[voter][comment_id] = (vote, timestamp)``."""

    name: str
    topic: str
    statements: dict[int, Statement]
    votes: dict[int, dict[int, tuple[int, int]]]
    stats: Counter[str] = field(default_factory=Counter)


def read(folder: Path, problems: Problems) -> Conversation:
    """Raises DataError where the conversation cannot be used at all."""
    topic = read_topic(folder / "summary.csv")
    statements, removed = read_statements(folder / "comments.csv", problems)
    conv = Conversation(folder.name, topic, statements, {})
    conv.votes = read_votes(folder / "votes.csv", conv, removed, problems)
    return conv


def read_topic(path: Path) -> str:
    """``summary.csv`` is key,value rows without a header; the ``topic`` row is needed."""
    if not path.is_file():
        raise DataError(path, "-", WHOLE, "no such file")
    try:
        rows = list(csv.reader(io.StringIO(path.read_bytes().decode("utf-8-sig"), newline="")))
    except UnicodeDecodeError as exc:
        raise DataError(path, "-", WHOLE, f"not valid UTF-8 (byte {exc.start})") from None
    for line, row in enumerate(rows, 1):
        if row and row[0].strip() == "topic":
            topic = normalise_ws(row[1]) if len(row) > 1 else ""
            if not topic:
                raise DataError(path, line, "topic", "empty")
            return topic
    raise DataError(path, "-", "topic", "missing (no row 'topic,...')")


def read_statements(path: Path, problems: Problems) -> tuple[dict[int, Statement], set[int]]:
    """The kept statements by id, and the ids of those dropped (moderated out, duplicated);
    moderated-out statements are counted as ``record:moderated_out``."""
    _need(path)
    found: dict[int, list[tuple[Record, tuple[Statement | None, int]]]] = defaultdict(list)
    for rec in read_csv(path, problems, "record:bad_comment", COMMENT_COLUMNS, "comment-id"):
        try:
            cid = rec.integer("comment-id")
        except DataError as exc:
            problems.bad("record:bad_comment", exc)
            continue
        found[cid].append((rec, _statement(rec, cid, problems)))
    kept = {}
    for cid, (statement, moderated) in unique(
        found, "comment-id", "record:duplicate_comment_id", problems
    ).items():
        if moderated == -1:
            problems.drop("record:moderated_out")
        elif statement is not None:
            kept[cid] = statement
    removed = set(found) - set(kept)
    return kept, removed


def _statement(rec: Record, cid: int, problems: Problems) -> tuple[Statement | None, int]:
    """The statement and its ``moderated`` value; ``None`` where a field is bad (its id is
    still known, so that votes on it are dropped with it, not reported one by one)."""
    try:
        moderated = rec.integer("moderated", (-1, 0, 1))
        author, time = rec.integer("author-id"), rec.integer("timestamp")
        return Statement(cid, author, rec.text("comment-body"), time), moderated
    except DataError as exc:
        problems.bad("record:bad_comment", exc)
        return None, 0


def read_votes(
    path: Path, conv: Conversation, removed: set[int], problems: Problems
) -> dict[int, dict[int, tuple[int, int]]]:
    """Each voter's last vote on each kept statement."""
    _need(path)
    latest: dict[tuple[int, int], tuple[int, int, int]] = {}  # (voter, cid) -> (time, line, vote)
    for rec in read_csv(path, problems, "record:bad_vote", VOTE_COLUMNS):
        try:
            time, cid, voter, vote = rec.integers("timestamp", "comment-id", "voter-id", "vote")
            if vote not in (-1, 0, 1):
                raise rec.error("vote", f"expected one of [-1, 0, 1], got {vote}")
            if cid not in conv.statements and cid not in removed:
                raise rec.error("comment-id", f"{cid} is not in comments.csv")
        except DataError as exc:
            problems.bad("record:bad_vote", exc)
            continue
        if cid in removed:
            conv.stats["votes_on_dropped_statements"] += 1
            continue
        key, value = (voter, cid), (time, int(rec.index), vote)
        if key in latest:
            conv.stats["votes_superseded"] += 1
        if key not in latest or value[:2] > latest[key][:2]:
            latest[key] = value
    votes: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)
    for (voter, cid), (time, _, vote) in latest.items():
        votes[voter][cid] = (vote, time)
    return dict(votes)


def _need(path: Path) -> None:
    if not path.is_file():
        raise DataError(path, "-", WHOLE, "no such file")
