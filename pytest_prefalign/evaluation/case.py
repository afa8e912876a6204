"""Running one (method, suite, size): generation, ROUGE, RM accuracy and policy accuracy.

Imported lazily by the test items (it pulls in torch through the LM). Everything that several
methods of one (suite, size) share is computed once and kept in the session's state: the suite's
data and pairs, the model, the fitted reward methods, the base log-likelihoods.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pytest

from pytest_prefalign import cache
from pytest_prefalign.analysis import metrics
from pytest_prefalign.api import CaseContext, DataError, DataNotFound, Pair, RewardMethod
from pytest_prefalign.evaluation.guard import GuardedReward
from pytest_prefalign.plumbing.collect import PrefalignError
from pytest_prefalign.registry import MethodName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import Decoder, Suite, SuiteData
    from pytest_prefalign.plumbing.collect import CaseItem
    from pytest_prefalign.plumbing.options import Floor
    from pytest_prefalign.plumbing.session import PrefalignSession

@dataclass
class SuiteState:
    suite: Suite
    data: SuiteData
    data_dir: Path | None
    uses: list[cache.Use]  # cached values its loading used (generated negatives)


@dataclass
class FittedReward:
    """A reward method fitted for one (suite, size): guarded, with its cache key and the cached
    values its fitting used."""

    reward: RewardMethod  # a GuardedReward, which answers as the method it wraps
    key: cache.Key
    uses: list[cache.Use]


def run_case(session: PrefalignSession, item: CaseItem) -> dict[str, Any]:
    """Evaluate one test item; returns the result row with its per-pair and per-item records."""
    with cache.using(session.disk), cache.recording() as uses:
        result = _run_case(session, item, uses)
    return result


def _run_case(session: PrefalignSession, item: CaseItem, uses: list[cache.Use]
              ) -> dict[str, Any]:
    started = time.perf_counter()
    state = suite_state(session, item.suite, item.suite_options)
    lm = load_model(session, item.size)
    fitted = fitted_reward(session, item, state, lm)
    factory = session.registry.decoder(item.method.decoder).obj
    decoder: Decoder = factory()
    ctx = CaseContext(lm=lm, suite=state.suite, data=state.data,
                      reward=fitted.reward if fitted else None,
                      options=session.method_options.decoder_options(item.method.decoder, factory),
                      seed=session.settings.seed, reduce=session.settings.reduce,
                      shared=session.state.setdefault(
                          ("shared", item.suite, tuple(sorted(item.suite_options.items())),
                           item.size), {}))
    timings: dict[str, float] = {"setup_s": time.perf_counter() - started}
    result = Result(item, state, lm)
    outputs = evaluate_generation(session, ctx, item, result, fitted, timings)
    if outputs is not None and ctx.reward is not None:
        evaluate_win_rates(session, ctx, result, outputs, timings)
    evaluate_pairs(ctx, decoder, item, result, timings)
    timings["total_s"] = time.perf_counter() - started
    used = [*lm.cache_uses, *state.uses, *(fitted.uses if fitted else []), *uses]
    row = result.finish(timings, session.settings.seed, cache.unique(used))
    row["options"] = dataclasses.asdict(ctx.options)
    return row


def suite_state(session: PrefalignSession, name: str, options: dict[str, str]) -> SuiteState:
    key = ("suite", name, tuple(sorted(options.items())))
    if key not in session.state:
        with cache.recording() as uses:
            session.state[key] = _load_suite(session, name, options, uses)
    state = session.state[key]
    if isinstance(state, PrefalignError):  # a failed load fails every test of the suite
        raise state
    return state


def _load_suite(session: PrefalignSession, name: str, options: dict[str, str],
                uses: list[cache.Use]):
    suite = session.registry.suite(name)
    try:
        data_dir, missing = locate_data(session, suite, options)
        try:
            data = suite.load(data_dir, limit=session.settings.limit, options=options)
        except DataNotFound as exc:
            # a suite reading a Hugging Face cache names its own places; add ours to them
            raise DataNotFound(f"{exc}\n{missing}" if missing else str(exc)) from None
        if not data.train_pairs and not data.test_pairs:
            reference = load_model(session, "reference")
            folder, _ = session.disk.folder(cache.make_key("pairs", suite=name))
            suite.build_pairs(data, reference, folder)
            uses[:0] = reference.cache_uses
    except (DataNotFound, DataError) as exc:
        return PrefalignError(f"suite {name!r}: {exc}")
    return SuiteState(suite, data, data_dir, uses)


def locate_data(session: PrefalignSession, suite: Suite, options: dict[str, str]
                ) -> tuple[Path | None, str | None]:
    """The suite's own data folder, or None (with the places searched) for a suite that can do
    without one; raises DataNotFound for a suite that needs one."""
    from pytest_prefalign.datadir import find_data_dir, requires_data_dir

    settings = session.settings
    try:
        root = find_data_dir(suite.source, option=settings.data, ini=settings.data_ini,
                             rootdir=Path(session.config.rootpath))
    except DataNotFound as exc:
        if requires_data_dir(suite, options):
            raise
        return None, str(exc)
    return root / suite.source, None


def load_model(session: PrefalignSession, label: str):
    from pytest_prefalign.runtime.models import ModelUnavailable

    try:
        return session.models.reference() if label == "reference" else session.models.get(label)
    except ModelUnavailable as exc:
        if exc.skip:
            pytest.skip(f"model {label}: {exc}")
        raise PrefalignError(f"model {label}: {exc}") from None


def fitted_reward(session: PrefalignSession, item: CaseItem, state: SuiteState, lm
                  ) -> FittedReward | None:
    name = item.method.reward
    if name is None:
        return None
    key = ("reward", item.suite, tuple(sorted(item.suite_options.items())), item.size, name)
    if key not in session.state:
        with cache.recording() as uses:
            session.state[key] = _fit(session, name, state, lm, uses)
    fitted = session.state[key]
    if isinstance(fitted, PrefalignError):
        raise fitted
    return fitted


def _fit(session: PrefalignSession, name: str, state: SuiteState, lm, uses: list[cache.Use]
         ) -> FittedReward | PrefalignError:
    """Fit the reward method in a cache folder of its own key: everything its parameters
    depend on (its configuration and code, the model, the exact training pairs), so that a
    method keeping files there cannot be handed parameters trained on other data. Disabled
    cache: a fresh folder."""
    entry = session.registry.reward(name)
    try:
        reward: RewardMethod = session.method_options.reward(name, entry.obj)
        key = reward_key(reward, entry.obj, lm, state.data.train_pairs)
        folder, had_files = session.disk.folder(key, name)
        reward.fit(lm, state.data.train_pairs, folder)
    except Exception as exc:
        return PrefalignError(f"reward method {name!r} failed in fit: {type(exc).__name__}: {exc}")
    # a method that says whether it trained is believed; else files it found mean it loaded
    trained = getattr(reward, "trained", None)
    hit = had_files if not isinstance(trained, bool) else (had_files and not trained)
    uses.append(cache.Use(key, hit))
    return FittedReward(cast(RewardMethod, GuardedReward(reward, name)), key, uses)


def reward_key(reward: RewardMethod, factory: Any, lm, train_pairs: list[Pair]) -> cache.Key:
    """What a fitted reward method depends on."""
    return cache.make_key("rewards", method=reward.name, config=reward.fingerprint(),
                          code=cache.code_version(factory), model=lm.fingerprint,
                          train_pairs=cache.records_fingerprint(train_pairs))


class Result:
    """Accumulates one case's records and metrics."""

    def __init__(self, item: CaseItem, state: SuiteState, lm) -> None:
        self.item, self.state, self.lm = item, state, lm
        self.key = {"suite": item.suite, "method": str(item.method), "size": item.size}
        self.metrics: dict[str, float] = {}
        self.ci: dict[str, list[float]] = {}
        self.per_user: dict[str, dict[str, float]] = {}
        self.items: list[dict[str, Any]] = []
        self.pairs: list[dict[str, Any]] = []
        self.judge: dict[str, Any] = {}

    def add(self, name: str, value: float, ci: tuple[float, float], per_user: dict[str, float]
            ) -> None:
        self.metrics[name] = float(value)
        self.ci[name] = [float(ci[0]), float(ci[1])]
        self.per_user[name] = {u: float(v) for u, v in per_user.items()}

    def finish(self, timings: dict[str, float], seed: int, uses: list[cache.Use]
               ) -> dict[str, Any]:
        data = self.state.data
        users = {r["user"] for r in self.items} | {r["user"] for r in self.pairs}
        return {
            **self.key,
            "decoder": self.item.method.decoder,
            "reward": self.item.method.reward,
            "n_users": len(users),
            "n_items": len(self.items),
            "n_pairs": len(self.pairs),
            "metrics": self.metrics,
            "ci": self.ci,
            "per_user": self.per_user,
            "judge": self.judge,
            "timings": {k: round(v, 3) for k, v in timings.items()},
            "model": {"name": self.lm.name, "fingerprint": self.lm.fingerprint},
            "data": {"source": data.source, "dropped": data.dropped,
                     "provenance": data.provenance},
            "cache": [use.to_json() for use in uses],
            "records": {"items": self.items, "pairs": self.pairs},
        }


