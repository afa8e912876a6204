"""The typed records of a run's analysis, and their one (de)serialisation: every kind of entry
the run file stores under ``tau`` and ``crisis`` (``TauEntry``, ``InversionEntry``,
``RegretEntry``, ``IclEntry``, ``CircularEntry``, ``SpreadEntry``, ``DegenerateEntry``), the
``Family`` of their looks, and the ``Crisis`` that holds them.

As pytest's ``TestReport`` carries its own ``_to_json`` / ``_from_json``, each record here has
``to_json`` and ``from_json``. The records are frozen: the analysis (``analysis/crisis.py``)
makes a new one with ``dataclasses.replace`` where it used to edit a dict in place (an entry's
adjusted p-value, its verdict). The statistics and the verdict rules stay in the analysis; this
module knows only the fields and their order.

``to_json`` writes the current version of the run file (``runs/records.py``): every field, in
declaration order; a JSON list reads as a tuple (an interval, the methods of a group) and writes
back as a list. ``from_json`` reads that version: a key it does not know is refused, a key that
is not required and missing reads as its field's default. An older file's forms (a key since
renamed or dropped, a key it lacked that the readers took as something else) are the
upgrader's, in ``runs/records.py``, which hands this module the current form.

The keys an entry cannot do without (which suite, size and methods it is about, the figures
it states) are required: a file without one is refused with an ``EntryError`` that names the
entry and the key (``runs/records.py`` reports it as a ``RunFileError`` naming the file).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

Interval = Sequence[float]  # a percentile interval, [low, high] in the file, held as a tuple

E = TypeVar("E", bound="Entry")


class EntryError(ValueError):
    """An analysis entry that cannot be read; the message names the entry and the key."""


# --------------------------------------------------------------------------------------------
# What a field's value may be, by its declared type
# --------------------------------------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _interval(value: Any) -> bool:
    return isinstance(value, list | tuple) and len(value) == 2 and all(map(_number, value))


def _names(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


def _counts(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in value.items()
    )


# the declared types of the records' fields (strings: annotations are not evaluated), what
# each is in words, and the JSON values it accepts
_ACCEPTS: dict[str, tuple[str, Any]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "str | None": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "float": ("a number", _number),
    "float | None": ("a number or null", lambda v: v is None or _number(v)),
    "int | None": (
        "an integer or null",
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    ),
    "Interval | None": ("an interval [low, high] or null", lambda v: v is None or _interval(v)),
    "tuple[str, ...]": ("a list of names", _names),
    "Mapping[str, int]": ("an object of counts", _counts),
}


def _freeze(value: Any) -> Any:
    """A JSON list as a tuple (its lists too), so that a record is immutable all the way."""
    return tuple(_freeze(v) for v in value) if isinstance(value, list | tuple) else value


def _thaw(value: Any) -> Any:
    """The inverse of ``_freeze``: tuples as the JSON lists they were."""
    return [_thaw(v) for v in value] if isinstance(value, list | tuple) else value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise EntryError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------------------------
# The common part: fields in the file's order
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """A record of the analysis, written as one JSON object whose keys are its fields in
    declaration order."""

    def __post_init__(self) -> None:
        for f in _fields(type(self)):
            value = getattr(self, f.name)
            if isinstance(value, list):
                object.__setattr__(self, f.name, _freeze(value))

    def to_json(self) -> dict[str, Any]:
        return {f.name: self._field_json(getattr(self, f.name)) for f in _fields(type(self))}

    @staticmethod
    def _field_json(value: Any) -> Any:
        return _thaw(value)

    @classmethod
    def from_json(cls: type[E], data: Any, where: str = "entry") -> E:
        """The record of ``data`` (a JSON object of the current version), checked: every
        required key present, no key it does not know, every value of its field's type."""
        row = _object(data, where)
        values: dict[str, Any] = {}
        for f in _fields(cls):
            if f.name not in row:
                if _required(f):
                    raise EntryError(f"{where}: field {f.name!r} is missing")
                continue
            values[f.name] = cls._field_from_json(f, row[f.name], f"{where}: field {f.name!r}")
        unknown = sorted(set(row) - {f.name for f in _fields(cls)})
        if unknown:
            raise EntryError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
        return cls(**values)

    @classmethod
    def _field_from_json(cls, f: dataclasses.Field[Any], value: Any, where: str) -> Any:
        described, accepts = _ACCEPTS.get(str(f.type), ("", None))
        if accepts is not None and not accepts(value):
            raise EntryError(f"{where}: {value!r} is not {described}")
        return _freeze(value)


def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    """The fields written to the file, in its order."""
    return dataclasses.fields(cls)


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def entries_from_json(cls: type[E], data: Any, where: str) -> tuple[E, ...]:
    """A list of entries of one kind, each checked (``where[n]`` names the one that is not)."""
    if not isinstance(data, list):
        raise EntryError(f"{where}: expected a list, got {type(data).__name__}")
    return tuple(cls.from_json(value, f"{where}[{n}]") for n, value in enumerate(data))


