"""The policy score of ``args`` (docs/metrics.md): ``S_u(y|x)`` teacher-forces ``y``; at step
``t`` the candidate set ``C_t`` is the base model's top-k plus the true token ``y_t``, each scored
``logit_base(c) + w * r_u(x, y_<t + c)`` and log-softmaxed over ``C_t``.

With a hidden-state reward (``"hidden"``) all positions of a batch of responses take two passes
on top of a shared prompt prefill: one plain pass (base logits, hence ``C_t``, and the true
tokens' rewards), one pass with every candidate of every ``t`` as an extra query token at
``t``'s position id that sees the prompt and ``y_<t`` only (``KV.queries``). Those passes do not
depend on the reward head, so they are kept per (suite, size) (``PASSES``) and every other
hidden-state head only applies itself to them. Otherwise the candidates' rewards come from
``prefix_rewards`` over their texts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from prefalign_methods.decoders.args_rule import (
    hidden_rewards,
    text_rewards,
    top_candidates,
    uses_hidden,
)
from pytest_prefalign import events
from pytest_prefalign.api import Batch, RewardMethod, capable
from pytest_prefalign.cache import Lru, Slot
from pytest_prefalign.runtime.decoding import KV
from pytest_prefalign.runtime.lm import LM, chunks, length_batches, pad
from pytest_prefalign.runtime.window import read_rows

QUERY_BLOCK = 512  # most candidate query tokens per row in one teacher-forced pass


@dataclass
class ForcedBatch:
    """Responses teacher-forced on their prompts, after the plain pass.

    ``logits``: ``(B, T, V)`` base logits predicting ``y_t``; ``targets``: ``(B, T)`` the
    ``y_t`` (padding beyond each length); ``kv``: the rows' cache, prompt (left-padded) then
    response (right-padded), ``prompt_width`` columns of prompt; ``positions``: ``(B, T)``
    position id of each ``y_t``; ``hidden``: ``(B, T, H)`` the final hidden state after each
    ``y_t``.
    """

    logits: torch.Tensor
    targets: torch.Tensor
    lengths: list[int]
    kv: KV
    prompt_width: int
    positions: torch.Tensor
    hidden: torch.Tensor


@dataclass(frozen=True)
class ForcedTokens:
    """One response teacher-forced on its prompt: what the policy score under ARGS needs of it
    whatever the reward head, so that every hidden-state reward method of a (suite, size) reuses
    it. ``targets`` ``(T,)`` the ``y_t``; ``cands`` ``(T, k)`` the base top-k at each step;
    ``cand_logits`` ``(T, k)`` and ``true_logits`` ``(T,)`` their base logits and ``y_t``'s;
    ``cand_hidden`` ``(T, k, H)`` and ``true_hidden`` ``(T, H)`` the final hidden states after
    each candidate and after ``y_t``."""

    targets: torch.Tensor
    cands: torch.Tensor
    cand_logits: torch.Tensor
    true_logits: torch.Tensor
    cand_hidden: torch.Tensor
    true_hidden: torch.Tensor


PASSES_BUDGET_MB = 1024  # ARGS passes kept per (suite, size), in CPU memory


def passes_memo() -> Lru[Any, ForcedTokens]:
    """A memo of ``ForcedTokens`` with its byte budget."""
    return Lru(
        PASSES_BUDGET_MB * 2**20,
        lambda t: sum(
            x.numel() * x.element_size()
            for x in (
                t.targets,
                t.cands,
                t.cand_logits,
                t.true_logits,
                t.cand_hidden,
                t.true_hidden,
            )
        ),
    )


# the model's passes of the policy score under ARGS, by (prompt, response, k), per (suite, size)
PASSES = Slot("ARGS passes", passes_memo)


def args_token_logprobs(
    lm: LM,
    reward: RewardMethod,
    batch: Batch,
    *,
    k: int = 10,
    w: float = 1.0,
    batch_size: int = 16,
    memo: Lru[Any, ForcedTokens] | None = None,
) -> list[np.ndarray]:
    """``log p_ARGS(y_t | x, y_<t)`` over ``C_t`` for every response token (the final
    ``eos_id`` included), float64, one array per (user, prompt, response) of ``batch``.

    With a hidden-state reward the model's passes do not depend on the reward head: they are
    kept in ``memo`` (one per LM, e.g. per (suite, size)) by (prompt, response, k), and another
    head scoring the same responses only applies itself to them."""
    if batch_size < 1 or k < 1:
        raise ValueError("k and batch_size must be >= 1")
    prompts, responses = batch.prompts, batch.responses
    if uses_hidden(lm, reward, forced_columns(lm, prompts, responses, k)):
        tokens = forced_tokens(
            lm, prompts, responses, k, batch_size, passes_memo() if memo is None else memo
        )
        return guided_from_tokens(reward, batch.users, tokens, w, batch_size)
    # pairs that share a prompt share its prefill, so they go in the same batch
    order = sorted(range(len(prompts)), key=lambda n: (-len(prompts[n]), prompts[n]))
    results: list[np.ndarray] = [np.zeros(0)] * len(prompts)
    with events.step("ARGS policy", total=len(order), unit="responses") as progress:
        for positions in chunks(order, batch_size):
            part = batch.take(positions)
            with torch.inference_mode():
                forced = teacher_force(lm, list(part.prompts), list(part.responses))
                cands = top_candidates(forced.logits.flatten(0, 1), k).view(
                    *forced.targets.shape, -1
                )
                rewards, true = candidate_rewards_text(lm, reward, part, forced, cands)
                logp = guided_logprobs(forced, cands, rewards, true, w)
            for n, row, length in zip(positions, logp, forced.lengths, strict=True):
                results[n] = row[:length].double().cpu().numpy()
            progress.advance(len(positions))
    return results


def forced_columns(lm: LM, prompts: Sequence[str], responses: Sequence[str], k: int) -> int:
    """The fewest cache columns the fast path's passes need: the longest prompt, the longest
    response and one step's k candidate queries (a pass may take more steps where there is
    room: ``steps_per_pass``)."""
    longest = max((len(lm.response_ids(r)) for r in set(responses)), default=0)
    prompt = max((len(lm.prompt_ids(p)) for p in set(prompts)), default=0)
    return prompt + longest + k


def steps_per_pass(lm: LM, columns: int, k: int) -> int:
    """Steps whose candidates one pass of ``candidate_hidden`` runs on a cache of ``columns``
    columns: as many as ``QUERY_BLOCK`` allows and, on a model with sliding-window layers, as
    many as keep the cache within the window (at least one)."""
    steps = max(1, QUERY_BLOCK // k)
    room = lm.prefills.reach - columns
    return steps if math.isinf(room) else max(1, min(steps, int(room) // k))


def forced_tokens(
    lm: LM,
    prompts: Sequence[str],
    responses: Sequence[str],
    k: int,
    batch_size: int,
    memo: Lru[Any, ForcedTokens],
) -> list[ForcedTokens]:
    """``ForcedTokens`` of each (prompt, response), from ``memo`` or from two passes per batch
    (the plain one and the candidates' one), which are then kept in ``memo`` as its budget
    allows."""
    keys = [(p, r, k) for p, r in zip(prompts, responses, strict=True)]
    found: dict[Any, ForcedTokens] = {}
    for key in dict.fromkeys(keys):
        if (kept := memo.get(key)) is not None:
            found[key] = kept
    # by response length, longest first, cut where padding would cost more than another pass:
    # every step of every row takes k query tokens, padding steps too (the prompts' prefills
    # come from the LM's store, so a prompt in two batches is not run twice)
    missing = sorted({key for key in keys if key not in found})  # ties: by prompt, response
    lengths = [len(lm.response_ids(r)) for _, r, _ in missing]
    # within the model's bounds: each row holds its prompt and response, and its logits
    prompt_len = {p: len(lm.prompt_ids(p)) for p in dict.fromkeys(p for p, _, _ in missing)}
    most = read_rows(
        max(prompt_len.values(), default=1), max(lengths, default=1), batch_size, lm.bounds
    )
    with events.step("ARGS passes", total=len(missing), unit="responses") as progress:
        for indices in length_batches(lengths, most, lm.device, lm.bounds):
            batch = [missing[i] for i in indices]
            with torch.inference_mode():
                longest = max(lengths[i] for i in indices)
                prompt = max(prompt_len[p] for p, _, _ in batch)
                per_pass = steps_per_pass(lm, prompt + longest, k)
                forced = teacher_force(
                    lm,
                    [p for p, _, _ in batch],
                    [r for _, r, _ in batch],
                    queries=min(per_pass, longest) * k,
                )
                cands = top_candidates(forced.logits.flatten(0, 1), k).view(
                    *forced.targets.shape, -1
                )
                hidden = candidate_hidden(forced, cands, per_pass)
                true_logits = forced.logits.gather(-1, forced.targets[..., None])[..., 0]
                cand_logits = forced.logits.gather(-1, cands)
            # kept on the CPU (on a GPU they would hold device memory for the whole session)
            for b, (key, n) in enumerate(zip(batch, forced.lengths, strict=True)):
                found[key] = ForcedTokens(
                    *(
                        t[b, :n].cpu().clone()
                        for t in (
                            forced.targets,
                            cands,
                            cand_logits,
                            true_logits,
                            hidden,
                            forced.hidden,
                        )
                    )
                )
                memo.put(key, found[key])
            progress.advance(len(batch))
    return [found[key] for key in keys]


def guided_from_tokens(
    reward: RewardMethod,
    users: Sequence[str],
    tokens: list[ForcedTokens],
    w: float,
    batch_size: int,
) -> list[np.ndarray]:
    """The guided log-probabilities of each ``y_t`` over ``C_t`` under this reward head, a
    batch of responses at a time (padded to the longest; the padding is cut off after)."""
    out: list[np.ndarray] = []
    for start in range(0, len(tokens), batch_size):
        chunk = tokens[start : start + batch_size]
        who = list(users[start : start + batch_size])

        def stacked(field: str, chunk: list[ForcedTokens] = chunk) -> torch.Tensor:
            return torch.nn.utils.rnn.pad_sequence(
                [getattr(t, field) for t in chunk], batch_first=True
            )

        with torch.inference_mode():
            # hidden_rewards returns on the device of the states, here the CPU
            rewards = hidden_rewards(reward, who, stacked("cand_hidden"))
            true = hidden_rewards(reward, who, stacked("true_hidden"))
            logp = _guided(
                stacked("true_logits"),
                stacked("cand_logits"),
                stacked("cands"),
                stacked("targets"),
                rewards,
                true,
                w,
            )
        out += [
            row[: len(t.targets)].double().cpu().numpy() for row, t in zip(logp, chunk, strict=True)
        ]
    return out


def teacher_force(
    lm: LM, prompts: list[str], responses: list[str], *, queries: int = 0
) -> ForcedBatch:
    """Prefill each distinct prompt once, then run the responses on their prompts' rows: the
    base logits predicting every ``y_t`` and the hidden states after each. ``queries``: the
    most candidate query columns the caller will append to the cache at once."""
    unique = list(dict.fromkeys(prompts))
    answers = [lm.response_ids(r) for r in responses]
    then = max(map(len, answers), default=0) + queries
    kv = KV.start(lm, [lm.prompt_ids(p) for p in unique], then=then)
    kv.select([unique.index(p) for p in prompts])
    prompt_width, last, start = kv.mask.shape[1], kv.last, kv.positions
    ids, _ = pad(answers, lm.pad_id, left=False, device=lm.device)
    positions = start[:, None] + torch.arange(ids.shape[1], device=lm.device)
    hidden = kv.extend(answers)  # (B, T, H): row t has read y_t
    # y_0 is predicted at the prompt's last token, y_t at y_{t-1}
    predicting = torch.cat([last[:, None], hidden[:, :-1]], dim=1)
    return ForcedBatch(
        lm.logits_from_hidden(predicting),
        ids,
        [len(a) for a in answers],
        kv,
        prompt_width,
        positions,
        hidden,
    )


def candidate_hidden(
    forced: ForcedBatch, cands: torch.Tensor, per_pass: int | None = None
) -> torch.Tensor:
    """The final hidden states ``(B, T, k, H)`` after every candidate, in as few passes as
    ``QUERY_BLOCK`` (or ``per_pass`` steps a pass) allows: each candidate is a query token at
    ``y_t``'s position that sees the prompt and ``y_<t`` only."""
    steps, k = cands.shape[1:]
    if per_pass is None:  # steps per pass: bounds the mask and attention sizes
        per_pass = max(1, QUERY_BLOCK // k)
    values = [
        _candidate_pass(forced, cands[:, start : start + per_pass], start)
        for start in range(0, steps, per_pass)
    ]
    return torch.cat(values, dim=1)


def _candidate_pass(forced: ForcedBatch, cands: torch.Tensor, start: int) -> torch.Tensor:
    """Hidden states ``(B, n, k, H)`` after the candidates of steps ``start .. start + n``;
    their cache entries are cropped afterwards, so every pass sees the same cache."""
    rows, steps, k = cands.shape
    mask = forced.kv.mask
    device = cands.device
    # query (t, j) sees cached columns before y_t's column, where the row has real tokens
    before = (
        torch.arange(mask.shape[1], device=device)
        < forced.prompt_width + start + torch.arange(steps, device=device)[:, None]
    )  # (n, width)
    sees = (before[None] & mask.bool()[:, None, :]).repeat_interleave(k, dim=1)
    positions = forced.positions[:, start : start + steps].repeat_interleave(k, dim=1)
    hidden = forced.kv.queries(cands.flatten(1), positions, sees)
    forced.kv.drop_queries()
    return hidden.view(rows, steps, k, -1)


def candidate_rewards_text(
    lm: LM, reward: RewardMethod, batch: Batch, forced: ForcedBatch, cands: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The general path: candidates' rewards from ``prefix_rewards`` over their texts, the true
    tokens' from ``prefix_rewards`` over the responses themselves (exact, same tokens)."""
    rows, steps, k = cands.shape
    targets, cand_list = forced.targets.tolist(), cands.tolist()
    seqs, who, said = [], [], []
    for b, length in enumerate(forced.lengths):
        for t in range(length):
            for c in cand_list[b][t]:
                seqs.append(targets[b][:t] + [c])
                who.append(batch.users[b])
                said.append(batch.prompts[b])
    flat = iter(text_rewards(lm, reward, who, said, seqs).tolist())
    values = torch.zeros(rows, steps, k)
    for b, length in enumerate(forced.lengths):
        for t in range(length):
            values[b, t] = torch.tensor([next(flat) for _ in range(k)])
    head = capable(reward, "prefix")
    if head is None:
        raise ValueError(f"reward method {reward.name!r} does not declare 'prefix'")
    prefix = head.prefix_rewards(lm, batch)
    true = torch.zeros(rows, steps)
    for b, (v, n) in enumerate(zip(prefix, forced.lengths, strict=True)):
        true[b, :n] = torch.as_tensor(np.asarray(v, dtype=np.float64)[:n], dtype=torch.float32)
    return values.to(cands.device), true.to(cands.device)


def guided_logprobs(
    forced: ForcedBatch, cands: torch.Tensor, rewards: torch.Tensor, true: torch.Tensor, w: float
) -> torch.Tensor:
    """``(B, T)`` log-softmax over ``C_t`` = top-k plus ``y_t`` of the true token's score."""
    targets = forced.targets
    return _guided(
        forced.logits.gather(-1, targets[..., None])[..., 0],
        forced.logits.gather(-1, cands),
        cands,
        targets,
        rewards,
        true,
        w,
    )


def _guided(
    true_logits: torch.Tensor,
    cand_logits: torch.Tensor,
    cands: torch.Tensor,
    targets: torch.Tensor,
    rewards: torch.Tensor,
    true: torch.Tensor,
    w: float,
) -> torch.Tensor:
    """``logit + w * reward`` of ``y_t`` log-softmaxed over ``C_t``. The true token's score
    comes from the plain pass; where it is also among the top-k, that copy is left out so that
    ``C_t`` holds it once."""
    true_score = true_logits + w * true
    cand_score = cand_logits + w * rewards
    cand_score = cand_score.masked_fill(cands == targets[..., None], float("-inf"))
    total = torch.logsumexp(torch.cat([cand_score, true_score[..., None]], dim=-1), dim=-1)
    return true_score - total
