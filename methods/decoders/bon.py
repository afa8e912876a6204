"""``bon``: best-of-N. N samples from the base LM for the task prompt [N = 16, seeded, at
temperature 0.7 from the nucleus of 0.9]; the one with the highest reward ``r_u`` is kept (ties:
the first sample).

The sampling is the one best-of-N is run with on small models, not the model's raw
distribution: sampled whole at temperature 1 with no cut (the earlier defaults, still the
options ``temperature=1.0,top_p=1.0,n=8``), a 135M model draws a good share of its samples from
the unreliable tail that nucleus sampling cuts (Holtzman et al., 2020, "The Curious Case of
Neural Text Degeneration"), and the reward picks among noise ("Diskstrelleamling seiner Lösung").
Best-of-N on small models samples below temperature 1 (Hugging Face's ``search-and-learn``,
best-of-N with Llama-3.2-1B/3B-Instruct: T = 0.8); Meta's reference chat sampling for Llama 2
is T = 0.6 with a nucleus of 0.9; 0.7 and 0.9 sit within those. Measured on the main job:
docs/usage.md, "Working points of icl and bon".

Best-of-N approximates the KL-regularised policy ``pi(y|x) ∝ pi_base(y|x) exp(r_u(x, y) / beta)``,
so its ``S_u(y|x)`` (policy accuracy) is that policy's unnormalised log-likelihood,
``log pi_base(y|x) + r_u(x, y) / beta`` [beta = 1]; the normaliser depends on ``x`` only, so it
cancels in a pair. Under the mean reduction the base part is the mean token log-probability, the
reward part stays ``r_u / beta``: the mean keeps what it means for the other decoders (a
per-token score that does not favour short responses), and the reward has no tokens to average.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prefalign_methods.decoders.base import BaseDecoder, base_logprobs, reductions
from pytest_prefalign.api import Batch, CaseContext, DecodeOptions, Item, RewardMethod
from pytest_prefalign.cache import Slot
from pytest_prefalign.runtime.chat import Prompt


@dataclass(frozen=True)
class BoNOptions(DecodeOptions):
    n: int = 16  # samples per prompt
    # sampled sequences per forward pass: n of each of 4 prompts (a sample's draw does not
    # depend on its batch; measured here, 64 samples a pass sampled 20-25% faster than 16)
    batch_size: int = 64
    beta: float = 1.0  # the policy it approximates: log pi_base + r / beta
    temperature: float = 0.7  # sampling temperature of the base LM (module docstring)
    top_p: float = 0.9  # the nucleus each token is drawn from (1: the whole distribution)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        for name in ("beta", "temperature"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


# the N samples of a prompt by (prompt, n, temperature, top_p, seed, max_new_tokens, batch_size)
SAMPLES = Slot("best-of-N samples", dict[tuple[Any, ...], list[str]])


class BestOfNDecoder(BaseDecoder):
    name = "bon"
    needs = frozenset({"score"})
    order = 30
    Options = BoNOptions
    # every reward method already has a row with args or genarm; bon gets one by default too
    default_reward = "per_user_bt"

    def generate(self, ctx: CaseContext, items: Sequence[Item]) -> list[str]:
        reward, n = _reward(ctx), ctx.options.n
        users, prompts = [it.user for it in items], [it.prompt for it in items]
        samples = base_samples(ctx, self.prompts(ctx, users, prompts), n)
        drawn = Batch(
            [u for u in users for _ in range(n)],
            [p for p in prompts for _ in range(n)],  # the reward reads the task
            [s for per_item in samples for s in per_item],
        )
        scores = np.asarray(reward.score(ctx.lm, drawn), dtype=np.float64).reshape(len(items), n)
        if not np.all(np.isfinite(scores)):
            raise ValueError(f"bon: reward method {reward.name!r} gave a non-finite score")
        # np.argmax returns the first maximum: ties keep the earlier sample
        best = scores.argmax(axis=1)
        return [per_item[int(k)] for per_item, k in zip(samples, best, strict=True)]

    def logliks(self, ctx: CaseContext, batch: Batch) -> dict[str, np.ndarray]:
        reward, beta = _reward(ctx), ctx.options.beta
        shown = self.prompts(ctx, batch.users, batch.prompts)
        base = reductions(base_logprobs(ctx, shown, batch.responses))
        rewards = np.asarray(reward.score(ctx.lm, batch), dtype=np.float64)
        return {how: values + rewards / beta for how, values in base.items()}


def base_samples(ctx: CaseContext, shown: Sequence[Prompt], n: int) -> list[list[str]]:
    """``n`` seeded samples from the base LM per prompt. They do not depend on the reward
    method, so they are kept in the (suite, size)'s shared state: a second ``bon[...]`` row
    over the same prompts only scores them."""
    opts = ctx.options
    settings = (n, opts.temperature, opts.top_p, ctx.seed, opts.max_new_tokens, opts.batch_size)
    memo = ctx.shared[SAMPLES]
    missing = list(dict.fromkeys(p for p in shown if (p, *settings) not in memo))
    if missing:
        drawn = ctx.lm.generate(
            missing,
            max_new_tokens=opts.max_new_tokens,
            batch_size=opts.batch_size,
            sample=True,
            temperature=opts.temperature,
            top_p=opts.top_p,
            num_samples=n,
            seed=ctx.seed,
        )
        memo.update(((p, *settings), d) for p, d in zip(missing, drawn, strict=True))
    return [list(memo[(p, *settings)]) for p in shown]


def _reward(ctx: CaseContext) -> RewardMethod:
    if ctx.reward is None:
        raise ValueError("bon needs a reward method: write bon[REWARD]")
    return ctx.reward
