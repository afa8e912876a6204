"""GenARM's guided distribution (see ``genarm`` for the method): the ARM's term for each step
(from the base model's hidden states, or from the text through ``next_token_logprobs``), the
rule that adds it to the base logits, generation by batches over the LM's one decode loop, and
the teacher-forced log-likelihood. Imported when ``genarm`` generates or scores, not when it is
registered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from pytest_prefalign import events
from pytest_prefalign.api import (
    Batch,
    CaseContext,
    HiddenLogprobs,
    NextTokenLogprobs,
    RewardMethod,
    capable,
)
from pytest_prefalign.runtime.decoding import (
    KV,
    Choice,
    Step,
    decode,
    generator,
    greedy,
    multinomial_choice,
)
from pytest_prefalign.runtime.hidden import predicting_hidden
from pytest_prefalign.runtime.lm import clean_text
from pytest_prefalign.runtime.window import rows_for
from pytest_prefalign.storage import content_key

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runtime.lm import LM

ROWS_PER_CHUNK = 256  # token rows per (rows, V) block in loglik: bounds the memory

# The ARM's term for the rows of one step: (users, prompts, tokens so far, base hidden (n, H))
# -> log p_arm (n, V).
ArmStep = Callable[[list[str], list[str], list[list[int]], torch.Tensor], torch.Tensor]


# -------------------------------------------------------------------------------------------
# Generation
# -------------------------------------------------------------------------------------------


def generate(
    ctx: CaseContext, reward: RewardMethod, users: Sequence[str], shown: Sequence[str]
) -> list[str]:
    """GenARM's text for each (user, prompt as shown), greedy or sampled as ``ctx.options``
    says; the same (user, prompt) decoded once, the prompts in batches within the pass bound."""
    alpha = ctx.options.alpha
    # T on the unnormalised mixture: the paper's T / (1 + alpha) on the normalised one
    temperature = ctx.options.temperature if ctx.options.sample else None
    step = arm_step(ctx.lm, reward)
    # the same (user, prompt) gives the same text: decode each once
    unique = list(dict.fromkeys(zip(users, shown, strict=True)))
    encoded = [ctx.lm.prompt_ids(p) for _, p in unique]
    order = sorted(range(len(unique)), key=lambda i: -len(encoded[i]))
    texts: dict[tuple[str, str], str] = {}
    longest = max((len(e) for e in encoded), default=1) + ctx.options.max_new_tokens
    batch_size = rows_for(longest, ctx.options.batch_size, ctx.lm.bounds)  # the pass bound
    with events.step("GenARM", total=len(order), unit="prompts") as progress:
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            keys = [unique[i] for i in batch]
            seeds = [_seed(ctx.seed, u, p) for u, p in keys]
            tokens = guided_generate(
                ctx.lm,
                step,
                keys,
                [encoded[i] for i in batch],
                alpha,
                ctx.options.max_new_tokens,
                temperature,
                seeds,
            )
            texts.update(
                zip(keys, (clean_text(ctx.lm.decode_response(t)) for t in tokens), strict=True)
            )
            progress.advance(len(batch))
    return [texts[key] for key in zip(users, shown, strict=True)]


def _seed(seed: int, user: str, prompt: str) -> int:
    """One generator per (user, prompt): a sample does not depend on its batch."""
    return int(content_key("genarm", seed, user, prompt), 16) % (2**63)


# -------------------------------------------------------------------------------------------
# The ARM's term
# -------------------------------------------------------------------------------------------


def arm_step(lm: LM, reward: RewardMethod) -> ArmStep:
    """The fast path where the reward reads the base hidden states, else the general one."""
    head = capable(reward, "hidden_logprobs")
    if head is not None:

        def from_hidden(
            users: list[str],
            prompts: list[str],
            tokens: list[list[int]],
            hidden: torch.Tensor,
            head: HiddenLogprobs = head,
        ) -> torch.Tensor:
            return head.logprobs_from_hidden(users, hidden).float()

        return from_hidden
    arm = _next_token(reward)

    def from_text(
        users: list[str], prompts: list[str], tokens: list[list[int]], hidden: torch.Tensor
    ) -> torch.Tensor:
        # the row that predicts the token after ``text`` is the one before its appended eos
        texts = [lm.tokenizer.decode(t, skip_special_tokens=False) for t in tokens]
        rows = arm.next_token_logprobs(lm, Batch(users, prompts, texts))
        return torch.stack([torch.as_tensor(np.asarray(r)[-1]) for r in rows]).float()

    return from_text


def _next_token(reward: RewardMethod) -> NextTokenLogprobs:
    arm = capable(reward, "next_token")
    if arm is None:
        raise ValueError(
            f"genarm needs an autoregressive reward method (capability "
            f"'next_token'), got {reward.name!r}"
        )
    return arm


# -------------------------------------------------------------------------------------------
# The rule
# -------------------------------------------------------------------------------------------


class GuidedRule:
    """GenARM's rule: ``logits_base + alpha * log p_arm`` over the whole vocabulary, greedy or
    sampled at ``temperature`` with each row's own generator."""

    def __init__(
        self,
        lm: LM,
        step: ArmStep,
        keys: list[tuple[str, str]],
        alpha: float,
        temperature: float | None,
        seeds: list[int],
    ) -> None:
        self.lm, self.arm, self.alpha, self.temperature = lm, step, alpha, temperature
        self.users, self.prompts = [u for u, _ in keys], [p for _, p in keys]
        self.gens = [generator(s) for s in seeds] if temperature else None

    def choose(self, step: Step) -> Choice:
        hidden = step.hidden
        guided = self.lm.logits_from_hidden(hidden)
        if self.alpha:
            rows = step.active
            arm = self.arm(
                [self.users[r] for r in rows],
                [self.prompts[r] for r in rows],
                [step.tokens[r] for r in rows],
                hidden,
            )
            guided = guided + self.alpha * arm.to(guided.device)
        if self.gens is None or self.temperature is None:
            return Choice(greedy(guided))
        return Choice(
            multinomial_choice(guided, self.temperature, [self.gens[r] for r in step.active])
        )


