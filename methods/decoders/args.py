"""The ``args`` decoder: ARGS, greedy over the base model's top-k tokens, each candidate ``c``
rescored by ``logit_base(c) + w * r_u(x, y_<t + c)`` [k = 10, w = 1].

Two paths, the same tokens:

- fast (the reward method declares ``"hidden"``, i.e. it is a head on the base model's own final
  hidden states): one forward pass per step serves both the candidates' rewards and the policy's
  next-token logits. The prompts are prefilled once, left-padded, one cache row each; at each step
  the k candidates are fed as k query tokens at the same position id on that row, under a 4D mask
  that lets each see the cached prefix and itself only. Their hidden states give their rewards,
  and the winner's hidden state gives the next step's logits, so the winner's pass is reused:
  its KV entry is kept and the others are cropped.
- general (``"prefix"`` only): the prompts are prefilled once and decoded with a cache; the
  candidates' rewards come from ``prefix_rewards`` over their texts, batched over candidates.

The policy accuracy score ``S_u(y|x)`` (docs/metrics.md) teacher-forces ``y``: at step ``t`` the
candidate set ``C_t`` is the base top-k plus the true token ``y_t``, scored like above and
log-softmaxed over ``C_t``. With ``"hidden"`` all positions of a batch of responses take two
passes on top of a shared prompt prefill: one plain pass (base logits, hence ``C_t``, and the true
tokens' rewards), one pass with every candidate of every ``t`` as an extra query token at ``t``'s
position id that sees the prompt and ``y_<t`` only.

Generation is in ``args_decode``, the policy score in ``args_score``, the rule both share in
``args_rule``; decoding itself is the LM's (``pytest_prefalign.runtime.decoding``): ARGS is a
``Rule`` there. This module declares the decoder (its options, what it needs of a reward method)
without torch; the others are imported when it generates or scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prefalign_methods.decoders.base import reductions
from pytest_prefalign.api import Batch, CaseContext, DecodeOptions, Decoder, Item, RewardMethod

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


@dataclass(frozen=True)
class ArgsOptions(DecodeOptions):
    k: int = 10  # the base model's top-k candidates per step
    w: float = 1.0  # reward weight

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if not math.isfinite(self.w):
            raise ValueError(f"w must be a finite number, got {self.w}")


class ArgsDecoder(Decoder):
    """ARGS: reward-guided greedy decoding over the base model's top-k tokens."""

    name = "args"
    needs = frozenset({"score", "prefix"})
    order = 10  # position in the default method list: the first reward-guided decoder
    Options = ArgsOptions
    # w, chosen per (reward method, suite, size) on validation items (docs/metrics.md): the
    # rewards are standardised, so w = 1 weighs one standard deviation of reward as one nat
    strength = "w"
    strengths = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0)

    def generate(self, ctx: CaseContext, items: Sequence[Item]) -> list[str]:
        from prefalign_methods.decoders.args_decode import args_generate
        from pytest_prefalign.runtime.lm import clean_text

        opts, lm = ctx.options, ctx.lm
        tokens = args_generate(
            lm,
            require_reward(ctx),
            [it.user for it in items],
            [it.prompt for it in items],
            k=opts.k,
            w=opts.w,
            max_new_tokens=opts.max_new_tokens,
            batch_size=opts.batch_size,
            finished=lm.finished,
        )
        return [clean_text(lm.decode_response(t)) for t in tokens]

    def logliks(self, ctx: CaseContext, batch: Batch) -> dict[str, np.ndarray]:
        from prefalign_methods.decoders.args_score import PASSES, args_token_logprobs

        opts = ctx.options
        # the model's passes are the same for every hidden-state reward head of this
        # (suite, size): kept in the case's shared state, each head only applies itself
        per_token = args_token_logprobs(
            ctx.lm,
            require_reward(ctx),
            batch,
            k=opts.k,
            w=opts.w,
            batch_size=opts.batch_size,
            memo=ctx.shared[PASSES],
        )
        return reductions(per_token)


def require_reward(ctx: CaseContext) -> RewardMethod:
    """The reward method, which must give prefix rewards (or hidden-state rewards)."""
    reward = ctx.reward
    if reward is None:
        raise ValueError("the args decoder needs a reward method, e.g. args[global_bt]")
    if not {"prefix", "hidden"} & set(reward.capabilities):
        raise ValueError(
            f"the args decoder needs prefix rewards, and reward method "
            f"{reward.name!r} declares neither 'prefix' nor 'hidden'"
        )
    return reward