def evaluate_generation(session: PrefalignSession, ctx: CaseContext, item: CaseItem,
                        result: Result, fitted: FittedReward | None,
                        timings: dict[str, float]) -> list[str] | None:
    items = ctx.data.items
    if not items:
        return None
    t0 = time.perf_counter()
    outputs = cached_generate(session, ctx, item.method, fitted.key if fitted else None)
    timings["generate_s"] = time.perf_counter() - t0
    refs = [it.reference for it in items]
    with_ref = [i for i, r in enumerate(refs) if r is not None]
    ref_texts = [r for r in refs if r is not None]
    r1 = np.full(len(items), np.nan)
    rl = np.full(len(items), np.nan)
    if with_ref:
        a, b = metrics.rouge([outputs[i] for i in with_ref], ref_texts)
        r1[with_ref], rl[with_ref] = a, b
        users = [items[i].user for i in with_ref]
        for name, values in (("rouge1", r1[with_ref]), ("rougeL", rl[with_ref])):
            result.add(name, float(np.mean(values)),
                       metrics.bootstrap_ci(values, users, statistic="micro", seed=0),
                       metrics.per_user_mean(values, users))
    for i, it in enumerate(items):
        result.items.append({**result.key, "item_id": it.item_id, "user": it.user,
                             "output": outputs[i], "reference": it.reference,
                             "rouge1": _num(r1[i]), "rougeL": _num(rl[i])})
    return outputs


