"""Reading raw data records and checking their fields, the same way for every suite.

A bad record is reported as a ``DataError`` naming the file, the record (the line number in JSON
Lines and CSV files, the position in a JSON list or a dataset split) and the field. A loader
either drops the record, counting it in ``Problems`` under a rule name, or, where the whole file is
unusable, raises the error. ``Problems`` then lands in ``SuiteData.dropped`` (counts),
``SuiteData.faults`` (every record dropped for an error, each named: file, line, id, field,
reason) and ``SuiteData.provenance["data_errors"]`` (the first messages), so the run goes on and
says why.

A text field longer than ``MAX_TEXT_CHARS`` is an error of its record: no task in the suites has
inputs near that size (the longest ACL abstract has 7,251 characters), and a model would read
only a small part of it (docs/suites.md, "Long texts").
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_prefalign.api import DataError

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import SuiteData

MAX_MESSAGES = 20  # error messages kept per load; the counts cover all of them
MAX_FAULTS = 10_000  # faults kept per load (``faults_total`` in the provenance counts them all)
MAX_TEXT_CHARS = 100_000  # a longer text field is an error of its record
WHOLE = "(whole record)"  # the field named when a record cannot be read at all

_SPACE = re.compile(r"\s+")
K = TypeVar("K")
V = TypeVar("V")


def normalise_ws(text: str) -> str:
    """Runs of whitespace become one space, ends are stripped; the text is otherwise kept."""
    return _SPACE.sub(" ", text).strip()


@dataclass
class Problems:
    """What one load dropped, by rule, the first error messages, and every fault."""

    counts: Counter[str] = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)
    errors: int = 0
    faults: list[dict[str, Any]] = field(default_factory=list)
    total_faults: int = 0

    def drop(self, rule: str, n: int = 1) -> None:
        """Count ``n`` records, users or pairs dropped by a rule (not an error in the data)."""
        if n:
            self.counts[rule] += n

    def bad(self, rule: str, error: DataError) -> None:
        """Count a record dropped for an error in the data, and keep the message."""
        self.drop(rule)
        self.errors += 1
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(str(error))
        self.fault(rule, error)

    def fault(self, rule: str, error: DataError) -> None:
        """Name a record dropped or altered (without counting it again)."""
        self.total_faults += 1
        if len(self.faults) < MAX_FAULTS:
            self.faults.append(error.fault(rule))

    def report(self, data: SuiteData) -> None:
        """Write the counts and messages into the suite data."""
        for rule, n in self.counts.items():
            data.dropped[rule] = data.dropped.get(rule, 0) + n
        if self.errors:
            data.provenance["data_errors"] = list(self.messages)
            data.provenance["data_errors_total"] = self.errors
        data.faults.extend(self.faults)
        if self.total_faults > len(self.faults):
            data.provenance["faults_total"] = self.total_faults


@dataclass(frozen=True)
class Record:
    """One raw record and where it came from. ``textual``: every value is a string (CSV), so
    numbers are parsed from text; in JSON a number must be a number."""

    file: str
    index: int | str
    data: Any
    textual: bool = False
    prefix: str = ""  # the path of a nested object inside its record, e.g. ``summaries[1]``
    id_field: str | None = None  # the field holding the record's own id, where it has one

    def error(self, name: str, problem: str) -> DataError:
        full = f"{self.prefix}.{name}" if self.prefix else name
        return DataError(self.file, self.index, full, problem, record_id=self.ident)

    @property
    def ident(self) -> str | None:
        """The record's own id (its ``id_field``), where it has a readable one."""
        if self.id_field is None or not isinstance(self.data, dict):
            return None
        value = self.data.get(self.id_field)
        ok = isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip()
        return str(value) if ok else None

    def get(self, name: str) -> Any:
        """The value at a dotted path (``info.post``); a missing field or null is an error."""
        if "." not in name and isinstance(self.data, dict):  # the common case, kept fast
            value = self.data.get(name)
            if value is None:
                raise self.error(name, "missing")
            return value
        value = self.data
        for part in name.split("."):
            if not isinstance(value, dict):
                raise self.error(name, f"expected an object at {part!r}, got {_kind(value)}")
            if part not in value or value[part] is None:
                raise self.error(name, "missing")
            value = value[part]
        return value

    def text(self, name: str) -> str:
        """A non-empty string (after whitespace normalisation) of at most ``MAX_TEXT_CHARS``
        characters, returned normalised."""
        value = self.get(name)
        if not isinstance(value, str):
            raise self.error(name, f"expected a string, got {_kind(value)}")
        if len(value) > MAX_TEXT_CHARS:
            raise self.error(
                name, f"{len(value):,} characters, more than the {MAX_TEXT_CHARS:,} a text may have"
            )
        value = normalise_ws(value)
        if not value:
            raise self.error(name, "empty")
        return value

    def integer(self, name: str, choices: Collection[int] | None = None) -> int:
        value = self.get(name)
        if self.textual and isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise self.error(name, f"expected an integer, got {value!r}") from None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(name, f"expected an integer, got {_kind(value)}")
        if choices is not None and value not in choices:
            raise self.error(name, f"expected one of {sorted(choices)}, got {value}")
        return value

    def integers(self, *names: str) -> tuple[int, ...]:
        """Several integer fields at once; CSV text is converted without the per-field checks
        first (a votes file has many rows), and checked field by field only if that fails."""
        if self.textual:
            try:
                return tuple(int(self.data[name]) for name in names)
            except (KeyError, ValueError, TypeError):
                pass
        return tuple(self.integer(name) for name in names)

    def listing(self, name: str) -> list[Any]:
        value = self.get(name)
        if not isinstance(value, list):
            raise self.error(name, f"expected a list, got {_kind(value)}")
        return value

    def child(self, name: str, value: Any) -> Record:
        """A nested object checked with the same file and record, its fields named under
        ``name`` (e.g. ``summaries[1].text``)."""
        full = f"{self.prefix}.{name}" if self.prefix else name
        # the nested object's fields are named under the record's own id
        return _Child(self.file, self.index, value, self.textual, full, parent=self.ident)


