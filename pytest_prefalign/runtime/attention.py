"""The attention the project's models run with on the CPU: transformers' SDPA attention, except
that blocks of query tokens with a mask give their grouped key/value heads to PyTorch's kernel as
they are.

With a mask, transformers' SDPA path copies every cached key and value once per query head of
its group (grouped-query attention, as in SmolLM2) at every layer of every pass over more than
one token: prefills, teacher-forced responses, ARGS's candidates (``KV.queries``). PyTorch's CPU
kernel takes grouped heads with a mask directly (``enable_gqa``): bit for bit the same output on
the lock's torch (checked in tests/test_lm.py; on torch 2.6 the same up to float rounding),
without the copies, which measured about a quarter off an ARGS step at ICL prompt lengths.
One-token passes keep transformers' path (it packs the group's heads and copies nothing). On CUDA
the grouped path would force the slow math kernel, so GPU models keep plain ``sdpa``. Registered
once under ``NAME`` through transformers' attention interface; no environment variable is
touched. ``GROUPED`` is the keyword ``KV.queries`` still passes, for a block of one query token.
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "prefalign_sdpa"
GROUPED = "prefalign_grouped_queries"  # the keyword a forward pass gives to ask for it


def grouped_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """``(B, q, heads, head_dim)`` attention output, as transformers' attention functions give
    it. ``query`` ``(B, heads, q, d)``, ``key``/``value`` ``(B, kv_heads, kv, d)``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    grouped = kwargs.pop(GROUPED, False)
    groups = getattr(module, "num_key_value_groups", 1)
    if (
        not (grouped or query.shape[2] > 1)
        or attention_mask is None
        or groups == 1
        or query.device.type != "cpu"
        or kwargs.get("softcap") is not None
        or kwargs.get("position_bias") is not None
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        enable_gqa=True,
    )
    return out.transpose(1, 2).contiguous(), None


def use_grouped_sdpa(model: Any) -> None:
    """Run ``model`` with ``grouped_sdpa`` where it runs transformers' ``sdpa`` today."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, grouped_sdpa)
        ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(NAME)