class Look:
    """What the run's family (``analysis/family.py``) reads of an entry that can be a look:
    its p-value, and whether its statement is observed in its direction (``holds``: a kind
    without such a field states whatever its test finds); it writes back ``p_holm`` and
    ``fires``, the one flag of whether the entry's statement stands."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # every look is one of the records below
    p_value: float | None
    p_holm: float | None
    fires: bool

    @property
    def holds(self) -> bool:
        return True

    @property
    def is_look(self) -> bool:
        """Whether the family counts it: it has a p-value."""
        return self.p_value is not None


# --------------------------------------------------------------------------------------------
# The entries, one kind each
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TauEntry(Entry, Look):
    """Kendall's tau-b of RM accuracy (``x``) against ``y`` across the reward methods of one
    (suite, size, decoder): the estimate, its permutation p-value, the interval with users
    resampled, whether the data can say anything (``enough``) and the verdict."""

    suite: str
    size: str
    decoder: str
    x: str
    y: str
    tau: float | None = None
    p_value: float | None = None
    p_method: str = ""
    test: str = ""
    ci: Interval | None = None
    upper_95: float | None = None  # the one-sided 95% upper bound of tau
    lower_95: float | None = None  # the one-sided 95% lower bound
    n_methods: int = 0
    n_users: int | None = 0  # None: a run file that did not record it
    methods: tuple[str, ...] = ()
    enough: bool = True
    verdict: str = ""
    p_holm: float | None = None
    fires: bool = False
    # how ``ci`` was made (``analysis/projection.py``); absent in run files written before the
    # projection interval, whose ``ci`` is the percentile bootstrap of tau over users
    interval: str = ""
    resolved_pairs: int | None = None  # the pairs of methods both figures' intervals order

    @property
    def is_look(self) -> bool:
        """Whether the family counts it: a p-value, and enough evidence to read it."""
        return self.p_value is not None and self.enough


@dataclass(frozen=True)
class InversionEntry(Entry, Look):
    """Two reward methods of one decoder that RM accuracy orders one way (``x_a > x_b``) and
    ``y`` the other, with both differences' intervals and the intersection-union p-value of
    their two sign-flip tests."""

    suite: str
    size: str
    decoder: str
    x: str
    y: str
    a: str
    b: str
    x_a: float
    x_b: float
    y_a: float
    y_b: float
    x_diff_ci: Interval | None = None
    y_diff_ci: Interval | None = None
    n_users: int = 0
    test: str = ""
    p_x: float | None = None
    p_y: float | None = None
    p_value: float | None = None
    p_holm: float | None = None
    fires: bool = False


@dataclass(frozen=True)
class RegretEntry(Entry, Look):
    """The cross-fitted selection regret of picking a reward method of one (suite, size,
    decoder) by RM accuracy, measured on ``y``, with its permutation p-value."""

    suite: str
    size: str
    decoder: str
    x: str
    y: str
    picked: tuple[str, ...] = ()
    best: str = ""
    regret: float | None = None
    regret_in_sample: float | None = None
    ci: Interval | None = None
    test: str = ""
    p_value: float | None = None
    holds: bool = False  # a field here, a property in Look
    n_methods: int = 0
    n_users: int = 0
    p_holm: float | None = None
    fires: bool = False


@dataclass(frozen=True)
class IclEntry(Entry, Look):
    """An in-context-learning row (``icl``) against the best reward-guided row (``rgd``) of
    its (suite, size) on ``metric``: the difference over the users they all have, its
    interval, the within-user permutation p-value and the verdict."""

    suite: str
    size: str
    metric: str
    icl: str
    rgd: str
    diff: float | None = None
    ci: Interval | None = None
    n_users: int = 0
    n_others: int = 0
    test: str = ""
    p_value: float | None = None
    verdict: str = ""
    p_holm: float | None = None
    fires: bool = False


@dataclass(frozen=True)
class CircularEntry(Entry, Look):
    """A method's win rate over base under its own reward model beside the independent
    judge's, its ROUGE-1 against base's, and the circular-evaluation test (``flag``)."""

    suite: str
    size: str
    method: str
    win_self: float
    win_self_ci: Interval | None = None
    win_independent: float | None = None
    win_independent_ci: Interval | None = None
    gap: float | None = None
    gap_ci: Interval | None = None
    n: int = 0
    judge_independent: str | None = None
    reason: str | None = None
    rouge1_vs_base: float | None = None
    rouge1_vs_base_ci: Interval | None = None
    test: str = ""
    p_win: float | None = None
    p_rouge: float | None = None
    p_value: float | None = None
    holds: bool = False  # a field here, a property in Look
    p_holm: float | None = None
    fires: bool = False


@dataclass(frozen=True)
class SpreadEntry(Entry, Look):
    """A per-user spread flag (``kind``: ``close_means`` or ``mean_only_gain``) of methods
    ``a`` and ``b`` on ``metric``: their user means and worst deciles over the shared users,
    the differences' intervals, the swap tests and the sentence the summary prints."""

    suite: str
    size: str
    metric: str
    kind: str
    a: str
    b: str
    mean_a: float
    mean_b: float
    tail_a: float
    tail_b: float
    tail_users: int
    n_users: int
    mean_ci: Interval | None = None
    tail_ci: Interval | None = None
    p_mean: float | None = None
    p_tail: float | None = None
    text: str = ""
    test: str = ""
    p_value: float | None = None
    p_holm: float | None = None
    fires: bool = False


