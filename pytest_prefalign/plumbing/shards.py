"""Splitting a run across machines and GPUs: ``--prefalign-shard K/N`` keeps a deterministic
share of the tests, and ``xdist_group`` marks keep each (suite, size) on one xdist worker.

Both work on groups: the tests of one (suite, its options, size) share their model, data, pairs,
prefills and fitted reward methods, so a group is never split. Shard ``K`` of ``N`` keeps the
groups whose place in the sorted list of group names is ``K - 1`` modulo ``N``: every shard
given the same command line collects the same groups and keeps its own share, and the ``N``
shards together run each test once. ``prefalign merge`` joins their run files.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_prefalign.plumbing.collect import CaseItem, group_name

SHARDED = "prefalign_sharded"  # the workeroutput key of the tests a worker's shard left out
SHARDED_KEYS = "prefalign_sharded_keys"  # and of their (suite, method, size)
_FORM = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1..``count``) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str) -> Shard:
        match = _FORM.fullmatch(text)
        if not match:
            raise argparse.ArgumentTypeError(f"{text!r}: expected K/N, e.g. 1/4")
        index, count = int(match.group(1)), int(match.group(2))
        if count < 1 or not 1 <= index <= count:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected K/N with 1 <= K <= N (shards count from 1)"
            )
        return cls(index, count)


def add_options(parser: pytest.Parser) -> None:
    """``--prefalign-shard K/N`` (read into ``Sharding`` by the session)."""
    parser.getgroup("prefalign").addoption(
        "--prefalign-shard",
        type=Shard.parse,
        default=None,
        metavar="K/N",
        help="run shard K of N (1 <= K <= N): a deterministic share of the tests, each "
        "(suite, size) whole; join the shards' run files with: prefalign merge.",
    )


def item_group(item: CaseItem) -> str:
    return group_name(item.suite, item.suite_options, item.size)


def split(items: list[pytest.Item], shard: Shard) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """``(kept, left out)``: the tests of this shard's groups (other tests are kept)."""
    groups = sorted({item_group(item) for item in items if isinstance(item, CaseItem)})
    if groups and shard.count > len(groups):  # a shard without a group: nothing to merge
        raise pytest.UsageError(
            f"--prefalign-shard {shard}: this run has {len(groups)} group(s) of tests (suite, "
            f"size) to share, and a group is never split: use at most {len(groups)} shards"
        )
    mine = {name for n, name in enumerate(groups) if n % shard.count == shard.index - 1}
    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        if isinstance(item, CaseItem) and item_group(item) not in mine:
            left.append(item)
        else:
            kept.append(item)
    return kept, left


class Sharding:
    """The plugin of a sharded run: leaves other shards' tests out (reported through pytest's
    ``pytest_deselected``, so ``-v`` and the summary count them) and remembers which they were,
    so that the run file says this run is its shard, complete when its own tests ran."""

    def __init__(self, config: pytest.Config, shard: Shard) -> None:
        self.config, self.shard = config, shard
        self.left_out: set[str] = set()
        self.left_keys: set[tuple[str, str, str]] = set()  # other shards' (suite, method, size)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        kept, left = split(items, self.shard)
        if not left:
            return
        self.left_out.update(item.nodeid for item in left)
        self.left_keys.update((i.suite, i.row, i.size) for i in left if isinstance(i, CaseItem))
        if hasattr(self.config, "workerinput"):
            self.config.workeroutput[SHARDED] = sorted(self.left_out)  # type: ignore[attr-defined]
            self.config.workeroutput[SHARDED_KEYS] = sorted(self.left_keys)  # type: ignore[attr-defined]
        items[:] = kept
        self.config.hook.pytest_deselected(items=left)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {})
        self.left_out.update(output.get(SHARDED, []))
        self.left_keys.update(tuple(k) for k in output.get(SHARDED_KEYS, []))
