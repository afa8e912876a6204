"""Evaluating one case, a (method, suite, size): generation and ROUGE, win rates over base, RM
accuracy and policy accuracy, pooled into the figures the metric catalogue declares.

The ``Evaluator`` works in the narrow context a run gives the evaluation (``RunContext``: the
registry, the settings it needs, the model pool, the disk cache and the method options) and keeps
the state the cases of one (suite, size) share (the suite's data, fitted reward methods, memos).
Imported lazily by the test items: it pulls in torch through the model runtime.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_prefalign import cache, events, portable, versions
from pytest_prefalign.analysis import catalogue
from pytest_prefalign.analysis.figures import figures
from pytest_prefalign.api import CaseContext
from pytest_prefalign.errors import PrefalignError
from pytest_prefalign.evaluation import faults, generation, guidance, pairs, prepare, scale, wins
from pytest_prefalign.evaluation.context import Case, RunContext
from pytest_prefalign.registry import MethodName
from pytest_prefalign.runs import parts
from pytest_prefalign.runs.records import CaseResult, Option

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import Decoder


# a loaded suite (or why it failed) by (name, options), per run
SUITES = cache.Slot("suites", dict[tuple[str, tuple[tuple[str, str], ...]], Any])
# a reward method configured (or why it failed), and fitted (or why it failed), by name, per
# (suite, size)
PLANS = cache.Slot("configured reward methods", dict[str, Any])
REWARDS = cache.Slot("fitted reward methods", dict[str, Any])


class Evaluator:
    """Evaluates cases; keeps what the cases of one (suite, size) share for the whole run. A
    failure to load a suite or fit a reward method is kept too, so that every test needing it
    fails with the same message, without trying again."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.registry = context.registry
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

    def plan(self, case: Case, state: prepare.SuiteState, lm: Any) -> prepare.RewardPlan | None:
        name = case.method.reward
        if name is None:
            return None
        return _kept(
            self.group(case)[PLANS],
            name,
            lambda: prepare.plan_reward(self.context, name, state, lm),
        )

    def reward(
        self, case: Case, state: prepare.SuiteState, lm: Any, plan: prepare.RewardPlan | None
    ) -> prepare.FittedReward | None:
        if plan is None:
            return None
        return _kept(
            self.group(case)[REWARDS],
            plan.name,
            lambda: prepare.fit_reward(self.context, plan, state, lm),
        )

    def _run(self, case: Case, uses: list[cache.Use]) -> CaseResult:
        started = time.perf_counter()
        timings: dict[str, float] = {}
        prepared = self._prepare(case, timings)
        value, fitted_uses = self._records(prepared, timings)
        timings["total_s"] = time.perf_counter() - started
        lm, state = prepared.lm, prepared.state
        used = cache.unique([*lm.cache_uses, *state.uses, *fitted_uses, *uses])
        roots = prepare.roots(self.context, prepared.state)  # the run file names no machine path
        return case_result(prepared, value, timings, used, roots)

    def _prepare(self, case: Case, timings: dict[str, float]) -> Prepared:
        """The suite, the model, the reward method's plan and the decoder's context at its
        working point; the meter is read before the guidance, whose passes count as the
        test's. The test that loads the suite carries what building its pairs cost: its own
        ``pairs_s`` phase, out of ``data_s``, and the writer's forward passes in its
        ``forward_*`` (a test that finds the suite loaded carries neither)."""
        loads = (case.suite, case.options) not in self.memory[SUITES]
        with _timed(timings, "data_s"):
            state = self.suite(case)
        if loads and state.pairs_cost:
            timings["data_s"] -= state.pairs_cost["pairs_s"]
            _add(timings, state.pairs_cost)
        with _timed(timings, "model_s"):
            lm = prepare.load_model(self.context, case.size)
        named = faults.of_group(
            self.group(case),
            case.suite,
            case.size,
            state.data,
            lm,
            disk=self.disk,
            data_key=state.fingerprint["all"],
        )
        plan = self.plan(case, state, lm)
        factory = self.registry.decoder(case.method.decoder).obj
        ctx = CaseContext(
            lm=lm,
            suite=state.suite,
            data=state.data,
            reward=None,  # fitted only if the case's results are not in the cache
            options=self.method_options.decoder_options(case.method.decoder, factory),
            seed=self.context.seed,
            reduce=self.context.reduce,
            shared=self.group(case),
        )
        before = lm.meter.reading()
        chosen = self.working_point(case, ctx, factory, state, lm, plan, timings)
        if chosen is not None:  # the decoder at its working point
            ctx = dataclasses.replace(ctx, options=chosen.apply(ctx.options))
        return Prepared(case, state, lm, plan, factory, ctx, chosen, named, before)

    def _records(
        self, prepared: Prepared, timings: dict[str, float]
    ) -> tuple[dict[str, Any], list[cache.Use]]:
        """The case's records (``items``, ``pairs``, ``judge``, ``reward_scale``) from the disk
        cache, or computed: the reward method fitted, the items generated and judged, the pairs
        scored; and the cached values the fitting used."""
        case, state, lm, plan = prepared.case, prepared.state, prepared.lm, prepared.plan
        key = {"suite": case.suite, "method": case.row, "size": case.size}
        fitted_uses: list[cache.Use] = []

        def compute() -> dict[str, Any]:
            ctx = prepared.ctx
            with _timed(timings, "fit_s"):
                fitted = self.reward(case, state, lm, plan)
            if fitted is not None:
                ctx = dataclasses.replace(ctx, reward=fitted.reward)
                fitted_uses.extend(fitted.uses)
            items, judge = self._items(case, ctx, fitted, key, timings)
            decoder: Decoder = prepared.factory()
            with events.step(f"scoring {len(ctx.data.test_pairs)} pairs"):
                records = pairs.pair_records(ctx, decoder, case.method.decoder, key, timings)
            _add(timings, lm.meter.since(prepared.before, lm.meter.reading()))
            standard = fitted.scale.to_json() if fitted is not None else None
            return {"items": items, "pairs": records, "judge": judge, "reward_scale": standard}

        results = results_key(self.context, case, prepared.ctx, prepared.factory, plan, state)
        value = self.disk.json(results, compute, valid=_valid_results)
        # the records name their test: two sizes with one model share the cached records
        pair_records = [parts.PairRecord.from_json({**r, **key}, "pair") for r in value["pairs"]]
        item_records = [parts.ItemRecord.from_json({**r, **key}, "item") for r in value["items"]]
        observed = {
            "pairs": observe({"pair": pair_records})["pair"],
            "items": observe({"item": item_records})["item"],
        }
        return {**value, **observed}, fitted_uses

    def working_point(
        self,
        case: Case,
        ctx: CaseContext,
        factory: Any,
        state: prepare.SuiteState,
        lm: Any,
        plan: prepare.RewardPlan | None,
        timings: dict[str, float],
    ) -> guidance.Choice | None:
        """The decoder's guidance strength (``guidance.choose``), timed as the guidance phase
        with the reward method's fitting, if it happens here, in the fit phase."""

        def fit() -> prepare.FittedReward | None:
            with _timed(timings, "fit_s"):
                return self.reward(case, state, lm, plan)

        started = time.perf_counter()
        fitting = timings.get("fit_s", 0.0)
        chosen = guidance.choose(self.context, case, ctx, factory, plan, fit)
        spent = time.perf_counter() - started - (timings.get("fit_s", 0.0) - fitting)
        timings["guidance_s"] = timings.get("guidance_s", 0.0) + spent
        return chosen

    def _items(
        self,
        case: Case,
        ctx: CaseContext,
        fitted: prepare.FittedReward | None,
        key: dict[str, str],
        timings: dict[str, float],
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The item records (outputs, ROUGE, and for reward-guided methods each judge's strict
        win and outcome) and what the judges were, with their counts of wins, ties and
        losses."""
        if not ctx.data.items:
            return [], {}
        with _timed(timings, "generate_s"):
            # the outputs depend on the fitted method and on the scale its rewards are read on
            outputs = generation.cached_generate(
                self.context,
                ctx,
                case.method,
                scale.scale_key(fitted.key) if fitted else None,
                row=case.row,
            )
        _, got = ctx.shared[generation.OUTPUTS][case.row]
        if not got.hit:  # generated here: its tokens give the decoder's rate
            timings["generate_tokens"] = float(sum(len(ctx.lm.response_ids(o)) for o in outputs))
        with _timed(timings, "rouge_s"):
            items = generation.item_records(ctx, outputs, key)
        if ctx.reward is None:
            return items, {}
        with _timed(timings, "judge_s"):
            base = generation.base_outputs(self.context, ctx)
            with events.step("judging win rates over base"):
                independent = wins.independent(self.registry)
                won = wins.win_rates(ctx, ctx.data.items, outputs, base, independent)
        for field, outcomes in (
            ("win_self", won["outcomes_self"]),
            ("win_independent", won["outcomes_independent"]),
        ):
            if outcomes is not None:
                strict = wins.strict_wins(outcomes)
                for record, value, won_it in zip(items, outcomes, strict, strict=True):
                    record[field] = float(won_it)  # 1 win, 0 tie or loss: the win rate's
                    record[f"{field}_outcome"] = float(value)  # 1 win, 1/2 tie, 0 loss
        judge = {
            "n": won["n"],
            "self": won["judge_self"],
            "independent": won["judge_independent"],
            "reason": won["reason_independent"],
            # wins, ties and losses by the win rate they belong to (None: no such judge)
            "counts": {
                "win_self": won["counts_self"],
                "win_independent": won["counts_independent"],
            },
        }
        return items, judge


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A case ready to compute: its suite, model and reward method's plan, the decoder's
    factory and context at its working point (``chosen``), the data's faults named for the
    (suite, size), and the model's meter reading before the guidance ran."""

    case: Case
    state: prepare.SuiteState
    lm: Any
    plan: prepare.RewardPlan | None
    factory: Any
    ctx: CaseContext
    chosen: guidance.Choice | None
    faults: list[Any]
    before: dict[str, float]


def case_result(
    prepared: Prepared,
    value: dict[str, Any],
    timings: dict[str, float],
    used: list[cache.Use],
    roots: dict[str, Path],
) -> CaseResult:
    """The case's row of the run file: its figures pooled from the records, and what it ran
    on (model, data, environment, reward method, options, guidance, cache uses), its paths
    written from ``roots`` (``portable.py``)."""
    case, ctx, lm, plan = prepared.case, prepared.ctx, prepared.lm, prepared.plan
    items, records = value["items"], value["pairs"]
    values, ci, per_user = figures({"pair": records, "item": items})
    return CaseResult(
        suite=case.suite,
        method=case.row,
        size=case.size,
        decoder=case.method.decoder,
        reward=case.method.reward,
        n_users=len({r.user for r in (*items, *records)}),
        n_items=len(items),
        n_pairs=len(records),
        metrics=values,
        ci=ci,
        per_user=per_user,
        judge=parts.read(parts.Judge | None, value["judge"], "judge"),
        timings={k: round(v, 3) for k, v in timings.items()},
        model=parts.Model.from_json(
            portable.relative(
                {"name": lm.name, "fingerprint": lm.fingerprint, "weights": lm.weights_fingerprint},
                roots,
            )
        ),
        data=parts.Data.from_json(
            portable.relative(data_record(prepared.state, prepared.faults), roots), "data"
        ),
        environment=parts.Environment.from_json(prepare.environment(lm), "environment"),
        reward_fingerprint=plan.fingerprint if plan else None,
        reward_package=plan.package if plan else None,
        reward_version=plan.version if plan else None,
        options=parts.read(Mapping[str, Option], dataclasses.asdict(ctx.options), "options"),
        guidance=parts.read(parts.Guidance | None, steering(prepared.chosen, value), "guidance"),
        settings=parts.Scoring(reduce=ctx.reduce, seed=ctx.seed),
        cache=tuple(parts.CacheUse.from_json(u.to_json(), "cache") for u in used),
        pairs=tuple(records),
        items=tuple(items),
    )


def data_record(state: prepare.SuiteState, named: list[Any]) -> dict[str, Any]:
    """What the case's data was: its source, the users dropped, the faults, how its pairs were
    made and its fingerprint."""
    return {
        "source": state.data.source,
        "dropped": state.data.dropped,
        "faults": named,
        "provenance": state.data.provenance,
        "fingerprint": state.fingerprint,
    }


def steering(chosen: guidance.Choice | None, value: dict[str, Any]) -> dict[str, Any]:
    """How the reward steered the decoder: the strength chosen, and the scale its rewards
    were read on (neither for a method without a reward)."""
    return {
        **({"strength": chosen.to_json()} if chosen is not None else {}),
        **({"reward_scale": value["reward_scale"]} if value.get("reward_scale") else {}),
    }


def results_key(
    run: RunContext,
    case: Case,
    ctx: CaseContext,
    factory: Any,
    plan: prepare.RewardPlan | None,
    state: prepare.SuiteState,
) -> cache.Key:
    """What a case's records (outputs, ROUGE, win outcomes, the pairs' scores) depend on: this
    evaluation's code (the metrics, the guard, the judges' training included), the decoder's
    code, options and seed, the policy score's reduction, the model, the reward method's key
    (its configuration, code and training pairs), the suite's code, the exact data, and for
    the win rates base's generations and the independent judge (what it is and its code)."""
    base = judge = None
    if plan is not None and ctx.data.items:
        base_factory = run.registry.decoder("base").obj
        base_ctx = dataclasses.replace(
            ctx, options=run.method_options.decoder_options("base", base_factory)
        )
        base_name = MethodName("base", None)
        base = generation.generation_key(base_ctx, base_name, base_factory, None).digest
        judge = wins.judge_key(wins.independent(run.registry))
    return cache.make_key(
        "results",
        method=str(case.method),
        evaluation=versions.code_version(sys.modules[__name__]),
        decoder=versions.code_version(factory),
        options=dataclasses.asdict(ctx.options),
        seed=ctx.seed,
        reduce=ctx.reduce,
        model=ctx.lm.fingerprint,
        reward=plan.key.digest if plan is not None else None,
        suite=f"{case.suite}@{versions.code_version(state.suite)}",
        # a decoder reads the items and profiles (as generations are keyed); the training
        # pairs matter through the reward method's key and the judge
        test_pairs=state.fingerprint["test_pairs"],
        items=state.fingerprint["items"],
        profiles=state.fingerprint["profiles"],
        train_pairs=state.fingerprint["train_pairs"] if plan is not None else None,
        base=base,
        judge=judge,
    )


def _valid_results(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("items"), list)
        and isinstance(value.get("pairs"), list)
        and isinstance(value.get("judge"), dict)
    )


