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

The policy accuracy score ``S_u(y|x)`` (SPEC.md section 3) teacher-forces ``y``: at step ``t`` the
candidate set ``C_t`` is the base top-k plus the true token ``y_t``, scored like above and
log-softmaxed over ``C_t``. With ``"hidden"`` all positions of a batch of responses take two
passes on top of a shared prompt prefill: one plain pass (base logits, hence ``C_t``, and the true
tokens' rewards), one pass with every candidate of every ``t`` as an extra query token at ``t``'s
position id that sees the prompt and ``y_<t`` only.

Ties: candidates are the top-k by base logit (the lower id first among equal logits) and the
winner is the best score (the lower id among equal scores); ``args_reference`` shares the rule.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from prefalign_methods.decoders.base import reduce_logprobs
from pytest_prefalign.api import CaseContext, DecodeOptions, Decoder, Item, RewardMethod
from pytest_prefalign.runtime.lm import LM, chunks, clean_text, pad

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.registry import Registry

Finished = Callable[[list[int]], bool]  # does a generated token list end the response?
QUERY_BLOCK = 512  # most candidate query tokens per row in one teacher-forced pass
FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"  # read by transformers' SDPA attention at each call


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
        tokens = args_generate(lm, require_reward(ctx), [it.user for it in items],
                               [it.prompt for it in items], k=opts.k, w=opts.w,
                               max_new_tokens=opts.max_new_tokens,
                               batch_size=opts.batch_size, finished=lm.finished)
        return [clean_text(lm.decode_response(t)) for t in tokens]

    def loglik(self, ctx: CaseContext, users: Sequence[str], prompts: Sequence[str],
               responses: Sequence[str]) -> np.ndarray:
        opts = ctx.options
        # the model's passes are the same for every hidden-state reward head of this
        # (suite, size): kept in the case's shared state, each head only applies itself
        per_token = args_token_logprobs(ctx.lm, require_reward(ctx), users, prompts, responses,
                                        k=opts.k, w=opts.w, batch_size=opts.batch_size,
                                        memo=ctx.shared.setdefault("args_forced_tokens", {}))
        return reduce_logprobs(per_token, ctx.reduce)


def require_reward(ctx: CaseContext) -> RewardMethod:
    """The reward method, which must give prefix rewards (or hidden-state rewards)."""
    reward = ctx.reward
    if reward is None:
        raise ValueError("the args decoder needs a reward method, e.g. args[global_bt]")
    if not {"prefix", "hidden"} & set(reward.capabilities):
        raise ValueError(f"the args decoder needs prefix rewards, and reward method "
                         f"{reward.name!r} declares neither 'prefix' nor 'hidden'")
    return reward


# -------------------------------------------------------------------------------------------
# The rule all implementations share
# -------------------------------------------------------------------------------------------


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


def uses_hidden(lm: LM, reward: RewardMethod) -> bool:
    """Whether the fast path applies: the reward reads the base model's hidden states, and all
    attention layers are full (a sliding-window layer would need its own mask)."""
    if "hidden" not in reward.capabilities:
        return False
    config = lm.model.config
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return all(t == "full_attention" for t in layer_types)
    return getattr(config, "sliding_window", None) is None


def hidden_rewards(reward: Any, users: Sequence[str], hidden: torch.Tensor) -> torch.Tensor:
    """``reward_from_hidden`` as float32 on the hidden states' device."""
    return reward.reward_from_hidden(list(users), hidden).to(hidden.device, torch.float32)


def text_rewards(lm: LM, reward: RewardMethod, users: Sequence[str], prompts: Sequence[str],
                 seqs: Sequence[Sequence[int]]) -> np.ndarray:
    """``r_u(x, seq)`` after the last token of each token sequence, from ``prefix_rewards``.

    The interface takes texts, so each sequence is decoded and the reward method tokenizes it
    again (the same tokens, except where the sequence is not the tokenizer's own split of its
    text). A sequence ending in ``eos_id`` is the response ``seq[:-1]`` complete: its last
    prefix reward; otherwise the prefix reward just before the appended ``eos_id``.
    """
    texts, complete = [], []
    for seq in seqs:
        done = len(seq) > 0 and seq[-1] == lm.eos_id
        texts.append(lm.tokenizer.decode(list(seq[:-1] if done else seq)))
        complete.append(done)
    values = reward.prefix_rewards(lm, list(users), list(prompts), texts)  # type: ignore[attr-defined]
    return np.array([float(v[-1] if done or len(v) < 2 else v[-2])
                     for v, done in zip(values, complete, strict=True)])


# -------------------------------------------------------------------------------------------
# Generation
# -------------------------------------------------------------------------------------------


class Stepper(Protocol):
    """One batch of rows being decoded: gives candidate rewards, then moves to the winners."""

    logits: torch.Tensor  # (B, V) base logits for each active row's next token

    def rewards(self, cands: torch.Tensor) -> torch.Tensor:
        """``(B, k)`` candidate ids -> ``(B, k)`` rewards ``r_u(x, y_<t + c)``."""

    def keep(self, rows: list[int]) -> None:
        """Keep only these rows (the others finished)."""

    def advance(self, win: torch.Tensor) -> None:
        """Append each row's winning candidate (its index in ``cands``); refresh ``logits``."""


def args_generate(lm: LM, reward: RewardMethod, users: Sequence[str], prompts: Sequence[str], *,
                  k: int = 10, w: float = 1.0, max_new_tokens: int = 24, batch_size: int = 16,
                  finished: Finished | None = None) -> list[list[int]]:
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
    for batch in chunks(sorted(range(len(unique)), key=lambda i: -len(encoded[i])), batch_size):
        batch_users = [unique[i][0] for i in batch]
        seqs = [encoded[i] for i in batch]
        with torch.inference_mode():
            stepper: Stepper = (SharedPassStepper(lm, reward, batch_users, seqs) if fast else
                                PrefixStepper(lm, reward, batch_users,
                                              [unique[i][1] for i in batch], seqs))
            tokens = decode_loop(stepper, k, w, max_new_tokens, finished)
        out.update(zip((unique[i] for i in batch), tokens, strict=True))
    return [list(out[(u, p)]) for u, p in zip(users, prompts, strict=True)]


def decode_loop(stepper: Stepper, k: int, w: float, max_new_tokens: int,
                finished: Finished) -> list[list[int]]:
    """The ARGS loop over a batch: top-k, rescore, keep the best, drop finished rows."""
    tokens: list[list[int]] = [[] for _ in range(stepper.logits.shape[0])]
    active = list(range(len(tokens)))  # rows of ``tokens`` still in the batch
    for step in range(max_new_tokens):
        cands = top_candidates(stepper.logits, k)
        scores = stepper.logits.gather(1, cands) + w * stepper.rewards(cands)
        win = pick(scores)
        chosen = cands.gather(1, win[:, None])[:, 0].tolist()
        keep = []
        for j, (row, tok) in enumerate(zip(active, chosen, strict=True)):
            tokens[row].append(tok)
            if not finished(tokens[row]):
                keep.append(j)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(active):
            stepper.keep(keep)
            win, active = win[keep], [active[j] for j in keep]
        stepper.advance(win)
    return tokens


class SharedPassStepper:
    """The fast path: one cache row per prompt, k candidates as k queries at one position."""

    def __init__(self, lm: LM, reward: RewardMethod, users: list[str],
                 seqs: list[list[int]]) -> None:
        self.lm, self.reward, self.users = lm, reward, users
        state = lm.prefill(seqs, batch_size=len(seqs))
        self.cache, self.mask, last = state.cache, state.mask, state.last
        self.positions = self.mask.sum(-1)  # (B,) the next position id of each row
        self.logits = lm.logits_from_hidden(last)
        self.hidden: torch.Tensor | None = None  # (B, k, H) of the pending candidates

    def rewards(self, cands: torch.Tensor) -> torch.Tensor:
        rows, k = cands.shape
        out = query_block_pass(self.lm, input_ids=cands,
                               attention_mask=candidate_mask(self.mask, k),
                               position_ids=self.positions[:, None].expand(rows, k),
                               cache=self.cache)
        self.hidden = out.last_hidden_state
        return hidden_rewards(self.reward, self.users, self.hidden)

    def keep(self, rows: list[int]) -> None:
        index = torch.tensor(rows, device=self.mask.device)
        self.cache.batch_select_indices(index)
        self.mask, self.positions = self.mask[index], self.positions[index]
        self.users = [self.users[r] for r in rows]
        if self.hidden is not None:
            self.hidden = self.hidden[index]

    def advance(self, win: torch.Tensor) -> None:
        if self.hidden is None:
            raise RuntimeError("advance() before rewards()")
        rows = torch.arange(len(win), device=win.device)
        keep_candidate(self.cache, self.mask.shape[1], win, self.hidden.shape[1])
        self.logits = self.lm.logits_from_hidden(self.hidden[rows, win])
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        self.positions = self.positions + 1
        self.hidden = None


def candidate_mask(mask: torch.Tensor, k: int) -> torch.Tensor:
    """``(B, 1, k, L + k)`` boolean mask: each of k query tokens sees the row's real cached
    tokens and itself, not the other candidates."""
    rows, length = mask.shape
    past = mask.bool()[:, None, None, :].expand(rows, 1, k, length)
    own = torch.eye(k, dtype=torch.bool, device=mask.device).expand(rows, 1, k, k)
    return torch.cat([past, own], dim=-1)


def query_block_pass(lm: LM, **inputs: Any) -> Any:
    """The base model over a block of query tokens under a 4D mask, on top of a cache.

    With a mask, transformers' SDPA path copies every cached key and value once per query head
    of its group (grouped-query attention) at every layer and step, unless
    ``TRANSFORMERS_SDPA_FORCE_GQA`` is set; on the CPU, PyTorch's kernel takes grouped heads
    with a mask directly, which measured about a quarter off a step at ICL prompt lengths. On
    CUDA that switch would force the slow math kernel, so it is left alone there.
    """
    if lm.device.type != "cpu":
        return lm.model.base_model(**inputs, use_cache=True)
    before = os.environ.get(FORCE_GQA)
    os.environ[FORCE_GQA] = "1"
    try:
        return lm.model.base_model(**inputs, use_cache=True)
    finally:
        if before is None:
            del os.environ[FORCE_GQA]
        else:
            os.environ[FORCE_GQA] = before


def keep_candidate(cache: Any, length: int, win: torch.Tensor, k: int) -> None:
    """After k candidates were appended to a cache of ``length`` tokens, keep each row's
    winner: its key and value move to slot ``length`` and the rest is cropped."""
    rows = torch.arange(len(win), device=win.device)
    for layer in cache.layers:
        for name in ("keys", "values"):
            states = getattr(layer, name)  # (B, heads, length + k, head_dim)
            states[:, :, length] = states[rows, :, length + win]
    if k > 1:
        cache.crop(-(k - 1))


class PrefixStepper:
    """The general path: cached policy decoding, candidates scored with ``prefix_rewards``."""

    def __init__(self, lm: LM, reward: RewardMethod, users: list[str], prompts: list[str],
                 seqs: list[list[int]]) -> None:
        self.lm, self.reward, self.users, self.prompts = lm, reward, users, prompts
        state = lm.prefill(seqs, batch_size=len(seqs))
        self.cache, self.mask, last = state.cache, state.mask, state.last
        self.positions = self.mask.sum(-1)
        self.logits = lm.logits_from_hidden(last)
        self.generated: list[list[int]] = [[] for _ in seqs]
        self.cands: torch.Tensor | None = None

    def rewards(self, cands: torch.Tensor) -> torch.Tensor:
        self.cands = cands
        k = cands.shape[1]
        seqs = [gen + [c] for gen, row in zip(self.generated, cands.tolist(), strict=True)
                for c in row]
        values = text_rewards(self.lm, self.reward, [u for u in self.users for _ in range(k)],
                              [p for p in self.prompts for _ in range(k)], seqs)
        return torch.tensor(values, dtype=torch.float32, device=cands.device).view(-1, k)

    def keep(self, rows: list[int]) -> None:
        index = torch.tensor(rows, device=self.mask.device)
        self.cache.batch_select_indices(index)
        self.mask, self.positions = self.mask[index], self.positions[index]
        self.users = [self.users[r] for r in rows]
        self.prompts = [self.prompts[r] for r in rows]
        self.generated = [self.generated[r] for r in rows]
        if self.cands is not None:
            self.cands = self.cands[index]

    def advance(self, win: torch.Tensor) -> None:
        if self.cands is None:
            raise RuntimeError("advance() before rewards()")
        chosen = self.cands.gather(1, win[:, None])  # (B, 1)
        for gen, tok in zip(self.generated, chosen[:, 0].tolist(), strict=True):
            gen.append(tok)
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        out = self.lm.model.base_model(input_ids=chosen, attention_mask=self.mask,
                                       position_ids=self.positions[:, None], cache=self.cache,
                                       use_cache=True)
        self.logits = self.lm.logits_from_hidden(out.last_hidden_state[:, -1])
        self.positions = self.positions + 1
        self.cands = None


# -------------------------------------------------------------------------------------------
# Policy accuracy: the teacher-forced log-likelihood under ARGS
# -------------------------------------------------------------------------------------------


@dataclass
class ForcedBatch:
    """Responses teacher-forced on their prompts, after the plain pass.

    ``logits``: ``(B, T, V)`` base logits predicting ``y_t``; ``targets``: ``(B, T)`` the
    ``y_t`` (padding beyond each length); ``cache``/``mask``: prompt (left-padded) then
    response (right-padded), ``prompt_width`` columns of prompt; ``positions``: ``(B, T)``
    position id of each ``y_t``; ``hidden``: ``(B, T, H)`` the final hidden state after each
    ``y_t``.
    """

    logits: torch.Tensor
    targets: torch.Tensor
    lengths: list[int]
    cache: Any
    mask: torch.Tensor
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


def args_token_logprobs(lm: LM, reward: RewardMethod, users: Sequence[str],
                        prompts: Sequence[str], responses: Sequence[str], *, k: int = 10,
                        w: float = 1.0, batch_size: int = 16,
                        memo: dict[Any, ForcedTokens] | None = None) -> list[np.ndarray]:
    """``log p_ARGS(y_t | x, y_<t)`` over ``C_t`` for every response token (the final
    ``eos_id`` included), float64, one array per (user, prompt, response).

    With a hidden-state reward the model's passes do not depend on the reward head: they are
    kept in ``memo`` (one per LM, e.g. per (suite, size)) by (prompt, response, k), and another
    head scoring the same responses only applies itself to them."""
    if not len(users) == len(prompts) == len(responses):
        raise ValueError(f"{len(users)} users, {len(prompts)} prompts, {len(responses)} "
                         f"responses: expected as many of each")
    if batch_size < 1 or k < 1:
        raise ValueError("k and batch_size must be >= 1")
    if uses_hidden(lm, reward):
        tokens = forced_tokens(lm, prompts, responses, k, batch_size,
                               {} if memo is None else memo)
        return guided_from_tokens(reward, users, tokens, w, batch_size)
    # pairs that share a prompt share its prefill, so they go in the same batch
    order = sorted(range(len(prompts)), key=lambda n: (-len(prompts[n]), prompts[n]))
    results: list[np.ndarray] = [np.zeros(0)] * len(prompts)
    for batch in chunks(order, batch_size):
        with torch.inference_mode():
            forced = teacher_force(lm, [prompts[n] for n in batch],
                                   [responses[n] for n in batch])
            cands = top_candidates(forced.logits.flatten(0, 1), k).view(*forced.targets.shape, -1)
            rewards, true = candidate_rewards_text(
                lm, reward, [users[n] for n in batch], [prompts[n] for n in batch],
                [responses[n] for n in batch], forced, cands)
            logp = guided_logprobs(forced, cands, rewards, true, w)
        for n, row, length in zip(batch, logp, forced.lengths, strict=True):
            results[n] = row[:length].double().cpu().numpy()
    return results


def forced_tokens(lm: LM, prompts: Sequence[str], responses: Sequence[str], k: int,
                  batch_size: int, memo: dict[Any, ForcedTokens]) -> list[ForcedTokens]:
    """``ForcedTokens`` of each (prompt, response), from ``memo`` or from two passes per batch
    (the plain one and the candidates' one), which are then kept in ``memo``."""
    keys = [(p, r, k) for p, r in zip(prompts, responses, strict=True)]
    # pairs that share a prompt share its prefill, so they go in the same batch
    missing = sorted({key for key in keys if key not in memo},
                     key=lambda key: (-len(key[0]), key[0], key[1]))
    for batch in chunks(missing, batch_size):
        with torch.inference_mode():
            forced = teacher_force(lm, [p for p, _, _ in batch], [r for _, r, _ in batch])
            cands = top_candidates(forced.logits.flatten(0, 1), k).view(*forced.targets.shape, -1)
            hidden = candidate_hidden(lm, forced, cands)
            true_logits = forced.logits.gather(-1, forced.targets[..., None])[..., 0]
            cand_logits = forced.logits.gather(-1, cands)
        # kept on the CPU (on a GPU they would hold device memory for the whole session)
        for b, (key, n) in enumerate(zip(batch, forced.lengths, strict=True)):
            memo[key] = ForcedTokens(*(t[b, :n].cpu().clone() for t in (
                forced.targets, cands, cand_logits, true_logits, hidden, forced.hidden)))
    return [memo[key] for key in keys]


def guided_from_tokens(reward: RewardMethod, users: Sequence[str], tokens: list[ForcedTokens],
                       w: float, batch_size: int) -> list[np.ndarray]:
    """The guided log-probabilities of each ``y_t`` over ``C_t`` under this reward head, a
    batch of responses at a time (padded to the longest; the padding is cut off after)."""
    out: list[np.ndarray] = []
    for start in range(0, len(tokens), batch_size):
        chunk = tokens[start:start + batch_size]
        who = list(users[start:start + batch_size])

        def stacked(field: str, chunk: list[ForcedTokens] = chunk) -> torch.Tensor:
            return torch.nn.utils.rnn.pad_sequence([getattr(t, field) for t in chunk],
                                                   batch_first=True)

        with torch.inference_mode():
            # hidden_rewards returns on the device of the states, here the CPU
            rewards = hidden_rewards(reward, who, stacked("cand_hidden"))
            true = hidden_rewards(reward, who, stacked("true_hidden"))
            logp = _guided(stacked("true_logits"), stacked("cand_logits"), stacked("cands"),
                           stacked("targets"), rewards, true, w)
        out += [row[:len(t.targets)].double().cpu().numpy()
                for row, t in zip(logp, chunk, strict=True)]
    return out


def teacher_force(lm: LM, prompts: list[str], responses: list[str]) -> ForcedBatch:
    """Prefill each distinct prompt once, then run the responses on their prompts' rows: the
    base logits predicting every ``y_t`` and the hidden states after each."""
    unique = list(dict.fromkeys(prompts))
    state = lm.prefill([lm.prompt_ids(p) for p in unique], batch_size=len(unique))
    cache, prompt_mask, last = state.cache, state.mask, state.last
    rows = torch.tensor([unique.index(p) for p in prompts], device=prompt_mask.device)
    cache.batch_select_indices(rows)
    prompt_mask, last = prompt_mask[rows], last[rows]
    answers = [lm.response_ids(r) for r in responses]
    ids, resp_mask = pad(answers, lm.pad_id, left=False, device=lm.device)
    mask = torch.cat([prompt_mask, resp_mask], dim=1)
    positions = prompt_mask.sum(-1, keepdim=True) + torch.arange(ids.shape[1], device=lm.device)
    out = lm.model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions,
                              cache=cache, use_cache=True)
    hidden = out.last_hidden_state  # (B, T, H): row t has read y_t
    # y_0 is predicted at the prompt's last token, y_t at y_{t-1}
    predicting = torch.cat([last[:, None], hidden[:, :-1]], dim=1)
    return ForcedBatch(lm.logits_from_hidden(predicting), ids,
                       [len(a) for a in answers], cache, mask, prompt_mask.shape[1], positions,
                       hidden)