@dataclass(frozen=True)
class DegenerateEntry(Entry, Look):
    """A generating row against base's row of its (suite, size): the fluency gap against the
    stated margin, the not-an-answer gap and its one-sided test, the gap of the share of
    outputs that are not text at all against its stated margin (``text_margin``; None where
    the items do not name the rule they break: a run file written before they did), and
    whether (and why) the row is ``flagged`` degenerate."""

    suite: str
    size: str
    method: str
    decoder: str
    fluency: float
    fluency_base: float
    fluency_gap: float
    fluency_gap_ci: Interval | None
    margin: float
    not_answer: float
    not_answer_base: float
    not_answer_gap: float
    not_answer_gap_ci: Interval | None
    n_users: int
    test: str = ""
    p_value: float | None = None
    holds: bool = False  # a field here, a property in Look
    flagged: bool = False
    reason: str = ""
    p_holm: float | None = None
    fires: bool = False
    not_text: float | None = None
    not_text_base: float | None = None
    not_text_gap: float | None = None
    text_margin: float | None = None


# --------------------------------------------------------------------------------------------
# The family and the crisis
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family(Entry):
    """All the looks of a run adjusted together (``analysis/family.py``): the method, the
    level, the looks per kind (in the order the kinds were adjusted) and in all, and how many
    fired."""

    method: str
    alpha: float
    looks: int
    by_kind: Mapping[str, int]
    fired: int

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "by_kind", dict(self.by_kind))

    @staticmethod
    def _field_json(value: Any) -> Any:
        return dict(value) if isinstance(value, Mapping) else _thaw(value)


# the crisis sections whose entries are verdicts, with the record of each, in the file's order
SECTIONS: dict[str, type[Entry]] = {
    "inversions": InversionEntry,
    "circular": CircularEntry,
    "spread": SpreadEntry,
    "regret": RegretEntry,
    "icl_vs_rgd": IclEntry,
    "degenerate": DegenerateEntry,
}


@dataclass(frozen=True)
class Crisis(Entry):
    """The run's analysis beside tau: each section's entries, the looks per kind that could not
    fire (``silent_looks``, counted in the family with p = 1) and the ``family`` (None: no
    analysis was made, ``Crisis.none()``)."""

    inversions: tuple[InversionEntry, ...] = ()
    circular: tuple[CircularEntry, ...] = ()
    spread: tuple[SpreadEntry, ...] = ()
    regret: tuple[RegretEntry, ...] = ()
    icl_vs_rgd: tuple[IclEntry, ...] = ()
    degenerate: tuple[DegenerateEntry, ...] = ()
    silent_looks: Mapping[str, int] = field(default_factory=dict)
    family: Family | None = None

    def __post_init__(self) -> None:
        for name in SECTIONS:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "silent_looks", dict(self.silent_looks))

    @classmethod
    def none(cls) -> Crisis:
        """No analysis: every section empty, no family."""
        return cls()

    def section(self, name: str) -> tuple[Any, ...]:
        """The entries of the section ``name`` (a key of ``SECTIONS``)."""
        if name not in SECTIONS:
            raise KeyError(f"no crisis section {name!r}; the sections: {', '.join(SECTIONS)}")
        return tuple(getattr(self, name))

    @staticmethod
    def _field_json(value: Any) -> Any:
        if isinstance(value, Entry):
            return value.to_json()
        if isinstance(value, tuple):
            return [e.to_json() for e in value]
        return None if value is None else dict(value)

    @classmethod
    def _field_from_json(cls, f: dataclasses.Field[Any], value: Any, where: str) -> Any:
        if f.name in SECTIONS:
            return entries_from_json(SECTIONS[f.name], value, where)
        if f.name == "family":
            return None if value is None else Family.from_json(value, where)
        return super()._field_from_json(f, value, where)


def tau_from_json(data: Any, where: str = "tau") -> tuple[TauEntry, ...]:
    """The run file's ``tau``: a list of ``TauEntry`` (null reads as none)."""
    return entries_from_json(TauEntry, [] if data is None else data, where)


def crisis_from_json(data: Any, where: str = "crisis") -> Crisis:
    """The run file's ``crisis`` (null: ``Crisis.none()``)."""
    return Crisis.from_json({} if data is None else data, where)
