"""The ``base`` decoder: greedy from the base LM, no personalization.

Also the shared pieces of every prompt-based decoder: generation from a list of prompts and the
base model's teacher-forced log-likelihoods, memoised per (suite, size) so that every method
that needs ``log pi_base(y | prompt)`` of the same pair computes it once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pytest_prefalign.api import REDUCTIONS, Batch, CaseContext, Decoder, Item
from pytest_prefalign.cache import Slot
from pytest_prefalign.runtime import chat
from pytest_prefalign.runtime.chat import Prompt

# log pi_base(y_t | prompt, y_<t) by (prompt, response), per (suite, size)
BASE_LOGPROBS = Slot("base log-likelihoods", dict[tuple[Prompt, str], np.ndarray])


class BaseDecoder(Decoder):
    name = "base"
    needs = frozenset()
    order = 0  # position in the default method list

    def prompts(
        self, ctx: CaseContext, users: Sequence[str], prompts: Sequence[str]
    ) -> Sequence[Prompt]:
        """The prompt this decoder shows the model for each (user, task prompt): the task
        prompt, or a dialogue with earlier turns (``runtime/chat.py``)."""
        return list(prompts)

    def generate(self, ctx: CaseContext, items: Sequence[Item]) -> list[str]:
        shown = self.prompts(ctx, [it.user for it in items], [it.prompt for it in items])
        texts = ctx.lm.generate(
            shown, max_new_tokens=ctx.options.max_new_tokens, batch_size=ctx.options.batch_size
        )
        return [samples[0] for samples in texts]

    def logliks(self, ctx: CaseContext, batch: Batch) -> dict[str, np.ndarray]:
        shown = self.prompts(ctx, batch.users, batch.prompts)
        return reductions(base_logprobs(ctx, shown, batch.responses))


def base_logprobs(
    ctx: CaseContext, prompts: Sequence[Prompt], responses: Sequence[str]
) -> list[np.ndarray]:
    """``log pi_base(y_t | prompt, y_<t)`` per response token, memoised per (suite, size)."""
    memo = ctx.shared[BASE_LOGPROBS]
    wanted = zip(prompts, responses, strict=True)
    # in the same order on every run: by the prompt's text (a dialogue's plain layout)
    missing = sorted(
        {(p, r) for p, r in wanted if (p, r) not in memo},
        key=lambda pair: (chat.text(pair[0]), pair[1], not isinstance(pair[0], str)),
    )
    if missing:
        values = ctx.lm.response_logprobs(
            [p for p, _ in missing], [r for _, r in missing], batch_size=ctx.options.batch_size
        )
        memo.update(zip(missing, values, strict=True))
    return [memo[(p, r)] for p, r in zip(prompts, responses, strict=True)]


def reduce_logprobs(per_token: Sequence[np.ndarray], how: str) -> np.ndarray:
    """``S(y|x)``: the sum of the token log-likelihoods, or their mean."""
    if how == "mean":
        return np.array([float(np.mean(lp)) for lp in per_token])
    return np.array([float(np.sum(lp)) for lp in per_token])


def reductions(per_token: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """``S(y|x)`` under every reduction (``REDUCTIONS``), from one set of token
    log-likelihoods."""
    return {how: reduce_logprobs(per_token, how) for how in REDUCTIONS}
