"""Text that fits the terminal: tables whose rows are no wider than the terminal, and prose lines
wrapped to it, as pytest's own output adapts to the terminal width.

A table wider than ``width`` has its widest cells wrapped inside their column (a verdict, a
judge's description, a figure and its interval on two lines; a word longer than the column is
cut), never the row itself wrapped by the terminal in the middle; no column is made narrower
than ``MIN_COLUMN``. Without a width (the HTML report, a file) nothing is wrapped. The width is the
terminal's, or ``$PREFALIGN_WIDTH`` where set (``terminal_width``, which both the pytest
summary and the ``prefalign`` command ask).
"""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

MIN_COLUMN = 7  # a wrapped column keeps at least this many characters ("[+0.000,")
GAP = 2  # tabulate's "simple" format puts two spaces between columns
HEADER_PADDING = 2  # and makes a column at least its header's width plus two


def table(
    body: Sequence[Sequence[Any]],
    headers: Sequence[str],
    *,
    tablefmt: str = "simple",
    width: int | None = None,
) -> str:
    """``tabulate`` of ``body``, its text cells wrapped so that no line exceeds ``width``
    (where it can: a table of numbers alone stays as it is)."""
    text = tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True)
    if width is None or tablefmt != "simple" or _widest(text) <= width:
        return text
    limits = column_limits(body, headers, width)
    if not any(limits):
        return text
    return tabulate(
        body,
        headers=headers,
        tablefmt=tablefmt,
        disable_numparse=True,
        maxcolwidths=limits,
        maxheadercolwidths=[None if n is None else n - HEADER_PADDING for n in limits],
    )


def column_limits(
    body: Sequence[Sequence[Any]], headers: Sequence[str], width: int
) -> list[int | None]:
    """A width for each column, narrowing the widest one first until the row fits ``width``:
    first only columns of words (cells with spaces), each down to its longest word, so that
    text wraps between words; then, if the row is still too wide, any column down to
    ``MIN_COLUMN`` (a long name is cut). None for a column left as it is."""
    columns = len(headers)
    natural = [_column_width(body, headers, i) for i in range(columns)]
    words = [_longest_word(body, i) if _has_spaces(body, i) else None for i in range(columns)]
    limits = list(natural)
    excess = sum(limits) + GAP * (columns - 1) - width
    floors_by_phase = (
        [max(MIN_COLUMN, w) if w is not None else n for w, n in zip(words, natural, strict=True)],
        [MIN_COLUMN] * columns,
    )
    for floors in floors_by_phase:
        while excess > 0:
            candidates = [i for i in range(columns) if limits[i] > floors[i]]
            if not candidates:
                break
            widest = max(candidates, key=lambda i: limits[i])
            limits[widest] -= 1
            excess -= 1
    return [limits[i] if limits[i] < natural[i] else None for i in range(columns)]


def _has_spaces(body: Sequence[Sequence[Any]], i: int) -> bool:
    return any(" " in str(row[i]) for row in body)


def _longest_word(body: Sequence[Sequence[Any]], i: int) -> int:
    return max((len(word) for row in body for word in str(row[i]).split()), default=0)


def width(is_terminal: bool, columns: int) -> int | None:
    """The width to fit: ``$PREFALIGN_WIDTH`` where set (at least 40: a log viewer's width,
    even where the output is no terminal); else, at a terminal of ``columns``, one column short
    of its edge (at least 40), as pytest's own lines; None where the output is no terminal (a
    CI log, a file, a pipe), which does not wrap rows."""
    text = os.environ.get("PREFALIGN_WIDTH", "").strip()
    if text.isdigit():
        return max(40, int(text))
    return max(40, columns - 1) if is_terminal else None


def terminal_width(is_terminal: bool) -> int | None:
    """The width to fit for output to a stream that is (or is not) a terminal: ``width`` of
    the terminal's columns as the standard library reads them (``$COLUMNS``, else the
    terminal's size, else 80), which is what pytest's terminal writer reads too. Whether the
    stream is a terminal is the caller's to say (pytest's reporter, or standard output), not
    read from ``$COLUMNS``, which pytest-xdist's workers and their subprocesses always carry."""
    return width(is_terminal, shutil.get_terminal_size().columns)


def prose(text: str, width: int | None, indent: str = "") -> list[str]:
    """A paragraph as lines no wider than ``width`` (one line without a width)."""
    if width is None or len(text) <= width:
        return [text]
    return textwrap.wrap(text, width=width, subsequent_indent=indent) or [text]


def _column_width(body: Sequence[Sequence[Any]], headers: Sequence[str], i: int) -> int:
    cells = [str(row[i]) for row in body]
    widest = max((len(line) for cell in cells for line in cell.splitlines() or [""]), default=0)
    return max(widest, len(str(headers[i])) + HEADER_PADDING)


def _widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)