def candidate_hidden(lm: LM, forced: ForcedBatch, cands: torch.Tensor) -> torch.Tensor:
    """The final hidden states ``(B, T, k, H)`` after every candidate, in as few passes as
    ``QUERY_BLOCK`` allows: each candidate is a query token at ``y_t``'s position that sees the
    prompt and ``y_<t`` only."""
    steps, k = cands.shape[1:]
    per_pass = max(1, QUERY_BLOCK // k)  # steps per pass: bounds the mask and attention sizes
    values = [_candidate_pass(lm, forced, cands[:, start:start + per_pass], start)
              for start in range(0, steps, per_pass)]
    return torch.cat(values, dim=1)


def _candidate_pass(lm: LM, forced: ForcedBatch, cands: torch.Tensor, start: int
                    ) -> torch.Tensor:
    """Hidden states ``(B, n, k, H)`` after the candidates of steps ``start .. start + n``;
    their cache entries are cropped afterwards, so every pass sees the same cache."""
    rows, steps, k = cands.shape
    width = forced.mask.shape[1]
    device = cands.device
    # query (t, j) sees cached columns before y_t's column, where the row has real tokens
    before = torch.arange(width, device=device) < forced.prompt_width + start + torch.arange(
        steps, device=device)[:, None]  # (n, width)
    past = (before[None] & forced.mask.bool()[:, None, :]).repeat_interleave(k, dim=1)
    own = torch.eye(steps * k, dtype=torch.bool, device=device).expand(rows, -1, -1)
    mask = torch.cat([past, own], dim=-1)[:, None]  # (B, 1, n*k, width + n*k)
    positions = forced.positions[:, start:start + steps].repeat_interleave(k, dim=1)
    out = query_block_pass(lm, input_ids=cands.flatten(1), attention_mask=mask,
                           position_ids=positions, cache=forced.cache)
    forced.cache.crop(-(steps * k))
    return out.last_hidden_state.view(rows, steps, k, -1)


def candidate_rewards_text(lm: LM, reward: RewardMethod, users: list[str], prompts: list[str],
                           responses: list[str], forced: ForcedBatch, cands: torch.Tensor
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
                who.append(users[b])
                said.append(prompts[b])
    flat = iter(text_rewards(lm, reward, who, said, seqs).tolist())
    values = torch.zeros(rows, steps, k)
    for b, length in enumerate(forced.lengths):
        for t in range(length):
            values[b, t] = torch.tensor([next(flat) for _ in range(k)])
    prefix = reward.prefix_rewards(lm, users, prompts, responses)  # type: ignore[attr-defined]
    true = torch.zeros(rows, steps)
    for b, (v, n) in enumerate(zip(prefix, forced.lengths, strict=True)):
        true[b, :n] = torch.as_tensor(np.asarray(v, dtype=np.float64)[:n], dtype=torch.float32)
    return values.to(cands.device), true.to(cands.device)


def guided_logprobs(forced: ForcedBatch, cands: torch.Tensor, rewards: torch.Tensor,
                    true: torch.Tensor, w: float) -> torch.Tensor:
    """``(B, T)`` log-softmax over ``C_t`` = top-k plus ``y_t`` of the true token's score."""
    targets = forced.targets
    return _guided(forced.logits.gather(-1, targets[..., None])[..., 0],
                   forced.logits.gather(-1, cands), cands, targets, rewards, true, w)


def _guided(true_logits: torch.Tensor, cand_logits: torch.Tensor, cands: torch.Tensor,
            targets: torch.Tensor, rewards: torch.Tensor, true: torch.Tensor, w: float
            ) -> torch.Tensor:
    """``logit + w * reward`` of ``y_t`` log-softmaxed over ``C_t``. The true token's score
    comes from the plain pass; where it is also among the top-k, that copy is left out so that
    ``C_t`` holds it once."""
    true_score = true_logits + w * true
    cand_score = cand_logits + w * rewards
    cand_score = cand_score.masked_fill(cands == targets[..., None], float("-inf"))
    total = torch.logsumexp(torch.cat([cand_score, true_score[..., None]], dim=-1), dim=-1)
    return true_score - total


def pytest_prefalign_register(registry: Registry) -> None:
    registry.add_decoder("args", ArgsDecoder)
