"""ARGS's generation (see ``args`` for the method): each batch of prompts decoded by the LM's
one loop (``runtime/decoding.py``) with one of ARGS's two rules, ``HiddenRule`` (the reward
reads the candidates' hidden states: one pass per step) or ``PrefixRule`` (the reward reads
their texts). Imported when ``args`` generates, not when it is registered.
"""

from __future__ import annotations

from collections.abc import Sequence

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
from pytest_prefalign import events
from pytest_prefalign.api import RewardMethod
from pytest_prefalign.runtime.decoding import KV, Choice, Step, decode
from pytest_prefalign.runtime.lm import LM, chunks
from pytest_prefalign.runtime.window import rows_for


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
    """ARGS token ids for each (user, prompt), stop token included where one was reached
    (as many users as prompts: ``zip(strict=True)`` below raises otherwise).

    ``finished`` defaults to stopping at a stop id; rows that finish leave the batch.
    """
    if max_new_tokens < 1 or batch_size < 1 or k < 1:
        raise ValueError("k, max_new_tokens and batch_size must be >= 1")
    finished = finished or eos_finished(lm)
    # the same request gives the same tokens: each distinct one is decoded once
    unique = list(dict.fromkeys(zip(users, prompts, strict=True)))
    encoded = [lm.prompt_ids(p) for _, p in unique]
    out: dict[tuple[str, str], list[int]] = {}
    order = sorted(range(len(unique)), key=lambda i: -len(encoded[i]))
    # a pass: each row's prompt, what it generated and its k candidates, within the bound
    width = max((len(e) for e in encoded), default=1) + max_new_tokens + k
    fast = uses_hidden(lm, reward, width)
    with events.step("ARGS", total=len(unique), unit="prompts") as progress:
        for batch in chunks(order, rows_for(width, batch_size, lm.bounds)):
            batch_users = [unique[i][0] for i in batch]
            rule = (
                HiddenRule(lm, reward, batch_users, k, w)
                if fast
                else PrefixRule(lm, reward, batch_users, [unique[i][1] for i in batch], k, w)
            )
            kv = KV.start(lm, [encoded[i] for i in batch], then=max_new_tokens + k)
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