def cached_generate(session: PrefalignSession, ctx: CaseContext, method: MethodName,
                    reward: cache.Key | None) -> list[str]:
    """The method's outputs for the suite's items, from the cache or generated (and kept in
    the (suite, size)'s shared state: the win rates compare with base's)."""
    memo = ctx.shared.setdefault("outputs", {})
    if str(method) not in memo:
        factory = session.registry.decoder(method.decoder).obj
        key = generation_key(ctx, method, factory, reward)
        items = ctx.data.items
        with cache.recording() as uses:
            outputs = session.disk.json(
                key, lambda: checked_outputs(factory().generate(ctx, items), method, len(items)),
                valid=lambda cached: isinstance(cached, list) and len(cached) == len(items))
        memo[str(method)] = outputs, uses[-1]
    outputs, use = memo[str(method)]
    cache.note(use.key, use.hit)  # listed by every test that uses them, as they were got
    return outputs


def generation_key(ctx: CaseContext, method: MethodName, factory: Any,
                   reward: cache.Key | None) -> cache.Key:
    """What generations depend on: the decoder's code, options and seed, the model, the fitted
    reward method's key (its training data included), the suite's code (it writes the prompts
    and the in-context examples) and the exact items and profiles."""
    data = ctx.data
    return cache.make_key(
        "generations", method=str(method), decoder=cache.code_version(factory),
        options=dataclasses.asdict(ctx.options), seed=ctx.seed, model=ctx.lm.fingerprint,
        reward=reward.digest if reward is not None else None,
        suite=f"{data.suite}@{cache.code_version(ctx.suite)}",
        items=cache.records_fingerprint(data.items),
        profiles=cache.profiles_fingerprint(data.profiles))


def checked_outputs(outputs: Any, method: MethodName, n: int) -> list[str]:
    outputs = list(outputs)
    if len(outputs) != n or not all(isinstance(o, str) for o in outputs):
        raise PrefalignError(f"decoder {method.decoder!r} returned {len(outputs)} outputs "
                             f"for {n} items (expected one string per item)")
    return outputs


def base_outputs(session: PrefalignSession, ctx: CaseContext) -> list[str]:
    """The ``base`` decoder's outputs for this (suite, size)."""
    factory = session.registry.decoder("base").obj
    options = session.method_options.decoder_options("base", factory)
    return cached_generate(session, dataclasses.replace(ctx, reward=None, options=options),
                           MethodName("base", None), None)


def evaluate_win_rates(session: PrefalignSession, ctx: CaseContext, result: Result,
                       outputs: list[str], timings: dict[str, float]) -> None:
    """Win rates against ``base`` under the method's own RM (circular) and an independent one."""
    from prefalign_methods.rewards import judge

    t0 = time.perf_counter()
    wins = judge.win_rates(ctx, ctx.data.items, outputs, base_outputs(session, ctx))
    users = [it.user for it in ctx.data.items]
    for name, key in (("win_self", "outcomes_self"), ("win_independent", "outcomes_independent")):
        if wins[key] is not None:  # absent rather than None: check() wants numbers in [0, 1]
            values = np.asarray(wins[key], dtype=np.float64)
            result.add(name, float(values.mean()),
                       metrics.bootstrap_ci(values, users, statistic="micro", seed=0),
                       metrics.per_user_mean(values, users))
    result.judge = {"n": wins["n"], "self": wins["judge_self"],
                    "independent": wins["judge_independent"],
                    "reason": wins["reason_independent"]}
    timings["judge_s"] = time.perf_counter() - t0


