"""The hidden states that predict each response token, kept per process within a budget: an
autoregressive RM's score (RM accuracy) and GenARM's policy score read the same test pairs, so one
forward pass serves both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from pytest_prefalign.cache import PROCESS, Lru, Slot
from pytest_prefalign.runtime import memory

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runtime.lm import LM


def tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


# The most recently used predicting states, by (model fingerprint, prompt, response), within a
# budget (a share of the process's memory, at most 256 MiB: ``memory.hidden_budget``): an
# autoregressive RM's score (RM accuracy) and GenARM's policy score read the same test pairs,
# so one forward pass serves both. (T_y, H) float32 per text: ~35 KB for a title.
HIDDEN = Slot(
    "predicting hidden states",
    lambda: Lru[tuple[str, str, str], torch.Tensor](memory.hidden_budget(), tensor_bytes),
)


def predicting_hidden(
    lm: LM, prompts: Sequence[str], responses: Sequence[str], *, batch_size: int = 48
) -> list[torch.Tensor]:
    """``(T_y, H)`` float32 CPU per pair: row ``t`` is the LM's final hidden state (after the
    final norm) that predicts ``y_t``: at the prompt's last token for ``t = 0``, at ``y_{t-1}``
    after. ``T_y`` counts the response tokens with the final ``eos_id``.

    Texts kept in the process's ``HIDDEN`` memo are not run again; the others go through
    ``LM.response_hidden``, on top of the prompts' kept prefills.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    keys = [(lm.fingerprint, p, r) for p, r in zip(prompts, responses, strict=True)]
    memo = PROCESS[HIDDEN]
    found = {k: h for k in dict.fromkeys(keys) if (h := memo.get(k)) is not None}
    missing = [k for k in dict.fromkeys(keys) if k not in found]
    if missing:
        states = lm.response_hidden(
            [k[1] for k in missing], [k[2] for k in missing], batch_size=batch_size, predicting=True
        )
        for key, value in zip(missing, states, strict=True):
            found[key] = value.clone()
            memo.put(key, found[key])
    return [found[k] for k in keys]
