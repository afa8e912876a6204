"""Reading the original LaMP-5 files (personalized scholarly title generation).

A folder holds ``{split}_questions.json`` (a list of ``{"id", "input", "profile": [{"id",
"title", "abstract"}]}``, the input being ``Generate a title for the following abstract of a
paper: ...``) and ``{split}_outputs.json`` (``{"task": "LaMP_5", "golds": [{"id", "output"}]}``)
for ``split`` train or dev. Each question is one user: its profile is that user's history (the
profile and the source of training pairs), the question is the test item, its gold the title.

Fatal: missing files, a file that is not UTF-8 JSON of the right shape, a ``task`` other than
LaMP_5. Dropped and counted: ``record:bad_question`` (bad ``id`` or ``input``, or ``profile`` not
a list), ``record:bad_profile_entry`` (one profile entry; the question is kept),
``record:bad_gold``, ``record:question_without_gold``, ``record:duplicate_question_id`` (every
copy). LaMP-5 has no paper ids shared across users, so a paper is identified by its abstract
(whitespace-normalised, case-folded) for the leak rule.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from prefalign_suites.pref_lamp.corpus import Paper, UserPapers
from prefalign_suites.raw_records import WHOLE, Problems, Record, read_json_document, unique
from pytest_prefalign.api import DataError, DataNotFound

PREFIX = "Generate a title for the following abstract of a paper:"
SPLITS = ("dev", "train")


def files(folder: Path, split: str) -> tuple[Path, Path]:
    """The questions and outputs files of ``split`` ('' picks dev where present, else train)."""
    if not folder.is_dir():
        raise DataNotFound(f"LaMP-5 folder {folder} does not exist (option lamp5_dir)")
    names = (split,) if split else SPLITS
    for name in names:
        questions, outputs = folder / f"{name}_questions.json", folder / f"{name}_outputs.json"
        if questions.is_file() and outputs.is_file():
            return questions, outputs
    wanted = " or ".join(f"{s}_questions.json + {s}_outputs.json" for s in names)
    raise DataNotFound(f"LaMP-5 folder {folder} holds no {wanted}")


def read(
    folder: Path, *, split: str, limit: int | None, problems: Problems
) -> tuple[dict[str, UserPapers], list[Paper], str]:
    """The first ``limit`` questions as users, every profile paper of the file (the pool for
    other-author negatives), and the questions file read."""
    questions_path, outputs_path = files(folder, split)
    golds = read_golds(outputs_path, problems)
    raw_users = read_questions(questions_path, golds, problems)
    owners: dict[str, set[str]] = defaultdict(set)
    for user, (profile, test) in raw_users.items():
        for entry in (*profile, test):
            owners[_key(entry["abstract"])].add(user)

    def paper(entry: dict[str, str]) -> Paper:
        key = _key(entry["abstract"])
        return Paper(entry["id"], entry["title"], entry["abstract"], key, frozenset(owners[key]))

    users = {
        user: UserPapers([paper(e) for e in profile], [paper(test)])
        for user, (profile, test) in list(raw_users.items())[:limit]
    }
    pool = {p.key: p for profile, _ in raw_users.values() for p in map(paper, profile)}
    return users, list(pool.values()), str(questions_path)


def read_golds(path: Path, problems: Problems) -> dict[str, str]:
    doc = read_json_document(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("golds"), list):
        raise DataError(path, 1, "golds", "expected an object with a list 'golds'")
    if doc.get("task", "LaMP_5") != "LaMP_5":
        raise DataError(path, 1, "task", f"expected LaMP_5, got {doc['task']!r}")
    golds = {}
    for index, raw in enumerate(doc["golds"]):
        rec = Record(str(path), index, raw, id_field="id")
        try:
            golds[_id(rec)] = rec.text("output")
        except DataError as exc:
            problems.bad("record:bad_gold", exc)
    return golds


def read_questions(
    path: Path, golds: dict[str, str], problems: Problems
) -> dict[str, tuple[list[dict[str, str]], dict[str, str]]]:
    """``lamp5:{id}`` -> (profile entries, the test entry), in file order."""
    doc = read_json_document(path)
    if not isinstance(doc, list):
        raise DataError(path, 1, WHOLE, "expected a JSON list of questions")
    found: dict[str, list[tuple[Record, Any]]] = defaultdict(list)
    for index, raw in enumerate(doc):
        rec = Record(str(path), index, raw, id_field="id")
        try:
            qid, abstract = _id(rec), _abstract(rec)
            listed = rec.listing("profile")
        except DataError as exc:
            problems.bad("record:bad_question", exc)
            continue
        if qid not in golds:
            problems.bad(
                "record:question_without_gold",
                rec.error("id", f"no gold output for {qid!r} in the outputs file"),
            )
            continue
        test = {"id": qid, "title": golds[qid], "abstract": abstract}
        found[qid].append((rec, (_profile(rec, listed, problems), test)))
    kept = unique(found, "id", "record:duplicate_question_id", problems)
    return {f"lamp5:{qid}": value for qid, value in kept.items()}


def _profile(rec: Record, listed: list[Any], problems: Problems) -> list[dict[str, str]]:
    entries = []
    for n, raw in enumerate(listed):
        entry = rec.child(f"profile[{n}]", raw)
        try:
            entries.append(
                {"id": _id(entry), "title": entry.text("title"), "abstract": entry.text("abstract")}
            )
        except DataError as exc:
            problems.bad("record:bad_profile_entry", exc)
    return entries


def _id(rec: Record) -> str:
    value = rec.get("id")
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise rec.error("id", "expected a non-empty string or an integer")
    return str(value).strip()


def _abstract(rec: Record) -> str:
    text = rec.text("input")
    if not text.casefold().startswith(PREFIX.casefold()):
        raise rec.error("input", f"expected it to start with {PREFIX!r}")
    abstract = text[len(PREFIX) :].strip()
    if not abstract:
        raise rec.error("input", "no abstract after the instruction")
    return abstract


def _key(abstract: str) -> str:
    return abstract.casefold()
