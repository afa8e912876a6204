"""The ARGS rule that every implementation shares (``args``, its policy score ``args_score``
and the references the tests and benchmarks measure against): the candidates, the winner, and
the two ways a reward method gives a candidate's reward.

Ties: candidates are the top-k by base logit (the lower id first among equal logits) and the
winner is the best score (the lower id among equal scores).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from pytest_prefalign.api import Batch, RewardMethod, capable
from pytest_prefalign.runtime.decoding import Finished

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runtime.lm import LM

__all__ = [
    "Finished",
    "eos_finished",
    "hidden_rewards",
    "pick",
    "text_rewards",
    "top_candidates",
    "uses_hidden",
]


def top_candidates(logits: torch.Tensor, k: int) -> torch.Tensor:
    """``(N, V)`` logits -> ``(N, k)`` ids of the k largest, ascending by id.

    Among equal logits at the k-th place the lower ids are taken; ``topk`` alone does not
    promise which, so rows with such a tie are redone with a stable sort.
    """
    k = min(k, logits.shape[-1])
    values, ids = logits.topk(k, dim=-1)
    tied = (logits >= values[:, -1:]).sum(-1) > k
    if tied.any():
        ids = ids.clone()
        ids[tied] = torch.sort(logits[tied], dim=-1, descending=True, stable=True).indices[:, :k]
    return ids.sort(dim=-1).values


def pick(scores: torch.Tensor) -> torch.Tensor:
    """Index of the best score per row; on exact ties the first, i.e. the lowest id, since
    candidates are in ascending id order."""
    return scores.argmax(dim=-1)


def eos_finished(lm: LM) -> Finished:
    """A response ends at a stop id (``eos_id`` among them)."""
    return lambda tokens: tokens[-1] in lm.stop_ids


def uses_hidden(lm: LM, reward: RewardMethod, columns: int) -> bool:
    """Whether the fast path applies: the reward reads the base model's hidden states, and
    every attention layer sees the whole of a cache of ``columns`` columns (full attention,
    or within a sliding window: ``LM.attends_whole``), as the candidate queries' mask needs."""
    return "hidden" in reward.capabilities and lm.attends_whole(columns)


def hidden_rewards(
    reward: RewardMethod, users: Sequence[str], hidden: torch.Tensor
) -> torch.Tensor:
    """``reward_from_hidden`` as float32 on the hidden states' device."""
    head = capable(reward, "hidden")
    if head is None:
        raise ValueError(f"reward method {reward.name!r} does not declare 'hidden'")
    return head.reward_from_hidden(list(users), hidden).to(hidden.device, torch.float32)


def text_rewards(
    lm: LM,
    reward: RewardMethod,
    users: Sequence[str],
    prompts: Sequence[str],
    seqs: Sequence[Sequence[int]],
) -> np.ndarray:
    """``r_u(x, seq)`` after the last token of each token sequence, from ``prefix_rewards``.

    The interface takes texts, so each sequence is decoded and the reward method tokenizes it
    again (the same tokens, except where the sequence is not the tokenizer's own split of its
    text). A sequence ending in ``eos_id`` is the response ``seq[:-1]`` complete: its last
    prefix reward; otherwise the prefix reward just before the appended ``eos_id``.
    """
    prefix = capable(reward, "prefix")
    if prefix is None:
        raise ValueError(f"reward method {reward.name!r} does not declare 'prefix'")
    texts, complete = [], []
    for seq in seqs:
        done = len(seq) > 0 and seq[-1] == lm.eos_id
        texts.append(lm.tokenizer.decode(list(seq[:-1] if done else seq)))
        complete.append(done)
    values = prefix.prefix_rewards(lm, Batch(users, prompts, texts))
    return np.array(
        [
            float(v[-1] if done or len(v) < 2 else v[-2])
            for v, done in zip(values, complete, strict=True)
        ]
    )
