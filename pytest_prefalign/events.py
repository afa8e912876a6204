"""Progress events: what a long step says while it runs.

A step (converting a model, loading it, fitting a reward method, generating, scoring) opens with
``step(name, total=N, unit=...)`` and counts with ``advance``. Each event goes to the
``prefalign`` logger (INFO, so ``pytest --log-cli-level=INFO`` shows it; counts at most every
``LOG_EVERY`` seconds) and to the listeners registered with ``listen``: the pytest plumbing draws
its status line from them (``plumbing/progress.py``). Code below the plumbing reports through this
module and never imports pytest. No heavy imports: pytest loads it on every run.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

LOGGER = logging.getLogger("prefalign")
LOG_EVERY = 5.0  # seconds between two log records of one step's counts


@dataclass(frozen=True)
class State:
    """One open step as an event shows it: its name and its count so far."""

    name: str
    done: int | None = None
    total: int | None = None
    unit: str = ""

    def count(self) -> str:
        """``16/48 prompts``, or "" for a step that does not count."""
        if self.done is None:
            return ""
        count = f"{self.done}/{self.total}" if self.total is not None else str(self.done)
        return f"{count} {self.unit}".strip()


@dataclass(frozen=True)
class Event:
    """One thing a step said: it started, it counted, or it ended."""

    kind: str  # "start", "count" or "end"
    steps: tuple[State, ...]  # the steps open at the time, outermost first
    seconds: float = 0.0  # since the innermost step started

    def text(self) -> str:
        """``generating icl_rag › generate 16/48 prompts › decode 5/24 tokens``: the outermost
        step (what the test is doing), then the steps inside it (what the model is doing)."""
        return " › ".join(f"{step.name} {step.count()}".strip() for step in self.steps)


Listener = Callable[[Event], None]
_LISTENERS: list[Listener] = []
_OPEN: contextvars.ContextVar[tuple[Step, ...]] = contextvars.ContextVar(
    "prefalign_steps", default=()
)


def listen(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` with every event from now on; returns what stops it."""
    _LISTENERS.append(listener)
    return lambda: _LISTENERS.remove(listener) if listener in _LISTENERS else None


class Step:
    """An open step: its name, its count and total, and when it started."""

    def __init__(self, name: str, total: int | None, unit: str, outer: tuple[Step, ...]) -> None:
        self.name, self.total, self.unit, self.outer = name, total, unit, outer
        self.done: int | None = None if total is None else 0
        self.started = self._logged = time.monotonic()

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more units done."""
        self.done = (self.done or 0) + n
        event = self._event("count")
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY:
            self._logged = now
            LOGGER.info("%s", event.text())
        _tell(event)

    def state(self) -> State:
        return State(self.name, self.done, self.total, self.unit)

    def _event(self, kind: str) -> Event:
        steps = tuple(step.state() for step in (*self.outer, self))
        return Event(kind, steps, time.monotonic() - self.started)


@contextlib.contextmanager
def step(name: str, *, total: int | None = None, unit: str = "") -> Iterator[Step]:
    """Open a step inside the steps already open (in this thread); it ends with the block."""
    outer = _OPEN.get()
    current = Step(name, total, unit, outer)
    token = _OPEN.set((*outer, current))
    start = current._event("start")
    # a test's steps at INFO; the model's batches inside them at DEBUG (their counts at INFO)
    LOGGER.log(logging.INFO if not outer else logging.DEBUG, "%s", start.text())
    _tell(start)
    try:
        yield current
    finally:
        _OPEN.reset(token)
        end = current._event("end")
        LOGGER.debug("%s: done in %.1fs", end.text(), end.seconds)
        _tell(end)


class _Unseen(Step):
    def advance(self, n: int = 1) -> None:
        self.done = (self.done or 0) + n


@contextlib.contextmanager
def unseen() -> Iterator[Step]:
    """A step that says nothing, where a caller would otherwise report a step inside its own
    (a recursion's inner levels)."""
    yield _Unseen("", None, "", ())


def _tell(event: Event) -> None:
    for listener in list(_LISTENERS):
        try:
            listener(event)
        except Exception:  # a broken display must not fail the evaluation it shows
            LOGGER.warning("a progress listener failed", exc_info=True)
