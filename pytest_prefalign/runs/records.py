"""The run file, its one owner: the typed records of a run (``CaseResult``, ``RunFile``), their one
writer and one reader, the version and the validation.

Layout (docs/usage.md): ``{"version", "created", "commit", "config", "models", "results": [...],
"tau": [...], "crisis": {...}, "pairs": [...], "items": [...]}``, atomically written as
``NAME.json``, with the per-pair and per-item records also beside it as ``NAME.pairs.jsonl`` and
``NAME.items.jsonl``. ``tau`` and ``crisis`` hold the analysis computed once when the run ended,
which the summary, the report and later commands read instead of computing it again; their
typed records, and how each is written and read, are ``runs/entries.py``'s; ``config`` and
``outcomes`` are typed parts (``runs/header.py``).

Version 2 added what a regression gate needs to know that two runs are comparable, and the
provenance of each row: per result, the data fingerprint (``data.fingerprint``), the model's
weights (``model.weights``), the environment (``environment``: versions, device, dtype) and
the reward method's ``fingerprint()``, package and version; per record, a ``digest`` of the pair
or item it was computed on. Version 1 files are still read; they lack these fields, and a check
that needs one says so (analysis/comparable.py).

A result's ``data.faults`` names every record of the data dropped or altered for a fault
(``api.fault``: file, line, id, field, reason, rule). Added within version 2: a file without it
reads as one whose data had no fault named; where present it is checked.

Version 3 states each analysis entry's verdict once (``fires``; no ``significant`` beside it, no
circular ``flag``, no degenerate ``p`` beside ``p_value``, no tau ``warning`` beside
``verdict``) and writes every key. The writer writes version 3; the reader upgrades an older
file on read (``upgrade``, the one place that knows the older forms), so that everything past
it sees the current records only.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_prefalign import storage
from pytest_prefalign.runs import entries, parts
from pytest_prefalign.runs.entries import Crisis, TauEntry
from pytest_prefalign.runs.header import RunConfig, RunOutcomes
from pytest_prefalign.runs.parts import (
    CacheUse,
    Data,
    Environment,
    Guidance,
    ItemRecord,
    Judge,
    Model,
    PairRecord,
    Scalar,
    Scoring,
    Strength,
)

VERSION = 3
READABLE = (1, 2, 3)  # the versions ``read`` accepts: the older ones upgraded
Key = tuple[str, str, str]  # (suite, method, size): one test


class RunFileError(ValueError):
    """A run file that cannot be used; the message names the file, the record and the field."""


Option = Scalar | tuple[Scalar, ...]  # a decoder option's value (pooled: each fold's)
RECORDS = ("pairs", "items")  # the fields a result's row leaves to the record files
KINDS = (("pairs", PairRecord), ("items", ItemRecord))  # each record file's records
PARTS = ("judge", "model", "data", "environment", "guidance", "settings", "cache", *RECORDS)


@dataclass(frozen=True)
class CaseResult:
    """One (method, suite, size) test's result, with its per-pair and per-item records.

    ``metrics``: name -> value (see ``analysis.catalogue``); ``ci``: name -> [low, high];
    ``per_user``: name -> user -> value. What the test ran on is in typed parts
    (``runs/parts.py``): the model, the data, the environment, the scoring ``settings``, the
    win rates' ``judge`` and the decoder's ``guidance`` (None where the method has none), the
    cached values used. A pair record holds ``pair_id``, ``user`` and the values of the pair
    fields (``rm_chosen``, ``policy_correct``, ...); an item record ``item_id``, ``user``,
    ``output``, ``reference`` and the item fields (``rouge1``, ...).
    """

    suite: str
    method: str
    size: str
    decoder: str = ""
    reward: str | None = None
    n_users: int = 0
    n_items: int = 0
    n_pairs: int = 0
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    ci: Mapping[str, Sequence[float]] = field(default_factory=dict)
    per_user: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    judge: Judge | None = None
    timings: Mapping[str, float] = field(default_factory=dict)
    model: Model = field(default_factory=Model)
    data: Data = field(default_factory=Data)
    environment: Environment = field(default_factory=Environment)
    reward_fingerprint: str | None = None  # the reward method's fingerprint()
    reward_package: str | None = None  # the distribution that provided it (None: no package)
    reward_version: str | None = None  # that distribution's version
    options: Mapping[str, Option] = field(default_factory=dict)
    guidance: Guidance | None = None
    settings: Scoring = field(default_factory=Scoring)
    cache: tuple[CacheUse, ...] = ()
    pairs: tuple[PairRecord, ...] = ()
    items: tuple[ItemRecord, ...] = ()

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(CaseResult)
        test = {"suite": self.suite, "method": self.method, "size": self.size}
        for name in PARTS:  # a part given as its JSON object is read as the part
            value = getattr(self, name)
            if name in RECORDS:  # a record given without its test is the result's
                value = [{**test, **r} if isinstance(r, Mapping) else r for r in value]
            if isinstance(value, Mapping) or (
                isinstance(value, list | tuple) and any(isinstance(v, Mapping) for v in value)
            ):
                object.__setattr__(self, name, parts.read(hints[name], value, name))
        for name in ("cache", *RECORDS):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def key(self) -> Key:
        return (self.suite, self.method, self.size)

    @property
    def sweep(self) -> Strength | None:
        """The strength of a test of the strength sweep (``--prefalign-guidance sweep``), None
        for any other row (a working point among them)."""
        strength = self.guidance.strength if self.guidance else None
        return strength if strength is not None and strength.swept else None

    @property
    def panel(self) -> str:
        """What the row's reward method is compared within, beside its suite and size: its
        decoder, and for a test of the strength sweep its strength too (``args@w=0.25``), so
        that tau, the inversions, the regret and the claims come per strength, and a swept row
        is never ranked against the working points."""
        found = self.sweep
        if found is None or found.value is None:
            return self.decoder
        return parts.at_strength(self.decoder, found.option or "?", found.value)

    def results_inputs(self) -> Mapping[str, Scalar]:
        """What the cached records of the test were keyed by (the ``results`` cache use's
        inputs: the code versions, the options, ...); none where it was not recorded."""
        return next((u.inputs for u in self.cache if u.artifact == "results"), {})

    def row(self) -> dict[str, Any]:
        """The run file's ``results`` entry: everything but the records."""
        return {
            f.name: parts.plain(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name not in RECORDS
        }

    def to_json(self) -> dict[str, Any]:
        """Plain data, records included: what a test report carries to the controller (under
        pytest-xdist it crosses a process boundary)."""
        records = {name: parts.plain(getattr(self, name)) for name in RECORDS}
        return {**self.row(), "records": records}

    @classmethod
    def from_json(cls, data: Any, where: str = "result") -> CaseResult:
        """The inverse of ``to_json`` (or of ``row``, without records), checked."""
        row = _object(data, where)
        for name in ("suite", "method", "size"):
            if not isinstance(row.get(name), str) or not row[name]:
                raise RunFileError(f"{where}: field {name!r}: missing or not a string")
        metrics = _object(row.get("metrics", {}), f"{where}: field 'metrics'")
        for name, value in metrics.items():
            if value is not None and not _number(value):
                raise RunFileError(f"{where}: metrics[{name!r}] = {value!r} is not a number")
        records = _object(row.get("records") or {}, f"{where}: field 'records'")
        hints = typing.get_type_hints(cls)
        values = {}
        try:
            for f in dataclasses.fields(cls):
                if f.name in row and f.name not in RECORDS:
                    values[f.name] = parts.read(hints[f.name], row[f.name], f"{where}: {f.name}")
        except parts.PartError as exc:
            raise RunFileError(str(exc)) from None
        for name, kind in KINDS:
            values[name] = _records(records.get(name), kind, f"{where}: records.{name}")
        return cls(**values)

    def with_records(self, pairs: Iterable[PairRecord], items: Iterable[ItemRecord]) -> CaseResult:
        """The result with these records added to its own."""
        return dataclasses.replace(self, pairs=(*self.pairs, *pairs), items=(*self.items, *items))


@dataclass
class RunFile:
    """A whole run: its configuration, every test's result with its records, and the analysis
    computed once at the end (``tau``, ``crisis``). ``config`` and ``outcomes`` are None where
    the run recorded none (``runs/header.py``); either given as its JSON object is read as its
    part."""

    results: list[CaseResult]
    created: str = ""
    commit: str | None = None
    config: RunConfig | None = None
    models: dict[str, Model] = field(default_factory=dict)  # by size
    tau: Sequence[TauEntry] = ()
    crisis: Crisis = field(default_factory=Crisis.none)
    version: int = VERSION
    # whether every selected test ran and left a result (``outcomes`` says what happened to
    # each test otherwise: interrupted, not run, failed, errors, skipped, deselected); a run
    # file written before this field existed reads as complete
    complete: bool = True
    outcomes: RunOutcomes | None = None

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(RunFile)
        for name in ("config", "outcomes"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                setattr(self, name, parts.read(hints[name], value, name))

    @property
    def pairs(self) -> list[PairRecord]:
        return [record for result in self.results for record in result.pairs]

    @property
    def items(self) -> list[ItemRecord]:
        return [record for result in self.results for record in result.items]

    def result(self, key: Key) -> CaseResult | None:
        return next((r for r in self.results if r.key == key), None)

    def by_case(self) -> dict[Key, RunFile]:
        """One run per test, each with that test's records (a baseline compared test by test)."""
        return {r.key: RunFile([r], version=self.version) for r in self.results}

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "created": self.created,
            "commit": self.commit,
            "config": parts.plain(self.config) or {},
            "models": parts.plain(self.models),
            "results": [r.row() for r in self.results],
            "tau": [entry.to_json() for entry in self.tau],
            "crisis": self.crisis.to_json(),
            "complete": self.complete,
            "outcomes": parts.plain(self.outcomes) or {},
            "pairs": parts.plain(self.pairs),
            "items": parts.plain(self.items),
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "run file") -> RunFile:
        """A run file's JSON, checked: the version, every result's key and metrics, every
        record's test, id and user, no test or record twice."""
        run = _object(data, where)
        version = run.get("version")
        if version not in READABLE:
            raise RunFileError(
                f"{where}: not a run file of version {', '.join(map(str, READABLE))} "
                f"(version: {version!r})"
            )
        if version != VERSION:
            run = upgrade(run)
        rows = _list(run.get("results"), f"{where}: field 'results'")
        results = [
            CaseResult.from_json(row, f"{where}: results[{n}]") for n, row in enumerate(rows)
        ]
        by_key: dict[Key, CaseResult] = {}
        for n, result in enumerate(results):
            if result.key in by_key:
                raise RunFileError(
                    f"{where}: results[{n}]: a second result for {_text(result.key)}"
                )
            by_key[result.key] = result
        pairs = _by_test(_records(run.get("pairs"), PairRecord, f"{where}: pairs"), by_key)
        items = _by_test(_records(run.get("items"), ItemRecord, f"{where}: items"), by_key)
        results = [r.with_records(pairs.get(r.key, ()), items.get(r.key, ())) for r in results]
        for result in results:
            for section, id_field in (("pairs", "pair_id"), ("items", "item_id")):
                _unique(
                    getattr(result, section), id_field, f"{where}: {section} of {_text(result.key)}"
                )
        try:
            tau = entries.tau_from_json(run.get("tau"), f"{where}: tau")
            crisis = entries.crisis_from_json(run.get("crisis"), f"{where}: crisis")
        except entries.EntryError as exc:
            raise RunFileError(str(exc)) from None
        return cls(results=results, tau=tau, crisis=crisis, version=VERSION, **_header(run, where))


# the fields of a run file beside its results and its analysis, each read by its declared type
HEADER = ("created", "commit", "config", "models", "complete", "outcomes")


def _header(run: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``HEADER``'s fields of a run file's JSON, each read by its declared type (a key the
    file lacks takes the field's default: an older file's absent part)."""
    hints = typing.get_type_hints(RunFile)
    try:
        return {
            name: parts.read(hints[name], run[name], f"{where}: field {name!r}")
            for name in HEADER
            if name in run
        }
    except parts.PartError as exc:
        raise RunFileError(str(exc)) from None


# --------------------------------------------------------------------------------------------
# The writer and the reader
# --------------------------------------------------------------------------------------------


def write(run: RunFile, path: Path) -> None:
    """Write ``run`` atomically to ``path``, its per-pair and per-item records in JSONL beside
    it (``NAME.pairs.jsonl``, ``NAME.items.jsonl``): a reader sees a whole file or none."""
    path = Path(path)
    stem = path.with_suffix("")
    storage.atomic_write_jsonl(stem.with_name(stem.name + ".pairs.jsonl"), parts.plain(run.pairs))
    storage.atomic_write_jsonl(stem.with_name(stem.name + ".items.jsonl"), parts.plain(run.items))
    storage.atomic_write_json(path, run.to_json())


def write_numbered(run: RunFile, runs_dir: Path) -> Path:
    """Write ``run`` as ``runs_dir/NNNN_<commit>_<timestamp>.json``, numbered under a lock; an
    incomplete run as ``NNNN_<commit>_<timestamp>.partial.json``, so that its name says it."""
    with storage.locked(runs_dir / "index"):
        number = 1 + sum(1 for _ in runs_dir.glob("[0-9][0-9][0-9][0-9]_*.json"))
        stamp = run.created.replace(":", "").replace("-", "")[:15]
        partial = "" if run.complete else ".partial"
        path = runs_dir / f"{number:04d}_{run.commit or 'nogit'}_{stamp}{partial}.json"
        write(run, path)
    return path


def read(path: Path) -> RunFile:
    """The run file at ``path``; ``RunFileError`` naming the file when it cannot be used."""
    path = Path(path)
    if not path.is_file():
        raise RunFileError(f"{path}: no such file")
    try:
        data = storage.read_json(path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunFileError(f"{path}: not a readable JSON file ({exc})") from None
    return RunFile.from_json(data, str(path))


# --------------------------------------------------------------------------------------------
# Older versions, upgraded on read
# --------------------------------------------------------------------------------------------


def upgrade(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run file of an older version (its JSON) as version ``VERSION`` writes it: its
    analysis entries in their current form (``TAU``, ``SECTIONS``); the rest is read as it was
    (the keys version 2 added are optional, and a check that needs one says it is missing)."""
    crisis = dict(run.get("crisis") or {})
    for name, upgraded in SECTIONS.items():
        if name in crisis:
            crisis[name] = [upgraded(entry) for entry in crisis[name] or []]
    tau = [_lower_95(TAU(entry)) for entry in run.get("tau") or []]
    return {**run, "version": VERSION, "tau": tau, "crisis": crisis}


@dataclass(frozen=True)
class Upgrade:
    """How an older analysis entry takes its current form: each key of ``renamed`` gives its
    value (where it has one) to the current key it names, where that has none (absent, null or
    empty); each key of ``dropped`` (a copy of another key) goes; each key of ``defaults`` an
    older entry lacks reads as the value given."""

    renamed: Mapping[str, str] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(entry)
        for old, new in self.renamed.items():
            value = out.pop(old, None)
            if value not in (None, "") and out.get(new) in (None, ""):
                out[new] = value
        for name in self.dropped:
            out.pop(name, None)
        for name, value in self.defaults.items():
            out.setdefault(name, value)
        return out


# a tau entry's verdict was once written as ``warning``; before ``n_users`` was kept, none
# (the summary shows a dash)
TAU = Upgrade(renamed={"warning": "verdict"}, defaults={"n_users": None})
# each section of the crisis analysis: an inversion stated ``significant`` beside ``fires``
# (before the inversions were tested, every one written was stated); a regret entry and a
# circular one kept a copy of ``fires`` (``significant``, ``flag``); before the spread flags
# were tested, every flag written was stated; a degenerate row's p-value was first written as
# ``p``, then beside ``p_value``
SECTIONS = {
    "inversions": Upgrade(renamed={"significant": "fires"}, defaults={"fires": True}),
    "regret": Upgrade(dropped=("significant",)),
    "circular": Upgrade(dropped=("flag",)),
    "spread": Upgrade(defaults={"fires": True}),
    "degenerate": Upgrade(renamed={"p": "p_value"}, defaults={"p_value": None}),
}


def _lower_95(entry: dict[str, Any]) -> dict[str, Any]:
    """A tau entry written before ``lower_95`` was kept: the interval's 2.5th percentile stands
    for it (the stricter bound)."""
    if "lower_95" in entry:
        return entry
    ci = entry.get("ci")
    return {**entry, "lower_95": ci[0] if ci else None}


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise RunFileError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return dict(value)


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise RunFileError(f"{where}: missing or not a list")
    return value


def _by_test(records: list[parts.R], tests: Mapping[Key, CaseResult]) -> dict[Key, list[parts.R]]:
    """The records of each test of ``tests``, in the file's order (a record of no such test is
    left out)."""
    found: dict[Key, list[parts.R]] = {}
    for record in records:
        key = (record.suite, record.method, record.size)
        if key in tests:
            found.setdefault(key, []).append(record)
    return found


def _records(value: Any, kind: type[parts.R], where: str) -> list[parts.R]:
    id_field = "pair_id" if kind is PairRecord else "item_id"
    out = []
    for n, record in enumerate(value or []):
        row = _object(record, f"{where}[{n}]")
        for name in ("suite", "method", "size", id_field, "user"):
            if row.get(name) is None:
                raise RunFileError(f"{where}[{n}]: field {name!r} is missing")
        try:
            out.append(kind.from_json(row, f"{where}[{n}]"))
        except parts.PartError as exc:
            raise RunFileError(str(exc)) from None
    return out


def _unique(records: Iterable[parts.Record], id_field: str, where: str) -> None:
    seen: set[str] = set()
    for record in records:
        if record.record_id in seen:
            raise RunFileError(f"{where}: {id_field} {record.record_id!r} appears twice")
        seen.add(record.record_id)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _text(key: Key) -> str:
    return f"{key[1]} on {key[0]} ({key[2]})"
