"""Two slow reference implementations of ARGS generation, kept to test and to benchmark the fast
one in ``args`` against (not registered as decoders).

- ``full_recompute_generate``: what simple re-implementations do. At every step the base model
  runs over the whole sequence (no cache) for the next-token logits, and once more over
  ``prompt + y_<t + c`` for every candidate ``c`` to get its reward.
- ``per_candidate_cache_generate``: the strategy of the original ARGS code. One prompt at a time;
  the policy decodes with its own cache; the reward model keeps a separate cache per candidate:
  in the first step each candidate prefills the prompt (k prefills), afterwards each candidate
  steps one token on its own copy of the previous winner's cache.

Both use the candidate and tie rule of ``args`` (``top_candidates``, ``pick``), so on the same
inputs all three give the same tokens.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from prefalign_methods.decoders.args_rule import (
    Finished,
    eos_finished,
    hidden_rewards,
    pick,
    text_rewards,
    top_candidates,
)
from pytest_prefalign.api import RewardMethod
from pytest_prefalign.runtime.lm import LM
from pytest_prefalign.runtime.prefill import CACHE


@torch.inference_mode()
def full_recompute_generate(
    lm: LM,
    reward: RewardMethod,
    users: Sequence[str],
    prompts: Sequence[str],
    *,
    k: int = 10,
    w: float = 1.0,
    max_new_tokens: int = 24,
    finished: Finished | None = None,
) -> list[list[int]]:
    """ARGS tokens, every forward pass over the whole sequence. With a ``"hidden"`` reward the
    candidate's reward is read at its last position, else from ``prefix_rewards`` on its text."""
    finished = finished or eos_finished(lm)
    results = []
    for user, prompt in zip(users, prompts, strict=True):
        seq = lm.prompt_ids(prompt)
        tokens: list[int] = []
        for _ in range(max_new_tokens):
            logits = lm.logits_from_hidden(_full_pass(lm, seq + tokens)[:, -1])
            cands = top_candidates(logits, k)[0]
            rewards = torch.stack(
                [_full_reward(lm, reward, user, prompt, seq, tokens + [c]) for c in cands.tolist()]
            )
            win = pick(logits[0, cands] + w * rewards)
            tokens.append(int(cands[win]))
            if finished(tokens):
                break
        results.append(tokens)
    return results


def _full_pass(lm: LM, ids: list[int]) -> torch.Tensor:
    """Final hidden states ``(1, L, H)`` of one sequence, no cache."""
    out = lm.model.base_model(input_ids=torch.tensor([ids], device=lm.device), use_cache=False)
    return out.last_hidden_state


def _full_reward(
    lm: LM, reward: RewardMethod, user: str, prompt: str, seq: list[int], response: list[int]
) -> torch.Tensor:
    """``r_u(x, response)`` for one candidate continuation, as a 0-d float32 tensor."""
    if "hidden" in reward.capabilities:
        return hidden_rewards(reward, [user], _full_pass(lm, seq + response)[:, -1])[0]
    return torch.tensor(
        text_rewards(lm, reward, [user], [prompt], [response])[0], dtype=torch.float32
    )


@torch.inference_mode()
def per_candidate_cache_generate(
    lm: LM,
    reward: RewardMethod,
    users: Sequence[str],
    prompts: Sequence[str],
    *,
    k: int = 10,
    w: float = 1.0,
    max_new_tokens: int = 24,
    finished: Finished | None = None,
) -> list[list[int]]:
    """ARGS tokens the way the original code computes them (needs a ``"hidden"`` reward: the
    reward model is the base model with the reward head, run with its own caches)."""
    if "hidden" not in reward.capabilities:
        raise ValueError(
            f"per_candidate_cache_generate needs a reward method with 'hidden'; "
            f"{reward.name!r} declares {sorted(reward.capabilities)}"
        )
    finished = finished or eos_finished(lm)
    return [
        _one_prompt(lm, reward, user, lm.prompt_ids(prompt), k, w, max_new_tokens, finished)
        for user, prompt in zip(users, prompts, strict=True)
    ]


def _one_prompt(
    lm: LM,
    reward: RewardMethod,
    user: str,
    seq: list[int],
    k: int,
    w: float,
    max_new_tokens: int,
    finished: Finished,
) -> list[int]:
    """One prompt: the policy's cache plus, per candidate, the reward model's own cache."""
    policy = lm.model.base_model(input_ids=torch.tensor([seq], device=lm.device), use_cache=True)
    policy_cache, logits = (
        getattr(policy, CACHE),
        lm.logits_from_hidden(policy.last_hidden_state[:, -1]),
    )
    rm_cache: Any = None  # the reward model's cache after the previous winner
    tokens: list[int] = []
    for _ in range(max_new_tokens):
        cands = top_candidates(logits, k)[0].tolist()
        scored = [_candidate(lm, reward, user, seq, rm_cache, c) for c in cands]
        rewards = torch.stack([r for r, _ in scored])
        win = int(pick(logits[0, cands] + w * rewards))
        tokens.append(cands[win])
        if finished(tokens):
            break
        rm_cache = scored[win][1]
        step = lm.model.base_model(
            input_ids=torch.tensor([[cands[win]]], device=lm.device),
            use_cache=True,
            **{CACHE: policy_cache},
        )
        logits = lm.logits_from_hidden(step.last_hidden_state[:, -1])
    return tokens


def _candidate(
    lm: LM, reward: RewardMethod, user: str, seq: list[int], rm_cache: Any, token: int
) -> tuple[torch.Tensor, Any]:
    """The reward of one candidate and the reward model's cache after it: the prompt prefilled
    with the candidate (first step), else one step on a copy of the winner's cache."""
    if rm_cache is None:
        out = lm.model.base_model(
            input_ids=torch.tensor([seq + [token]], device=lm.device), use_cache=True
        )
    else:
        out = lm.model.base_model(
            input_ids=torch.tensor([[token]], device=lm.device),
            use_cache=True,
            **{CACHE: copy.deepcopy(rm_cache)},
        )
    return hidden_rewards(reward, [user], out.last_hidden_state[:, -1])[0], getattr(out, CACHE)
