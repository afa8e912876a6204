"""What the tests of one (suite, size) share, made once per run: the suite's data and pairs, the
model, and each reward method fitted on the suite's training pairs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from pytest_prefalign import cache, events, portable, storage, suite_options, versions
from pytest_prefalign.api import (
    DataError,
    DataNotFound,
    Pair,
    ProfileEntry,
    RewardMethod,
    declared,
    describe_fault,
)
from pytest_prefalign.errors import MethodFailure, PrefalignError, SuiteUnavailable
from pytest_prefalign.evaluation.guard import GuardedReward
from pytest_prefalign.evaluation.scale import RewardScale, StandardisedReward, cached_scale

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import Suite, SuiteData
    from pytest_prefalign.evaluation.context import RunContext
    from pytest_prefalign.runtime.lm import LM


@dataclass
class SuiteState:
    """A suite loaded for this run, with the cached values its loading used (negatives), the
    fingerprint of its data (``data_fingerprint``) and what building its pairs cost
    (``pairs_cost``: empty where the data came with its pairs)."""

    suite: Suite
    data: SuiteData
    data_dir: Path | None
    uses: list[cache.Use]
    fingerprint: dict[str, str]
    pairs_cost: dict[str, float] = field(default_factory=dict)


@dataclass
class FittedReward:
    """A reward method fitted for one (suite, size): guarded, with its cache key and the cached
    values its fitting used."""

    # a GuardedReward on its own scale (StandardisedReward), which answers as the method it wraps
    reward: RewardMethod
    key: cache.Key
    uses: list[cache.Use]
    fingerprint: str  # the method's fingerprint()
    package: str | None  # the distribution that provided it, and its version
    version: str | None
    scale: RewardScale  # its rewards standardised on its training responses (scale.py)


def load_suite(run: RunContext, name: str, options: dict[str, str]) -> SuiteState:
    """The suite's data and pairs; a failure is a ``PrefalignError`` naming the suite (raised
    for every test of the suite, without loading again)."""
    pairs_cost: dict[str, float] = {}
    with cache.recording() as uses, events.step(f"loading suite {name}"):
        suite = run.registry.suite(name)
        try:
            typed = suite_options.for_suite(suite, options)  # its dataclass, where it has one
            data_dir, missing = locate_data(run, suite, options)
            try:
                data = suite.load(data_dir, limit=run.limit, options=typed)
            except DataNotFound as exc:
                # a suite reading a Hugging Face cache names its own places; add ours to them
                raise DataNotFound(f"{exc}\n{missing}" if missing else str(exc)) from None
            if not (data.items or data.test_pairs or data.profiles):
                raise nothing_to_evaluate(name, data)  # nothing to build pairs from
            if not data.train_pairs and not data.test_pairs:
                pairs_cost = build_pairs(run, name, suite, data, uses)
            if not data.items and not data.test_pairs:
                raise nothing_to_evaluate(name, data)
        except (DataNotFound, DataError) as exc:
            fetch = f"prefalign data fetch {name}" if declared(suite, "fetcher") else None
            message = f"suite {name!r}: {exc}"
            if fetch and isinstance(exc, DataNotFound) and fetch not in message:
                message += f"\nFetch its data with: {fetch}"
            raise SuiteUnavailable(name, message, fetch) from None
    # the data's terms travel with every result to the run file and the report (CC BY asks
    # for the attribution wherever the data is used)
    data.provenance.setdefault("licence", suite.licence)
    attribution = declared(suite, "attribution")
    if attribution:
        data.provenance.setdefault("attribution", attribution)
    return SuiteState(suite, data, data_dir, uses, data_fingerprint(data), pairs_cost)


def build_pairs(
    run: RunContext, name: str, suite: Suite, data: SuiteData, uses: list[cache.Use]
) -> dict[str, float]:
    """Build the suite's pairs with its writer (``pairs_model``), in place, and return what it
    cost: ``pairs_s`` (the writer's loading and its writing), and the writer's forward passes
    (``forward_tokens``, ``forward_flops``, ``forward_s``, from its meter) with ``pairs_tokens``
    and ``pairs_flops``, the writer's share of them. The test that loaded the suite adds them
    to its timings, so that the run's forward FLOPs count the writer's passes like any other
    model's."""
    started = time.perf_counter()
    reference = pairs_model(run, suite, data)
    meter = getattr(reference, "meter", None)  # a stand-in model of a test may have none
    before = meter.reading() if meter is not None else None
    folder, _ = run.disk.folder(cache.make_key("pairs", suite=name))
    with events.step("building pairs"):
        suite.build_pairs(data, reference, folder)
    uses[:0] = reference.cache_uses
    cost = {"pairs_s": time.perf_counter() - started}
    if meter is not None and before is not None:
        passes = meter.since(before, meter.reading())
        cost.update(passes)
        cost.update(pairs_tokens=passes["forward_tokens"], pairs_flops=passes["forward_flops"])
    return cost


def nothing_to_evaluate(name: str, data: SuiteData) -> SuiteUnavailable:
    """The failure of a suite whose data left no item and no test pair: its source and what
    dropped its records and users (a floor or a gate would otherwise pass on no figure)."""
    dropped = ", ".join(f"{rule} {n}" for rule, n in sorted(data.dropped.items()) if n)
    first = f"\nfirst fault: {describe_fault(data.faults[0])}" if data.faults else ""
    return SuiteUnavailable(
        name,
        f"suite {name!r}: no user left to evaluate in {data.source} ({len(data.profiles)} "
        f"users, 0 items, 0 test pairs; dropped: {dropped or 'nothing'}){first}",
        None,
    )


def data_fingerprint(data: SuiteData) -> dict[str, str]:
    """What every figure of a (suite, size) was computed from, part by part, so that a gate
    can say which part of the data differs between two runs: the test pairs and items (every
    field, ids and texts), the training pairs and the profiles; ``all`` covers the four."""
    parts = {
        "test_pairs": cache.records_fingerprint(data.test_pairs),
        "items": cache.records_fingerprint(data.items),
        "train_pairs": cache.records_fingerprint(data.train_pairs),
        "profiles": cache.profiles_fingerprint(data.profiles),
    }
    return {"all": storage.content_key(sorted(parts.items())), **parts}


def environment(lm: LM) -> dict[str, Any]:
    """What the figures were computed with besides the model's weights: the versions of this
    plugin, Python, torch and transformers, the device, the dtype and the kernel of the linear
    layers (``runtime/packed.py``; recorded, not compared by the gate: like the CPU's
    instruction set, it moves figures by float rounding only)."""
    import platform

    versions_of = versions.library_versions("pytest-prefalign", "torch", "transformers")
    return {
        **versions_of,
        "python": platform.python_version(),
        "device": lm.device_type,
        "dtype": lm.dtype,
        "linear": getattr(lm, "linear_kernel", "dense"),
    }


def locate_data(
    run: RunContext, suite: Suite, options: dict[str, str]
) -> tuple[Path | None, str | None]:
    """The suite's own data folder, or None (with the places searched) for a suite that can do
    without one; raises DataNotFound for a suite that needs one."""
    from pytest_prefalign.api import requires_data_dir
    from pytest_prefalign.datadir import find_data_dir

    try:
        root = find_data_dir(
            suite.source,
            option=run.data,
            ini=run.data_ini,
            rootdir=run.rootdir,
            fetch=requires_data_dir(suite, options),
        )
    except DataNotFound as exc:
        if requires_data_dir(suite, options):
            raise
        return None, str(exc)
    return root / suite.source, None


def roots(run: RunContext, state: SuiteState) -> dict[str, Path]:
    """The roots a result's paths are written from (``portable.py``): the place that held the
    suite's data folder, the cache, the rootdir, the temporary and the home folder."""
    data = state.data_dir.parent if state.data_dir is not None else None
    return portable.machine_roots(data=data, rootdir=run.rootdir)


def load_model(run: RunContext, label: str) -> LM:
    """The LM of a size label (or the suites' reference generator), loaded when first used
    beyond its identity (``runtime/lazy.py``); an optional model that is not installed skips
    the test, any other missing model fails it with where it looked."""
    from pytest_prefalign.runtime.identity import ModelUnavailable

    try:
        return run.models.reference() if label == "reference" else run.models.lazy(label)
    except ModelUnavailable as exc:
        if exc.skip:
            pytest.skip(f"model {label}: {exc}")
        raise PrefalignError(f"model {label}: {exc}") from None


def pairs_model(run: RunContext, suite: Suite, data: SuiteData) -> LM:
    """The model a suite writes its pairs with: the one its ``writer(data)`` names (a model
    source, the same whatever size is evaluated), else the suites' reference generator."""
    writer = declared(suite, "writer")
    source = writer(data) if callable(writer) else None
    if not source:
        return load_model(run, "reference")
    from pytest_prefalign.runtime.models import ModelUnavailable

    try:
        return run.models.writer(source)
    except ModelUnavailable as exc:
        raise PrefalignError(f"the pairs' writer {source}: {exc}") from None


@dataclass
class RewardPlan:
    """A reward method configured for one (suite, size), not yet fitted: its cache key (what
    its parameters would depend on) and where it comes from. A rerun whose results are all in
    the cache never fits it."""

    name: str
    method: RewardMethod
    key: cache.Key
    package: str | None  # the distribution that provided it, and its version
    version: str | None

    @property
    def fingerprint(self) -> str:  # the method's fingerprint()
        return str(self.key.inputs["config"])


def plan_reward(run: RunContext, name: str, state: SuiteState, lm: LM) -> RewardPlan:
    """The reward method configured with its options, and its key."""
    entry = run.registry.reward(name)
    try:
        reward: RewardMethod = run.method_options.reward(name, entry.obj)
        profiles = state.data.profiles if declared(reward, "needs_profiles") else None
        key = reward_key(reward, entry.obj, lm, state.data.train_pairs, profiles)
    except Exception as exc:  # the method's own code: its traceback is shown below
        raise MethodFailure(
            f"reward method {name!r} failed in fit: {type(exc).__name__}: {exc}"
        ) from exc
    return RewardPlan(name, reward, key, entry.package, entry.version)


def fit_reward(run: RunContext, plan: RewardPlan, state: SuiteState, lm: LM) -> FittedReward:
    """Fit the reward method in a cache folder of its own key: everything its parameters
    depend on (its configuration and code, the model, the exact training pairs), so that a
    method keeping files there cannot be handed parameters trained on other data. Disabled
    cache: a fresh folder. The fitted method answers on its own scale: its rewards
    standardised on its training responses (``scale.py``)."""
    name, reward, key = plan.name, plan.method, plan.key
    with cache.recording() as uses, events.step(f"fitting {name}"):
        try:
            folder, had_files = run.disk.folder(key, name)
            if declared(
                reward, "needs_profiles"
            ):  # declared in api.RewardMethod; in the key (reward_key)
                reward.use_profiles(state.data.profiles)
            reward.fit(lm, state.data.train_pairs, folder)
        except Exception as exc:  # the method's own code: its traceback is shown below
            raise MethodFailure(
                f"reward method {name!r} failed in fit: {type(exc).__name__}: {exc}"
            ) from exc
    # a method that says whether it trained is believed; else files it found mean it loaded
    trained = declared(reward, "trained")
    hit = had_files if not isinstance(trained, bool) else (had_files and not trained)
    uses.append(cache.Use(key, hit))
    guarded = GuardedReward(reward, name, state.data, getattr(lm, "vocab_size", None))
    with cache.recording() as scaled:
        scale = cached_scale(run.disk, key, cast(RewardMethod, guarded), lm, state.data.train_pairs)
    uses.extend(scaled)
    standard = cast(RewardMethod, StandardisedReward(guarded, scale))
    return FittedReward(standard, key, uses, plan.fingerprint, plan.package, plan.version, scale)


def reward_key(
    reward: RewardMethod,
    factory: Any,
    lm: LM,
    train_pairs: list[Pair],
    profiles: dict[str, list[ProfileEntry]] | None = None,
) -> cache.Key:
    """What a fitted reward method depends on; ``profiles``: the users' profiles, for a method
    that reads them (``needs_profiles``)."""
    read = {} if profiles is None else {"profiles": cache.profiles_fingerprint(profiles)}
    return cache.make_key(
        "rewards",
        method=reward.name,
        config=reward.fingerprint(),
        code=versions.code_version(factory),
        model=lm.fingerprint,
        train_pairs=cache.records_fingerprint(train_pairs),
        **read,
    )
