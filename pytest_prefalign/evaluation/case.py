"""Evaluating one case, a (method, suite, size): generation and ROUGE, win rates over base, RM
accuracy and policy accuracy, pooled into the figures the metric catalogue declares.

The ``Evaluator`` works in the narrow context a run gives the evaluation (``RunContext``: the
registry, the settings it needs, the model pool, the disk cache and the method options) and keeps
the state the cases of one (suite, size) share (the suite's data, fitted reward methods, memos).
Imported lazily by the test items: it pulls in torch through the model runtime.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_prefalign import cache, events
from pytest_prefalign.analysis import catalogue, metrics
from pytest_prefalign.api import CaseContext
from pytest_prefalign.errors import PrefalignError
from pytest_prefalign.evaluation import generation, pairs, prepare, wins
from pytest_prefalign.evaluation.context import Case, RunContext
from pytest_prefalign.runs.records import CaseResult

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import Decoder


# a loaded suite (or why it failed) by (name, options), per run
SUITES = cache.Slot("suites", dict[tuple[str, tuple[tuple[str, str], ...]], Any])
# a fitted reward method (or why it failed) by name, per (suite, size)
REWARDS = cache.Slot("fitted reward methods", dict[str, Any])


class Evaluator:
    """Evaluates cases; keeps what the cases of one (suite, size) share for the whole run. A
    failure to load a suite or fit a reward method is kept too, so that every test needing it
    fails with the same message, without trying again."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.registry, self.settings = context.registry, context.settings
        self.disk, self.method_options = context.disk, context.method_options
        self.memory = cache.Scope("run")  # the suites; each (suite, size) has a scope of its own
        self.groups: dict[tuple[Any, ...], cache.Scope] = {}

    def run(self, case: Case) -> CaseResult:
        """The case's result, with its per-pair and per-item records and the cached values it
        used."""
        with cache.using(self.disk), cache.recording() as uses:
            return self._run(case, uses)

    def group(self, case: Case) -> cache.Scope:
        """What the tests of the case's (suite, size) share: fitted reward methods, outputs,
        and the methods' own memos (``CaseContext.shared``)."""
        return self.groups.setdefault(case.group, cache.Scope(f"{case.suite}·{case.size}"))

    def suite(self, case: Case) -> prepare.SuiteState:
        return _kept(
            self.memory[SUITES],
            (case.suite, case.options),
            lambda: prepare.load_suite(self.context, case.suite, dict(case.options)),
        )

    def reward(self, case: Case, state: prepare.SuiteState, lm: Any) -> prepare.FittedReward | None:
        name = case.method.reward
        if name is None:
            return None
        return _kept(
            self.group(case)[REWARDS],
            name,
            lambda: prepare.fit_reward(self.context, name, state, lm),
        )

    def _run(self, case: Case, uses: list[cache.Use]) -> CaseResult:
        started = time.perf_counter()
        state = self.suite(case)
        lm = prepare.load_model(self.context, case.size)
        fitted = self.reward(case, state, lm)
        factory = self.registry.decoder(case.method.decoder).obj
        decoder: Decoder = factory()
        ctx = CaseContext(
            lm=lm,
            suite=state.suite,
            data=state.data,
            reward=fitted.reward if fitted else None,
            options=self.method_options.decoder_options(case.method.decoder, factory),
            seed=self.settings.seed,
            reduce=self.settings.reduce,
            shared=self.group(case),
        )
        timings: dict[str, float] = {"setup_s": time.perf_counter() - started}
        key = {"suite": case.suite, "method": str(case.method), "size": case.size}
        items, judge = self._items(case, ctx, fitted, key, timings)
        with events.step(f"scoring {len(ctx.data.test_pairs)} pairs"):
            records = pairs.pair_records(ctx, decoder, case.method.decoder, key, timings)
        timings["total_s"] = time.perf_counter() - started
        values, ci, per_user = figures({"pair": records, "item": items})
        used = cache.unique([*lm.cache_uses, *state.uses, *(fitted.uses if fitted else []), *uses])
        return CaseResult(
            suite=case.suite,
            method=str(case.method),
            size=case.size,
            decoder=case.method.decoder,
            reward=case.method.reward,
            n_users=len({r["user"] for r in (*items, *records)}),
            n_items=len(items),
            n_pairs=len(records),
            metrics=values,
            ci=ci,
            per_user=per_user,
            judge=judge,
            timings={k: round(v, 3) for k, v in timings.items()},
            model={
                "name": lm.name,
                "fingerprint": lm.fingerprint,
                "weights": lm.weights_fingerprint,
            },
            data={
                "source": state.data.source,
                "dropped": state.data.dropped,
                "provenance": state.data.provenance,
                "fingerprint": state.fingerprint,
            },
            environment=prepare.environment(lm),
            reward_fingerprint=fitted.fingerprint if fitted else None,
            reward_package=fitted.package if fitted else None,
            reward_version=fitted.version if fitted else None,
            options=_asdict(ctx.options),
            cache=[u.to_json() for u in used],
            pairs=records,
            items=items,
        )

    def _items(
        self,
        case: Case,
        ctx: CaseContext,
        fitted: prepare.FittedReward | None,
        key: dict[str, str],
        timings: dict[str, float],
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The item records (outputs, ROUGE, and win outcomes for reward-guided methods) and
        what the judges were."""
        if not ctx.data.items:
            return [], {}
        t0 = time.perf_counter()
        outputs = generation.cached_generate(
            self.context, ctx, case.method, fitted.key if fitted else None
        )
        timings["generate_s"] = time.perf_counter() - t0
        items = generation.item_records(ctx, outputs, key)
        if ctx.reward is None:
            return items, {}
        t0 = time.perf_counter()
        base = generation.base_outputs(self.context, ctx)
        with events.step("judging win rates over base"):
            won = wins.win_rates(ctx, ctx.data.items, outputs, base)
        timings["judge_s"] = time.perf_counter() - t0
        for field, outcomes in (
            ("win_self", won["outcomes_self"]),
            ("win_independent", won["outcomes_independent"]),
        ):
            if outcomes is not None:
                for record, value in zip(items, outcomes, strict=True):
                    record[field] = float(value)
        judge = {
            "n": won["n"],
            "self": won["judge_self"],
            "independent": won["judge_independent"],
            "reason": won["reason_independent"],
        }
        return items, judge


def _kept(store: dict[Any, Any], key: Any, make: Any) -> Any:
    """``make()`` once per key, its value or its ``PrefalignError`` kept (and raised again)."""
    if key not in store:
        try:
            store[key] = make()
        except PrefalignError as exc:
            store[key] = exc
    value = store[key]
    if isinstance(value, PrefalignError):
        raise value
    return value


def _asdict(options: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(options)


# --------------------------------------------------------------------------------------------
# The figures, as the catalogue declares them
# --------------------------------------------------------------------------------------------


def figures(
    records: dict[str, Sequence[dict[str, Any]]],
) -> tuple[dict[str, float], dict[str, list[float]], dict[str, dict[str, float]]]:
    """``(metrics, ci, per_user)``: each catalogue metric whose record field has observations,
    pooled over users (macro) or over observations (micro), with a 95% bootstrap interval over
    users and each user's mean where the catalogue asks for them."""
    values, ci, per_user = {}, {}, {}
    for metric in catalogue.METRICS:
        observed = [
            (r[metric.field], r["user"])
            for r in records.get(metric.level, ())
            if r.get(metric.field) is not None
        ]
        if not observed:
            continue
        outcomes = np.asarray([v for v, _ in observed], dtype=np.float64)
        users = [u for _, u in observed]
        means = metrics.per_user_mean(outcomes, users)
        values[metric.name] = float(
            np.mean(list(means.values())) if metric.pooling == "macro" else outcomes.mean()
        )
        if metric.interval:
            low, high = metrics.bootstrap_ci(outcomes, users, statistic=metric.pooling, seed=0)
            ci[metric.name] = [float(low), float(high)]
            per_user[metric.name] = {u: float(v) for u, v in means.items()}
    return values, ci, per_user


def check(result: CaseResult, floors: Sequence[tuple[str, float]]) -> list[str]:
    """What is wrong with a finished result: a metric that is unknown, not finite or outside
    its range, or below a floor the user set (``(metric, value)`` pairs)."""
    problems = []
    for name, value in result.metrics.items():
        metric = catalogue.find(name)
        if metric is None:
            problems.append(f"metric {name} is not in the catalogue")
        elif (
            not (isinstance(value, float) and math.isfinite(value))
            or not metric.low <= value <= metric.high
        ):
            problems.append(
                f"metric {name} = {value!r} is not a number in [{metric.low:g}, {metric.high:g}]"
            )
    for name, floor in floors:
        got = result.metrics.get(name)
        if got is not None and got < floor:
            problems.append(f"{name} = {got:.4f} is below the floor {floor:g}")
    return problems
