"""Fluency: the base model's mean negative log-likelihood per token of each output, given the
item's plain task prompt (docs/metrics.md, "Fluency and answers").

One scorer for every generating row: the base model (the size's own LM, unguided) reads the
item's ``prompt`` (never the ICL prompt, whatever the row was shown) and each output teacher-
forced after it (``LM.response_logprobs``). The figure is ``-mean_t log pi(y_t | prompt,
y_<t)`` over the output's own tokens, in nats: the stop token that ``response_ids`` appends is
left out, since a generation cut at ``max_new_tokens`` or at the end of its first line never
chose to stop there, and an output's fluency should not depend on where it was cut. An empty
output has no tokens of its own; its figure is the cost of stopping at once (the stop token's
negative log-likelihood), so that every output has one, finite and positive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def fluency(lm: Any, prompts: Sequence[str], outputs: Sequence[str], batch_size: int) -> np.ndarray:
    """``(n,)`` float64: each output's mean negative log-likelihood per token (nats) under
    ``lm`` after its prompt, the final stop token left out (an empty output: that token's)."""
    if len(prompts) != len(outputs):
        raise ValueError(f"{len(prompts)} prompts but {len(outputs)} outputs")
    if not len(outputs):
        return np.zeros(0)
    per_token = lm.response_logprobs(list(prompts), list(outputs), batch_size=batch_size)
    return np.array([_nll(np.asarray(lp, dtype=np.float64)) for lp in per_token])


def _nll(logprobs: np.ndarray) -> float:
    own = logprobs[:-1] if len(logprobs) > 1 else logprobs  # the stop token last
    return float(-own.mean())
