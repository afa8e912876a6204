"""A KV cache layer that appends in place.

transformers' ``DynamicLayer`` appends by concatenation: every pass copies the layer's whole
cache into a new tensor, one token longer. In a decode step that copy costs more than the
step's attention reads (here, 48 ms a step for 16 rows of 300 tokens on this project's 2-core
machine, 200 ms for best-of-N's 64 rows). ``RoomyLayer`` keeps each layer's keys and values in
buffers with room after the last column: ``keys`` and ``values`` are views of the filled part,
an append writes into the room, a crop only shortens the views, and a buffer is copied only
when it runs out of room (then with room again, so a long decode copies a few times, not every
step). The numbers are the same as ``DynamicLayer``'s: the same values, read through a view.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

ROOM = 64  # columns of room a buffer gets beyond what it holds (a response, ARGS's queries)


class RoomyLayer(DynamicLayer):
    """``DynamicLayer`` with in-place appends; ``keys``/``values`` are views of its buffers.

    ``limit``: the columns it may hold. A sliding-window layer is given one as a ``RoomyLayer``
    whose limit is its window: within it the layer sees the whole sequence, as a full layer
    does; past it the layer would be wrong, so it raises instead."""

    def __init__(self, *, limit: float = math.inf, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limit = limit
        self.length = 0
        self.key_room: torch.Tensor | None = None
        self.value_room: torch.Tensor | None = None

    def hold(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """Take ``(B, heads, C, head_dim)`` buffers whose first ``length`` columns are the
        cache (``C - length`` columns of room)."""
        self._check(length)
        self.device, self.is_initialized = keys.device, True
        self.key_room, self.value_room, self.length = keys, values, length
        self._views()

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        self._check(end)
        room = self.key_room
        if (
            room is None
            or end > room.shape[-2]
            or room.shape[0] != key_states.shape[0]
            or not writable(room)
        ):
            self._grow(key_states, value_states, end)
        assert self.key_room is not None and self.value_room is not None
        self.key_room[:, :, start:end] = key_states
        self.value_room[:, :, start:end] = value_states
        self.length = end
        return self._views()

    def _check(self, columns: int) -> None:
        if columns > self.limit:
            raise RuntimeError(
                f"a KV cache layer given {columns} columns, beyond its limit of "
                f"{self.limit:g} (a sliding window: the layer would no longer see the whole "
                f"sequence); the caller must ask for a plain pass"
            )

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop() takes a negative count, got {tokens_to_remove}")
        if tokens_to_remove == 0 or not self.is_initialized or self.key_room is None:
            return
        self.length = max(0, self.length + tokens_to_remove)
        self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.key_room is not None and self.value_room is not None and self.length:
            self.key_room = select_rows(self.key_room, indices, self.length)
            self.value_room = select_rows(self.value_room, indices, self.length)
            self._views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.key_room is not None and self.length:
            self.key_room = self.key_room.repeat_interleave(repeats, dim=0)
            if self.value_room is not None:
                self.value_room = self.value_room.repeat_interleave(repeats, dim=0)
            self._views()

    def reset(self) -> None:
        self.key_room = self.value_room = None
        self.length = 0
        super().reset()

    # -----------------------------------------------------------------------------------------

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, end: int) -> None:
        """New buffers for ``end`` columns and room; what the old ones held is copied over."""
        rows, heads, _, dim = key_states.shape
        capacity = end + max(ROOM, end // 4)
        # the room is written before it is read (the views end at ``length``): no zeros
        keys = key_states.new_empty((rows, heads, capacity, dim))
        values = value_states.new_empty((rows, value_states.shape[1], capacity, dim))
        if self.key_room is not None and self.value_room is not None and self.length:
            keys[:, :, : self.length] = self.key_room[:, :, : self.length]
            values[:, :, : self.length] = self.value_room[:, :, : self.length]
        self.key_room, self.value_room = keys, values

    def _views(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.key_room is not None and self.value_room is not None
        keys = self.keys = self.key_room[:, :, : self.length]
        values = self.values = self.value_room[:, :, : self.length]
        return keys, values


def writable(buffer: torch.Tensor) -> bool:
    """Whether ``buffer`` can be written in place now: one made under inference mode cannot be
    written outside it."""
    return not buffer.is_inference() or torch.is_inference_mode_enabled()


def select_rows(buffer: torch.Tensor, indices: torch.Tensor, length: int) -> torch.Tensor:
    """Rows ``indices`` of a ``(B, heads, C, head_dim)`` buffer whose first ``length`` columns
    are in use. When rows leave a decoding batch (on the CPU, slot ``j`` taking a row at or
    beyond ``j``: the kept rows in order, or ``compacted``'s order) they are written in place,
    in the columns in use only, and the result is a view of the first rows with the same room:
    no new buffer to allocate and fill (for ICL prompts of a thousand tokens, selecting into a
    new buffer cost a tenth of a generation). Otherwise a copy."""
    order = indices.tolist() if indices.device.type == "cpu" else None
    if (
        order is None
        or buffer.device.type != "cpu"
        or not writable(buffer)
        or any(i < j or i >= buffer.shape[0] for j, i in enumerate(order))
    ):
        return buffer[indices]
    # slot j takes row order[j] >= j: the slots written before it are below j, so the row it
    # reads is never one already overwritten
    for j, i in enumerate(order):
        if i != j:
            buffer[j, :, :length].copy_(buffer[i, :, :length])
    return buffer[: len(order)]


def roomy_cache(config: Any, *, reach: float = math.inf) -> Any:
    """A ``DynamicCache`` for ``config`` whose full-attention layers are ``RoomyLayer``s. With
    a finite ``reach`` (a model with sliding-window layers, every one of whose rows will stay
    within ``reach`` columns: ``prefill.attention_reach``), every layer is a ``RoomyLayer``
    limited to it: within its window a sliding layer attends as a full one."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    cache.layers = [
        RoomyLayer(limit=reach) if type(layer) is DynamicLayer or math.isfinite(reach) else layer
        for layer in cache.layers
    ]
    return cache
