"""Cached values: what each one depends on, where it is kept, and which tests used it.

Four scopes, each explicit:

- **disk, by content** (``Disk``): values reused from one run to the next, under a ``Key``;
- **process** (``PROCESS``): what a process loads once (models, the encoder, parsed code);
- **run** and **(suite, size)**: ``Scope`` objects the evaluation owns and hands to the methods
  (``CaseContext.shared``), so that the methods of one (suite, size) share work;

in memory, a module declares the place it keeps something as a typed ``Slot`` (as pytest's
``StashKey``), and a memo that holds tensors is an ``Lru`` with a byte budget.

A value that one run reuses from another (a generation, a trained reward method, features, the
generated negatives, the independent judge, a converted model) is stored under a ``Key`` that
hashes everything it depends on, each input named:

- the model: ``LM.fingerprint`` (the weights, dtype, device, and the LM code with the versions
  of the libraries it runs on);
- the data: ``records_fingerprint`` of the exact records the value was computed from (the
  training pairs, the generation items, the profiles), so suite options reach a key through the
  data they produce;
- options and the seed, as given;
- the code that computes it: ``versions.code_version``, a hash of the syntax tree of its module
  and of every first-party module that module imports (comments and docstrings do not count),
  with the versions of the third-party libraries they import.

A change in any input is a miss. ``Disk`` keeps values by key under the user cache; with
``--prefalign-no-cache`` it is disabled, so everything is computed again and nothing is written.

Each use of a cached value is noted (``note``) in the ledger of the test that is running
(``recording``), and the run file lists, per test, the values it used, their keys and named
inputs, and whether they came from the cache (``hit``) or were computed. No heavy imports here:
pytest loads this module through the plugin on every run.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import shutil
import tempfile
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from pytest_prefalign import storage

SCHEMA = 2  # the layout of every key: bump it to invalidate every cache at once

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


# --------------------------------------------------------------------------------------------
# Memory: scopes, slots, budgets
# --------------------------------------------------------------------------------------------


class Slot(Generic[T]):
    """A typed place in a scope, declared once by the module that keeps something there: a
    name for messages, and how to make its value the first time a scope is asked for it."""

    def __init__(self, name: str, make: Callable[[], T]) -> None:
        self.name, self.make = name, make

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


class Scope:
    """Values kept in memory for one lifetime: the process, a run, or the tests of one
    (suite, size). ``scope[slot]`` is the slot's value, made on first use."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._values: dict[Slot[Any], Any] = {}

    def __getitem__(self, slot: Slot[T]) -> T:
        if slot not in self._values:
            self._values[slot] = slot.make()
        return cast(T, self._values[slot])

    def __contains__(self, slot: Slot[Any]) -> bool:
        return slot in self._values

    def clear(self) -> None:
        self._values.clear()


PROCESS = Scope("process")  # what a process loads once; its memos of tensors have budgets


class Lru(Generic[K, V]):
    """A memo that keeps at most ``budget`` bytes (``size`` measures a value), dropping the
    least recently used values first; a value larger than the budget is not kept."""

    def __init__(self, budget: int, size: Callable[[V], int]) -> None:
        self.budget, self.size = budget, size
        self.used = 0
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        return None

    def __contains__(self, key: K) -> bool:
        return key in self._items

    def put(self, key: K, value: V) -> None:
        if key in self._items:
            return
        nbytes = self.size(value)
        if nbytes > self.budget:
            return
        self._items[key] = value
        self.used += nbytes
        while self.used > self.budget:
            _, old = self._items.popitem(last=False)
            self.used -= self.size(old)

    def clear(self) -> None:
        self._items.clear()
        self.used = 0

    def __len__(self) -> int:
        return len(self._items)


# --------------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """A cached value's key: its kind and its named inputs (JSON-serialisable: fingerprints,
    options, the seed). ``digest`` hashes both; ``summary`` shows each input briefly."""

    kind: str
    inputs: Mapping[str, Any] = field(compare=False)
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "digest", storage.content_key(SCHEMA, self.kind, dict(self.inputs))
        )

    def summary(self) -> dict[str, Any]:
        """Each input as itself when short (a number, a name), else as a short hash of it, so
        that two run files show which input of a key changed."""
        return {name: _brief(value) for name, value in self.inputs.items()}

    def __str__(self) -> str:
        return f"{self.kind}-{self.digest}"


def make_key(kind: str, **inputs: Any) -> Key:
    return Key(kind, inputs)


def _brief(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and len(value) <= 64:
        return value
    return "#" + storage.content_key(value)


def records_fingerprint(records: Iterable[Any]) -> str:
    """Every field of every record (dataclasses such as ``Pair``, ``Item``, ``ProfileEntry``),
    in order: the data a value was computed from."""
    return storage.content_key([dataclasses.astuple(r) if _is_record(r) else r for r in records])


def _is_record(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def profiles_fingerprint(profiles: Mapping[str, Iterable[Any]]) -> str:
    """Every user's profile entries, users in name order."""
    return storage.content_key(
        [(user, records_fingerprint(profiles[user])) for user in sorted(profiles)]
    )


# --------------------------------------------------------------------------------------------
# The ledger: which cached values a test used
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Use:
    """One cached value used by a test: its key, and whether it came from the cache."""

    key: Key
    hit: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact": self.key.kind,
            "key": self.key.digest,
            "hit": self.hit,
            "inputs": self.key.summary(),
        }


_LEDGER: contextvars.ContextVar[list[Use] | None] = contextvars.ContextVar(
    "prefalign_ledger", default=None
)


