"""``prefalign merge``: shard run files (``--prefalign-shard K/N``) joined into one run file,
as if one run had run every test.

The results and their records are taken as they are; what is computed over a whole run (tau,
inversions, circular evaluation: ``crisis.analyse``) is computed again on the joined results,
so the merged leaderboard, tau, regret and gates are those of a single run. Shards that could
not have come from one run are refused with what differs: another configuration, commit, model,
data or environment, a shard missing or given twice, a test in two shards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_prefalign.analysis import comparable, crisis
from pytest_prefalign.runs.header import OUTCOMES, RunConfig, ShardFile
from pytest_prefalign.runs.parts import Model
from pytest_prefalign.runs.records import CaseResult, RunFile


class MergeError(ValueError):
    """Shards that cannot be merged; the message names the files and what differs."""


def merge(runs: Sequence[tuple[Path, RunFile]]) -> RunFile:
    """One run file from the shards ``(path, run)`` of one run."""
    if not runs:
        raise MergeError("give the run files of the shards")
    _check_shards(runs)
    comparable.check_config(runs, comparable.SHARED_CONFIG, "shards", MergeError)
    _check_collected(runs)
    comparable.check_code(runs, "shards", MergeError)
    results = _joined(runs)
    comparable.check_like_for_like(runs, _same_run, "shards of one run", MergeError)
    first = runs[0][1]
    order = result_order(first.config)
    results.sort(key=order)
    tau, found = crisis.analyse(results)
    models: dict[str, Model] = {}
    for _, run in runs:
        models.update(run.models)
    complete = all(run.complete for _, run in runs)
    return RunFile(
        results=results,
        created=max(run.created for _, run in runs),
        commit=first.commit,
        config=dataclasses.replace(
            first.config or RunConfig(),
            args=None,
            shard=None,
            merged=tuple(_shard_file(path, run.config) for path, run in runs),
        ),
        models=models,
        tau=tau,
        crisis=found,
        version=first.version,
        complete=complete,
        outcomes=comparable.joined_outcomes(runs, every=False),
    )


def _shard_file(path: Path, config: RunConfig | None) -> ShardFile:
    """A shard's run file as the merged run names it."""
    if config is None:
        return ShardFile(str(path))
    return ShardFile(str(path), config.shard, config.args)


def _check_shards(runs: Sequence[tuple[Path, RunFile]]) -> None:
    shards: list[tuple[Path, int, int]] = []
    for path, run in runs:
        shard = run.config.shard if run.config else None
        if shard is None or "/" not in shard:
            raise MergeError(f"{path}: not a shard's run file (run with --prefalign-shard K/N)")
        index, count = (int(part) for part in shard.split("/"))
        shards.append((path, index, count))
    comparable.check_parts(
        shards,
        first=1,
        noun="shards",
        label=lambda k, n: f"shard {k}/{n}",
        split="the shards split the run differently",
        error=MergeError,
    )


def _check_collected(runs: Sequence[tuple[Path, RunFile]]) -> None:
    """Every shard collected the same tests (its own, and those it left to the others): shards
    given other paths, ``-k`` or data would otherwise lose a group between them."""
    collected = []
    for path, run in runs:
        outcomes = run.outcomes
        if outcomes is None or outcomes.shard is None:  # a file that does not say: no check
            return
        own = {test for name in OUTCOMES for test in outcomes.of(name)}  # a shard's own tests
        collected.append((path, own | set(outcomes.shard.other_shards)))
    (path0, first), rest = collected[0], collected[1:]
    for path, tests in rest:
        if tests != first:
            odd = sorted(tests ^ first)
            raise MergeError(
                f"{path0} and {path} are not shards of one run: they collected other tests "
                f"({len(odd)} in one only, e.g. {', '.join(odd[:3])}; other paths, -k or data?)"
            )


def _joined(runs: Sequence[tuple[Path, RunFile]]) -> list[CaseResult]:
    where: dict[tuple[str, str, str], Path] = {}
    results = []
    for path, run in runs:
        for result in run.results:
            if result.key in where:
                raise MergeError(
                    f"{comparable.key_text(result.key)} is in two shards: {where[result.key]} "
                    f"and {path} (overlapping tests)"
                )
            where[result.key] = path
            results.append(result)
    return results


def _same_run(one: CaseResult, other: CaseResult) -> set[str]:
    """What two shards' results must share: the environment, a size's model, a suite's data."""
    kinds = {"environment"}
    if one.size == other.size:
        kinds.add("model")
    if one.suite == other.suite:
        kinds.add("data")
    return kinds


def result_order(config: RunConfig | None) -> Callable[[CaseResult], tuple[Any, ...]]:
    """A single run's order of results: by suite, size, then method as collected (a test of
    the strength sweep after its method's own, by strength; a run without its configuration:
    by name)."""
    sizes = list(config.sizes) if config else []
    methods = list(config.methods) if config else []

    def key(result: CaseResult) -> tuple[Any, ...]:
        method = result.method.partition("@")[0]  # a swept test's: args[pref]@w=0.25
        swept = result.sweep
        return (
            result.suite,
            sizes.index(result.size) if result.size in sizes else len(sizes),
            result.size,
            methods.index(method) if method in methods else len(methods),
            method,
            (swept is not None, swept.value or 0.0 if swept is not None else 0.0),
            result.method,
        )

    return key
