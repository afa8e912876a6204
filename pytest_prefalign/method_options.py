"""Options of decoders and reward methods, set on the command line or in the ini file.

A decoder declares its options as a frozen dataclass, its ``Options`` (a subclass of
``api.DecodeOptions``, whose ``__post_init__`` checks the values); a reward method declares its
configuration as ``Config`` and takes it as ``config=``. ``--prefalign-option TARGET.FIELD=VALUE``
(repeatable, comma-separated) or one line per assignment in the ini value ``prefalign_options``
sets a field: ``args.k=5``, ``genarm.alpha=0.5``, ``arm.rank=4``. Without a target,
``FIELD=VALUE`` sets the field for every decoder that has it (``max_new_tokens=32``). The
command line wins over the ini file. Everything is checked before the run starts: an unknown
target or field, or a value the field refuses, is a usage error that names the assignment.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_prefalign.api import declared

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import DecodeOptions, RewardMethod
    from pytest_prefalign.registry import Registry

_ASSIGNMENT = re.compile(
    r"^(?:(?P<target>[A-Za-z0-9_.-]+)\.)?(?P<field>[A-Za-z_]\w*)=(?P<value>.*)$"
)
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Assignment:
    """``target.field=value`` as written; ``target`` None: every decoder with the field."""

    target: str | None
    field: str
    value: str

    @classmethod
    def parse(cls, text: str) -> Assignment:
        match = _ASSIGNMENT.match(text.strip().replace(" ", ""))
        if not match:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected TARGET.FIELD=VALUE (e.g. args.k=5) or FIELD=VALUE"
            )
        return cls(match["target"], match["field"], match["value"])

    def __str__(self) -> str:
        return f"{self.target + '.' if self.target else ''}{self.field}={self.value}"


def assignments(text: str) -> list[Assignment]:
    """``--prefalign-option`` type: one or more comma-separated assignments."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("expected TARGET.FIELD=VALUE")
    return [Assignment.parse(part) for part in parts]


@dataclass
class Resolved:
    """The checked overrides: per decoder and per reward method, field -> typed value."""

    decoders: dict[str, dict[str, Any]] = field(default_factory=dict)
    rewards: dict[str, dict[str, Any]] = field(default_factory=dict)

    def decoder_options(self, name: str, factory: Any) -> DecodeOptions:
        """The decoder's ``Options`` with the overrides applied."""
        return options_class(factory)(**self.decoders.get(name, {}))

    def reward(self, name: str, factory: Any) -> RewardMethod:
        """A new reward method, configured with the overrides when there are any."""
        overrides = self.rewards.get(name)
        if not overrides:
            return factory()
        return factory(config=factory.Config(**overrides))


def options_class(factory: Any) -> type[DecodeOptions]:
    return declared(factory, "Options")


def resolve(given: Iterable[Assignment], registry: Registry) -> Resolved:
    """Check every assignment against what is registered; raises ValueError naming the first
    one that does not fit."""
    resolved = Resolved()
    for assignment in given:
        try:
            _apply(assignment, registry, resolved)
        except ValueError as exc:
            raise ValueError(f"{assignment}: {exc}") from None
    # each combination must build: a field's check may involve the others
    for name, overrides in resolved.decoders.items():
        _build(options_class(registry.decoder(name).obj), overrides, f"decoder {name!r}")
    for name, overrides in resolved.rewards.items():
        _build(registry.reward(name).obj.Config, overrides, f"reward method {name!r}")
    return resolved


def _apply(assignment: Assignment, registry: Registry, resolved: Resolved) -> None:
    if assignment.target is None:
        targets = [
            name
            for name, entry in sorted(registry.decoders.items())
            if assignment.field in _fields(options_class(entry.obj))
        ]
        if not targets:
            raise ValueError(f"no decoder has an option {assignment.field!r}; {_known(registry)}")
        for name in targets:
            _set(resolved.decoders, name, options_class(registry.decoders[name].obj), assignment)
        return
    name = assignment.target
    decoder, reward = registry.decoders.get(name), registry.rewards.get(name)
    if decoder is not None and (
        reward is None or assignment.field in _fields(options_class(decoder.obj))
    ):
        _set(resolved.decoders, name, options_class(decoder.obj), assignment)
        return
    if reward is not None:
        config = declared(reward.obj, "Config")
        if not isinstance(config, type) or not dataclasses.is_dataclass(config):
            raise ValueError(f"reward method {name!r} declares no options (no Config dataclass)")
        _set(resolved.rewards, name, config, assignment)
        return
    raise ValueError(f"{name!r} is neither a decoder nor a reward method; {_known(registry)}")


def _set(table: dict[str, dict[str, Any]], name: str, cls: type, assignment: Assignment) -> None:
    fields = _fields(cls)
    if assignment.field not in fields:
        raise ValueError(
            f"{name} has no option {assignment.field!r}; it has "
            f"{', '.join(sorted(fields)) or 'none'}"
        )
    value = _convert(fields[assignment.field], assignment.value)
    table.setdefault(name, {})[assignment.field] = value
    _build(cls, table[name], name)


def _build(cls: type, overrides: dict[str, Any], what: str) -> Any:
    try:
        return cls(**overrides)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: {exc}") from None


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, str) for f in dataclasses.fields(cls) if f.init}


def _convert(kind: Any, text: str) -> Any:
    if kind is bool:
        low = text.lower()
        if low in _TRUE | _FALSE:
            return low in _TRUE
        raise ValueError(f"{text!r} is not true or false")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    if typing.get_origin(kind) is typing.Literal:
        if text not in typing.get_args(kind):
            raise ValueError(f"{text!r}: expected one of {', '.join(typing.get_args(kind))}")
        return text
    if kind is str:
        return text
    raise ValueError(f"an option of type {kind} cannot be set from text")


def _known(registry: Registry) -> str:
    parts = []
    for name, entry in sorted(registry.decoders.items()):
        fields = sorted(_fields(options_class(entry.obj)))
        parts.append(f"{name}: {', '.join(fields)}")
    return "decoder options: " + "; ".join(parts)
