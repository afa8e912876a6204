"""The test pairs: each side scored by the reward method (RM accuracy) and by the decoder's
guided policy (policy accuracy), as per-pair records (docs/metrics.md)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_prefalign import cache
from pytest_prefalign.analysis import metrics
from pytest_prefalign.api import REDUCTIONS, Batch, declared, policy_scores
from pytest_prefalign.errors import PrefalignError
from pytest_prefalign.evaluation import guard
from pytest_prefalign.evaluation.generation import number

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import CaseContext, Decoder, Pair


def pair_records(
    ctx: CaseContext, decoder: Decoder, name: str, key: dict[str, str], timings: dict[str, float]
) -> list[dict[str, Any]]:
    """One record per test pair: the reward method's scores of both sides and whether it
    prefers the chosen one (``rm_correct``; None without a reward method), and the same for the
    decoder's policy score ``S_u(y|x)`` under the run's reduction (``policy_correct``; None for
    a decoder that is no policy), with the outcome under each reduction
    (``policy_correct_sum``, ``policy_correct_mean``). Ties count 1/2."""
    pairs = ctx.data.test_pairs
    if not pairs or (ctx.reward is None and not declared(decoder, "policy")):
        return []
    rm = None
    if ctx.reward is not None:
        t0 = time.perf_counter()
        rm = reward_scores(ctx, pairs)
        timings["rm_s"] = time.perf_counter() - t0
    policy: dict[str, Any] = {}
    if declared(decoder, "policy"):
        t0 = time.perf_counter()
        policy = policy_fields(ctx, decoder, name, pairs)
        timings["policy_s"] = time.perf_counter() - t0
        timings["policy_tokens"] = float(  # the responses' tokens scored, both sides
            sum(
                len(ctx.lm.response_ids(p.chosen)) + len(ctx.lm.response_ids(p.rejected))
                for p in pairs
            )
        )
    rm_out = metrics.pair_outcomes(*rm) if rm is not None else None

    def value(array: np.ndarray | None, i: int) -> float | None:
        return number(array[i]) if array is not None else None

    return [
        {
            **key,
            "pair_id": p.pair_id,
            "user": p.user,
            "digest": cache.records_fingerprint([p]),  # the pair's texts: a gate checks them
            "rm_chosen": value(rm and rm[0], i),
            "rm_rejected": value(rm and rm[1], i),
            "rm_correct": value(rm_out, i),
            **{field: value(policy.get(field), i) for field in POLICY_FIELDS},
        }
        for i, p in enumerate(pairs)
    ]


# the per-pair fields of the policy score: under the run's reduction, and each reduction's outcome
POLICY_FIELDS = (
    "policy_chosen",
    "policy_rejected",
    "policy_correct",
    *(f"policy_correct_{how}" for how in REDUCTIONS),
)


def policy_fields(
    ctx: CaseContext, decoder: Decoder, name: str, pairs: list[Pair]
) -> dict[str, np.ndarray]:
    """The ``POLICY_FIELDS`` of every pair: each distinct side scored once, under every reduction
    (``api.policy_scores``), the outcome under each, and the scores and the outcome under the
    run's reduction (``ctx.reduce``)."""
    n = len(pairs)
    distinct, where = (Batch.of_pairs(pairs, "chosen") + Batch.of_pairs(pairs, "rejected")).unique()
    scores = policy_scores(decoder, ctx, distinct)
    sides: dict[str, dict[str, np.ndarray]] = {"chosen": {}, "rejected": {}}
    for how in REDUCTIONS:
        got = reduced(scores, how, name)
        values = guard.numbers(got, len(distinct), f"decoder {name!r} loglik")[where]
        for side, part in (("chosen", slice(0, n)), ("rejected", slice(n, 2 * n))):
            what = f"decoder {name!r} loglik ({side})"
            sides[side][how] = guard.finite_array(values[part], n, what, for_pair(pairs))
    outcomes = {
        how: metrics.pair_outcomes(sides["chosen"][how], sides["rejected"][how])
        for how in REDUCTIONS
    }
    return {
        "policy_chosen": sides["chosen"][ctx.reduce],
        "policy_rejected": sides["rejected"][ctx.reduce],
        "policy_correct": outcomes[ctx.reduce],
        **{f"policy_correct_{how}": outcomes[how] for how in REDUCTIONS},
    }


def reduced(scores: Any, how: str, name: str) -> Any:
    """One reduction's scores from what a decoder's ``logliks`` returned, or a failure naming
    the reduction it lacks."""
    if not isinstance(scores, dict) or how not in scores:
        raise PrefalignError(
            f"decoder {name!r} logliks returned {type(scores).__name__} without {how!r} scores: "
            f"expected a dict with {', '.join(map(repr, REDUCTIONS))}"
        )
    return scores[how]


def reward_scores(ctx: CaseContext, pairs: list[Pair]) -> tuple[np.ndarray, np.ndarray]:
    """``r_u(x, y_w)`` and ``r_u(x, y_l)``, scored in one call so that a method can share each
    prompt's prefill between the two sides of its pair, each distinct side once (a matched
    design's pairs share sides; the guard checks what comes back)."""
    n = len(pairs)
    if ctx.reward is None:
        raise PrefalignError("RM accuracy needs a reward method")
    both = Batch.of_pairs(pairs, "chosen") + Batch.of_pairs(pairs, "rejected")
    distinct, where = both.unique()
    scores = np.asarray(ctx.reward.score(ctx.lm, distinct))[where]
    return scores[:n], scores[n:]


def for_pair(pairs: list[Pair]) -> guard.Where:
    """Names the pair a position of the scores is for."""
    return lambda i: f"for pair {pairs[i].pair_id!r}"
