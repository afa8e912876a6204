"""Live progress: what the running test is doing, drawn from the progress events that the
evaluation and the model runtime emit (``events.py``: converting, loading, fitting, generating
n/N, scoring n/N).

In pytest's idiom: written through the terminal reporter, with output capture suspended as
pytest's live logging does. Registered by the session, except under ``-q`` (quiet), with
``--log-cli-level`` (the log lines carry the same events) and on pytest-xdist workers (only the
controller writes; the workers' events reach ``logging`` only).

- On a terminal: one status line per test that has run longer than ``DELAY`` seconds, rewritten
  in place with the step, its counts and the time so far, at least every ``TICK`` seconds while
  a step says nothing (a model conversion is one long call); once the test is over the line says
  where its time went.
- Elsewhere (a CI log): one line per step that has lasted longer than ``DELAY`` seconds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_prefalign import events

DELAY = 2.0  # seconds a test or a step runs before its progress is shown
TICK = 1.0  # seconds between two redraws of a silent step's status line
REDRAW = 0.2  # least seconds between two redraws for events
# the verbosity of the test lines: a setting of its own from pytest 8.1 on, the general one before
TEST_CASES = getattr(pytest.Config, "VERBOSITY_TEST_CASES", None)


def wanted(config: pytest.Config) -> bool:
    """Whether this process shows progress (see the module's docstring)."""
    log_cli = config.getoption("log_cli_level", None) is not None or bool(config.getini("log_cli"))
    return (
        config.get_verbosity() >= 0
        and not log_cli
        and not hasattr(config, "workerinput")
        and config.pluginmanager.getplugin("terminalreporter") is not None
    )


def on_terminal(reporter: Any) -> bool:
    """Whether the terminal reporter writes to a terminal. Its ``isatty`` is a method from
    pytest 8.4.1 on (a boolean that can be called), a plain boolean before."""
    isatty = reporter.isatty
    return bool(isatty() if callable(isatty) else isatty)


class Progress:
    """The status of the test running in this process; its methods are hooks."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tr: Any = config.pluginmanager.getplugin("terminalreporter")
        self.capture = config.pluginmanager.getplugin("capturemanager")
        self.live = on_terminal(self.tr)
        self.lock = threading.Lock()
        self.test: str | None = None  # the running test's name
        self.started = 0.0
        self.event: events.Event | None = None
        self.steps: dict[str, float] = {}  # outermost steps of this test: when each started
        self.spent: dict[str, float] = {}  # ... and how long the finished ones took
        self.announced: set[str] = set()  # steps written a line for (not a terminal)
        self.shown = False  # a status line of this test is on screen (a terminal)
        self.drawn = 0.0
        self._unlisten = events.listen(self.on_event)
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # -- hooks --------------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True, trylast=True)  # innermost: inside the capture of the call
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        with self.lock:
            self.test, self.started, self.event = item.name, time.monotonic(), None
            self.steps, self.spent, self.announced, self.shown = {}, {}, set(), False
        self._start_ticker()
        try:
            return (yield)
        finally:
            with self.lock:
                if self.shown:
                    self._draw(self._finished())
                if self.shown or self.announced:
                    self._resume(item.nodeid)
                self.test = None

    def pytest_unconfigure(self) -> None:
        self._unlisten()
        self._stop.set()

    # -- events -------------------------------------------------------------------------------

    def on_event(self, event: events.Event) -> None:
        with self.lock:
            if self.test is None:
                return
            now = time.monotonic()
            outer = event.steps[0].name
            if len(event.steps) == 1 and event.kind == "end":
                self.spent[outer] = self.spent.get(outer, 0.0) + event.seconds
                self.steps.pop(outer, None)
            else:
                self.steps.setdefault(outer, now)
            self.event = event
            if now - self.drawn >= REDRAW:
                self._update(now)

    def _start_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(
                target=self._tick, name="prefalign-progress", daemon=True
            )
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            with self.lock:
                if self.test is not None:
                    self._update(time.monotonic())

    def _update(self, now: float) -> None:
        """Show what is due: on a terminal the status line, elsewhere a line per long step."""
        if now - self.started < DELAY or self.event is None:
            return
        if self.live:
            # the time first: a line cut at the terminal's width still shows it move
            self._draw(f"  {self.test} · {now - self.started:.0f}s · {self.event.text()}")
            return
        outer = self.event.steps[0].name
        began = self.steps.get(outer)
        if began is not None and outer not in self.announced and now - began >= DELAY:
            self.announced.add(outer)
            with self._suspended():
                self._line(f"  {self.test} · {self.event.text()}")

    def _draw(self, text: str) -> None:
        width = max(20, int(getattr(self.tr._tw, "fullwidth", 80)) - 1)
        with self._suspended():
            if not self.shown:
                self._line("")
                self.shown = True
            self.tr.rewrite(text[:width], erase=True)
        self.drawn = time.monotonic()

    def _line(self, text: str) -> None:
        """Start a line of ours below the test's own, left open: ``_resume`` or the next line
        ends it."""
        self.tr.ensure_newline()
        if self.tr._tw.width_of_current_line:
            self.tr._tw.line()
        self.tr._tw.write(text, flush=True)

    def _resume(self, nodeid: str) -> None:
        """Give pytest its line back: without ``-v`` it writes the test's letter where the cursor
        is, so the file's line starts again below ours (with ``-v`` it starts one itself)."""
        with self._suspended():
            self.tr.currentfspath = None
            if self.config.get_verbosity(TEST_CASES) <= 0:
                self.tr.write_fspath_result(nodeid, "")
            else:
                self.tr.ensure_newline()

    def _finished(self) -> str:
        took = ", ".join(
            f"{step} {seconds:.0f}s" for step, seconds in self.spent.items() if seconds >= 1
        )
        return f"  {self.test} · {time.monotonic() - self.started:.0f}s" + (
            f" ({took})" if took else ""
        )

    @contextlib.contextmanager
    def _suspended(self) -> Iterator[None]:
        """Write to the terminal, not into the test's captured output (as live logging does)."""
        if self.capture is None:
            yield
            return
        with self.capture.global_and_fixture_disabled():
            yield
