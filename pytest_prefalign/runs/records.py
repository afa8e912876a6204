"""The run file, its one owner: the typed records of a run (``CaseResult``, ``RunFile``), their one
writer and one reader, the version and the validation.

Layout (docs/usage.md): ``{"version", "created", "commit", "config", "models", "results": [...],
"tau": [...], "crisis": {...}, "pairs": [...], "items": [...]}``, atomically written as
``NAME.json``, with the per-pair and per-item records also beside it as ``NAME.pairs.jsonl`` and
``NAME.items.jsonl``. ``tau`` and ``crisis`` hold the analysis computed once when the run ended,
which the summary, the report and later commands read instead of computing it again; their
typed records, and how each is written and read, are ``runs/entries.py``'s.

Version 2 added what a regression gate needs to know that two runs are comparable, and the
provenance of each row: per result, the data fingerprint (``data["fingerprint"]``), the model's
weights (``model["weights"]``), the environment (``environment``: versions, device, dtype) and
the reward method's ``fingerprint()``, package and version; per record, a ``digest`` of the pair
or item it was computed on. Version 1 files are still read; they lack these fields, and a check
that needs one says so (analysis/comparable.py).

A result's ``data["faults"]`` names every record of the data dropped or altered for a fault
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_prefalign import storage
from pytest_prefalign.runs import entries
from pytest_prefalign.runs.entries import Crisis, TauEntry

VERSION = 3
READABLE = (1, 2, 3)  # the versions ``read`` accepts: the older ones upgraded
Key = tuple[str, str, str]  # (suite, method, size): one test


class RunFileError(ValueError):
    """A run file that cannot be used; the message names the file, the record and the field."""


@dataclass
class CaseResult:
    """One (method, suite, size) test's result, with its per-pair and per-item records.

    ``metrics``: name -> value (see ``analysis.catalogue``); ``ci``: name -> [low, high];
    ``per_user``: name -> user -> value. A pair record holds ``pair_id``, ``user`` and the
    values of the pair fields (``rm_chosen``, ``policy_correct``, ...); an item record
    ``item_id``, ``user``, ``output``, ``reference`` and the item fields (``rouge1``, ...).
    """

    suite: str
    method: str
    size: str
    decoder: str = ""
    reward: str | None = None
    n_users: int = 0
    n_items: int = 0
    n_pairs: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    ci: dict[str, list[float]] = field(default_factory=dict)
    per_user: dict[str, dict[str, float]] = field(default_factory=dict)
    judge: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)  # name, fingerprint, weights
    # source, dropped, faults, provenance, fingerprint
    data: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)  # versions, device, dtype
    reward_fingerprint: str | None = None  # the reward method's fingerprint()
    reward_package: str | None = None  # the distribution that provided it (None: no package)
    reward_version: str | None = None  # that distribution's version
    options: dict[str, Any] = field(default_factory=dict)
    # the decoder's working point: ``strength``, how its guidance strength was set (chosen on
    # validation items, with the grid, the rule and each strength's measures, or fixed), and
    # ``reward_scale``, the reward method's standardisation (evaluation/guidance.py, scale.py)
    guidance: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # reduce, seed
    cache: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> Key:
        return (self.suite, self.method, self.size)

    def row(self) -> dict[str, Any]:
        """The run file's ``results`` entry: everything but the records."""
        data = dataclasses.asdict(self)
        del data["pairs"], data["items"]
        return data

    def to_json(self) -> dict[str, Any]:
        """Plain data, records included: what a test report carries to the controller (under
        pytest-xdist it crosses a process boundary)."""
        return {**self.row(), "records": {"pairs": self.pairs, "items": self.items}}

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
        known = {f.name for f in dataclasses.fields(cls)} - {"pairs", "items"}
        values = {k: v for k, v in row.items() if k in known}
        _faults(_object(row.get("data") or {}, f"{where}: field 'data'"), f"{where}: data")
        result = cls(**values)
        result.pairs = _records(records.get("pairs"), "pair_id", f"{where}: records.pairs")
        result.items = _records(records.get("items"), "item_id", f"{where}: records.items")
        return result


@dataclass
class RunFile:
    """A whole run: its configuration, every test's result with its records, and the analysis
    computed once at the end (``tau``, ``crisis``)."""

    results: list[CaseResult]
    created: str = ""
    commit: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    tau: Sequence[TauEntry] = ()
    crisis: Crisis = field(default_factory=Crisis.none)
    version: int = VERSION
    # whether every selected test ran and left a result (``outcomes`` says what happened to
    # each test otherwise: interrupted, not run, failed, errors, skipped, deselected); a run
    # file written before this field existed reads as complete
    complete: bool = True
    outcomes: dict[str, Any] = field(default_factory=dict)

    @property
    def pairs(self) -> list[dict[str, Any]]:
        return [record for result in self.results for record in result.pairs]

    @property
    def items(self) -> list[dict[str, Any]]:
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
            "config": self.config,
            "models": self.models,
            "results": [r.row() for r in self.results],
            "tau": [entry.to_json() for entry in self.tau],
            "crisis": self.crisis.to_json(),
            "complete": self.complete,
            "outcomes": self.outcomes,
            "pairs": self.pairs,
            "items": self.items,
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
        for section, id_field in (("pairs", "pair_id"), ("items", "item_id")):
            for record in _records(run.get(section), id_field, f"{where}: {section}"):
                key = (record["suite"], record["method"], record["size"])
                if key in by_key:
                    getattr(by_key[key], section).append(record)
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
        return cls(
            results=results,
            created=str(run.get("created") or ""),
            commit=run.get("commit"),
            config=dict(run.get("config") or {}),
            models=dict(run.get("models") or {}),
            tau=tau,
            crisis=crisis,
            version=VERSION,
            complete=_flag(run.get("complete", True), f"{where}: field 'complete'"),
            outcomes=_object(run.get("outcomes") or {}, f"{where}: field 'outcomes'"),
        )


