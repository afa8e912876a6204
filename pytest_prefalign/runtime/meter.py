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

The same figures are kept apart by the kind of pass (``KINDS``), because the kinds meet
different limits: ``steps`` (one new position a row: decoding), ``candidates`` (a block of
queries each seeing the cache and itself, under a 4D mask: ARGS's candidates) and ``blocks``
(several positions a row: prompts, teacher-forced responses). Per kind, ``forward_<kind>_passes``,
``_tokens``, ``_flops``, ``_s`` and ``_bytes``: the least a pass must read from memory, the
body's linear weights once (and the head's, where it makes logits after it) and the cached
keys and values each row's queries see, once. A pass of few rows does little arithmetic per
weight it reads, so ``bytes / memory bandwidth`` bounds its time where ``flops / matmul rate``
does not (for weights too large for the CPU's caches).

Within each body pass the meter also reads ``LINEAR_CLOCK``, the seconds the linear layers'
packed kernels (``runtime/packed.py``) took, so that a pass's time splits into its linear layers
and the rest (attention, norms, activations): ``forward_linear_s`` and ``forward_<kind>_linear_s``
(0 where the linears run dense, which are not timed one by one).

On a GPU the seconds are those of launching the work (kernels run asynchronously).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

KINDS = ("steps", "candidates", "blocks")  # the kinds of pass (module docstring)


class KernelClock:
    """Seconds spent inside kernels that add to it (``runtime/packed.py``'s linears), summed
    over the process; a meter reads it at the start and the end of each body pass."""

    def __init__(self) -> None:
        self.seconds = 0.0


LINEAR_CLOCK = KernelClock()  # the packed linear layers' kernels


@dataclass
class KindCount:
    """One kind of pass's totals: passes, body positions, output-head positions, seconds, and
    the (query, key) pairs and cached keys read, summed over layers (on the mask's device until
    a reading)."""

    passes: int = 0
    tokens: int = 0
    head_positions: int = 0
    head_passes: int = 0
    seconds: float = 0.0
    linear_seconds: float = 0.0  # of ``seconds``, inside the body's packed linear kernels
    pairs: int = 0
    keys: int = 0
    pending: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def settle(self) -> None:
        pending, self.pending = self.pending, []
        self.pairs += sum(int(pairs) for pairs, _ in pending)
        self.keys += sum(int(keys) for _, keys in pending)


class ForwardMeter:
    def __init__(self, body: torch.nn.Module, head: torch.nn.Module | None = None) -> None:
        import torch

        linears = [m.weight for m in body.modules() if isinstance(m, torch.nn.Linear)]
        self.per_token = 2 * sum(w.numel() for w in linears)
        self.weight_bytes = sum(w.numel() * w.element_size() for w in linears)
        self.attention = AttentionCount(getattr(body, "config", None))
        weight = getattr(head, "weight", None)
        self.per_logit_position = 2 * int(weight.numel()) if weight is not None else 0
        self.head_bytes = int(weight.numel() * weight.element_size()) if weight is not None else 0
        size = linears[0].element_size() if linears else 0
        self.key_bytes = 2 * self.attention.kv_width * size  # its key and value, one layer
        self.kinds = {kind: KindCount() for kind in KINDS}
        self._kind = self.kinds["blocks"]  # the last body pass's: the head's time is its
        self._started: float | None = None
        self._linear_started = 0.0  # ``LINEAR_CLOCK`` at the start of the body pass
        self._head_started: float | None = None
        body.register_forward_pre_hook(self._enter, with_kwargs=True)
        body.register_forward_hook(self._leave)
        if head is not None:
            # the head's time is the pass's too: its FLOPs are in the floor (the logits of a
            # decoding step or a response are made by the caller, outside the body)
            head.register_forward_pre_hook(self._enter_head)
            head.register_forward_hook(self._logits)

    @property
    def tokens(self) -> int:
        """The token positions the body ran, all kinds."""
        return sum(count.tokens for count in self.kinds.values())

    def _enter(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"][..., 0]
        mask = kwargs.get("attention_mask")
        count = self.kinds[kind_of(ids.shape, mask)]
        count.passes += 1
        count.tokens += int(ids.numel())
        if self.attention.per_pair:
            # each pass's counts stay on its mask's device until a reading: an int() per pass
            # would wait for the device at every decoding step
            count.pending.append(self.attention.pairs_and_keys(ids.shape, mask))
        self._kind = count
        self._linear_started = LINEAR_CLOCK.seconds
        self._started = time.perf_counter()

    def _leave(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        if self._started is not None:
            self._kind.seconds += time.perf_counter() - self._started
            self._kind.linear_seconds += LINEAR_CLOCK.seconds - self._linear_started
            self._started = None

    def _enter_head(self, module: Any, args: tuple[Any, ...]) -> None:
        self._head_started = time.perf_counter()

    def _logits(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        hidden = args[0]
        self._kind.head_positions += int(hidden.numel() // hidden.shape[-1])
        self._kind.head_passes += 1
        if self._head_started is not None:
            self._kind.seconds += time.perf_counter() - self._head_started
            self._head_started = None

    def reading(self) -> dict[str, float]:
        """The totals so far, under the names the run file's timings use."""
        totals = dict.fromkeys(("tokens", "body", "attention", "head", "seconds", "linear"), 0.0)
        kinds: dict[str, float] = {}
        for name, count in self.kinds.items():
            count.settle()
            body = float(count.tokens * self.per_token)
            attention = float(count.pairs * self.attention.per_pair)
            head = float(count.head_positions * self.per_logit_position)
            values = (count.tokens, body, attention, head, count.seconds, count.linear_seconds)
            for total, value in zip(totals, values, strict=True):
                totals[total] += value
            kinds[f"forward_{name}_passes"] = float(count.passes)
            kinds[f"forward_{name}_tokens"] = float(count.tokens)
            kinds[f"forward_{name}_flops"] = body + attention + head
            kinds[f"forward_{name}_bytes"] = float(
                count.passes * self.weight_bytes
                + count.head_passes * self.head_bytes
                + count.keys * self.key_bytes
            )
            kinds[f"forward_{name}_s"] = count.seconds
            kinds[f"forward_{name}_linear_s"] = count.linear_seconds
        return {
            "forward_tokens": totals["tokens"],
            "forward_flops": totals["body"] + totals["attention"] + totals["head"],
            "forward_body_flops": totals["body"],
            "forward_attention_flops": totals["attention"],
            "forward_head_flops": totals["head"],
            "forward_s": totals["seconds"],
            "forward_linear_s": totals["linear"],
            **kinds,
        }

    @staticmethod
    def since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        """What was counted between two readings (an empty ``before``: the reading of a model
        not loaded yet, which had run nothing)."""
        return {name: after[name] - before.get(name, 0.0) for name in after}


def kind_of(shape: torch.Size, mask: torch.Tensor | None) -> str:
    """The kind of a pass of ``shape`` ``(B, T)`` new positions under ``mask`` (``KINDS``)."""
    if mask is not None and mask.dim() == 4:
        return "candidates"
    return "steps" if int(shape[-1]) == 1 else "blocks"


class AttentionCount:
    """The attention FLOPs of a pass, from its model's config and the pass's mask."""

    def __init__(self, config: Any) -> None:
        config = getattr(config, "text_config", None) or config
        heads = int(getattr(config, "num_attention_heads", 0) or 0)
        hidden = int(getattr(config, "hidden_size", 0) or 0)
        head_dim = getattr(config, "head_dim", None) or (hidden // heads if heads else 0)
        layers = int(getattr(config, "num_hidden_layers", 0) or 0)
        self.per_pair = 4 * heads * int(head_dim)  # q . k and the weighted values, per layer
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        self.kv_width = kv_heads * int(head_dim)  # a cached key's numbers in one layer
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
        return self.pairs_and_keys(shape, mask)[0]

    def pairs_and_keys(
        self, shape: torch.Size, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``pairs``, and the cached keys the pass must read summed over its layers: for each
        row, the most keys one of its queries sees (a sliding layer's at most its window)."""
        seen = keys_seen(shape, mask)  # per query
        most = seen.amax(-1) if seen.numel() else seen.sum(-1)
        pairs, keys = self.full * seen.sum(), self.full * most.sum()
        if self.sliding:
            pairs = pairs + self.sliding * seen.clamp(max=self.window).sum()
            keys = keys + self.sliding * most.clamp(max=self.window).sum()
        return pairs, keys


def keys_seen(shape: torch.Size, mask: torch.Tensor | None) -> torch.Tensor:
    """The number of keys each real query of a pass attends to (itself included), 0 for
    padding queries."""
    import torch

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
