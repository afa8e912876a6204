"""``genarm``: GenARM decoding, the base LM's next-token logits plus ``alpha`` times the
log-probabilities of an autoregressive reward model (ARM) for the user.

    guided(. | x, y_<t) = log_softmax(logits_base + alpha * log p_arm_u(. | x, y_<t))

Generation is greedy over the guided logits [default], or samples (option ``genarm_sample``)
from GenARM's decoding distribution at temperature ``T``: ``pi_base * p_arm^alpha``,
renormalised, with its logits divided by ``T``, i.e. ``softmax(guided / T)``, the distribution
whose log-likelihood policy accuracy scores (at ``T = 1``). The paper's "temperature
``T / (1 + alpha)``" is the same distribution: its reference code (model arithmetic) first
divides the mixture ``logits_base + alpha * logprobs_arm`` by the sum of its weights
``1 + alpha``; applying ``T / (1 + alpha)`` to the unnormalised mixture instead would sample
from ``softmax((1 + alpha) * guided / T)``, far sharper than either model. ``S_u(y|x)`` (policy
accuracy) is the teacher-forced log-likelihood under ``guided``, a log-softmax over the whole
vocabulary, summed (or averaged) over the response tokens, the final ``eos_id`` included.

Two ways to get the ARM's log-probabilities:

- fast (the reward declares ``"hidden_logprobs"``, e.g. ``arm``): the ARM is a head on the base
  LM's own hidden states, so one model and one KV cache serve both; each step is one forward
  pass of the base model.
- general (only ``"next_token"``, e.g. a separate third-party ARM): at each step the ARM is asked,
  through ``next_token_logprobs``, for its distribution after the text generated so far (the
  interface is text; it re-reads the whole prefix, so this path is slower). Where that text
  re-tokenizes to the generated tokens (always, for teacher-forced ``loglik``) the two paths
  agree.

This module declares the decoder (its options, what it needs of a reward method) without torch;
the guided distribution, its generation and its log-likelihood are in ``genarm_guided``,
imported when it generates or scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prefalign_methods.decoders.base import BaseDecoder, reductions
from pytest_prefalign.api import Batch, CaseContext, DecodeOptions, Item, RewardMethod

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


@dataclass(frozen=True)
class GenARMOptions(DecodeOptions):
    alpha: float = 1.0  # weight of the ARM's log-probabilities
    sample: bool = False  # sample from softmax(guided / temperature) instead of greedy
    temperature: float = 1.0  # T, used when sampling

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature}")


class GenARMDecoder(BaseDecoder):
    name = "genarm"
    needs = frozenset({"score", "next_token"})
    order = 20
    Options = GenARMOptions
    # alpha, chosen per (reward method, suite, size) on validation items (docs/metrics.md)
    strength = "alpha"
    strengths = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0)

    def generate(self, ctx: CaseContext, items: Sequence[Item]) -> list[str]:
        from prefalign_methods.decoders.genarm_guided import generate

        reward = _reward(ctx)
        users = [it.user for it in items]
        return generate(ctx, reward, users, self.prompts(ctx, users, [it.prompt for it in items]))

    def logliks(self, ctx: CaseContext, batch: Batch) -> dict[str, np.ndarray]:
        from prefalign_methods.decoders.genarm_guided import guided_logprobs

        shown = self.prompts(ctx, batch.users, batch.prompts)
        per_token = guided_logprobs(
            ctx.lm,
            _reward(ctx),
            ctx.options.alpha,
            Batch(batch.users, shown, batch.responses),
            batch_size=ctx.options.batch_size,
        )
        return reductions(per_token)


def _reward(ctx: CaseContext) -> RewardMethod:
    reward = ctx.reward
    if reward is None or "next_token" not in reward.capabilities:
        name = getattr(reward, "name", None)
        raise ValueError(
            f"genarm needs an autoregressive reward method (capability 'next_token'), got {name!r}"
        )
    return reward