@contextlib.contextmanager
def _timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    """Add the block's wall time to ``timings[phase]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = timings.get(phase, 0.0) + time.perf_counter() - t0


def _add(timings: dict[str, float], more: dict[str, float]) -> None:
    """Add each of ``more``'s figures to the one of ``timings`` by its name: the writer's
    forward passes and the test's own model's go into the same ``forward_*``."""
    for name, value in more.items():
        timings[name] = timings.get(name, 0.0) + value


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


# --------------------------------------------------------------------------------------------
# The figures, as the catalogue declares them
# --------------------------------------------------------------------------------------------


def observe(records: Mapping[str, Sequence[parts.R]]) -> dict[str, list[parts.R]]:
    """The records of each level with each computed metric's observation (a plugin's
    ``Metric.compute``, given the typed record) as its field: new records, made after the
    cache, so that the cached records stay the evaluation's own. A field the record has
    already, or an observation that is not a finite number or None, is a failure naming the
    metric."""
    out = {}
    for level, found in records.items():
        for metric in catalogue.computed(level):
            for record in found:
                if record.has(metric.field):
                    raise PrefalignError(
                        f"metric {metric.name!r} computes the field {metric.field!r}, which "
                        "the evaluation writes: name a field of its own"
                    )
            found = [r.with_value(metric.field, _observation(metric, r)) for r in found]
        out[level] = list(found)
    return out


def _observation(metric: catalogue.Metric, record: parts.Record) -> float | None:
    assert metric.compute is not None
    value = metric.compute(record)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PrefalignError(
            f"metric {metric.name!r}: compute returned {value!r} for the record of user "
            f"{record.user!r}; expected a finite number or None"
        )
    return float(value)


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
