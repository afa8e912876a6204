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

The policy score is in ``args_score``, the rule both share in ``args_rule``; decoding itself is the
LM's (``pytest_prefalign.runtime.decoding``): ARGS is a ``Rule`` there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from prefalign_methods.decoders.args_rule import (
    Finished,
    eos_finished,
    hidden_rewards,
    pick,
    text_rewards,
    top_candidates,
    uses_hidden,
)
from prefalign_methods.decoders.args_score import PASSES, args_token_logprobs
from prefalign_methods.decoders.base import reductions
from pytest_prefalign import events
from pytest_prefalign.api import CaseContext, DecodeOptions, Decoder, Item, RewardMethod
from pytest_prefalign.runtime.decoding import KV, Choice, Step, decode
from pytest_prefalign.runtime.lm import LM, chunks, clean_text
from pytest_prefalign.runtime.window import rows_for

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.registry import Registry


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

    def generate(self, ctx: CaseContext, items: Sequence[Item]) -> list[str]:
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

    def logliks(
        self,
        ctx: CaseContext,
        users: Sequence[str],
        prompts: Sequence[str],
        responses: Sequence[str],
    ) -> dict[str, np.ndarray]:
        opts = ctx.options
        # the model's passes are the same for every hidden-state reward head of this
        # (suite, size): kept in the case's shared state, each head only applies itself
        per_token = args_token_logprobs(
            ctx.lm,
            require_reward(ctx),
            users,
            prompts,
            responses,
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


# -------------------------------------------------------------------------------------------
# Generation
# -------------------------------------------------------------------------------------------


def args_generate(
    lm: LM,
    reward: RewardMethod,
    users: Sequence[str],
    prompts: Sequence[str],
    *,
    k: int = 10,
    w: float = 1.0,
    max_new_tokens: int = 24,
    batch_size: int = 16,
    finished: Finished | None = None,
) -> list[list[int]]:
    """ARGS token ids for each (user, prompt), stop token included where one was reached.

    ``finished`` defaults to stopping at a stop id; rows that finish leave the batch.
    """
    if len(users) != len(prompts):
        raise ValueError(f"{len(users)} users but {len(prompts)} prompts")
    if max_new_tokens < 1 or batch_size < 1 or k < 1:
        raise ValueError("k, max_new_tokens and batch_size must be >= 1")
    finished = finished or eos_finished(lm)
    # the same request gives the same tokens: each distinct one is decoded once
    unique = list(dict.fromkeys(zip(users, prompts, strict=True)))
    encoded = [lm.prompt_ids(p) for _, p in unique]
    fast = uses_hidden(lm, reward)
    out: dict[tuple[str, str], list[int]] = {}
    order = sorted(range(len(unique)), key=lambda i: -len(encoded[i]))
    # a pass: each row's prompt, what it generated and its k candidates, within the bound
    width = max((len(e) for e in encoded), default=1) + max_new_tokens + k
    with events.step("ARGS", total=len(unique), unit="prompts") as progress:
        for batch in chunks(order, rows_for(width, batch_size)):
            batch_users = [unique[i][0] for i in batch]
            rule = (
                HiddenRule(lm, reward, batch_users, k, w)
                if fast
                else PrefixRule(lm, reward, batch_users, [unique[i][1] for i in batch], k, w)
            )
            kv = KV.start(lm, [encoded[i] for i in batch])
            tokens = decode(kv, rule, max_new_tokens, finished)
            out.update(zip((unique[i] for i in batch), tokens, strict=True))
            progress.advance(len(batch))
    return [list(out[(u, p)]) for u, p in zip(users, prompts, strict=True)]


class HiddenRule:
    """The fast path: the k candidates of each row run as k queries at the row's next position
    (``KV.candidates``); their hidden states give their rewards, and the winner's hidden state,
    kept in the cache as the row's next token, gives the next step's logits."""

    def __init__(self, lm: LM, reward: RewardMethod, users: list[str], k: int, w: float) -> None:
        self.lm, self.reward, self.users, self.k, self.w = lm, reward, users, k, w

    def choose(self, step: Step) -> Choice:
        logits = self.lm.logits_from_hidden(step.hidden)
        cands = top_candidates(logits, self.k)
        hidden = step.kv.candidates(cands)
        rewards = hidden_rewards(self.reward, [self.users[r] for r in step.active], hidden)
        win = pick(logits.gather(1, cands) + self.w * rewards)
        return Choice(cands.gather(1, win[:, None])[:, 0].tolist(), query=win)


class PrefixRule:
    """The general path: the candidates' rewards come from ``prefix_rewards`` over their texts,
    batched over candidates; the winner is then run as the next token."""

    def __init__(
        self, lm: LM, reward: RewardMethod, users: list[str], prompts: list[str], k: int, w: float
    ) -> None:
        self.lm, self.reward, self.k, self.w = lm, reward, k, w
        self.users, self.prompts = users, prompts

    def choose(self, step: Step) -> Choice:
        logits = self.lm.logits_from_hidden(step.hidden)
        cands = top_candidates(logits, self.k)
        rows, k = step.active, cands.shape[1]
        seqs = [
            step.tokens[r] + [c] for r, row in zip(rows, cands.tolist(), strict=True) for c in row
        ]
        values = text_rewards(
            self.lm,
            self.reward,
            [self.users[r] for r in rows for _ in range(k)],
            [self.prompts[r] for r in rows for _ in range(k)],
            seqs,
        )
        rewards = torch.tensor(values, dtype=torch.float32, device=cands.device).view(-1, k)
        win = pick(logits.gather(1, cands) + self.w * rewards)
        return Choice(cands.gather(1, win[:, None])[:, 0].tolist())


def pytest_prefalign_register(registry: Registry) -> None:
    registry.add_decoder("args", ArgsDecoder)