@contextlib.contextmanager
def recording() -> Iterator[list[Use]]:
    """Collect the uses noted inside the block (an inner block collects its own)."""
    uses: list[Use] = []
    token = _LEDGER.set(uses)
    try:
        yield uses
    finally:
        _LEDGER.reset(token)


def note(key: Key, hit: bool) -> Use:
    """Note a use in the ledger being recorded, if any."""
    use = Use(key, hit)
    ledger = _LEDGER.get()
    if ledger is not None:
        ledger.append(use)
    return use


def unique(uses: Iterable[Use]) -> list[Use]:
    """Each (kind, key) once, in first-use order (a value used twice is listed once)."""
    seen: dict[tuple[str, str], Use] = {}
    for use in uses:
        seen.setdefault((use.key.kind, use.key.digest), use)
    return list(seen.values())


# --------------------------------------------------------------------------------------------
# The disk cache
# --------------------------------------------------------------------------------------------


class Disk:
    """Values by key under ``root/<kind>/``, written atomically under a lock that pytest-xdist
    workers share. Disabled (``--prefalign-no-cache``): nothing is read or written, and
    ``folder`` gives a fresh empty folder."""

    def __init__(self, root: Path, *, enabled: bool = True) -> None:
        self.root, self.enabled = Path(root), enabled
        self._scratch: list[Path] = []

    def path(self, key: Key, suffix: str = ".json") -> Path:
        return self.root / key.kind / f"{key.digest}{suffix}"

    def json(
        self,
        key: Key,
        compute: Callable[[], T],
        *,
        valid: Callable[[Any], bool] = lambda value: True,
    ) -> T:
        """The JSON value of ``key``, or ``compute()`` stored under it. A file that cannot be
        read, or whose value ``valid`` refuses, is computed again (it is only a cache)."""
        return self.load_or_compute(
            key,
            compute,
            suffix=".json",
            read=lambda path: _valid(storage.read_json(path), valid),
            write=lambda path, value: storage.atomic_write_json(path, value),
        )

    def load_or_compute(
        self,
        key: Key,
        compute: Callable[[], T],
        *,
        suffix: str,
        read: Callable[[Path], T],
        write: Callable[[Path, T], None],
    ) -> T:
        if not self.enabled:
            value = compute()
            note(key, hit=False)
            return value
        path = self.path(key, suffix)
        with storage.locked(path):
            if path.exists():
                try:
                    value = read(path)
                except Exception as exc:  # whatever the reader's library raises on a bad file
                    discard(path, exc)  # truncated, or from an incompatible version
                else:
                    note(key, hit=True)
                    return value
            value = compute()
            write(path, value)
        note(key, hit=False)
        return value

    def folder(self, key: Key, name: str = "") -> tuple[Path, bool]:
        """``(folder, hit)``: the folder ``<kind>/<name>/<digest>`` of ``key``, for code that
        keeps its own files there, and whether it already held any. Disabled: a new empty
        folder each time."""
        if not self.enabled:
            path = Path(tempfile.mkdtemp(prefix=f"prefalign-{key.kind}-"))
            self._scratch.append(path)
            return path, False
        path = self.root / key.kind / name / key.digest
        hit = path.is_dir() and any(path.iterdir())
        path.mkdir(parents=True, exist_ok=True)
        return path, hit

    def cleanup(self) -> None:
        """Remove the scratch folders handed out while disabled."""
        for path in self._scratch:
            shutil.rmtree(path, ignore_errors=True)
        self._scratch.clear()


class CacheWarning(UserWarning):
    """A cache entry that could not be read: it was removed and its value computed again."""


def discard(path: Path, problem: BaseException | str, *also: Path) -> None:
    """A cache entry that cannot be read is a miss: one warning naming it, then it is removed
    (with ``also``, the files that belong with it), so that the next run does not meet it."""
    named = " and ".join(str(p) for p in (path, *also))
    message = f"unreadable cache entry {named} ({_reason(problem)}): removed, computed again"
    # located at the entry itself: pytest's summary shows one line, and no source line under it
    warnings.warn_explicit(CacheWarning(message), CacheWarning, str(path), 0)
    for entry in (path, *also):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _reason(problem: BaseException | str) -> str:
    if isinstance(problem, str):
        return problem
    lines = str(problem).strip().splitlines()
    text = f"{type(problem).__name__}: {lines[0]}" if lines else type(problem).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def readable_by(read: Callable[[Any], Any]) -> Callable[[Any], bool]:
    """A ``valid`` for ``Disk.json``: a cached value is valid when ``read`` (a record's
    ``from_json``) takes it without a ``ValueError``, ``KeyError`` or ``TypeError``."""

    def valid(value: Any) -> bool:
        try:
            read(value)
        except (ValueError, KeyError, TypeError):
            return False
        return True

    return valid


def _valid(value: Any, valid: Callable[[Any], bool]) -> Any:
    if not valid(value):
        raise ValueError("cached value refused")
    return value


_ACTIVE: contextvars.ContextVar[Disk | None] = contextvars.ContextVar(
    "prefalign_disk", default=None
)


def active() -> Disk:
    """The disk cache of the run in progress (``using``), else the user cache."""
    disk = _ACTIVE.get()
    return disk if disk is not None else Disk(storage.cache_root())


@contextlib.contextmanager
def using(disk: Disk) -> Iterator[Disk]:
    """Make ``disk`` the cache that library code (features, judges, ...) reads and writes."""
    token = _ACTIVE.set(disk)
    try:
        yield disk
    finally:
        _ACTIVE.reset(token)
