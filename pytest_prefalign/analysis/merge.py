"""``prefalign merge``: shard run files (``--prefalign-shard K/N``) joined into one run file,
as if one run had run every test.

The results and their records are taken as they are; what is computed over a whole run (tau,
inversions, circular evaluation: ``crisis.analyse``) is computed again on the joined results,
so the merged leaderboard, tau, regret and gates are those of a single run. Shards that could
not have come from one run are refused with what differs: another configuration, commit, model,
data or environment, a shard missing or given twice, a test in two shards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_prefalign.analysis import comparable, crisis
from pytest_prefalign.runs.records import CaseResult, RunFile

# the configuration every shard must share (``args`` and ``shard`` are each shard's own)
SHARED_CONFIG = ("methods", "sizes", "limit", "reduce", "seed", "options")


class MergeError(ValueError):
    """Shards that cannot be merged; the message names the files and what differs."""


def merge(runs: Sequence[tuple[Path, RunFile]]) -> RunFile:
    """One run file from the shards ``(path, run)`` of one run."""
    if not runs:
        raise MergeError("give the run files of the shards")
    _check_shards(runs)
    _check_config(runs)
    _check_collected(runs)
    check_code(runs)
    results = _joined(runs)
    _check_like_for_like(runs)
    first = runs[0][1]
    order = result_order(first.config)
    results.sort(key=order)
    tau, found = crisis.analyse(results)
    models: dict[str, Any] = {}
    for _, run in runs:
        models.update(run.models)
    complete = all(run.complete for _, run in runs)
    return RunFile(
        results=results,
        created=max(run.created for _, run in runs),
        commit=first.commit,
        config={
            **{k: v for k, v in first.config.items() if k not in ("args", "shard")},
            "shard": None,
            "merged": [
                {
                    "file": str(path),
                    "shard": run.config.get("shard"),
                    "args": run.config.get("args"),
                }
                for path, run in runs
            ],
        },
        models=models,
        tau=tau,
        crisis=found,
        version=first.version,
        complete=complete,
        outcomes=_outcomes(runs),
    )


def _check_shards(runs: Sequence[tuple[Path, RunFile]]) -> None:
    shards: list[tuple[Path, int, int]] = []
    for path, run in runs:
        shard = run.config.get("shard")
        if not isinstance(shard, str) or "/" not in shard:
            raise MergeError(f"{path}: not a shard's run file (run with --prefalign-shard K/N)")
        index, count = (int(part) for part in shard.split("/"))
        shards.append((path, index, count))
    check_parts(
        shards,
        first=1,
        noun="shards",
        label=lambda k, n: f"shard {k}/{n}",
        split="the shards split the run differently",
        error=MergeError,
    )


def check_parts(
    parts: Sequence[tuple[Path, int, int]],
    *,
    first: int,
    noun: str,
    label: Callable[[int, int], str],
    split: str,
    error: type[Exception],
) -> None:
    """The run files of the parts of a whole (``(path, index, count)``: the shards of a run,
    the folds of a design): one count, each part once, none missing (indices ``first`` to
    ``first + count - 1``); else ``error``, naming the files and the parts by ``label``."""
    counts = {count for _, _, count in parts}
    if len(counts) > 1:
        raise error(f"{split}: " + ", ".join(f"{p} is {label(k, n)}" for p, k, n in parts))
    given: dict[int, Path] = {}
    for path, index, count in parts:
        if index in given:
            raise error(f"{path}: {label(index, count)} is given twice (also {given[index]})")
        given[index] = path
    (count,) = counts
    missing = [label(k, count) for k in range(first, first + count) if k not in given]
    if missing:
        raise error(f"{', '.join(missing)} missing: give the run files of all {count} {noun}")


OWN = ("passed", "failed", "error", "skipped", "deselected", "not_run")  # a shard's own tests


def _check_collected(runs: Sequence[tuple[Path, RunFile]]) -> None:
    """Every shard collected the same tests (its own, and those it left to the others): shards
    given other paths, ``-k`` or data would otherwise lose a group between them."""
    collected = []
    for path, run in runs:
        shard = run.outcomes.get("shard") or {}
        if "other_shards" not in shard:  # a run file that does not say: nothing to check
            return
        own = {t for name in OWN for t in run.outcomes.get(name) or []}
        collected.append((path, own | set(shard["other_shards"])))
    (path0, first), rest = collected[0], collected[1:]
    for path, tests in rest:
        if tests != first:
            odd = sorted(tests ^ first)
            raise MergeError(
                f"{path0} and {path} are not shards of one run: they collected other tests "
                f"({len(odd)} in one only, e.g. {', '.join(odd[:3])}; other paths, -k or data?)"
            )


def check_code(runs: Sequence[tuple[Path, RunFile]], what: str = "shards") -> None:
    """The same code in every run (``what``: the shards of a run, the folds of a design), by
    the code versions each result was keyed by (the evaluation's, each suite's, each
    decoder's): one commit with an edit between two of them would otherwise join."""
    seen: dict[tuple[str, str], tuple[str, Path]] = {}
    for path, run in runs:
        for result in run.results:
            inputs = next(
                (u.get("inputs") or {} for u in result.cache if u.get("artifact") == "results"),
                {},
            )
            parts = (("evaluation", ""), ("suite", result.suite), ("decoder", result.decoder))
            for part, name in parts:
                value = inputs.get(part)
                if value is None:
                    continue
                first = seen.setdefault((part, name), (str(value), path))
                if first[0] != str(value):
                    component = f"{part} {name}".strip()
                    raise MergeError(
                        f"the {what} ran other code: the {component} code is {first[0]} in "
                        f"{first[1]} but {value} in {path}"
                    )


def _check_config(runs: Sequence[tuple[Path, RunFile]]) -> None:
    (path0, run0), rest = runs[0], runs[1:]
    for path, run in rest:
        for name in SHARED_CONFIG:
            if run.config.get(name) != run0.config.get(name):
                raise MergeError(
                    f"the shards were run with other options: {name} is "
                    f"{run0.config.get(name)!r} in {path0} but {run.config.get(name)!r} in {path}"
                )
        if run.commit != run0.commit:
            raise MergeError(
                f"the shards ran other code: commit {run0.commit} in {path0}, "
                f"{run.commit} in {path}"
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


def _check_like_for_like(runs: Sequence[tuple[Path, RunFile]]) -> None:
    """The environment everywhere, each size's model and each suite's data must be those of
    one run (``comparable.case_differences``, the checks a regression gate makes)."""
    seen: list[tuple[Path, CaseResult]] = []
    for path, run in runs:
        for result in run.results:
            for other_path, other in seen:
                if other_path == path:
                    continue
                relevant = {"environment"}
                if other.size == result.size:
                    relevant.add("model")
                if other.suite == result.suite:
                    relevant.add("data")
                for difference in comparable.case_differences(other, result):
                    if difference.kind in relevant and not difference.unverified:
                        raise MergeError(
                            f"{path} and {other_path} are not shards of one run: "
                            f"{difference.text} ({comparable.key_text(other.key)} against "
                            f"{comparable.key_text(result.key)})"
                        )
            seen.append((path, result))


def result_order(config: dict[str, Any]):
    """A single run's order of results: by suite, size, then method as collected."""
    sizes = list(config.get("sizes") or [])
    methods = list(config.get("methods") or [])

    def key(result: CaseResult) -> tuple[Any, ...]:
        return (
            result.suite,
            sizes.index(result.size) if result.size in sizes else len(sizes),
            result.size,
            methods.index(result.method) if result.method in methods else len(methods),
            result.method,
        )

    return key


def _outcomes(runs: Sequence[tuple[Path, RunFile]]) -> dict[str, Any]:
    """The shards' outcomes together, as one run's."""
    out: dict[str, Any] = {"selected": 0, "interrupted": None, "incomplete": []}
    for path, run in runs:
        parts = run.outcomes
        out["selected"] += int(parts.get("selected") or 0)
        for name in ("passed", "failed", "error", "skipped", "deselected", "not_run"):
            out[name] = sorted([*out.get(name, []), *(parts.get(name) or [])])
        out["without_result"] = [
            *out.get("without_result", []),
            *(parts.get("without_result") or []),
        ]
        out["interrupted"] = out["interrupted"] or parts.get("interrupted")
        out["incomplete"] += [f"{path}: {reason}" for reason in parts.get("incomplete") or []]
    return out