def unique(
    found: Mapping[K, list[tuple[Record, V]]], name: str, rule: str, problems: Problems
) -> dict[K, V]:
    """The values whose id occurs once. An id found in several records is ambiguous (which copy
    is right cannot be told): every copy is dropped, each later one reported at field ``name``."""
    kept: dict[K, V] = {}
    for key, copies in found.items():
        if len(copies) == 1:
            kept[key] = copies[0][1]
            continue
        first = copies[0][0]
        problems.drop(rule)
        problems.fault(rule, first.error(name, f"{key!r} repeats later; every copy is dropped"))
        for rec, _ in copies[1:]:
            where = "" if rec.file == first.file else f"{first.file} "
            problems.bad(
                rule,
                rec.error(
                    name, f"{key!r} also at {where}record {first.index}; every copy is dropped"
                ),
            )
    return kept


def read_json_lines(
    path: Path, problems: Problems, rule: str, id_field: str | None = None
) -> Iterator[Record]:
    """Each non-blank line a JSON object; a line that is not is reported and skipped."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                problems.bad(
                    rule,
                    DataError(
                        path, number, WHOLE, f"not valid UTF-8 (byte {exc.start} of the line)"
                    ),
                )
                continue
            except json.JSONDecodeError as exc:
                problems.bad(rule, DataError(path, number, WHOLE, f"not valid JSON: {exc.msg}"))
                continue
            if not isinstance(obj, dict):
                problems.bad(
                    rule,
                    DataError(path, number, WHOLE, f"expected a JSON object, got {_kind(obj)}"),
                )
                continue
            yield Record(str(path), number, obj, id_field=id_field)


def read_json_document(path: Path) -> Any:
    """A whole JSON file; a file that cannot be read is fatal (its line is named)."""
    blob = path.read_bytes()
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = blob[: exc.start].count(b"\n") + 1
        raise DataError(path, line, WHOLE, f"not valid UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, exc.lineno, WHOLE, f"not valid JSON: {exc.msg}") from None


def read_csv(
    path: Path, problems: Problems, rule: str, columns: Sequence[str], id_field: str | None = None
) -> Iterator[Record]:
    """Rows of a CSV file with a header, numbered by the line they start on. A missing column
    is fatal; a row with the wrong number of fields or bytes that are not UTF-8 is skipped."""
    blob = path.read_bytes()
    try:
        text, clean = blob.decode("utf-8-sig"), True
    except UnicodeDecodeError:
        # keep going: the undecodable bytes become surrogates, found again row by row below
        text, clean = blob.decode("utf-8-sig", errors="surrogateescape"), False
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, [])
    for column in columns:
        if column not in header:
            raise DataError(path, 1, column, f"missing column (header: {', '.join(header)})")
    start = reader.line_num + 1
    for row in reader:
        line, start = start, reader.line_num + 1
        if not row:
            continue
        if len(row) != len(header):
            problems.bad(
                rule, DataError(path, line, WHOLE, f"expected {len(header)} fields, got {len(row)}")
            )
            continue
        values = dict(zip(header, row, strict=True))
        broken = None if clean else next((k for k, v in values.items() if _undecodable(v)), None)
        if broken is not None:
            problems.bad(rule, DataError(path, line, broken, "not valid UTF-8"))
            continue
        yield Record(str(path), line, values, textual=True, id_field=id_field)


@dataclass(frozen=True)
class _Child(Record):
    """A nested object of a record: its errors carry the record's id (``parent``)."""

    parent: str | None = None

    @property
    def ident(self) -> str | None:
        return self.parent


def _undecodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