# --------------------------------------------------------------------------------------------
# The writer and the reader
# --------------------------------------------------------------------------------------------


def write(run: RunFile, path: Path) -> None:
    """Write ``run`` atomically to ``path``, its per-pair and per-item records in JSONL beside
    it (``NAME.pairs.jsonl``, ``NAME.items.jsonl``): a reader sees a whole file or none."""
    path = Path(path)
    stem = path.with_suffix("")
    storage.atomic_write_jsonl(stem.with_name(stem.name + ".pairs.jsonl"), run.pairs)
    storage.atomic_write_jsonl(stem.with_name(stem.name + ".items.jsonl"), run.items)
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
    analysis entries in their current form (``_UPGRADES``); the rest is read as it was (the
    keys version 2 added are optional, and a check that needs one says it is missing)."""
    crisis = dict(run.get("crisis") or {})
    for name, upgraded in _UPGRADES.items():
        if name in crisis:
            crisis[name] = [upgraded(dict(entry)) for entry in crisis[name] or []]
    tau = [_tau(dict(entry)) for entry in run.get("tau") or []]
    return {**run, "version": VERSION, "tau": tau, "crisis": crisis}


def _tau(entry: dict[str, Any]) -> dict[str, Any]:
    """A tau entry: its verdict once written as ``warning``; before ``lower_95`` was kept, the
    interval's 2.5th percentile stands for it (the stricter bound); before ``n_users`` was,
    none (the summary shows a dash)."""
    warning = entry.pop("warning", None)
    if not entry.get("verdict") and warning:
        entry["verdict"] = str(warning)
    if "lower_95" not in entry:
        entry["lower_95"] = entry["ci"][0] if entry.get("ci") else None
    entry.setdefault("n_users", None)
    return entry


def _inversion(entry: dict[str, Any]) -> dict[str, Any]:
    """An inversion stated ``significant`` beside ``fires``; before the inversions were
    tested, every one written was stated."""
    significant = entry.pop("significant", True)
    entry.setdefault("fires", significant)
    return entry


def _dropped(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """An entry that kept a copy of ``fires`` under ``name``: the copy dropped."""

    def upgraded(entry: dict[str, Any]) -> dict[str, Any]:
        entry.pop(name, None)
        return entry

    return upgraded


def _spread(entry: dict[str, Any]) -> dict[str, Any]:
    """Before the spread flags were tested, every flag written was stated."""
    entry.setdefault("fires", True)
    return entry


def _degenerate(entry: dict[str, Any]) -> dict[str, Any]:
    """A degenerate row's p-value, first written as ``p``, then beside ``p_value``."""
    p = entry.pop("p", None)
    entry.setdefault("p_value", p)
    return entry


_UPGRADES = {
    "inversions": _inversion,
    "regret": _dropped("significant"),
    "circular": _dropped("flag"),
    "spread": _spread,
    "degenerate": _degenerate,
}


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise RunFileError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return dict(value)


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise RunFileError(f"{where}: expected true or false, got {value!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise RunFileError(f"{where}: missing or not a list")
    return value


def _records(value: Any, id_field: str, where: str) -> list[dict[str, Any]]:
    out = []
    for n, record in enumerate(value or []):
        row = _object(record, f"{where}[{n}]")
        for name in ("suite", "method", "size", id_field, "user"):
            if row.get(name) is None:
                raise RunFileError(f"{where}[{n}]: field {name!r} is missing")
        out.append(row)
    return out


def _faults(data: dict[str, Any], where: str) -> None:
    """``data["faults"]``, where present: a list of objects whose ``file``, ``field`` and
    ``reason`` are strings, ``line`` an integer, a string or null, ``id`` a string or null."""
    if "faults" not in data:
        return
    for n, value in enumerate(_list(data["faults"], f"{where}: field 'faults'")):
        fault = _object(value, f"{where}: faults[{n}]")
        for name in ("file", "field", "reason"):
            if not isinstance(fault.get(name), str):
                raise RunFileError(f"{where}: faults[{n}]: field {name!r}: missing or not a string")
        line, ident = fault.get("line"), fault.get("id")
        if not (line is None or isinstance(line, str) or (_number(line) and line == int(line))):
            raise RunFileError(f"{where}: faults[{n}]: field 'line': {line!r} is not a line")
        if not (ident is None or isinstance(ident, str)):
            raise RunFileError(f"{where}: faults[{n}]: field 'id': {ident!r} is not a string")


def _unique(records: Iterable[Mapping[str, Any]], id_field: str, where: str) -> None:
    seen: set[str] = set()
    for record in records:
        record_id = str(record[id_field])
        if record_id in seen:
            raise RunFileError(f"{where}: {id_field} {record_id!r} appears twice")
        seen.add(record_id)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _text(key: Key) -> str:
    return f"{key[1]} on {key[0]} ({key[2]})"