def guided_generate(
    lm: LM,
    step: ArmStep,
    keys: list[tuple[str, str]],
    prompt_seqs: list[list[int]],
    alpha: float,
    max_new_tokens: int,
    temperature: float | None,
    seeds: list[int],
) -> list[list[int]]:
    """Token ids generated for each (user, prompt) of a batch; finished rows leave it. The
    base model runs on its KV cache, one new token per row and step (``decoding.decode``);
    the ARM's term comes from ``step``."""
    rule = GuidedRule(lm, step, keys, alpha, temperature, seeds)
    return decode(KV.start(lm, prompt_seqs, then=max_new_tokens), rule, max_new_tokens, lm.finished)


# -------------------------------------------------------------------------------------------
# Teacher-forced log-likelihood
# -------------------------------------------------------------------------------------------


def guided_logprobs(
    lm: LM, reward: RewardMethod, alpha: float, batch: Batch, *, batch_size: int = 16
) -> list[np.ndarray]:
    """``log guided(y_t | x, y_<t)`` per response token (eos included) of each (user, prompt,
    response) of ``batch``, float64. Pairs go ``batch_size`` at a time, so that at most that
    many ``(T_y, V)`` ARM tables are held."""
    out: list[np.ndarray] = []
    for start in range(0, len(batch), batch_size):
        out += _guided_batch(lm, reward, alpha, batch[start : start + batch_size], batch_size)
    return out


def _guided_batch(
    lm: LM, reward: RewardMethod, alpha: float, batch: Batch, batch_size: int
) -> list[np.ndarray]:
    users, responses = batch.users, batch.responses
    hidden = predicting_hidden(lm, batch.prompts, responses, batch_size=batch_size)
    targets = [torch.tensor(lm.response_ids(r)) for r in responses]
    arm: list[torch.Tensor | None] = [None] * len(users)  # None: read from the hidden states
    if alpha and capable(reward, "hidden_logprobs") is None:
        tables = _next_token(reward).next_token_logprobs(lm, batch)
        arm = [torch.as_tensor(np.asarray(a)).float() for a in tables]
        for a, t, r in zip(arm, targets, responses, strict=True):
            if a is not None and a.shape[0] != t.shape[0]:
                raise ValueError(
                    f"genarm: next_token_logprobs gave {a.shape[0]} rows for a "
                    f"response of {t.shape[0]} tokens ({r!r})"
                )
    return [
        _one(lm, reward, alpha, u, h, t, a)
        for u, h, t, a in zip(users, hidden, targets, arm, strict=True)
    ]


@torch.inference_mode()
def _one(
    lm: LM,
    reward: RewardMethod,
    alpha: float,
    user: str,
    hidden: torch.Tensor,
    target: torch.Tensor,
    arm: torch.Tensor | None,
) -> np.ndarray:
    """One response's guided token log-probabilities from its predicting states ``(T, H)``."""
    out = []
    for i in range(0, hidden.shape[0], ROWS_PER_CHUNK):
        h = hidden[i : i + ROWS_PER_CHUNK].to(lm.device)
        guided = lm.logits_from_hidden(h)
        if alpha:
            head = capable(reward, "hidden_logprobs")
            if arm is None and head is not None:
                part = head.logprobs_from_hidden([user], h[None])[0]
            elif arm is None:
                raise ValueError("genarm: no log-probabilities of the ARM for this response")
            else:
                part = arm[i : i + ROWS_PER_CHUNK]
            guided = guided + alpha * part.to(guided.device).float()
        logp = torch.log_softmax(guided, dim=-1)
        out.append(logp.gather(-1, target[i : i + ROWS_PER_CHUNK, None].to(logp.device))[:, 0])
    return torch.cat(out).double().cpu().numpy()
