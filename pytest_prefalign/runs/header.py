"""The typed parts of a run file beside its results (``runs/records.py``'s ``RunFile``): the
configuration the run was made with (``config``) and what became of its tests (``outcomes``),
each a part as ``runs/parts.py`` reads and writes them (its fields its keys, in declaration
order; a key a file may lack left out where it is None; what a field does not name kept as
read, in ``details``).

A run made by pytest writes every key of both (``plumbing/run_file.py``,
``plumbing/outcomes.py``); a run joined from others (``prefalign merge``, ``prefalign pool``:
``analysis/merge.py``, ``analysis/folds.py``) has no command line of its own but names the run
files it joined, each with theirs. A run that recorded neither (a run of one test split from
another, a file written before they were kept) has none: its file holds ``{}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_prefalign.runs.parts import Part, absent, rest


@dataclass(frozen=True)
class ShardFile(Part):
    """A shard's run file that a merged run joined: its path as given, its shard (``K/N``) and
    its command line."""

    file: str
    shard: str | None = None
    args: tuple[str, ...] | None = None


@dataclass(frozen=True)
class FoldFile(Part):
    """A fold's run file that a pooled run pooled: its path as given, its fold and its command
    line."""

    file: str
    fold: int
    args: tuple[str, ...] | None = None


@dataclass(frozen=True)
class RunConfig(Part):
    """What the run was made with: the methods and the model sizes as listed, the users per
    suite (``limit``), the policy score's reduction, the seed, how the guidance strengths were
    set (``guidance``: chosen, fixed, sweep; None in a file written before), the method options
    (``TARGET.FIELD=VALUE``), the command line (``args``: its paths from the named ``roots``;
    None for a joined run), the shard (``K/N``, None: the whole run), and for a joined run the
    files it joined (``merged``: the shards; ``pooled_folds``: the folds)."""

    methods: tuple[str, ...] = ()
    sizes: tuple[str, ...] = ()
    limit: int | None = None
    reduce: str | None = None
    seed: int | None = None
    guidance: str | None = absent()
    options: tuple[str, ...] = ()
    args: tuple[str, ...] | None = absent()
    shard: str | None = None
    roots: Mapping[str, str] = field(default_factory=dict)
    merged: tuple[ShardFile, ...] | None = absent()
    pooled_folds: tuple[FoldFile, ...] | None = absent()
    details: Mapping[str, Any] = rest()


@dataclass(frozen=True)
class ShardTests(Part):
    """A shard's split of the run: its shard (``K/N``) and the tests it left to the others."""

    shard: str
    other_shards: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunOutcomes(Part):
    """What became of the run's tests (their ids): the number selected; those that passed,
    failed, errored, were skipped, deselected, never ran, or ran without leaving a result; why
    the run stopped early (``interrupted``, None: it did not) and each reason the run is
    incomplete (none: complete); a shard's split of the run (``shard``)."""

    selected: int = 0
    passed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    error: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    deselected: tuple[str, ...] = ()
    not_run: tuple[str, ...] = ()
    without_result: tuple[str, ...] = ()
    interrupted: str | None = None
    incomplete: tuple[str, ...] = ()
    shard: ShardTests | None = absent()
    details: Mapping[str, Any] = rest()

    def of(self, outcome: str) -> tuple[str, ...]:
        """The tests with ``outcome``, one of ``OUTCOMES``."""
        return {
            "passed": self.passed,
            "failed": self.failed,
            "error": self.error,
            "skipped": self.skipped,
            "deselected": self.deselected,
            "not_run": self.not_run,
        }[outcome]


# what became of a test, by the field of ``RunOutcomes`` that lists it
OUTCOMES = ("passed", "failed", "error", "skipped", "deselected", "not_run")
