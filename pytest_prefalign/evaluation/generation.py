"""Generation: a method's outputs for the suite's items (cached by content) and the item records:
ROUGE against the users' own text, whether each output is an answer at all
(``analysis/answers.py``) and its fluency under the base model (``fluency.py``)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_prefalign import cache, events, versions
from pytest_prefalign.analysis import answers, metrics
from pytest_prefalign.errors import PrefalignError
from pytest_prefalign.evaluation.fluency import fluency
from pytest_prefalign.registry import MethodName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import CaseContext
    from pytest_prefalign.evaluation.context import RunContext

# each method's outputs, and the cache use that got them, per (suite, size)
OUTPUTS = cache.Slot("outputs by method", dict[str, tuple[list[str], cache.Use]])


def cached_generate(
    run: RunContext,
    ctx: CaseContext,
    method: MethodName,
    reward: cache.Key | None,
    *,
    row: str | None = None,
) -> list[str]:
    """The method's outputs for the suite's items, from the cache or generated (and kept in
    the (suite, size)'s shared state under the test's ``row``, the method's name unless given:
    the win rates compare with base's; a test of the strength sweep keeps its own)."""
    memo = ctx.shared[OUTPUTS]
    row = str(method) if row is None else row
    if row not in memo:
        factory = run.registry.decoder(method.decoder).obj
        key = generation_key(ctx, method, factory, reward)
        items = ctx.data.items

        def generate() -> list[str]:
            with events.step(f"generating {method} ({len(items)} items)"):
                return checked_outputs(factory().generate(ctx, items), method, len(items))

        with cache.recording() as uses:
            outputs = run.disk.json(
                key,
                generate,
                valid=lambda cached: isinstance(cached, list) and len(cached) == len(items),
            )
        memo[row] = outputs, uses[-1]
    outputs, use = memo[row]
    cache.note(use.key, use.hit)  # listed by every test that uses them, as they were got
    return outputs


def generation_key(
    ctx: CaseContext, method: MethodName, factory: Any, reward: cache.Key | None
) -> cache.Key:
    """What generations depend on: the decoder's code, options and seed, the model, the fitted
    reward method's key (its training data included), the suite's code (it writes the prompts
    and the in-context examples) and the exact items and profiles."""
    data = ctx.data
    return cache.make_key(
        "generations",
        method=str(method),
        decoder=versions.code_version(factory),
        options=dataclasses.asdict(ctx.options),
        seed=ctx.seed,
        model=ctx.lm.fingerprint,
        reward=reward.digest if reward is not None else None,
        suite=f"{data.suite}@{versions.code_version(ctx.suite)}",
        items=cache.records_fingerprint(data.items),
        profiles=cache.profiles_fingerprint(data.profiles),
    )


def checked_outputs(outputs: Any, method: MethodName, n: int) -> list[str]:
    outputs = list(outputs)
    if len(outputs) != n or not all(isinstance(o, str) for o in outputs):
        raise PrefalignError(
            f"decoder {method.decoder!r} returned {len(outputs)} outputs "
            f"for {n} items (expected one string per item)"
        )
    return outputs


def base_outputs(run: RunContext, ctx: CaseContext) -> list[str]:
    """The ``base`` decoder's outputs for this (suite, size), generated with base's options."""
    factory = run.registry.decoder("base").obj
    options = run.method_options.decoder_options("base", factory)
    return cached_generate(
        run, dataclasses.replace(ctx, reward=None, options=options), MethodName("base", None), None
    )


def item_records(ctx: CaseContext, outputs: list[str], key: dict[str, str]) -> list[dict[str, Any]]:
    """One record per item: the output, the user's own text, ROUGE-1 / ROUGE-L against it
    (None where the suite has no reference), the output's ``fluency`` (the base model's mean
    negative log-likelihood per token given the item's plain prompt, the same scorer for every
    row), and ``not_answer`` (1.0 when the output breaks a rule of ``answers.RULES``, else 0.0)
    with ``not_answer_rule`` (the rule's name, or None)."""
    items = ctx.data.items
    with_ref = [i for i, it in enumerate(items) if it.reference is not None]
    r1 = np.full(len(items), np.nan)
    rl = np.full(len(items), np.nan)
    if with_ref:
        r1[with_ref], rl[with_ref] = metrics.rouge(
            [outputs[i] for i in with_ref], [items[i].reference or "" for i in with_ref]
        )
    rules = [
        answers.not_an_answer(out, input=it.input, prompt=it.prompt)
        for it, out in zip(items, outputs, strict=True)
    ]
    with events.step(f"fluency of {len(items)} outputs"):
        nll = fluency(ctx.lm, [it.prompt for it in items], outputs, ctx.options.batch_size)
    return [
        {
            **key,
            "item_id": it.item_id,
            "user": it.user,
            "digest": cache.records_fingerprint([it]),  # the item's texts: a gate checks them
            "output": outputs[i],
            "reference": it.reference,
            "rouge1": number(r1[i]),
            "rougeL": number(rl[i]),
            "fluency": number(nll[i]),
            "not_answer": float(rules[i] is not None),
            "not_answer_rule": rules[i],
        }
        for i, it in enumerate(items)
    ]


def number(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