def evaluate_pairs(ctx: CaseContext, decoder: Decoder, item: CaseItem, result: Result,
                   timings: dict[str, float]) -> None:
    pairs = ctx.data.test_pairs
    if not pairs:
        return
    users = [p.user for p in pairs]
    prompts = [p.prompt for p in pairs]
    rm = None
    if ctx.reward is not None:
        t0 = time.perf_counter()
        rm = reward_scores(ctx, pairs)
        timings["rm_s"] = time.perf_counter() - t0
        _add_accuracy(result, "rm_acc", metrics.pair_outcomes(*rm), users)
    t0 = time.perf_counter()
    chosen = _checked(decoder.loglik(ctx, users, prompts, [p.chosen for p in pairs]),
                      len(pairs), f"decoder {item.method.decoder!r} loglik (chosen)", pairs)
    rejected = _checked(decoder.loglik(ctx, users, prompts, [p.rejected for p in pairs]),
                        len(pairs), f"decoder {item.method.decoder!r} loglik (rejected)", pairs)
    timings["policy_s"] = time.perf_counter() - t0
    policy = metrics.pair_outcomes(chosen, rejected)
    _add_accuracy(result, "policy_acc", policy, users)
    rm_out = metrics.pair_outcomes(*rm) if rm is not None else None
    for i, p in enumerate(pairs):
        result.pairs.append({
            **result.key, "pair_id": p.pair_id, "user": p.user,
            "rm_chosen": _num(rm[0][i]) if rm else None,
            "rm_rejected": _num(rm[1][i]) if rm else None,
            "rm_correct": _num(rm_out[i]) if rm_out is not None else None,
            "policy_chosen": _num(chosen[i]), "policy_rejected": _num(rejected[i]),
            "policy_correct": _num(policy[i]),
        })


def reward_scores(ctx: CaseContext, pairs: list[Pair]) -> tuple[np.ndarray, np.ndarray]:
    """``r_u(x, y_w)`` and ``r_u(x, y_l)``, scored in one call so that a method can share each
    prompt's prefill between the two sides of its pair (the guard checks what comes back)."""
    n = len(pairs)
    if ctx.reward is None:
        raise PrefalignError("RM accuracy needs a reward method")
    scores = ctx.reward.score(ctx.lm, [p.user for p in pairs] * 2, [p.prompt for p in pairs] * 2,
                              [p.chosen for p in pairs] + [p.rejected for p in pairs])
    return scores[:n], scores[n:]


def _checked(values: Any, n: int, what: str, pairs: list[Pair]) -> np.ndarray:
    """Scores from any method: one finite number per pair, or a failure saying what came."""
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise PrefalignError(f"{what} returned {type(values).__name__}, not numbers") from None
    if arr.shape[0] != n:
        raise PrefalignError(f"{what} returned {arr.shape[0]} scores, expected {n}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise PrefalignError(f"{what} returned {arr[i]} for pair {pairs[i].pair_id!r} "
                             f"({bad.size} non-finite of {n})")
    return arr


def _add_accuracy(result: Result, name: str, outcomes: np.ndarray, users: list[str]) -> None:
    acc = metrics.accuracy(outcomes, users)
    result.add(name, acc.macro, metrics.bootstrap_ci(outcomes, users, statistic="macro", seed=0),
               acc.per_user)
    result.metrics[f"{name}_micro"] = float(acc.micro)


def _num(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def check(result: dict[str, Any], floors: list[Floor]) -> list[str]:
    """What is wrong with a finished result: a metric missing, not finite or out of [0, 1], or
    below a floor the user set."""
    problems = []
    expected = []
    if result["n_items"] and any(r.get("reference") is not None
                                 for r in result["records"]["items"]):
        expected += ["rouge1", "rougeL"]
    if result["n_pairs"]:
        expected += ["policy_acc"] + (["rm_acc"] if result["reward"] else [])
    values = result["metrics"]
    for name in expected:
        if name not in values:
            problems.append(f"metric {name} is missing")
    for name, value in values.items():
        if not (isinstance(value, float) and math.isfinite(value)) or not 0.0 <= value <= 1.0:
            problems.append(f"metric {name} = {value!r} is not a number in [0, 1]")
    for floor in floors:
        value = values.get(floor.metric)
        if value is not None and value < floor.value:
            problems.append(f"{floor.metric} = {value:.4f} is below the floor {floor.value:g}")
    return problems
