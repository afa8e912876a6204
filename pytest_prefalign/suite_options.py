"""Suite options: a suite declares them as a frozen dataclass, its ``options``, whose fields carry
the types, the defaults and (in a comment) the meanings; a ``suite.toml`` sets them as strings in
its ``[options]`` table. ``parse`` builds the dataclass from those strings; the run checks the
options of every collected suite before any test runs, so a bad one is a usage error naming the
file, the option and what it accepts (``plumbing/preflight.py``), as a bad decoder option is.

A field's type says how its text is read:

- ``str``: as written; ``bool``: true or false (also 1/0, yes/no, on/off);
- ``int``: a whole number; ``Annotated[int, AtLeast(1)]``: at least 1 (``Count``: at least 0);
- ``float``: a number; ``Annotated[float, Above(0)]``: above 0;
- ``Fraction``: a number kept exact (``0.3`` is 3/10, so rounding with it is exact too);
  ``Share``: one strictly between 0 and 1;
- ``Literal["a", "b"]``: one of the values;
- ``tuple[X, ...]``: comma-separated values, each read as ``X`` (empty: none);
- ``X | Y``: the first of them that reads the text (``Count | Literal["any"]``).

A check that involves two fields goes in the dataclass's ``__post_init__``, which raises
``OptionError`` naming the option. ``as_strings`` writes options back as text in the same
format, the form a suite records in its data's provenance (``provenance["options"]``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Any, Literal, TypeVar

from pytest_prefalign import api
from pytest_prefalign.api import DataError

T = TypeVar("T")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


class OptionError(ValueError):
    """A value that an option refuses, raised by an options dataclass's own checks."""

    def __init__(self, option: str, problem: str) -> None:
        self.option, self.problem = option, problem
        super().__init__(f"{option}: {problem}")


class _Unreadable(ValueError):
    """Text that is not of the option's type: ``expected WHAT, got 'TEXT'``."""

    def __init__(self, what: str, text: str) -> None:
        self.what = what
        super().__init__(f"expected {what}, got {text!r}")


@dataclass(frozen=True)
class AtLeast:
    """The lowest value of a whole-number option."""

    minimum: int

    def check(self, value: Any, text: str) -> None:
        if value < self.minimum:
            raise ValueError(f"expected at least {self.minimum}, got {value}")


@dataclass(frozen=True)
class Above:
    """The bound a number option must exceed."""

    bound: float

    def check(self, value: Any, text: str) -> None:
        if not value > self.bound:
            raise ValueError(f"expected a number above {self.bound}, got {text}")


@dataclass(frozen=True)
class Between:
    """The bounds a number option must lie strictly between."""

    low: float
    high: float

    def check(self, value: Any, text: str) -> None:
        if not self.low < value < self.high:
            raise ValueError(f"expected a number between {self.low} and {self.high}, got {text}")


Count = Annotated[int, AtLeast(0)]  # a whole number, 0 or more
Share = Annotated[Fraction, Between(0, 1)]  # a proportion strictly between 0 and 1, exact


def option_error(option: str, problem: str) -> DataError:
    """A bad option as a suite reports it: an error on ``suite.toml``'s ``[options]``."""
    return DataError("suite.toml", "[options]", option, problem)


def declared(suite: Any) -> type | None:
    """The options dataclass a suite declares, or None (its loader takes the strings)."""
    cls = api.declared(suite, "options")
    return cls if isinstance(cls, type) and dataclasses.is_dataclass(cls) else None


def for_suite(suite: Any, given: Mapping[str, str]) -> Any:
    """What the suite's ``load`` receives as ``options``: its dataclass built from the
    ``[options]`` strings, or the strings themselves where it declares none. Raises a
    ``DataError`` (``option_error``) for an unknown option or a value refused."""
    cls = declared(suite)
    return dict(given) if cls is None else parse(cls, given)


def parse(cls: type[T], given: Mapping[str, Any] | T) -> T:
    """The options ``cls`` from the ``[options]`` strings, each stripped, the defaults for the
    rest; an instance of ``cls`` is checked as its text would be. An unknown option, or a value
    its field refuses, raises a ``DataError`` naming the option and what it accepts."""
    if isinstance(given, cls):
        given = as_strings(given)
    assert isinstance(given, Mapping)
    fields = _fields(cls)
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise option_error(unknown[0], f"unknown option; known: {', '.join(sorted(fields))}")
    values = {}
    for name, raw in given.items():
        try:
            values[name] = read(fields[name], str(raw).strip())
        except ValueError as exc:
            raise option_error(name, str(exc)) from None
    try:
        return cls(**values)
    except OptionError as exc:
        raise option_error(exc.option, exc.problem) from None


def as_strings(options: Any) -> dict[str, str]:
    """Each option as text, in the form ``parse`` reads (a ``Share`` of 3/10 is ``0.3``), in the
    order the dataclass declares them."""
    return {f.name: as_text(getattr(options, f.name)) for f in dataclasses.fields(options)}


def as_text(value: Any) -> str:
    """One option's value as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(as_text(v) for v in value)
    if isinstance(value, Fraction):
        return _decimal(value)
    return str(value)


def read(kind: Any, text: str) -> Any:
    """``text`` read as a value of the type ``kind``; a ValueError says what was expected."""
    origin = typing.get_origin(kind)
    if origin is Annotated:
        base, *marks = typing.get_args(kind)
        value = read(base, text)
        for mark in marks:
            mark.check(value, text)
        return value
    if origin in (typing.Union, types.UnionType):
        members = typing.get_args(kind)
        for member in members:
            try:
                return read(member, text)
            except _Unreadable:
                continue
        raise _Unreadable(" or ".join(_expected(m) for m in members), text)
    if origin is Literal:
        if text not in typing.get_args(kind):
            raise _Unreadable(_expected(kind), text)
        return text
    if origin is tuple:
        element = typing.get_args(kind)[0]
        return tuple(read(element, part.strip()) for part in text.split(",") if part.strip())
    if kind is str:
        return text
    if kind is bool:
        if text.lower() not in _TRUE + _FALSE:
            raise _Unreadable(_expected(kind), text)
        return text.lower() in _TRUE
    try:
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind is Fraction:
            return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise _Unreadable(_expected(kind), text) from None
    raise TypeError(f"an option of type {kind} cannot be read from text")


def _expected(kind: Any) -> str:
    if typing.get_origin(kind) is Annotated:
        return _expected(typing.get_args(kind)[0])
    if typing.get_origin(kind) is Literal:
        values = typing.get_args(kind)
        listed = ", ".join(repr(v) for v in values)
        return listed if len(values) == 1 else f"one of {listed}"
    names = {int: "an integer", float: "a number", Fraction: "a number", bool: "true or false"}
    return names.get(kind, str(kind))


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _decimal(value: Fraction) -> str:
    """A fraction as a decimal where one is exact (``0.3``), else as ``p/q``."""
    for places in range(20):
        scaled = value * 10**places
        if scaled.denominator == 1:
            digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
            sign = "-" if value < 0 else ""
            return sign + (f"{digits[:-places]}.{digits[-places:]}" if places else digits)
    return str(value)
