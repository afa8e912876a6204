"""``prefalign pool``: the run files of a cross-fitted suite's folds pooled into one run file,
as one run over every fold's test items.

With ``folds = K`` (Pref-LaMP, docs/suites.md "Cross-fitting") each of K runs tests the papers
of one fold and trains on the others, so that over the K runs every paper is a test item once.
Each run is a run of its own, with its own verdicts over a part of each user's papers. Pooled,
each (method, suite, size)'s pair and item records are those of all the folds together: a
user's RM and policy accuracy are over all their test papers (each scored by the reward method
fitted without it), its figures, intervals and per-user values are computed again from the
pooled records (``analysis/figures.py``), and the run's analysis (tau, inversions, regret, the
ICL comparison: one family of verdicts) is computed once on the pooled results.

Fold runs that could not have been one cross-fitted design are refused with what differs: a
result that is not of a fold, folds missing or given twice, other fold counts, a test in one
fold only, other options, commit, code, reward method, model, environment or judge. Each fold's
working point (guidance strength chosen on its own validation items; the row's options and its
working-point line give one value per fold where they differ), timings and cache uses are kept
per fold; the data's fingerprint is one over the folds' (so that a comparison with another
pooled run sees a change in any fold). Metrics a plugin declares (``pytest_prefalign_metrics``)
are known to a pytest run only: the pool leaves them out and names them.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from pytest_prefalign.analysis import catalogue, comparable, crisis
from pytest_prefalign.analysis.figures import figures
from pytest_prefalign.analysis.merge import result_order
from pytest_prefalign.runs.header import FoldFile, RunConfig
from pytest_prefalign.runs.parts import (
    Counts,
    CrossFit,
    Data,
    Fingerprint,
    Guidance,
    Judge,
    Model,
    Provenance,
    Scalar,
    Strength,
)
from pytest_prefalign.runs.records import CaseResult, Key, Option, RunFile


class PoolError(ValueError):
    """Fold runs that cannot be pooled; the message names the files and what differs."""


def pool(runs: Sequence[tuple[Path, RunFile]]) -> tuple[RunFile, list[str]]:
    """One run file from the run files ``(path, run)`` of a design's folds, and the metrics
    left out (``"name (method)"``: a plugin's, not in this process's catalogue)."""
    if not runs:
        raise PoolError("give the run files of the folds")
    folds = _check_folds(runs)
    comparable.check_config(runs, (*comparable.SHARED_CONFIG, "shard"), "folds", PoolError)
    comparable.check_code(runs, "folds", PoolError)
    comparable.check_like_for_like(runs, _same_design, "folds of one design", PoolError)
    _check_suite_options(runs)
    by_key: dict[Key, list[tuple[int, CaseResult]]] = defaultdict(list)
    for (_, run), fold in zip(runs, folds, strict=True):
        for result in run.results:
            by_key[result.key].append((fold, result))
    _check_same_tests(folds, by_key)
    _check_same_methods(by_key)
    pooled, dropped = [], []
    for parts in by_key.values():
        result, left_out = pooled_result([r for _, r in sorted(parts, key=lambda p: p[0])])
        pooled.append(result)
        dropped += [f"{name} ({result.method})" for name in left_out]
    first = runs[0][1]
    pooled.sort(key=result_order(first.config))
    tau, found = crisis.analyse(pooled)
    models: dict[str, Model] = {}
    for _, run in runs:
        models.update(run.models)
    run_file = RunFile(
        results=pooled,
        created=max(run.created for _, run in runs),
        commit=first.commit,
        config=replace(
            first.config or RunConfig(),
            args=None,
            pooled_folds=tuple(
                FoldFile(str(path), fold, run.config.args if run.config else None)
                for (path, run), fold in zip(runs, folds, strict=True)
            ),
        ),
        models=models,
        tau=tau,
        crisis=found,
        version=first.version,
        complete=all(run.complete for _, run in runs),
        outcomes=comparable.joined_outcomes(runs, every=True),
    )
    return run_file, sorted(set(dropped))


def pooled_result(parts: Sequence[CaseResult]) -> tuple[CaseResult, list[str]]:
    """One test's result over its folds (in fold order): records concatenated, figures made
    again from them; and the metrics of the folds that the catalogue cannot make again."""
    first = parts[0]
    pairs = [record for part in parts for record in part.pairs]
    items = [record for part in parts for record in part.items]
    values, ci, per_user = figures({"pair": pairs, "item": items})
    known = {m.name for m in catalogue.metrics()}
    left_out = sorted({name for part in parts for name in part.metrics if name not in known})
    timings: dict[str, float] = defaultdict(float)
    for part in parts:
        for name, seconds in part.timings.items():
            timings[name] += seconds
    cross_fit = CrossFit(pooled=tuple(part.data.provenance.cross_fit for part in parts))
    provenance = replace(first.data.provenance, cross_fit=cross_fit)
    return (
        CaseResult(
            suite=first.suite,
            method=first.method,
            size=first.size,
            decoder=first.decoder,
            reward=first.reward,
            n_users=len({r.user for r in (*pairs, *items)}),
            n_items=len(items),
            n_pairs=len(pairs),
            metrics=values,
            ci=ci,
            per_user=per_user,
            judge=pooled_judge(parts),
            timings={k: round(v, 3) for k, v in timings.items()},
            model=first.model,
            data=pooled_data(parts, provenance),
            environment=first.environment,
            reward_fingerprint=first.reward_fingerprint,
            reward_package=first.reward_package,
            reward_version=first.reward_version,
            options=per_fold([part.options for part in parts]),
            guidance=pooled_guidance(parts),
            settings=first.settings,
            cache=tuple(use for part in parts for use in part.cache),
            pairs=tuple(pairs),
            items=tuple(items),
        ),
        left_out,
    )


def pooled_judge(parts: Sequence[CaseResult]) -> Judge | None:
    """The win rates' judge over the folds: its counts summed (None where no fold had the
    judge), each fold's kept. The folds' judges are the same (``_check_same_methods``)."""
    judges = [part.judge or Judge() for part in parts]
    if parts[0].judge is None:
        return None
    counts: dict[str, Counts | None] = {}
    for judge in judges:
        for name, count in judge.counts.items():
            if count is None:  # that judge was unavailable (JudgeUnavailable)
                counts.setdefault(name, None)
                continue
            total = counts.get(name) or Counts()
            counts[name] = Counts(
                wins=total.wins + count.wins,
                ties=total.ties + count.ties,
                losses=total.losses + count.losses,
            )
    return replace(
        judges[0],
        n=sum(judge.n or 0 for judge in judges),
        counts=counts,
        folds=tuple(judges),
    )


def pooled_guidance(parts: Sequence[CaseResult]) -> Guidance | None:
    """Each fold's guidance kept (``folds``); ``strength`` the folds' one where they chose the
    same value, else the value each chose (``values``, ``how``: "chosen per fold")."""
    if parts[0].guidance is None:
        return None
    folds = tuple(part.guidance or Guidance() for part in parts)
    pooled = replace(folds[0], folds=folds)
    strengths = [g.strength for g in folds if g.strength is not None]
    chosen = [(s.value, s.how) for s in strengths if s.value is not None]
    if len(chosen) < len(folds):
        return pooled
    if any(c != chosen[0] for c in chosen):
        pooled = replace(
            pooled,
            strength=Strength(
                option=strengths[0].option,
                how="chosen per fold",
                values=tuple(value for value, _ in chosen),
            ),
        )
    return pooled


def per_fold(options: Sequence[Mapping[str, Option]]) -> dict[str, Option]:
    """The folds' options: a value where every fold has it, else the list of each fold's (the
    guidance strength each fold chose)."""
    names = dict.fromkeys(name for found in options for name in found)
    pooled: dict[str, Option] = {}
    for name in names:
        values = tuple(found.get(name) for found in options)
        pooled[name] = values[0] if all(v == values[0] for v in values) else _each(name, values)
    return pooled


def _each(name: str, values: Sequence[Option]) -> tuple[Scalar, ...]:
    """Each fold's value of option ``name``; PoolError where a fold's is already a list of
    values (a row pooled from folds is no fold)."""
    each: list[Scalar] = []
    for value in values:
        if isinstance(value, tuple):
            raise PoolError(f"option {name!r} is already per fold in a fold's row: {value!r}")
        each.append(value)
    return tuple(each)


def pooled_data(parts: Sequence[CaseResult], provenance: Provenance) -> Data:
    """The row's data: fold 0's source, every fold's faults and drops, a fingerprint over the
    folds' (each part hashed over the folds, so that another pooled run with other training
    pairs in any fold differs), the pooled provenance, and each fold's data as it was."""
    prints = [part.data.fingerprint or Fingerprint() for part in parts]
    fingerprint = Fingerprint(
        **{
            name: hashlib.sha256(
                "|".join(str(getattr(p, name)) for p in prints).encode()
            ).hexdigest()[:16]
            for name in (f.name for f in fields(Fingerprint))
        }
    )
    dropped: dict[str, int] = {}
    for part in parts:
        for reason, n in part.data.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + n
    return replace(
        parts[0].data,
        dropped=dropped,
        faults=tuple(fault for part in parts for fault in part.data.faults),
        fingerprint=fingerprint if any(p.data.fingerprint for p in parts) else None,
        provenance=provenance,
        folds=tuple(part.data for part in parts),
    )


