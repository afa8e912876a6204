"""Suite options from ``suite.toml`` (``[options]``, all strings): defaults, checks, parsing.

A bad option is reported as a ``DataError`` on ``suite.toml`` naming the option, so the plugin
fails the suite's tests with that message and the rest of the run goes on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction

from pytest_prefalign.api import DataError


def option_error(key: str, problem: str) -> DataError:
    return DataError("suite.toml", "[options]", key, problem)


def resolve(given: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, str]:
    """The defaults overridden by the given options; an unknown option is an error."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise option_error(unknown[0], f"unknown option; known: {', '.join(sorted(defaults))}")
    return {**defaults, **{k: str(v).strip() for k, v in given.items()}}


def choice(opts: Mapping[str, str], key: str, allowed: Iterable[str]) -> str:
    allowed = tuple(allowed)
    if opts[key] not in allowed:
        listed = ", ".join(repr(a) for a in allowed)
        raise option_error(key, f"expected one of {listed}, got {opts[key]!r}")
    return opts[key]


def integer(opts: Mapping[str, str], key: str, *, minimum: int = 0) -> int:
    try:
        value = int(opts[key])
    except ValueError:
        raise option_error(key, f"expected an integer, got {opts[key]!r}") from None
    if value < minimum:
        raise option_error(key, f"expected at least {minimum}, got {value}")
    return value


def positive(opts: Mapping[str, str], key: str) -> float:
    """A number above 0."""
    try:
        value = float(opts[key])
    except ValueError:
        raise option_error(key, f"expected a number, got {opts[key]!r}") from None
    if not value > 0:
        raise option_error(key, f"expected a number above 0, got {opts[key]}")
    return value


def share(opts: Mapping[str, str], key: str) -> Fraction:
    """A proportion strictly between 0 and 1, kept exact (``0.3`` is 3/10) so rounding is too."""
    try:
        value = Fraction(opts[key])
    except (ValueError, ZeroDivisionError):
        raise option_error(key, f"expected a number, got {opts[key]!r}") from None
    if not 0 < value < 1:
        raise option_error(key, f"expected a number between 0 and 1, got {opts[key]}")
    return value
