"""What the model computed: the token positions its body ran, their FLOPs and the seconds spent
inside the body and the output head.

Every forward pass of ``LM`` goes through ``model.base_model`` (prefills, decoding steps, ARGS's
candidate queries, teacher forcing), so two hooks there count all of them, and a third on the
output head counts the positions it turned into logits. The FLOPs are the model's own work,
counted where it happens and only where it is useful:

- the body's weights: ``2 x`` the weights of its linear layers per position (``per_token``);
- attention: ``4 x heads x head_dim`` per layer for every (query, key) pair a query attends
  to (``q . k`` and the weighted sum of values), the pairs read from the pass's mask: padding
  and the columns a query does not see are not counted; on a layer with a sliding window a
  query counts at most the window's keys;
- the output head: ``2 x`` its weights per position it computes logits for (a decoding step's
  last position, every position of a teacher-forced response).

Each is a lower bound on what the pass computes (kernels also spend FLOPs on padding, on the
softmax and the norms), so ``flops / matmul rate`` is a lower bound on the time the same work
can take on a machine. The run file's per-test timings carry a test's share
(``forward_tokens``, ``forward_flops`` with its parts ``forward_body_flops``,
``forward_attention_flops``, ``forward_head_flops``, and ``forward_s``);
``benchmarks/bench_main_job.py`` sets them beside the matmul rate.

On a GPU the seconds are those of launching the work (kernels run asynchronously).
"""

from __future__ import annotations

import time
from typing import Any

import torch


class ForwardMeter:
    def __init__(self, body: torch.nn.Module, head: torch.nn.Module | None = None) -> None:
        self.per_token = 2 * sum(
            m.weight.numel() for m in body.modules() if isinstance(m, torch.nn.Linear)
        )
        self.attention = AttentionCount(getattr(body, "config", None))
        weight = getattr(head, "weight", None)
        self.per_logit_position = 2 * int(weight.numel()) if weight is not None else 0
        self.tokens = 0
        self.attention_flops = 0
        # each pass's (query, key) pairs, left on its mask's device until a reading: an int()
        # per pass would wait for the device at every decoding step
        self._attention_pending: list[torch.Tensor] = []
        self.head_positions = 0
        self.seconds = 0.0
        self._started: float | None = None
        self._head_started: float | None = None
        body.register_forward_pre_hook(self._enter, with_kwargs=True)
        body.register_forward_hook(self._leave)
        if head is not None:
            # the head's time is the pass's too: its FLOPs are in the floor (the logits of a
            # decoding step or a response are made by the caller, outside the body)
            head.register_forward_pre_hook(self._enter_head)
            head.register_forward_hook(self._logits)

    def _enter(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"][..., 0]
        self.tokens += int(ids.numel())
        if self.attention.per_pair:
            self._attention_pending.append(
                self.attention.pairs(ids.shape, kwargs.get("attention_mask"))
            )
        self._started = time.perf_counter()

    def _leave(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        if self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self._started = None

    def _enter_head(self, module: Any, args: tuple[Any, ...]) -> None:
        self._head_started = time.perf_counter()

    def _logits(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        hidden = args[0]
        self.head_positions += int(hidden.numel() // hidden.shape[-1])
        if self._head_started is not None:
            self.seconds += time.perf_counter() - self._head_started
            self._head_started = None

    def reading(self) -> dict[str, float]:
        """The totals so far, under the names the run file's timings use."""
        body = float(self.tokens * self.per_token)
        head = float(self.head_positions * self.per_logit_position)
        pending, self._attention_pending = self._attention_pending, []
        self.attention_flops += sum(int(n) for n in pending) * self.attention.per_pair
        attention = float(self.attention_flops)
        return {
            "forward_tokens": float(self.tokens),
            "forward_flops": body + attention + head,
            "forward_body_flops": body,
            "forward_attention_flops": attention,
            "forward_head_flops": head,
            "forward_s": self.seconds,
        }

    @staticmethod
    def since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        """What was counted between two readings."""
        return {name: after[name] - before[name] for name in after}


class AttentionCount:
    """The attention FLOPs of a pass, from its model's config and the pass's mask."""

    def __init__(self, config: Any) -> None:
        config = getattr(config, "text_config", None) or config
        heads = int(getattr(config, "num_attention_heads", 0) or 0)
        hidden = int(getattr(config, "hidden_size", 0) or 0)
        head_dim = getattr(config, "head_dim", None) or (hidden // heads if heads else 0)
        layers = int(getattr(config, "num_hidden_layers", 0) or 0)
        self.per_pair = 4 * heads * int(head_dim)  # q . k and the weighted values, per layer
        kinds = list(getattr(config, "layer_types", None) or [])[:layers]
        window = getattr(config, "sliding_window", None)
        self.sliding = sum(k == "sliding_attention" for k in kinds) if window else 0
        self.full = layers - self.sliding
        self.window = int(window) if window else 0

    def flops(self, shape: torch.Size, mask: torch.Tensor | None) -> int:
        """``shape``: the pass's ``(B, T)`` new positions; ``mask``: ``(B, past + T)`` real
        columns (the new block causal), ``(B, 1, T, K)`` the keys each query sees, or None (a
        causal block with nothing before it)."""
        return int(self.pairs(shape, mask)) * self.per_pair

    def pairs(self, shape: torch.Size, mask: torch.Tensor | None) -> torch.Tensor:
        """The (query, key) pairs of a pass summed over its layers, a 0-dim tensor on the
        mask's device (``flops`` for the arguments)."""
        seen = keys_seen(shape, mask)  # per query
        pairs = self.full * seen.sum()
        if self.sliding:
            pairs = pairs + self.sliding * seen.clamp(max=self.window).sum()
        return pairs


def keys_seen(shape: torch.Size, mask: torch.Tensor | None) -> torch.Tensor:
    """The number of keys each real query of a pass attends to (itself included), 0 for
    padding queries."""
    rows, new = int(shape[0]), int(shape[-1])
    if mask is None:
        return torch.arange(1, new + 1).expand(rows, new)
    with torch.no_grad():
        if mask.dim() == 4:  # (B, 1, T, K): True, or an additive 0, where a query sees a key
            sees = mask if mask.dtype == torch.bool else mask == 0
            return sees.sum(-1).flatten(1)
        real = mask.bool()
        past = real[:, : real.shape[1] - new].sum(-1, keepdim=True)
        block = real[:, real.shape[1] - new :]
        return (past + block.cumsum(-1)) * block