def fold_of(result: CaseResult) -> tuple[int, int] | None:
    """``(fold, folds)`` of a cross-fitted suite's result (its data's provenance), else None."""
    cross_fit = result.data.provenance.cross_fit
    if cross_fit is None or cross_fit.fold is None or cross_fit.folds is None:
        return None
    return cross_fit.fold, cross_fit.folds


# -------------------------------------------------------------------------------------------
# Checks
# -------------------------------------------------------------------------------------------


def _check_folds(runs: Sequence[tuple[Path, RunFile]]) -> list[int]:
    """Each run file's fold: one per file, every fold of one count once."""
    folds: list[tuple[Path, int, int]] = []
    for path, run in runs:
        if not run.results:
            raise PoolError(f"{path}: no results to pool")
        seen = set()
        for result in run.results:
            found = fold_of(result)
            if found is None:
                raise PoolError(
                    f"{path}: {comparable.key_text(result.key)} is not of a fold (its suite "
                    "was not run with folds > 1)"
                )
            seen.add(found)
        if len(seen) > 1:
            raise PoolError(f"{path}: results of several folds ({_folds_text(seen)})")
        ((fold, count),) = seen
        folds.append((path, fold, count))
    comparable.check_parts(
        folds,
        first=0,
        noun="folds",
        label=lambda k, n: f"fold {k} of {n}",
        split="the runs split the papers differently",
        error=PoolError,
    )
    return [fold for _, fold, _ in folds]


