"""Suite options declared as dataclasses (``pytest_prefalign.suite_options``): the text of
``suite.toml``'s ``[options]`` read by each field's type, refused values named with what the
option accepts, the options written back as text in the form the provenance has always had."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Literal

import pytest

from prefalign_suites.polis.suite import Polis, PolisOptions
from prefalign_suites.pref_lamp import writer
from prefalign_suites.pref_lamp.suite import PrefLamp, PrefLampOptions
from prefalign_suites.prism.suite import Prism
from prefalign_suites.synthetic.suite import Synthetic, SyntheticOptions
from prefalign_suites.tldr.suite import Tldr
from pytest_prefalign.api import DataError
from pytest_prefalign.suite_options import (
    Above,
    AtLeast,
    Count,
    OptionError,
    Share,
    as_strings,
    declared,
    for_suite,
    parse,
)


@dataclass(frozen=True)
class Toy:
    """Every kind of field a suite's options may have."""

    name: str = ""
    on: bool = False
    n: Annotated[int, AtLeast(1)] = 2
    offset: int = 0
    count: Count = 0
    rate: Annotated[float, Above(0)] = 0.5
    share: Share = Fraction("0.25")
    mode: Literal["a", "b"] = "a"
    slack: Count | Literal["any"] = 1
    kinds: tuple[Literal["x", "y"], ...] = ("x", "y")

    def __post_init__(self) -> None:
        if self.on and not self.name:
            raise OptionError("name", "needed with on = true")


@pytest.mark.parametrize("suite", [PrefLamp(), Polis(), Synthetic(), Tldr(), Prism()])
def test_each_built_in_suite_declares_its_options(suite) -> None:
    cls = declared(suite)
    assert cls is not None and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    defaults = cls()
    assert parse(cls, as_strings(defaults)) == defaults  # the text reads back as it was
    assert parse(cls, {}) == defaults == for_suite(suite, {})


def test_the_defaults_are_written_as_before() -> None:
    """The provenance's ``options`` (run files keep it) are the strings the suites' old
    ``DEFAULTS`` held: a share is ``0.3``, not ``3/10``, a list is comma-separated."""
    assert as_strings(PolisOptions()) == {
        "min_votes": "3",
        "max_train_pairs": "24",
        "max_test_pairs": "12",
        "test_share": "0.3",
        "items_per_user": "3",
        "seed": "0",
        "conversations": "",
    }
    assert as_strings(SyntheticOptions()) == {
        "users": "6",
        "items_per_user": "10",
        "test_share": "0.3",
        "rules": "short,colon,vocab",
        "seed": "0",
    }
    lamp = as_strings(PrefLampOptions())
    assert lamp["writer_temperature"] == "0.7" and lamp["length_slack"] == "1"
    assert as_strings(PrefLampOptions(length_slack="any"))["length_slack"] == "any"


def test_text_is_read_by_each_fields_type() -> None:
    got = parse(
        Toy,
        {
            "name": "  m ",
            "on": "yes",
            "n": "3",
            "offset": "-2",
            "rate": "2",
            "share": "0.30",
            "mode": "b",
            "slack": "any",
            "kinds": "y, x,",
        },
    )
    assert got == Toy("m", True, 3, -2, 0, 2.0, Fraction(3, 10), "b", "any", ("y", "x"))
    assert parse(Toy, {"slack": "4", "kinds": ""}).slack == 4
    assert parse(Toy, {"kinds": ""}).kinds == ()
    assert as_strings(got)["share"] == "0.3" and as_strings(got)["kinds"] == "y,x"
    assert as_strings(parse(Toy, {"share": "1/3"}))["share"] == "1/3"


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"colour": "red"}, "unknown option; known: count, kinds, mode, n, name, offset, "),
        ({"n": "many"}, "expected an integer, got 'many'"),
        ({"n": "0"}, "expected at least 1, got 0"),
        ({"count": "-1"}, "expected at least 0, got -1"),
        ({"rate": "fast"}, "expected a number, got 'fast'"),
        ({"rate": "0"}, "expected a number above 0, got 0"),
        ({"share": "1.5"}, "expected a number between 0 and 1, got 1.5"),
        ({"share": "1/0"}, "expected a number, got '1/0'"),
        ({"mode": "c"}, "expected one of 'a', 'b', got 'c'"),
        ({"slack": "wide"}, "expected an integer or 'any', got 'wide'"),
        ({"slack": "-1"}, "expected at least 0, got -1"),
        ({"kinds": "x,z"}, "expected one of 'x', 'y', got 'z'"),
        ({"on": "maybe"}, "expected true or false, got 'maybe'"),
        ({"on": "true"}, "needed with on = true"),
    ],
)
def test_a_refused_value_names_the_option_and_what_it_accepts(given, problem) -> None:
    with pytest.raises(DataError) as info:
        parse(Toy, given)
    error = info.value
    assert error.file == "suite.toml" and error.record == "[options]"
    assert error.field == ("name" if "on =" in problem else next(iter(given)))
    assert problem in error.problem


def test_options_given_as_a_dataclass_are_checked_as_their_text() -> None:
    assert parse(Toy, Toy(n=5)) == Toy(n=5)
    with pytest.raises(DataError, match="field 'n': expected at least 1, got 0"):
        parse(Toy, Toy(n=0))
    with pytest.raises(DataError, match="field 'test_share': leaves no profile item of 2"):
        Synthetic().load(None, limit=None, options={"items_per_user": "2", "test_share": "0.9"})


def test_a_suite_without_options_gets_the_strings() -> None:
    class Plain:
        name = "plain"

    assert declared(Plain()) is None
    assert for_suite(Plain(), {"anything": "x"}) == {"anything": "x"}


def test_pref_lamp_names_every_pair_design_it_writes() -> None:
    negatives = typing.get_type_hints(PrefLampOptions)["negatives"]
    assert set(writer.DESIGNS) <= set(typing.get_args(negatives))


def test_loading_takes_the_dataclass_or_the_strings() -> None:
    by_text = Synthetic().load(None, limit=2, options={"users": "3", "rules": "colon"})
    typed = Synthetic().load(None, limit=2, options=SyntheticOptions(users=3, rules=("colon",)))
    assert by_text == typed
    assert typed.provenance["options"] == {
        "users": "3",
        "items_per_user": "10",
        "test_share": "0.3",
        "rules": "colon",
        "seed": "0",
    }
