"""The typed parts of a test's result (``runs/records.py``'s ``CaseResult``): the model, the
environment, the scoring settings, the judge of the win rates, the guidance, the data and its
provenance, the cached values used, and the per-pair and per-item records; and their one
(de)serialisation.

Each part is a frozen dataclass written as one JSON object whose keys are its fields, in
declaration order (a field made by ``key`` is written under a key that is not a Python name: the
environment's ``pytest-prefalign``, the judge's ``self``; one made by ``absent``, a key a file
may lack, is left out where it is None). ``from_json`` reads the object by the fields' declared
types: a part, a part or null, a tuple of parts, a mapping of names to values; a key no field
names is refused, unless the part has a ``rest`` field, which holds what a suite, a method or a
plugin adds beside the fields the analysis reads (the suite's own provenance, a record's
measured fields), written back after the others. What an older file wrote otherwise is the
reader's to upgrade (``runs/records.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

P = TypeVar("P", bound="Part")
R = TypeVar("R", "PairRecord", "ItemRecord")  # a record of either kind, kept as it is
AnyRecord = TypeVar("AnyRecord", bound="Record")  # a record, whatever its kind

Scalar = str | int | float | bool | None  # a JSON value that is not a list or an object


class PartError(ValueError):
    """A part of a result that cannot be read; the message names where and the key."""


@dataclass(frozen=True)
class Written:
    """How a field of a part is written: under ``key`` (None: its name), as the keys no other
    field names (``rest``), or left out where it is None (``omitted``)."""

    key: str | None = None
    rest: bool = False
    omitted: bool = False


WRITTEN = "prefalign"  # the metadata entry of a field that holds its ``Written``
PLAIN = Written()  # a field written under its name


def key(name: str) -> Any:
    """A field written under another key than its name."""
    return field(default=None, metadata={WRITTEN: Written(key=name)})


def rest() -> Any:
    """The field that holds the keys no other field names, as read."""
    return field(default_factory=dict, metadata={WRITTEN: Written(rest=True)})


def absent() -> Any:
    """A field for a key that a file may lack: None where it does, and then not written."""
    return field(default=None, metadata={WRITTEN: Written(omitted=True)})


@dataclass(frozen=True)
class Part:
    """A part of a result, written as one JSON object (see the module's docstring)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        extra: Mapping[str, Any] = {}
        for f in dataclasses.fields(self):
            value, how = getattr(self, f.name), _written(f)
            if how.rest:
                extra = value
            elif value is not None or not how.omitted:
                out[how.key or f.name] = plain(value)
        return {**out, **{k: plain(v) for k, v in extra.items()}}

    @classmethod
    def from_json(cls: type[P], data: Any, where: str = "part") -> P:
        """The part of ``data`` (a JSON object), checked: every required key present, no key
        it does not know (but in its ``rest``), every value of its field's type."""
        row = _object(data, where)
        fields, extra = _plan(cls)
        values: dict[str, Any] = {}
        for name, key_, reader, required in fields:
            if key_ in row:
                values[name] = reader(row[key_], f"{where}: field {key_!r}")
            elif required:
                raise PartError(f"{where}: field {key_!r} is missing")
        if len(values) < len(row):
            known = {key_ for _, key_, _, _ in fields}
            unknown = {k: v for k, v in row.items() if k not in known}
            if extra is not None:
                values[extra[0]] = extra[1](unknown, where)
            elif unknown:
                names = ", ".join(map(repr, sorted(unknown)))
                raise PartError(f"{where}: unknown field(s) {names}")
        return cls(**values)


Plan = tuple[list[tuple[str, str, "Reader", bool]], tuple[str, "Reader"] | None]
_PLANS: dict[type, Plan] = {}  # each part's plan, made once


def _plan(cls: type) -> Plan:
    """A part's fields as read: (name, key, reader, required), and its ``rest`` (once a
    part)."""
    if cls not in _PLANS:
        _PLANS[cls] = _make_plan(cls)
    return _PLANS[cls]


def _make_plan(cls: type) -> Plan:
    hints = typing.get_type_hints(cls)
    fields, extra = [], None
    for f in dataclasses.fields(cls):
        if _written(f).rest:
            extra = (f.name, _reader(hints[f.name]))
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        fields.append((f.name, _written(f).key or f.name, _reader(hints[f.name]), required))
    return fields, extra


# --------------------------------------------------------------------------------------------
# Reading and writing by declared type
# --------------------------------------------------------------------------------------------


def _written(f: dataclasses.Field[Any]) -> Written:
    found: Written = f.metadata.get(WRITTEN, PLAIN)
    return found


def plain(value: Any) -> Any:
    """``value`` as JSON: a part as its object, a tuple as a list."""
    if isinstance(value, Part):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


_SCALARS: dict[Any, tuple[str, Any]] = {
    str: ("a string", lambda v: isinstance(v, str)),
    int: ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: ("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    bool: ("true or false", lambda v: isinstance(v, bool)),
    type(None): ("null", lambda v: v is None),
}

Reader = Callable[[Any, str], Any]


def read(tp: Any, value: Any, where: str) -> Any:
    """``value`` read as the declared type ``tp`` (``where`` names it in an error)."""
    return _reader(tp)(value, where)


@functools.cache
def _reader(tp: Any) -> Reader:
    """How a value of the declared type ``tp`` is read, made once per type."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return lambda value, where: value
    if origin in (types.UnionType, typing.Union):
        return _union_reader(args)
    if isinstance(tp, type) and issubclass(tp, Part):
        return tp.from_json
    if origin in (tuple, list, Sequence):
        inner, make = _reader(args[0]), tuple if origin is tuple else list

        def sequence(value: Any, where: str) -> Any:
            if not isinstance(value, list | tuple):
                raise PartError(f"{where}: expected a list, got {type(value).__name__}")
            return make(inner(v, f"{where}[{n}]") for n, v in enumerate(value))

        return sequence
    if origin in (Mapping, dict):
        inner = _reader(args[1])

        def mapping(value: Any, where: str) -> Any:
            return {str(k): inner(v, where) for k, v in _object(value, where).items()}

        return mapping
    return _scalar_reader((tp,))


def _scalar_reader(args: tuple[Any, ...]) -> Reader:
    accepts = [_SCALARS[tp][1] for tp in args]
    described = " or ".join(_SCALARS[tp][0] for tp in args)

    def scalar(value: Any, where: str) -> Any:
        if not any(accept(value) for accept in accepts):
            raise PartError(f"{where}: {value!r} is not {described}")
        return value

    return scalar


def _union_reader(args: tuple[Any, ...]) -> Reader:
    """A value of one of ``args``: a scalar of one of them; null where null is one; an empty
    object for an optional part reads as none (an older file's absent part); else the first
    that reads."""
    if all(tp in _SCALARS for tp in args):
        return _scalar_reader(args)
    optional = type(None) in args
    readers = [_reader(tp) for tp in args if tp is not type(None)]

    def union(value: Any, where: str) -> Any:
        if value is None and optional:
            return None
        if optional and value == {}:
            return None
        errors = []
        for reader in readers:
            try:
                return reader(value, where)
            except PartError as exc:
                errors.append(str(exc))
        if len(errors) == 1:
            raise PartError(errors[0])
        raise PartError(f"{where}: {value!r} is not of its type")

    return union


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PartError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------------------------
# What the test ran on
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model(Part):
    """The model: its name, the fingerprint of its source and of its weights and tokenizer."""

    name: str | None = None
    fingerprint: str | None = None
    weights: str | None = None


@dataclass(frozen=True)
class Environment(Part):
    """What the figures were computed with besides the weights (``evaluation/prepare.py``):
    the versions of this plugin, torch, transformers and Python, the device, the dtype and the
    linear layers' kernel."""

    plugin: str | None = key("pytest-prefalign")
    torch: str | None = None
    transformers: str | None = None
    python: str | None = None
    device: str | None = None
    dtype: str | None = None
    linear: str | None = None

    @property
    def recorded(self) -> bool:
        """Whether the run recorded one (a version 1 file did not)."""
        return any(v is not None for v in dataclasses.astuple(self))

    def named(self) -> dict[str, str | None]:
        """Each entry by the name the run file gives it (``pytest-prefalign``, ``torch``, ...)."""
        return self.to_json()


@dataclass(frozen=True)
class Scoring(Part):
    """The run's settings that define a figure (the file's ``settings``): the policy score's
    reduction (``sum`` or ``mean``: which policy accuracy) and the seed of sampled methods."""

    reduce: str | None = None
    seed: int | None = None

    @property
    def recorded(self) -> bool:
        """Whether the run recorded them (an older file did not)."""
        return self.reduce is not None or self.seed is not None


@dataclass(frozen=True)
class CacheUse(Part):
    """A cached value the test used (``cache.Use``): its kind, its key, whether it came from
    the cache, and what its key was made of."""

    artifact: str
    key: str
    hit: bool
    inputs: Mapping[str, Scalar] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# The judge of the win rates
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts(Part):
    """A win rate's wins, ties and losses."""

    wins: int = 0
    ties: int = 0
    losses: int = 0


@dataclass(frozen=True)
class Judge(Part):
    """The win rates' judges: the items judged, the method's own judge (``self``) and the
    independent one (None where unavailable, with the ``reason``), each win rate's counts
    (None: that judge was unavailable) and, pooled over folds, each fold's."""

    n: int | None = None
    own: str | None = key("self")
    independent: str | None = None
    reason: str | None = None
    counts: Mapping[str, Counts | None] = field(default_factory=dict)
    folds: tuple[Judge, ...] = ()


# --------------------------------------------------------------------------------------------
# The decoder's working point
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trial(Part):
    """One guidance strength tried on the validation items (``evaluation/guidance.py``)."""

    value: float | None = None
    fluency: float = 0.0
    not_answer: float = 0.0
    reward: float = 0.0
    fluent: bool = True
    answers: bool = True
    raises: bool = False
    answer_p: float = 1.0
    broken: float = 0.0
    intact: bool = True


SWEPT = "sweep"  # ``Strength.how`` of a test of the strength sweep (--prefalign-guidance sweep)


def at_strength(name: str, option: str, value: float) -> str:
    """``name`` at one strength of the sweep: a swept test's method (``args[pref]@w=0.25``),
    and the panel its reward method is compared in (``args@w=0.25``)."""
    return f"{name}@{option}={value:g}"


@dataclass(frozen=True)
class Strength(Part):
    """How the decoder's guidance strength was set: the option, its value, ``how`` (chosen on
    validation items, fixed, set, ``sweep`` (one of the strength sweep's common strengths);
    pooled over folds that chose differently, "chosen per fold" with each fold's ``values``),
    the grid, the rule and each strength's measures."""

    option: str | None = None
    value: float | None = None
    how: str | None = None
    grid: tuple[float, ...] = ()
    rule: str = ""
    n_items: int = 0
    n_users: int = 0
    base: Trial | None = None
    trials: tuple[Trial, ...] = ()
    fallback: bool = False
    note: str = ""
    values: tuple[float, ...] = ()

    @property
    def swept(self) -> bool:
        """Set by the strength sweep, not chosen for the row: a strength common to every
        reward method of the decoder."""
        return self.how == SWEPT


@dataclass(frozen=True)
class RewardScale(Part):
    """The reward method's standardisation (``evaluation/scale.py``)."""

    mean: float
    std: float
    n: int
    degenerate: bool = False
    native: bool = False


@dataclass(frozen=True)
class Guidance(Part):
    """How the reward steered the decoder: the strength and the reward's scale (each None for
    a method without them) and, pooled over folds, each fold's."""

    strength: Strength | None = None
    reward_scale: RewardScale | None = None
    folds: tuple[Guidance, ...] = ()


# --------------------------------------------------------------------------------------------
# The data
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Fault(Part):
    """A record of the data dropped or altered for a fault (``api.fault``)."""

    file: str
    line: int | str | None = None
    id: str | None = None
    field: str
    reason: str
    rule: str | None = None


@dataclass(frozen=True)
class CrossFit(Part):
    """A cross-fitted suite's fold (``fold`` of ``folds``, with the suite's counts in
    ``details``), or pooled, each fold's (``pooled``)."""

    fold: int | None = None
    folds: int | None = None
    pooled: tuple[CrossFit | None, ...] = ()
    details: Mapping[str, Any] = rest()


@dataclass(frozen=True)
class Design(Part):
    """How a suite's pairs were made, where a model wrote them: a label, a note, the writer's
    fingerprint and weights."""

    label: str | None = None
    note: str | None = None
    writer_fingerprint: str | None = None
    writer_weights: str | None = None
    details: Mapping[str, Any] = rest()


@dataclass(frozen=True)
class Release(Part):
    """The released pairs a suite read: their version and checksum."""

    version: str | None = None
    sha256: str | None = None
    details: Mapping[str, Any] = rest()


@dataclass(frozen=True)
class Provenance(Part):
    """Where the data came from: the suite's options, the data's licence and attribution, and
    where they apply its fold, the design of its pairs and their release; the rest is the
    suite's own (``details``)."""

    options: Mapping[str, Scalar] | None = None
    licence: str | None = None
    attribution: str | None = None  # what the licence asks to be said wherever it is used
    cross_fit: CrossFit | None = None
    design: Design | None = None
    pairs_release: Release | None = None
    details: Mapping[str, Any] = rest()


@dataclass(frozen=True)
class Fingerprint(Part):
    """What the test's figures were computed from, part by part (``evaluation/prepare.py``):
    ``all`` over the test pairs, the items, the training pairs and the profiles."""

    all: str | None = None
    test_pairs: str | None = None
    items: str | None = None
    train_pairs: str | None = None
    profiles: str | None = None


@dataclass(frozen=True)
class Data(Part):
    """The test's data: its source, the records dropped by reason, the faults, the provenance
    and the fingerprint of its parts; pooled over folds, each fold's."""

    source: str | None = None
    dropped: Mapping[str, int] = field(default_factory=dict)
    faults: tuple[Fault, ...] = ()
    provenance: Provenance = field(default_factory=Provenance)
    fingerprint: Fingerprint | None = None
    folds: tuple[Data, ...] = ()


# --------------------------------------------------------------------------------------------
# The per-pair and per-item records
# --------------------------------------------------------------------------------------------


class Record(Part):
    """What a pair's and an item's record share: the test (``suite``, ``method``, ``size``),
    the ``user``, the ``digest`` of its texts, and the values measured on it by field name
    (``values``: ``rm_correct``, ``rouge1``, ..., a plugin metric's too)."""

    suite: str
    method: str
    size: str
    user: str
    digest: str | None
    values: Mapping[str, Scalar]

    @property
    def record_id(self) -> str:
        raise NotImplementedError

    def value(self, name: str) -> Scalar:
        """The value of the field ``name`` (None where the record has none)."""
        return self.values.get(name)

    def has(self, name: str) -> bool:
        """Whether the record has a field ``name``, a value or one of its own."""
        return name in self.values or name in {f.name for f in dataclasses.fields(self)}

    def with_value(self: AnyRecord, name: str, value: Scalar) -> AnyRecord:
        """The record with one more value."""
        # every record is a dataclass with ``values`` (PairRecord, ItemRecord); this base is not
        made: Any = dataclasses.replace(cast(Any, self), values={**self.values, name: value})
        return cast(AnyRecord, made)


@dataclass(frozen=True)
class PairRecord(Record):
    """A test pair's record (``evaluation/pairs.py``): its id and the scores of its sides."""

    suite: str
    method: str
    size: str
    pair_id: str
    user: str
    digest: str | None = None
    values: Mapping[str, Scalar] = rest()

    @property
    def record_id(self) -> str:
        return self.pair_id


@dataclass(frozen=True)
class ItemRecord(Record):
    """A generation item's record (``evaluation/generation.py``): its id, the output, the
    user's own text (``reference``, None where the suite has none) and the measures."""

    suite: str
    method: str
    size: str
    item_id: str
    user: str
    digest: str | None = None
    output: str | None = None
    reference: str | None = None
    values: Mapping[str, Scalar] = rest()

    @property
    def record_id(self) -> str:
        return self.item_id