def _folds_text(seen: set[tuple[int, int]]) -> str:
    return ", ".join(f"fold {k} of {n}" for k, n in sorted(seen))


def _check_same_tests(folds: list[int], by_key: dict[Key, list[tuple[int, CaseResult]]]) -> None:
    """Every test in every fold: a row pooled over some folds would hold some users' papers
    only."""
    for key, parts in by_key.items():
        missing = sorted(set(folds) - {fold for fold, _ in parts})
        if missing:
            raise PoolError(
                f"{comparable.key_text(key)} has no result in fold(s) "
                f"{', '.join(map(str, missing))}: give runs of the same tests"
            )


def _check_same_methods(by_key: dict[Key, list[tuple[int, CaseResult]]]) -> None:
    """One reward method and one independent judge per test across the folds: a plugin
    upgraded, or the judge unavailable, between two folds' runs would pool other things."""
    fields = ("reward_fingerprint", "reward_package", "reward_version")
    for key, parts in by_key.items():
        fold0, first = parts[0]
        for fold, part in parts[1:]:
            for name in fields:
                if getattr(part, name) != getattr(first, name):
                    raise PoolError(
                        f"{comparable.key_text(key)}: the reward method's {name.split('_')[1]} "
                        f"is {getattr(first, name)!r} in fold {fold0} but "
                        f"{getattr(part, name)!r} in fold {fold}"
                    )
            judges = [p.judge.independent if p.judge else None for p in (first, part)]
            if judge_identity(judges[0]) != judge_identity(judges[1]):
                raise PoolError(
                    f"{comparable.key_text(key)}: the independent judge is {judges[0]!r} in fold "
                    f"{fold0} but {judges[1]!r} in fold {fold} (unavailable in one?)"
                )


def judge_identity(description: str | None) -> str | None:
    """An independent judge's description without its trailing ``(N pairs, M users)``: the
    judge is fitted in each fold on that fold's training pairs, so its counts differ between
    folds by design; what it is (encoder, head, negatives) must not."""
    if description is None:
        return None
    return re.sub(r"\s*\(\d+ pairs, \d+ users\)$", "", description)


def _same_design(one: CaseResult, other: CaseResult) -> set[str]:
    """What two folds' results must share: one environment, and one model per size; the data
    differ between folds by design, so only their suite's options are compared (apart from
    ``fold``: ``_check_suite_options``)."""
    return {"environment", "model"} if one.size == other.size else {"environment"}


def _check_suite_options(runs: Sequence[tuple[Path, RunFile]]) -> None:
    first: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path, run in runs:
        for result in run.results:
            options = dict(result.data.provenance.options or {})
            options.pop("fold", None)
            if result.suite not in first:
                first[result.suite] = (path, options)
                continue
            path0, options0 = first[result.suite]
            odd = sorted(k for k in {*options, *options0} if options.get(k) != options0.get(k))
            if odd:
                name = odd[0]
                raise PoolError(
                    f"the folds' {result.suite} was run with other options: {name} is "
                    f"{options0.get(name)!r} in {path0} but {options.get(name)!r} in {path}"
                )
